"""Shared test settings: hypothesis profiles.

`ci` (what tox sets) is derandomised, so a CI run explores the same examples every
time and cannot fail by chance; `dev` explores new examples on every run. Tests
that need many examples set `max_examples` themselves.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

pytest_plugins = ["boxmaker.testing.sandbox_fixtures"]  # the sandbox suites' fixtures

settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
