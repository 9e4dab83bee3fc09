"""Shared test settings: hypothesis profiles, and no BOXMAKER_* variable from outside.

`ci` (what tox sets) is derandomised, so a CI run explores the same examples every
time and cannot fail by chance; `dev` explores new examples on every run. Tests
that need many examples set `max_examples` themselves.

Every test runs with no `BOXMAKER_*` variable in its environment, so a developer's
own BOXMAKER_HOME never reaches a role under test; a test that needs one sets it.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["support.sandbox_fixtures"]  # the sandbox suites' fixtures

settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def no_boxmaker_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove every BOXMAKER_* variable for the test (restored after it)."""
    for name in [name for name in os.environ if name.startswith("BOXMAKER_")]:
        monkeypatch.delenv(name)
