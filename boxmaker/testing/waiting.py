"""Waiting in tests: poll a condition until it holds, by a deadline. No I/O of its own.

Nothing in a test sleeps to wait for something to happen: it polls what it waits
for with `wait_until`, which gives up with `TimeoutError` at its deadline. The
sleep between two polls is a polling interval (doubling from 2 ms up to
`interval_s`), not a wait for an event.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

FIRST_INTERVAL_S = 0.002


def wait_until(
    condition: Callable[[], T],
    timeout_s: float = 10.0,
    what: str = "the condition",
    *,
    interval_s: float = 0.05,
) -> T:
    """The first true value of `condition()`, polled until `timeout_s` seconds have
    passed; TimeoutError then, naming `what`.

    `interval_s` is the longest pause between polls: a condition that runs a
    process (`bxctl status`) is polled less often than one that reads a list.
    """
    deadline = time.monotonic() + timeout_s
    delay = min(FIRST_INTERVAL_S, interval_s)
    while not (value := condition()):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} did not hold within {timeout_s} s")
        time.sleep(delay)  # a poll interval, not a wait for something to happen
        delay = min(delay * 2, interval_s)
    return value
