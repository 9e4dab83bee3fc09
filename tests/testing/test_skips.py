"""A test this machine cannot run is skipped loudly, and under CI fails instead."""

from __future__ import annotations

import pytest
from support.skips import skip_or_fail


def test_outside_ci_it_skips_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no widget here"):
        skip_or_fail("no widget here")
    assert "*** SKIPPED: no widget here ***" in capfd.readouterr().err


def test_under_ci_it_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"no widget here \(CI must run it\)"):
        skip_or_fail("no widget here")
