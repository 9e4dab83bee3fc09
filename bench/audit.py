"""Audit log throughput: the writer against bare write+fsync, verify against a bare pass.

I/O: writes and reads files in a temporary directory under the repository's
parent directory (so on the file system the repository is on; `--dir` changes
it), and runs the installed `bxctl audit verify`. Prints each figure and ratio;
exits 1 if the writer is under 0.9 of the bare loop or verify under 0.8.

Both sides of each ratio are timed back to back in rounds, and the ratio is the
median of the rounds' ratios: on a shared machine, fsync time and CPU speed
swing from second to second, and a ratio taken within a round cancels most of it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from boxmaker.brokerd.audit_startup import Started, start_audit
from boxmaker.core.audit.records import (
    AuditRecord,
    DecisionEvent,
    ResultEvent,
    ResultStatus,
    encode_record,
)
from boxmaker.core.grants.decisions import AllowedRecord
from boxmaker.core.hashes import ZERO_HASH
from boxmaker.core.labels import DataClass
from boxmaker.core.timestamps import add_ms

WRITE_LIMIT = 0.9
VERIFY_LIMIT = 0.8


def decision(i: int) -> DecisionEvent:
    return DecisionEvent(
        session="chat-1",
        call=f"c{i}",
        tool="read_file",
        arguments=f'{{"path":"/home/owner/notes/2026/november/{i}.md"}}',
        outcome=AllowedRecord(),
        grant="notes-read",
        grant_sha256=hashlib.sha256(b"grant").hexdigest(),
        taint=DataClass.PRIVATE,
        untrusted=False,
    )


def result(i: int) -> ResultEvent:
    return ResultEvent.model_validate(
        {
            "session": "chat-1",
            "call": f"c{i}",
            "decision": i,
            "status": ResultStatus.RESULT,
            "class": DataClass.PRIVATE,
            "untrusted": False,
            "truncated": False,
            "bytes": 1200 + i % 500,
            "sha256": hashlib.sha256(str(i).encode()).hexdigest(),
            "taint_after": DataClass.PRIVATE,
        }
    )


def produce(i: int) -> tuple[Any, str]:
    """The i-th record's event and time, made as brokerd's ledger makes them: just before."""
    event = decision(i) if i % 2 == 0 else result(i - 1)
    return event, add_ms("2026-11-30T12:00:00.000Z", i)


def bench_writer(work: Path, n: int, rounds: int) -> tuple[float, float, float]:
    """Median writer rate, median bare rate, and the median of the paired ratios.

    brokerd makes each event just before it appends it, so both loops make the
    i-th event and time before the i-th write (`produce`), and only the write
    itself is timed: `AuditWriter.append` on one side, `os.write` + `os.fsync`
    of a line of the same size on the other. The machine is shared and fsync
    time swings from second to second, so each round runs both loops back to
    back (alternating which goes first) and the ratio is taken within the round.
    """
    lines = _writer_round(work / "warm-up", n)[1]
    writer_rates, bare_rates, ratios = [], [], []
    for r in range(rounds):
        if r % 2:
            bare = _bare_round(work / f"bare{r}.jsonl", lines)
            writer, lines = _writer_round(work / f"w{r}", n)
        else:
            writer, lines = _writer_round(work / f"w{r}", n)
            bare = _bare_round(work / f"bare{r}.jsonl", lines)
        writer_rates.append(writer)
        bare_rates.append(bare)
        ratios.append(writer / bare)
    return statistics.median(writer_rates), statistics.median(bare_rates), statistics.median(ratios)


def _writer_round(home: Path, n: int) -> tuple[float, list[bytes]]:
    """Records per second through `AuditWriter.append`, and the lines it wrote."""
    audit = home / "audit"
    started = start_audit(audit, produce(0)[1])
    assert isinstance(started, Started)
    writer = started.writer
    spent = 0.0
    for i in range(n):
        event, now = produce(i)
        t0 = time.perf_counter()
        writer.append(event, now)
        spent += time.perf_counter() - t0
    writer.close()
    return n / spent, (audit / "2026-11-30.jsonl").read_bytes().splitlines(keepends=True)


def _bare_round(path: Path, lines: list[bytes]) -> float:
    """Lines per second through a bare `os.write` + `os.fsync` loop."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
    spent = 0.0
    for i, line in enumerate(lines):
        produce(i)  # the same untimed work as the writer's loop
        t0 = time.perf_counter()
        os.write(fd, line)
        os.fsync(fd)
        spent += time.perf_counter() - t0
    os.close(fd)
    return len(lines) / spent


def make_log(home: Path, n: int) -> Path:
    """`n` records in one day file, chained as the writer chains them (without fsync)."""
    audit = home / "audit"
    audit.mkdir(parents=True)
    path = audit / "2026-11-30.jsonl"
    prev, now = ZERO_HASH, "2026-11-30T00:00:00.000Z"
    with path.open("wb") as file:
        for seq in range(n):
            now = add_ms(now, 10)
            event = decision(seq) if seq % 2 == 0 else result(seq - 1)
            line = encode_record(AuditRecord(seq=seq, time=now, prev=prev, event=event))
            prev = hashlib.sha256(line).hexdigest()
            file.write(line + b"\n")
    return path


def bare_pass(path: Path) -> None:
    for line in path.read_bytes().split(b"\n")[:-1]:
        hashlib.sha256(line).hexdigest()
        orjson.loads(line)


def run_verify(bxctl: str, home: Path, expect: str) -> float:
    """Seconds taken by `bxctl audit verify --home home`, a new process."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [bxctl, "audit", "verify", "--home", str(home)], capture_output=True, check=False
    )
    seconds = time.perf_counter() - t0
    if done.returncode != 0 or not done.stdout.startswith(expect.encode()):
        raise SystemExit(f"bxctl audit verify failed: {done.stdout!r} {done.stderr!r}")
    return seconds


def bench_verify(work: Path, n: int, rounds: int) -> tuple[float, float, float, float, float]:
    """Median verify rate, median bare rate, median paired ratio, bytes per record, start-up.

    Each round runs `bxctl audit verify` (a new process, start-up included) and
    the bare pass back to back, alternating which goes first.
    """
    home = work / "v"
    path = make_log(home, n)
    empty = work / "empty"
    (empty / "audit").mkdir(parents=True)
    bxctl = str(Path(sys.executable).parent / "bxctl")
    startup = min(run_verify(bxctl, empty, "audit: ok, 0 records") for _ in range(3))
    verify_rates, bare_rates, ratios = [], [], []
    for r in range(rounds):
        if r % 2:
            t0 = time.perf_counter()
            bare_pass(path)
            bare = n / (time.perf_counter() - t0)
            verify = n / run_verify(bxctl, home, f"audit: ok, {n} records")
        else:
            verify = n / run_verify(bxctl, home, f"audit: ok, {n} records")
            t0 = time.perf_counter()
            bare_pass(path)
            bare = n / (time.perf_counter() - t0)
        verify_rates.append(verify)
        bare_rates.append(bare)
        ratios.append(verify / bare)
    median = statistics.median
    size = path.stat().st_size / n
    return median(verify_rates), median(bare_rates), median(ratios), size, startup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=Path(__file__).resolve().parent.parent.parent)
    parser.add_argument("--writes", type=int, default=200, help="records per writer round")
    parser.add_argument("--write-rounds", type=int, default=15)
    parser.add_argument(
        "--records", type=int, default=1_000_000, help="records in the log verified"
    )
    parser.add_argument("--verify-rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bxbench-", dir=args.dir) as tmp:
        work = Path(tmp)
        print(f"directory: {work} (the file system of {args.dir})")
        writer_rate, write_rate, write_ratio = bench_writer(work, args.writes, args.write_rounds)
        verify_rate, read_rate, verify_ratio, size, startup = bench_verify(
            work, args.records, args.verify_rounds
        )
    print(
        f"writer:  {writer_rate:10.0f} records/s (fsync each); bare write+fsync {write_rate:10.0f}/s"
        f" (medians of {args.write_rounds} rounds of {args.writes})"
    )
    print(f"         ratio {write_ratio:.2f}, median of the paired rounds (limit {WRITE_LIMIT})")
    print(
        f"verify:  {verify_rate:10.0f} records/s (bxctl audit verify, {args.records} records of"
        f" {size:.0f} bytes); bare read+sha256+orjson.loads {read_rate:10.0f}/s"
        f" (medians of {args.verify_rounds} rounds)"
    )
    print(
        f"         ratio {verify_ratio:.2f}, median of the paired rounds (limit {VERIFY_LIMIT});"
        f" bxctl start-up on an empty log {startup * 1000:.0f} ms, included"
    )
    ok = write_ratio >= WRITE_LIMIT and verify_ratio >= VERIFY_LIMIT
    print("audit bench: " + ("ok" if ok else "UNDER THE LIMIT"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
