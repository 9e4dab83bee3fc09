"""Many clients at once on broker.sock: one chain, no repeated seq, taint never down.

Eight threads, two sessions, fifty calls each, through brokerd in this process on
its real socket with the recording runtime; half of the grants label their
results secret. The log must verify (with `ChainVerifier` and with `bxctl audit
verify`), every seq must appear once, and each session's `taint_after` must never
go down from one Result record to the next.
"""

from __future__ import annotations

import threading
from pathlib import Path

import orjson
import pytest

from boxmaker.bxctl.main import main as bxctl
from boxmaker.core.audit.records import DecisionEvent, ResultEvent, ResultStatus
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker import ResultResponse, ToolRequest
from boxmaker.testing.daemons import running_brokerd
from boxmaker.testing.homes import read_records, verify_log, write_grant
from boxmaker.testing.sockets import exchange

THREADS = 8
CALLS = 50
SESSIONS = ("chat-a", "chat-b")


@pytest.mark.slow
def test_eight_threads_two_sessions_one_sound_chain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grants = tmp_path / "grants"
    dirs = [tmp_path / f"d{n}" for n in range(4)]
    for n, directory in enumerate(dirs):  # d0 and d2 private, d1 and d3 secret
        label = "secret" if n % 2 else "private"
        write_grant(
            grants, f"read-{n}", tool="read_file", result_class=label, paths=[str(directory)]
        )
    failures: list[str] = []

    def client(index: int, socket_path: Path) -> None:
        session = SESSIONS[index % 2]
        for n in range(CALLS):
            # mostly private reads first, so the secret ones land mid-stream
            directory = dirs[(index + n) % 4] if n > CALLS // 4 else dirs[0]
            arguments = orjson.dumps({"path": str(directory / f"f{n}")}).decode()
            call = f"t{index}-{n}"
            request = ToolRequest(session=session, call=call, tool="read_file", arguments=arguments)
            answers = exchange(socket_path, request, call)
            if not isinstance(answers[-1].message, ResultResponse):
                failures.append(f"{call}: {answers[-1].message}")

    with running_brokerd(tmp_path) as b:
        threads = [
            threading.Thread(target=client, args=(i, b.broker_socket)) for i in range(THREADS)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        runs = b.runtime.count
    assert failures == []
    assert runs == THREADS * CALLS

    records = read_records(b.home)
    assert len(records) == 2 * THREADS * CALLS
    seqs = [r.seq for r in records]
    assert len(set(seqs)) == len(seqs)
    assert seqs == list(range(len(seqs)))

    report = verify_log(b.home)
    assert report.ok, report.failure
    assert report.records == len(records)
    assert report.unfinished == ()

    decided: dict[str, int] = {}
    last: dict[str, DataClass] = {}
    for record in records:
        event = record.event
        if isinstance(event, DecisionEvent):
            decided[event.call] = record.seq
        elif isinstance(event, ResultEvent):
            assert decided[event.call] == event.decision  # a Result follows its own Decision
            assert event.status is ResultStatus.RESULT
            before = last.get(event.session, DataClass.PRIVATE)
            assert event.taint_after >= before, (record.seq, event.session)
            assert event.taint_after >= event.class_
            last[event.session] = event.taint_after
    assert last == {"chat-a": DataClass.SECRET, "chat-b": DataClass.SECRET}
    for session in SESSIONS:
        state = b.home / "broker" / "sessions" / f"{session}.json"
        assert orjson.loads(state.read_bytes()) == {"taint": "secret", "untrusted": False}

    assert bxctl(["audit", "verify", "--home", str(b.home)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"audit: ok, {len(records)} records, head {report.head}\n")
