"""How long does brokerd take to answer a tool call over broker.sock?

Figures, measured in one run on one file system:
- median and p99 latency of a denied tool_request (one Decision record, synced);
- median and p99 latency of an allowed tool_request with the recording runtime
  (Decision record, state file, Result record, each synced);
each as a ratio to the median latency of a bare write+fsync of one audit-sized
line (the limit: no call can be answered before its record is on disk);
- decisions per second with 8 concurrent clients sending denied calls, beside
  the bare write+fsync rate, and the audit records each fsync made durable
  (group commit: records staged while an fsync is in flight share the next);
- the same with 32 clients, as a ratio to the 8-client rate (more clients must
  not be slower).

`--grants N` puts N grant files in the directory (one covers the allowed calls,
the others other directories), since brokerd looks at every file at every call.

brokerd runs in this process on real Unix sockets (a `serve.Brokerd` with a real
audit writer), as the tests assemble it; the clients are threads of the same
process, so they share the interpreter with it. Work files go in a temporary
directory under the repository's parent directory (`--dir` changes it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

from boxmaker.brokerd.audit_writer import AuditWriter
from boxmaker.core.messages import ToolRequest
from boxmaker.testing.daemons import InProcessBrokerd, start_brokerd
from boxmaker.testing.homes import write_grant
from boxmaker.testing.sockets import exchange

LINE = (
    b'{"seq":0,"time":"2026-11-30T12:00:00.000Z","prev":"'
    + b"0" * 64
    + b'","event":'
    + b"x" * 300
    + b"}\n"
)
CLIENTS = 8
MORE_CLIENTS = 32


def bare_fsync(work: Path, n: int) -> list[float]:
    """Latency of each of `n` appends of one line, each followed by fsync."""
    fd = os.open(work / "bare.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
    times = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            os.write(fd, LINE)
            os.fsync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    return times


def request(path: Path, call: str, session: str = "bench") -> ToolRequest:
    arguments = orjson.dumps({"path": str(path)}).decode()
    return ToolRequest(session=session, call=call, tool="read_file", arguments=arguments)


def latencies(
    brokerd: InProcessBrokerd, target: Path, n: int, tag: str, expect: str
) -> list[float]:
    times = []
    socket_path = brokerd.broker_socket  # the harness's property, not brokerd's time
    for i in range(n):
        message = request(target / f"f{i}", f"{tag}{i}")
        t0 = time.perf_counter()
        answers = exchange(socket_path, message, message.call)
        times.append(time.perf_counter() - t0)
        status = getattr(answers[-1].message, "status", None)
        if status != expect:
            raise SystemExit(f"expected {expect}, got {answers[-1].message}")
    return times


def concurrent(
    brokerd: InProcessBrokerd, target: Path, per_client: int, clients: int = CLIENTS
) -> tuple[float, float]:
    """Decisions per second with `clients` threads each sending `per_client` denied calls,
    and the audit records per fsync meanwhile."""
    writer = brokerd.daemon.writer
    assert isinstance(writer, AuditWriter)
    before = writer.stats
    barrier = threading.Barrier(clients + 1)
    errors: list[str] = []
    socket_path = brokerd.broker_socket

    def client(index: int) -> None:
        barrier.wait()
        for i in range(per_client):
            message = request(target / f"f{i}", f"k{clients}-{index}-{i}", f"bench-{index % 2}")
            answers = exchange(socket_path, message, message.call)
            if getattr(answers[-1].message, "status", None) != "denied":
                errors.append(str(answers[-1].message))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise SystemExit(f"a concurrent call was not denied: {errors[0]}")
    after = writer.stats
    per_fsync = (after.records - before.records) / max(after.fsyncs - before.fsyncs, 1)
    return clients * per_client / elapsed, per_fsync


def p99(times: list[float]) -> float:
    return statistics.quantiles(times, n=100)[98]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=Path(__file__).resolve().parent.parent.parent)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--per-client", type=int, default=100)
    parser.add_argument("--grants", type=int, default=1, help="grant files (at least 1)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bxbench-", dir=args.dir) as tmp:
        work = Path(tmp)
        print(f"directory: {work} (the file system of {args.dir})")
        notes, elsewhere = work / "notes", work / "elsewhere"
        write_grant(work / "grants", "notes-read", tool="read_file", paths=[str(notes)])
        for n in range(1, args.grants):
            write_grant(
                work / "grants", f"other-{n}", tool="read_file", paths=[str(work / f"o{n}")]
            )
        print(f"grant files: {max(args.grants, 1)}")
        bare = bare_fsync(work, args.calls)
        brokerd = start_brokerd(work)
        try:
            latencies(brokerd, elsewhere, 20, "w", "denied")  # warm up
            denied = latencies(brokerd, elsewhere, args.calls, "d", "denied")
            allowed = latencies(brokerd, notes, args.calls, "a", "result")
            rate, per_fsync = concurrent(brokerd, elsewhere, args.per_client)
            more, more_per_fsync = concurrent(brokerd, elsewhere, args.per_client, MORE_CLIENTS)
        finally:
            brokerd.stop()
    limit = statistics.median(bare)
    print(f"bare write+fsync of one {len(LINE)}-byte line: median {ms(limit)} (the limit)")
    for name, times in (("denied", denied), ("allowed", allowed)):
        median, tail = statistics.median(times), p99(times)
        print(
            f"{name:8} tool_request over broker.sock ({len(times)} calls):"
            f" median {ms(median)}  ratio {median / limit:6.2f};"
            f" p99 {ms(tail)}  ratio {tail / limit:6.2f}"
        )
    print(
        f"{CLIENTS} concurrent clients, denied calls: {rate:,.0f} decisions/s"
        f" (bare write+fsync {1 / limit:,.0f}/s, ratio {rate * limit:.2f});"
        f" {per_fsync:.1f} records per fsync"
    )
    print(
        f"{MORE_CLIENTS} concurrent clients, denied calls: {more:,.0f} decisions/s"
        f" (ratio {more * limit:.2f}; {more / rate:.2f} of the {CLIENTS}-client rate);"
        f" {more_per_fsync:.1f} records per fsync"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
