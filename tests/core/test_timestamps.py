"""Timestamps: `check_timestamp` (pattern and remembered dates) says what `parse_timestamp` says."""

from __future__ import annotations

import pytest

from boxmaker.core.timestamps import check_timestamp, parse_timestamp

GOOD = [
    "2026-11-30T12:00:00.000Z",
    "2024-02-29T23:59:59.999Z",
    "0001-01-01T00:00:00.000Z",
    "9999-12-31T23:59:59.999Z",
]
BAD = [
    "2026-02-29T12:00:00.000Z",  # not a leap year
    "2100-02-29T12:00:00.000Z",
    "2026-04-31T12:00:00.000Z",
    "2026-13-01T12:00:00.000Z",
    "0000-01-01T00:00:00.000Z",
    "2026-11-30T24:00:00.000Z",
    "2026-11-30T12:60:00.000Z",
    "2026-11-30T12:00:60.000Z",
    "2026-11-30T12:00:00Z",
    "2026-11-30T12:00:00.000z",
    "2026-11-30 12:00:00.000Z",
    "2026-11-30T12:00:00.000Z ",
    "\u0662\u0660\u0662\u0666-11-30T12:00:00.000Z",  # digits, but not ASCII ones
    "",
]


@pytest.mark.parametrize("text", GOOD)
def test_a_timestamp_is_taken(text: str) -> None:
    assert check_timestamp(text) == text
    assert parse_timestamp(text).isoformat(timespec="milliseconds")[:23] == text[:23]


@pytest.mark.parametrize("text", BAD)
def test_a_non_timestamp_is_refused_the_same_way_twice(text: str) -> None:
    for _ in range(2):  # the second time the date may be remembered: still refused
        with pytest.raises(ValueError, match=r"^not a (timestamp like|real date)"):
            check_timestamp(text)
    with pytest.raises(ValueError, match=r"^not a (timestamp like|real date)"):
        parse_timestamp(text)
