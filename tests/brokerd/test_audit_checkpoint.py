"""brokerd's audit checkpoints: checkpoint.json, the refusal to start below it, the
`checkpoint` request on admin.sock, and `bxctl audit checkpoint` against the real daemon."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from boxmaker.brokerd.audit_checkpoint import (
    CHECKPOINT_NAME,
    Checkpointer,
    CheckpointUnavailableError,
    read_checkpoint,
)
from boxmaker.brokerd.audit_startup import Refused, Started, audit_files, start_audit
from boxmaker.core.audit.checkpoints import Checkpoint, encode_state
from boxmaker.core.audit.records import DecisionEvent, decode_record, encode_line
from boxmaker.core.errors import ErrorCode
from boxmaker.core.grants.decisions import DeniedRecord, DenyReason
from boxmaker.core.home.layout import Home
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker_admin import AuditCheckpoint, CheckpointReply
from boxmaker.core.wire.common import Error
from boxmaker.testing.daemons import running_brokerd
from boxmaker.testing.homes import make_home, write_config
from boxmaker.testing.processes import DaemonProcess, clean_environment

D1, D2 = "2026-11-30.jsonl", "2026-12-01.jsonl"
LATER = "2026-12-02T09:00:00.000Z"
BXCTL = str(Path(sys.executable).parent / "bxctl")
POINTER = "see runbook.md#audit-below-checkpoint"


def event(call: str, path: str = "/x") -> DecisionEvent:
    return DecisionEvent(
        session="chat-1",
        call=call,
        tool="read_file",
        arguments=f'{{"path":"{path}"}}',
        outcome=DeniedRecord(reason=DenyReason.NO_GRANT),
        taint=DataClass.PRIVATE,
        untrusted=False,
    )


def write_log(audit: Path, days: tuple[str, ...] = ("2026-11-30", "2026-12-01")) -> Checkpoint:
    """Five records a day by the real writer, checkpointed after the last, as brokerd does."""
    started = start_audit(audit, f"{days[0]}T08:00:00.000Z")
    assert isinstance(started, Started)
    for day in days:
        for i in range(5):
            started.writer.append(event(f"{day}-{i}"), f"{day}T08:00:0{i}.000Z")
    taken = Checkpointer(audit, started.writer.durable_head, lambda: LATER).take()
    started.writer.close()
    return taken


def start(audit: Path) -> Started | Refused:
    outcome = start_audit(audit, LATER)
    if isinstance(outcome, Started):
        outcome.writer.close()
    return outcome


def files(audit: Path) -> dict[str, bytes]:
    return {name: (audit / name).read_bytes() for name in audit_files(audit)}


def test_a_checkpoint_names_the_last_record_and_is_kept_0600(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    taken = write_log(audit)
    last = (audit / D2).read_bytes().splitlines()[-1]
    assert (taken.seq, taken.head, taken.time) == (9, hashlib.sha256(last).hexdigest(), LATER)
    assert read_checkpoint(audit) == taken
    assert stat.S_IMODE((audit / CHECKPOINT_NAME).stat().st_mode) == 0o600
    outcome = start(audit)  # the log holds it: a plain start
    assert isinstance(outcome, Started)


def test_an_empty_log_has_no_checkpoint(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    started = start_audit(audit, LATER)
    assert isinstance(started, Started)
    with pytest.raises(CheckpointUnavailableError, match="no records yet"):
        Checkpointer(audit, started.writer.durable_head, lambda: LATER).take()
    started.writer.close()
    assert read_checkpoint(audit) is None


@pytest.mark.parametrize("records", [1, 2, 5])
def test_a_start_after_a_tail_cut_is_refused_and_writes_nothing(
    tmp_path: Path, records: int
) -> None:
    audit = tmp_path / "audit"
    write_log(audit)
    lines = (audit / D2).read_bytes().splitlines(keepends=True)
    (audit / D2).write_bytes(b"".join(lines[:-records]))
    before = files(audit)
    outcome = start(audit)
    assert isinstance(outcome, Refused)
    assert outcome.status == 1
    assert outcome.lines == (
        f"audit: the log is below its checkpoint 9 of {LATER} ({audit / CHECKPOINT_NAME}):"
        f" record 9 is missing: the log ends at seq {9 - records}",
        POINTER,
    )
    assert files(audit) == before
    os.rename(audit / CHECKPOINT_NAME, audit / "checkpoint.json.lost")  # the owner accepts
    outcome = start(audit)
    assert isinstance(outcome, Started)
    assert outcome.writer.position.next_seq == 10 - records


def rewrite_last(path: Path) -> None:
    lines = path.read_bytes().splitlines()
    record = decode_record(lines[-1])
    lines[-1] = encode_line(record.seq, record.time, record.prev, event("x", "/innocent"))
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def test_a_start_after_the_last_record_was_rewritten_is_refused(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    write_log(audit)
    rewrite_last(audit / D2)
    outcome = start(audit)
    assert isinstance(outcome, Refused)
    assert "record 9 differs: its hash is " in outcome.lines[0]


def rewrite_from(audit: Path, seq: int) -> None:
    """Rewrite the record `seq` and compute the chain after it again, across files."""
    prev: str | None = None
    for name in audit_files(audit):
        lines = (audit / name).read_bytes().splitlines()
        for i, line in enumerate(lines):
            record = decode_record(line)
            if record.seq == seq:
                lines[i] = encode_line(seq, record.time, record.prev, event("x", "/innocent"))
            elif prev is not None:
                lines[i] = encode_line(record.seq, record.time, prev, record.event)
            if record.seq >= seq:
                prev = hashlib.sha256(lines[i]).hexdigest()
        (audit / name).write_bytes(b"".join(line + b"\n" for line in lines))


@pytest.mark.parametrize("seq", [3, 4], ids=["inside-the-older-file", "its-last-line"])
def test_a_checkpoint_in_an_older_file_is_found_by_its_seq(tmp_path: Path, seq: int) -> None:
    audit = tmp_path / "audit"
    write_log(audit, ("2026-11-30",))  # checkpointed at seq 4, the last of D1
    line = (audit / D1).read_bytes().splitlines()[seq]
    kept = Checkpoint(seq, hashlib.sha256(line).hexdigest(), LATER)
    (audit / CHECKPOINT_NAME).write_bytes(encode_state(kept))
    started = start_audit(audit, LATER)
    assert isinstance(started, Started)
    started.writer.append(event("later"), "2026-12-01T08:00:00.000Z")  # D2, past it
    started.writer.close()
    assert isinstance(start(audit), Started)  # a plain start reads D2 only
    rewrite_from(audit, seq)
    outcome = start(audit)
    assert isinstance(outcome, Refused)
    assert f"record {seq} differs" in outcome.lines[0]


def test_a_damaged_checkpoint_file_is_refused(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    write_log(audit)
    (audit / CHECKPOINT_NAME).write_text('{"seq": 9}\n', encoding="utf-8")
    outcome = start(audit)
    assert isinstance(outcome, Refused)
    assert outcome.lines[0].startswith(f"audit: {audit / CHECKPOINT_NAME}: expected ")
    assert outcome.lines[1] == POINTER


def test_checkpoint_on_admin_sock(tmp_path: Path) -> None:
    with running_brokerd(tmp_path) as brokerd:
        empty = brokerd.admin(AuditCheckpoint())[-1].message
        assert isinstance(empty, Error)
        assert empty.code is ErrorCode.UNAVAILABLE
        assert empty.message == "no checkpoint: the audit log has no records yet"
        brokerd.daemon.writer.append(event("c1"), brokerd.clock())
        reply = brokerd.admin(AuditCheckpoint())[-1].message
        position = brokerd.daemon.writer.position
        assert isinstance(reply, CheckpointReply)
        assert (reply.seq, reply.head) == (position.next_seq - 1, position.prev)
        kept = read_checkpoint(Home(brokerd.home).audit)
        assert kept == Checkpoint(reply.seq, reply.head, reply.time)


# --- the real daemon ---------------------------------------------------------------


def setup(tmp_path: Path, every_s: float | None = None) -> tuple[Path, Path]:
    home = make_home(tmp_path)
    (tmp_path / "grants").mkdir()
    config = write_config(tmp_path / "brokerd.toml", home, tmp_path / "grants")
    if every_s is not None:
        with config.open("a", encoding="utf-8") as f:
            f.write(f"[audit]\ncheckpoint_every_s = {every_s}\n")
    return home, config


@pytest.mark.e2e
def test_the_real_brokerd_refuses_to_start_below_its_checkpoint(tmp_path: Path) -> None:
    home, config = setup(tmp_path)
    audit = Home(home).audit
    write_log(audit)
    lines = (audit / D2).read_bytes().splitlines(keepends=True)
    (audit / D2).write_bytes(b"".join(lines[:-2]))
    daemon = DaemonProcess(config)
    assert daemon.wait_exit() == 1
    output = daemon.stderr
    assert "audit: the log is below its checkpoint 9 of " in output
    assert "record 9 is missing: the log ends at seq 7" in output
    assert POINTER in output
    assert "Traceback" not in output


def bxctl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BXCTL, "audit", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        # the owner's state (verify's remembered head) beside the home, not the real one
        env=clean_environment(
            {"BOXMAKER_HOME": str(home), "XDG_STATE_HOME": str(home.parent / "owner-state")}
        ),
    )


@pytest.mark.e2e
def test_bxctl_takes_checkpoints_kept_outside_the_home(tmp_path: Path) -> None:
    home, config = setup(tmp_path, every_s=0.2)
    write_log(Home(home).audit)
    outside = tmp_path / "kept" / "checkpoints.txt"
    outside.parent.mkdir()
    key = tmp_path / "kept" / "owner.key"
    public = tmp_path / "kept" / "owner.pub"
    made = bxctl(home, "keygen", "--out", str(key))
    public.write_text(made.stdout, encoding="utf-8")
    with DaemonProcess(config) as daemon:
        daemon.wait_serving([Home(home).admin_socket])
        daemon.wait_for_line(lambda line: "event=checkpoint seq=9 head=" in line)
        inside = bxctl(home, "checkpoint", "--append", str(home / "checkpoints.txt"))
        assert inside.returncode == 1
        assert "is inside boxmaker's home" in inside.stderr
        assert not (home / "checkpoints.txt").exists()
        plain = bxctl(home, "checkpoint", "--append", str(outside))
        signed = bxctl(home, "checkpoint", "--append", str(outside), "--key", str(key))
        chained = bxctl(home, "checkpoint", "--append", str(outside), "--key", str(key))
    for done in (plain, signed, chained):
        assert done.returncode == 0, done.stderr
    head = read_checkpoint(Home(home).audit)
    assert head is not None
    assert plain.stdout == f"9:{head.head} {plain.stdout.split()[1]}\n"
    assert signed.stdout.startswith(f"9:{head.head} ")
    assert f" prev={'0' * 64} key=" in signed.stdout  # the file's first sealed line
    assert " sig=" in signed.stdout
    first_sealed = hashlib.sha256(signed.stdout.rstrip("\n").encode("ascii")).hexdigest()
    assert f" prev={first_sealed} key=" in chained.stdout  # chained to the one before
    assert outside.read_text(encoding="utf-8") == plain.stdout + signed.stdout + chained.stdout
    assert stat.S_IMODE(outside.stat().st_mode) == 0o600
    done = bxctl(home, "verify", "--checkpoints", str(outside))
    assert done.returncode == 0, done.stdout
    assert done.stdout.splitlines()[-1] == "audit: checkpoints hold: 3, the latest at seq 9"
    done = bxctl(home, "verify", "--checkpoints", str(outside), "--public-key", str(public))
    assert done.returncode == 1  # the first line is not signed; the two sealed ones chain
    assert done.stdout == f"{outside}:1: the checkpoint is not signed\n"
