"""Skipping a test that this machine cannot run: loudly, and never in CI.

A skip hides a test, so it is said on standard error in capitals (pytest's
summary line alone is easy to miss), and under CI (`CI` set, as `.ci/run` sets
it) it is a failure instead: CI installs what every test needs.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import pytest


def skip_or_fail(why: str, *, allow_module_level: bool = False) -> NoReturn:
    """Skip with `why` said loudly, or fail with it under CI."""
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI must run it)", pytrace=False)
    print(f"\n*** SKIPPED: {why} ***", file=sys.__stderr__)
    pytest.skip(why, allow_module_level=allow_module_level)
