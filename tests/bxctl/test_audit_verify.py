"""`bxctl audit verify` through the installed console script, on logs the real writer made."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from boxmaker.brokerd.audit_startup import Started, start_audit
from boxmaker.core.audit.records import DecisionEvent
from boxmaker.core.grants.decisions import AllowedRecord, AskRecord, DecisionRecord
from boxmaker.core.labels import DataClass

BXCTL = str(Path(sys.executable).parent / "bxctl")
D1, D2 = "2026-11-30.jsonl", "2026-12-01.jsonl"


def event(call: str, outcome: DecisionRecord) -> DecisionEvent:
    return DecisionEvent(
        session="chat-1",
        call=call,
        tool="read_file",
        arguments='{"path":"/x"}',
        outcome=outcome,
        taint=DataClass.PRIVATE,
        untrusted=False,
    )


def write_log(home: Path) -> str:
    """Five records a day on two days; seq 0 is an ask, seq 1 allowed; the head."""
    started = start_audit(home / "audit", "2026-11-30T08:00:00.000Z")
    assert isinstance(started, Started)
    writer = started.writer
    for day in ("2026-11-30", "2026-12-01"):
        for i in range(5):
            outcome = AskRecord() if (day, i) == ("2026-11-30", 0) else AllowedRecord()
            writer.append(event(f"{day}-{i}", outcome), f"{day}T08:00:0{i}.000Z")
    head = writer.position.prev
    writer.close()
    return head


def bxctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BXCTL, "audit", "verify", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=60,
    )


def test_a_sound_log(tmp_path: Path) -> None:
    head = write_log(tmp_path)
    done = bxctl("--home", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"audit: ok, 10 records, head {head}",
        "audit: approval pending or abandoned: decision 0",
        *[f"audit: call running or unfinished: decision {s}" for s in range(1, 10)],
    ]
    assert done.stderr == ""


def test_home_comes_from_boxmaker_home(tmp_path: Path) -> None:
    head = write_log(tmp_path)
    done = bxctl(env={**os.environ, "BOXMAKER_HOME": str(tmp_path)})
    assert done.stdout.splitlines()[0] == f"audit: ok, 10 records, head {head}"


def test_an_empty_log(tmp_path: Path) -> None:
    (tmp_path / "audit").mkdir()
    done = bxctl("--home", str(tmp_path))
    assert (done.returncode, done.stdout) == (0, "audit: ok, 0 records, head none\n")


def test_no_audit_directory_is_one_line(tmp_path: Path) -> None:
    done = bxctl("--home", str(tmp_path / "nowhere"))
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1
    assert "Traceback" not in done.stderr


def _edit(index: int, change: Callable[[bytes], bytes | None]) -> Callable[[list[bytes]], None]:
    def apply(lines: list[bytes]) -> None:
        new = change(lines[index])
        if new is None:
            del lines[index]
        else:
            lines[index] = new

    return apply


def _swap(lines: list[bytes]) -> None:
    lines[2], lines[3] = lines[3], lines[2]


TAMPERING: dict[str, tuple[str, Callable[[list[bytes]], None], str]] = {
    "changed-byte": (D2, _edit(2, lambda x: x.replace(b'"path', b'"Path')), f"{D2}:4"),
    "deleted-line": (D2, _edit(2, lambda x: None), f"{D2}:3"),
    "swapped-lines": (D1, _swap, f"{D1}:3"),
    "seq-gap": (D2, _edit(2, lambda x: x.replace(b'"seq":', b'"seq":9', 1)), f"{D2}:3"),
    "cut-short": (D1, _edit(2, lambda x: x[:50] + b"\n"), f"{D1}:3"),
    "file-does-not-chain": (D1, _edit(4, lambda x: None), f"{D2}:1"),
}


@pytest.mark.parametrize(("name", "damage", "where"), TAMPERING.values(), ids=TAMPERING.keys())
def test_tampering_names_its_file_and_line(
    tmp_path: Path, name: str, damage: Callable[[list[bytes]], None], where: str
) -> None:
    write_log(tmp_path)
    path = tmp_path / "audit" / name
    lines = path.read_bytes().splitlines(keepends=True)
    damage(lines)
    path.write_bytes(b"".join(lines))
    done = bxctl("--home", str(tmp_path))
    assert done.returncode == 1
    assert done.stdout.startswith(f"{where}: ")
    assert len(done.stdout.splitlines()) == 1
    assert done.stderr == "see runbook.md#audit-chain-broken\n"


def test_edges_that_are_not_failures_are_ok_and_reported(tmp_path: Path) -> None:
    write_log(tmp_path)
    audit = tmp_path / "audit"
    with (audit / D2).open("ab") as f:
        f.write(b'{"seq":10')
    done = bxctl("--home", str(tmp_path))
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1] == (
        f"audit: torn final line at {D2}:6 (9 bytes), recovered at the next brokerd start"
    )
    started = start_audit(audit, "2026-11-30T07:00:00.000Z")  # the clock went back
    assert isinstance(started, Started)
    started.writer.close()
    done = bxctl("--home", str(tmp_path))
    lines = done.stdout.splitlines()
    assert done.returncode == 0
    assert lines[0].startswith("audit: ok, 11 records, head ")
    assert f"audit: recovered torn line at {D2}:6" in lines
    assert f"audit: clock went backwards at {D2}:7" in lines
    # the recovery means a new brokerd: what waited before it is reported all the same
    assert "audit: approval pending or abandoned: decision 0" in lines


def test_an_accepted_break_is_reported_by_every_later_verify(tmp_path: Path) -> None:
    write_log(tmp_path)
    audit = tmp_path / "audit"
    lines = (audit / D1).read_bytes().splitlines(keepends=True)
    lines[1] = b"damage\n"
    (audit / D1).write_bytes(b"".join(lines))
    assert bxctl("--home", str(tmp_path)).stdout.startswith(f"{D1}:2: not an audit record")
    started = start_audit(audit, "2026-12-01T09:00:00.000Z", accept_break=True)
    assert isinstance(started, Started)
    started.writer.close()
    for _ in range(2):
        done = bxctl("--home", str(tmp_path))
        assert done.returncode == 0
        assert f"audit: accepted break at {D2}:6" in done.stdout.splitlines()
