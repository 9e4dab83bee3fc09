"""Every sanitizer pattern scans its worst 64 KiB near miss in under 50 ms (linear time).

The inputs are in `boxmaker.testing.sanitize_redos`, one or more per pattern: a
pattern added without its worst case fails `test_every_pattern_has_inputs`. Each
time is the best of three `time.perf_counter` runs, so a busy machine's pauses do
not count; a pattern that backtracks takes seconds on such an input, not
milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from boxmaker.core.sanitize.flag_patterns import PATTERNS as FLAG_PATTERNS
from boxmaker.core.sanitize.secret_prefixes import PATTERNS as SECRET_PATTERNS
from boxmaker.testing.sanitize_redos import (
    FLAG_UNITS,
    LIMIT_S,
    SECRET_UNITS,
    SIZE,
    best_of,
    fill,
    scans,
)

SCANS = scans()


def test_every_pattern_has_inputs() -> None:
    assert {p.name for p in FLAG_PATTERNS} == set(FLAG_UNITS)
    assert {p.name for p in SECRET_PATTERNS} == set(SECRET_UNITS)
    assert all(len(fill(unit)) == SIZE for units in FLAG_UNITS.values() for unit in units)


@pytest.mark.parametrize(
    ("what", "unit", "scan"),
    SCANS,
    ids=[f"{what}-{index}" for index, (what, _, _) in enumerate(SCANS)],
)
def test_worst_input_scans_in_time(what: str, unit: str, scan: Callable[[], object]) -> None:
    seconds = best_of(scan)
    assert seconds < LIMIT_S, f"{what}: {seconds * 1000:.1f} ms on {unit[:40]!r} repeated"
