"""The real `brokerd serve --config` process: its sockets, their modes, SIGTERM, and the
owner's whole flow with the real `bxctl` console script.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from pathlib import Path

import orjson
import pytest

from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.home.layout import Home
from boxmaker.core.wire.broker import (
    DeniedResponse,
    FailedResponse,
    PendingApprovalResponse,
    ToolRequest,
)
from boxmaker.core.wire.broker_admin import Approvals, Approve, CheckGrants, Refuse
from boxmaker.core.wire.common import Error
from boxmaker.core.wire.envelope import Message
from boxmaker.sandbox.runner import RunFailure
from boxmaker.testing.homes import make_home, verify_log, write_config
from boxmaker.testing.processes import DaemonProcess, clean_environment, console_script
from boxmaker.testing.sockets import OpenCall, exchange

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "grants.example"


def setup(tmp_path: Path, grants: Path | None = None) -> tuple[Path, Path]:
    home = make_home(tmp_path)
    grants_dir = grants if grants is not None else tmp_path / "grants"
    grants_dir.mkdir(exist_ok=True)
    return home, write_config(tmp_path / "brokerd.toml", home, grants_dir)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def both_sockets(home: Path) -> list[Path]:
    """broker.sock and admin.sock of `home`."""
    place = Home(home)
    return [place.broker_socket, place.admin_socket]


def check_modes(home: Path) -> None:
    for path in both_sockets(home):
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert mode(path) == 0o600, path.relative_to(home)
        assert mode(path.parent) == 0o700, path.parent.relative_to(home)


def test_brokerd_makes_its_socket_directories_0700_and_its_sockets_0600(tmp_path: Path) -> None:
    home, config = setup(tmp_path)
    assert not (home / "run").exists()
    with DaemonProcess(config) as daemon:
        daemon.wait_serving(both_sockets(home))
        check_modes(home)


def test_brokerd_sets_directories_it_finds_at_0755_to_0700_and_replaces_a_stale_socket(
    tmp_path: Path,
) -> None:
    home, config = setup(tmp_path)
    for path in both_sockets(home):
        directory = path.parent
        directory.mkdir(parents=True)
        directory.chmod(0o755)
        assert mode(directory) == 0o755
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(Home(home).broker_socket))
    stale.close()  # the file stays; nobody listens on it
    with DaemonProcess(config) as daemon:
        daemon.wait_serving(both_sockets(home))
        check_modes(home)


ADMIN_KINDS: list[Message] = [
    Approvals(),
    Approve(approval=0),
    Refuse(approval=0),
    CheckGrants(),
]


def test_the_real_daemon_forbids_each_wrong_kind_and_closes(tmp_path: Path) -> None:
    home, config = setup(tmp_path)
    tool = ToolRequest(session="chat-1", call="c1", tool="read_file", arguments="{}")
    wrong = [(Home(home).broker_socket, m) for m in ADMIN_KINDS] + [(Home(home).admin_socket, tool)]
    with DaemonProcess(config) as daemon:
        daemon.wait_serving(both_sockets(home))
        for path, message in wrong:
            answers = exchange(path, message, "w1")  # reads until the server closes
            assert len(answers) == 1
            error = answers[0].message
            assert isinstance(error, Error), (path.name, message.kind)
            assert error.code == "forbidden"
        lines = daemon.wait_for_line(lambda line: "kind=tool_request socket=admin.sock" in line)
        assert lines.endswith("see runbook.md#socket-forbidden")
    assert verify_log(home).records == 0


@pytest.mark.slow
def test_sigterm_stops_brokerd_cleanly_even_right_after_it_starts(tmp_path: Path) -> None:
    home, config = setup(tmp_path)
    sockets = both_sockets(home)
    for _ in range(3):
        daemon = DaemonProcess(config)
        daemon.wait_serving(sockets)
        status = daemon.stop(timeout_s=10)
        assert daemon.stopped_cleanly, f"brokerd ignored SIGTERM:\n{daemon.stderr}"
        assert status == 0
        assert not any(path.exists() for path in sockets)
        assert "event=stopped" in daemon.stderr


def bxctl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*console_script("bxctl"), *args],
        capture_output=True,
        text=True,
        env=clean_environment({"BOXMAKER_HOME": str(home)}),
        timeout=60,
        check=False,
    )


@pytest.mark.slow
def test_the_owner_approves_a_call_with_the_example_grants(tmp_path: Path) -> None:
    home, config = setup(tmp_path, EXAMPLES)
    with DaemonProcess(config) as daemon:
        daemon.wait_serving(both_sockets(home))
        keys = orjson.dumps({"path": "/home/owner/notes/keys/id"}).decode()
        denied = exchange(
            Home(home).broker_socket,
            ToolRequest(session="chat-1", call="k1", tool="read_file", arguments=keys),
            "k1",
        )
        assert denied[-1].message == DeniedResponse(reason=DenyReason.DENIED_BY_GRANT)

        arguments = orjson.dumps({"command": "make", "cwd": "/home/owner/scratch"}).decode()
        request = ToolRequest(session="chat-1", call="s1", tool="shell", arguments=arguments)
        with OpenCall(Home(home).broker_socket, request) as call:
            waiting = call.first().message
            assert isinstance(waiting, PendingApprovalResponse)
            listed = bxctl(home, "approvals")
            assert listed.returncode == 0, listed.stderr
            head, body = listed.stdout.splitlines()
            assert head.startswith(f"{waiting.approval}  ")
            assert "grant scratch-shell  taint private" in head
            assert body == f"    shell {arguments}"
            approved = bxctl(home, "approve", str(waiting.approval))
            assert (approved.returncode, approved.stdout) == (
                0,
                f"approved {waiting.approval}: runs\n",
            )
            answer = call.final()
        # the refusing runtime is brokerd's default until a sandbox is configured
        assert answer.message == FailedResponse(message=RunFailure.NOT_CONFIGURED.value)
    verified = bxctl(home, "audit", "verify", "--home", str(home))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith("audit: ok, 4 records, head ")
    assert len(verified.stdout.splitlines()) == 1
    report = verify_log(home)
    assert report.ok
    assert os.listdir(home / "audit") != []
