"""Timestamps: UTC, exactly `YYYY-MM-DDTHH:MM:SS.mmmZ`. No I/O, no clock.

A timestamp stays a `str` on the wire and in memory. Because the format is fixed
width, string order is time order, so `now >= expires` compares correctly. The
clock is read only at the edges (`boxmaker.brokerd`, `boxmaker.bxctl`), which pass
`now` in.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Annotated

from pydantic import AfterValidator

_FORMAT = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{3}Z"
)


def parse_timestamp(text: str) -> datetime:
    """The aware UTC datetime of `text`; ValueError if it is not exactly the format."""
    if _FORMAT.fullmatch(text) is None:
        raise ValueError(f"not a timestamp like 2026-11-30T12:00:00.000Z: {text!r}")
    try:  # fixed positions: much faster than strptime
        return datetime(
            int(text[0:4]),
            int(text[5:7]),
            int(text[8:10]),
            int(text[11:13]),
            int(text[14:16]),
            int(text[17:19]),
            int(text[20:23]) * 1000,
            tzinfo=UTC,
        )
    except ValueError as exc:
        raise ValueError(f"not a real date and time: {text!r}") from exc


def check_timestamp(text: str) -> str:
    """`text` if it is a timestamp; ValueError as `parse_timestamp` says otherwise.

    On every audit write and wire message: one pattern, and the date looked up
    among the dates already found real, rather than a datetime built each time.
    """
    if _FORMAT.fullmatch(text) is None or not is_real_date(text[:10]):
        parse_timestamp(text)  # raises with the message that fits
    return text


@lru_cache(maxsize=1024)
def is_real_date(text: str) -> bool:
    """Whether `YYYY-MM-DD` (ASCII digits, already matched) names a day of the calendar."""
    try:
        date(int(text[0:4]), int(text[5:7]), int(text[8:10]))
    except ValueError:
        return False
    return True


def format_timestamp(moment: datetime) -> str:
    """`moment` (aware) in the wire format, truncated to the millisecond."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def add_ms(text: str, ms: int) -> str:
    """The timestamp `ms` milliseconds after `text`."""
    return format_timestamp(parse_timestamp(text) + timedelta(milliseconds=ms))


Timestamp = Annotated[str, AfterValidator(check_timestamp)]
