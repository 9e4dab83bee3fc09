"""Every fail-closed state brokerd and bxctl own names its runbook entry.

Each test brings the real `brokerd serve` process (or the real `bxctl`) into one
state and checks that a line of what it printed ends with
its runbook pointer, and that runbook.md has the entry it names.
"""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

import orjson
import pytest

from boxmaker.brokerd.audit_startup import Started, audit_files, start_audit
from boxmaker.core.audit.records import DecisionEvent
from boxmaker.core.grants.decisions import DeniedRecord, DenyReason
from boxmaker.core.home.layout import Home
from boxmaker.core.labels import DataClass
from boxmaker.core.timestamps import add_ms
from boxmaker.core.wire.broker import DeniedResponse, ToolRequest
from boxmaker.core.wire.broker_admin import Approvals
from boxmaker.core.wire.common import Error
from boxmaker.testing.homes import make_home, verify_log, write_config, write_grant
from boxmaker.testing.processes import DaemonProcess, clean_environment, console_script
from boxmaker.testing.sockets import exchange

pytestmark = pytest.mark.e2e

RUNBOOK = Path(__file__).resolve().parents[2] / "runbook.md"
NOW = "2026-11-30T12:00:00.000Z"


def pointer(text: str) -> str:
    """`text` (a pointer written out in full), once runbook.md is seen to have its entry."""
    anchor = text.partition("#")[2]
    assert f"\n## {anchor}\n" in RUNBOOK.read_text(encoding="utf-8"), anchor
    return text


def ends_with(text: str, wanted: str) -> bool:
    wanted = pointer(wanted)
    return any(line.rstrip().endswith(wanted) for line in text.splitlines())


def prepare(tmp_path: Path) -> tuple[Path, Path, Path]:
    home = make_home(tmp_path)
    grants = tmp_path / "grants"
    write_grant(grants, "notes-read", tool="read_file", paths=[str(tmp_path / "notes")])
    return home, grants, write_config(tmp_path / "brokerd.toml", home, grants)


def serving(config: Path, home: Path) -> DaemonProcess:
    daemon = DaemonProcess(config)
    daemon.wait_serving([Home(home).broker_socket, Home(home).admin_socket])
    return daemon


def read(tmp_path: Path, session: str = "chat-1") -> ToolRequest:
    arguments = orjson.dumps({"path": str(tmp_path / "notes" / "a.md")}).decode()
    return ToolRequest(session=session, call="c1", tool="read_file", arguments=arguments)


def write_log(home: Path, records: int) -> Path:
    """A sound log of `records` Decision records, written by the real writer."""
    started = start_audit(home / "audit", NOW)
    assert isinstance(started, Started)
    for n in range(records):
        started.writer.append(
            DecisionEvent(
                session="chat-1",
                call=f"c{n}",
                tool="read_file",
                arguments='{"path":"/x"}',
                outcome=DeniedRecord(reason=DenyReason.NO_GRANT),
                taint=DataClass.PRIVATE,
                untrusted=False,
            ),
            add_ms(NOW, n),
        )
    started.writer.close()
    (name,) = audit_files(home / "audit")
    return home / "audit" / name


def test_grants_invalid(tmp_path: Path) -> None:
    home, grants, config = prepare(tmp_path)
    (grants / "broken.toml").write_text(
        'tool = "read_file"\nmode = "deny"\nmax_taint = "private"\n'
    )
    with serving(config, home) as daemon:
        daemon.wait_for_line(lambda line: line.endswith(pointer("see runbook.md#grants-invalid")))
        assert "broken.toml" in daemon.stderr
        answer = exchange(Home(home).broker_socket, read(tmp_path), "c1")[-1].message
        assert answer == DeniedResponse(reason=DenyReason.GRANTS_INVALID)


def test_audit_unavailable(tmp_path: Path) -> None:
    home, _, config = prepare(tmp_path)
    with serving(config, home) as daemon:
        # from now on no file of brokerd's may grow: the next audit write fails
        resource.prlimit(daemon.process.pid, resource.RLIMIT_FSIZE, (0, 0))
        for session in ("chat-1", "chat-2"):
            answer = exchange(Home(home).broker_socket, read(tmp_path, session), "c1")[-1].message
            assert answer == DeniedResponse(reason=DenyReason.AUDIT_UNAVAILABLE)
        daemon.wait_for_line(lambda line: "reason=audit_unavailable" in line)
        assert ends_with(daemon.stderr, "see runbook.md#audit-unavailable")


def test_state_unreadable(tmp_path: Path) -> None:
    home, _, config = prepare(tmp_path)
    sessions = home / "broker" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "chat-1.json").write_bytes(b'{"taint":"public","untrusted":false}')
    with serving(config, home) as daemon:
        answer = exchange(Home(home).broker_socket, read(tmp_path), "c1")[-1].message
        assert answer == DeniedResponse(reason=DenyReason.STATE_UNREADABLE)
        daemon.wait_for_line(
            lambda line: line.endswith(pointer("see runbook.md#broker-state-damaged"))
        )


def test_a_broken_chain_at_startup(tmp_path: Path) -> None:
    home, _, config = prepare(tmp_path)
    log = write_log(home, 3)
    lines = log.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"c1"', b'"c9"')
    log.write_bytes(b"\n".join(lines))
    daemon = DaemonProcess(config)
    assert daemon.wait_exit() == 1
    assert f"{log.name}:3: " in daemon.stderr  # the line whose prev no longer matches
    assert ends_with(daemon.stderr, "see runbook.md#audit-chain-broken")
    assert not Home(home).broker_socket.exists()
    assert log.read_bytes() == b"\n".join(lines)  # nothing written


def test_a_recovered_tail(tmp_path: Path) -> None:
    home, _, config = prepare(tmp_path)
    log = write_log(home, 2)
    with log.open("ab") as f:
        f.write(b'{"seq":2,"time":"2026-11-30T12:00:00.0')
    with serving(config, home) as daemon:
        assert "audit: recovered a torn final line" in daemon.stderr
        assert ends_with(daemon.stderr, "see runbook.md#audit-recovered")
    report = verify_log(home)
    assert report.ok
    assert len(report.recoveries) == 1


def test_a_held_lock(tmp_path: Path) -> None:
    home, _, config = prepare(tmp_path)
    with serving(config, home):
        second = DaemonProcess(config)
        assert second.wait_exit() == 1
        assert "brokerd is already running" in second.stderr
        assert ends_with(second.stderr, "see runbook.md#brokerd-already-running")
        # the first one still serves
        answer = exchange(Home(home).broker_socket, read(tmp_path), "c1")[-1].message
        assert answer.kind == "tool_response"


def test_a_forbidden_message(tmp_path: Path) -> None:
    home, _, config = prepare(tmp_path)
    with serving(config, home) as daemon:
        answer = exchange(Home(home).broker_socket, Approvals(), "a1")[-1].message
        assert isinstance(answer, Error)
        assert answer.code == "forbidden"
        line = daemon.wait_for_line(lambda line: "event=forbidden" in line)
        assert "kind=approvals" in line
        assert "socket=broker.sock" in line
        assert line.endswith(pointer("see runbook.md#socket-forbidden"))


@pytest.mark.parametrize(
    "args",
    [["approvals"], ["approve", "41"], ["refuse", "41"], ["grants", "check"]],
    ids=lambda a: "-".join(a),
)
def test_bxctl_with_brokerd_unreachable(tmp_path: Path, args: list[str]) -> None:
    done = subprocess.run(
        [*console_script("bxctl"), *args],
        capture_output=True,
        text=True,
        env=clean_environment({"BOXMAKER_HOME": str(tmp_path / "nobody-home")}),
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert str(Home(tmp_path / "nobody-home").admin_socket) in line
    assert line.endswith(pointer("see runbook.md#broker-unavailable"))


def test_a_grant_over_brokerds_own_state_by_its_real_path(tmp_path: Path) -> None:
    """brokerd's home is configured through a link; a grant names the real audit
    directory. It is refused at start, with the runbook pointer, and calls are denied."""
    home, grants, _ = prepare(tmp_path)
    alias = home.parent / "alias"
    alias.symlink_to(home)
    config = write_config(tmp_path / "aliased.toml", alias, grants)
    write_grant(grants, "audit-shell", tool="shell", paths=[str(home.resolve() / "audit")])
    daemon = DaemonProcess(config)
    daemon.wait_serving([Home(alias).broker_socket, Home(alias).admin_socket])
    with daemon:
        line = daemon.wait_for_line(lambda line: "audit-shell.toml" in line)
        assert f"reaches boxmaker's own home ({home.resolve()})" in line
        assert line.endswith("see runbook.md#grant-covers-boxmaker")
        answer = exchange(Home(alias).broker_socket, read(tmp_path), "c1")[-1].message
        assert answer == DeniedResponse(reason=DenyReason.GRANTS_INVALID)
