"""Record times come from the clock read under the ledger's lock, so they never go backwards.

Eight threads make calls at once through brokerd in this process. The clock hands
out strictly increasing times, one millisecond apart, and then lets other
threads run before returning its time (as a busy machine might): a time read
before the lock would often lose the race for the lock to a later one. The log
must verify with no clock warning.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

from boxmaker.core.timestamps import format_timestamp
from boxmaker.core.wire.broker import ResultResponse, ToolRequest
from boxmaker.testing.daemons import running_brokerd
from boxmaker.testing.homes import read_records, verify_log, write_grant
from boxmaker.testing.sockets import exchange

THREADS = 8
CALLS = 15


class YieldingClock:
    """Strictly increasing times; yields the processor between taking a time and returning it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = datetime.now(UTC)

    def __call__(self) -> str:
        with self._lock:
            now = self._next
            self._next += timedelta(milliseconds=1)
        time.sleep(0.001)  # widens the race window; nothing is waited for
        return format_timestamp(now)


def test_concurrent_calls_write_times_in_order(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    write_grant(tmp_path / "grants", "notes-read", tool="read_file", paths=[str(notes)])
    failures: list[str] = []

    def client(index: int, socket_path: Path) -> None:
        for n in range(CALLS):
            call = f"t{index}-{n}"
            arguments = orjson.dumps({"path": str(notes / f"f{n}")}).decode()
            request = ToolRequest(
                session=f"s{index % 2}", call=call, tool="read_file", arguments=arguments
            )
            answer = exchange(socket_path, request, call)[-1].message
            if not isinstance(answer, ResultResponse):
                failures.append(f"{call}: {answer}")

    with running_brokerd(tmp_path, clock=YieldingClock()) as b:
        threads = [
            threading.Thread(target=client, args=(i, b.broker_socket)) for i in range(THREADS)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
    assert failures == []
    times = [record.time for record in read_records(b.home)]
    assert len(times) == 2 * THREADS * CALLS
    report = verify_log(b.home)
    assert report.ok, report.failure
    assert report.clock_warnings == ()
    assert times == sorted(times)
