"""Every sanitizer pattern scans its worst 64 KiB near miss in linear time.

The inputs are in `boxmaker.testing.sanitize_redos`, one or more per pattern: a
pattern added without its worst case fails `test_every_pattern_has_inputs`. Each
time is the best of three `time.perf_counter` runs, so a busy machine's pauses do
not count; a pattern that backtracks takes seconds on such an input, not
milliseconds. A scan over 50 ms (a machine slowed by other work, or a pattern
that backtracks) must then take less than GROWTH_LIMIT times its scan of a
quarter of the input: linear time takes about 4 times as long, quadratic 16.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from boxmaker.core.sanitize.flag_patterns import PATTERNS as FLAG_PATTERNS
from boxmaker.core.sanitize.secret_prefixes import PATTERNS as SECRET_PATTERNS
from boxmaker.testing.sanitize_redos import (
    FLAG_UNITS,
    GROWTH_LIMIT,
    LIMIT_S,
    SECRET_UNITS,
    SIZE,
    best_of,
    fill,
    growth,
    scans,
)

SCANS = scans()
# each scan beside the same scan of a quarter of its input (scans keeps its order)
PAIRED = [
    (what, unit, scan, quarter)
    for (what, unit, scan), (_, _, quarter) in zip(SCANS, scans(SIZE // 4), strict=True)
]


def test_every_pattern_has_inputs() -> None:
    assert {p.name for p in FLAG_PATTERNS} == set(FLAG_UNITS)
    assert {p.name for p in SECRET_PATTERNS} == set(SECRET_UNITS)
    assert all(len(fill(unit)) == SIZE for units in FLAG_UNITS.values() for unit in units)


@pytest.mark.parametrize(
    ("what", "unit", "scan", "quarter"),
    PAIRED,
    ids=[f"{what}-{index}" for index, (what, _, _) in enumerate(SCANS)],
)
def test_worst_input_scans_in_time(
    what: str, unit: str, scan: Callable[[], object], quarter: Callable[[], object]
) -> None:
    seconds = best_of(scan)
    if seconds < LIMIT_S:
        return
    times = growth(scan, quarter)
    assert times < GROWTH_LIMIT, (
        f"{what}: {seconds * 1000:.1f} ms on {unit[:40]!r} repeated,"
        f" {times:.1f} times its scan of a quarter as much"
    )


def test_the_growth_check_tells_quadratic_from_linear() -> None:
    def quadratic(n: int) -> Callable[[], object]:
        text = "a" * n  # every start runs a* to the end, then backtracks all of it
        return lambda: re.search(r"a*x", text)

    def linear(n: int) -> Callable[[], object]:
        text = "a" * n * 64
        return lambda: re.search(r"ax", text)

    assert growth(quadratic(4096), quadratic(1024)) > GROWTH_LIMIT
    assert growth(linear(4096), linear(1024)) < GROWTH_LIMIT
