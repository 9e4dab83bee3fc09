"""The real brokerd with few descriptors, broker.sock flooded with idle connections.

brokerd starts with RLIMIT_NOFILE at 128 (soft and hard, so it cannot raise it),
and a client opens idle connections on broker.sock as fast as it can and holds
them all, far more than brokerd has descriptors. The owner's `approvals` on
admin.sock must still be answered every time, brokerd's log must stay a few
lines (no traceback per accept), and once the flood stops broker.sock must serve
again.
"""

from __future__ import annotations

import resource
import socket
import threading
from pathlib import Path

import pytest

from boxmaker.core.errors import ProtocolError
from boxmaker.core.home.layout import Home
from boxmaker.core.wire.broker import DeniedResponse, ToolRequest
from boxmaker.core.wire.broker_admin import ApprovalList, Approvals
from boxmaker.testing.homes import make_home, write_config
from boxmaker.testing.processes import DaemonProcess
from boxmaker.testing.sockets import exchange
from boxmaker.testing.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LIMIT = 128
HELD = 500  # at most: about four times what brokerd has, and within a test's own 1024
ASKS = 12
ASK_TIMEOUT_S = 5.0  # each answer is at once; half the idle timeout is plenty


def few_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


class Flood:
    """Opens idle connections on a socket as fast as it can, up to HELD, and holds them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.opened = 0
        self.stop = threading.Event()
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self.stop.is_set() and len(self._held) < HELD:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(0.5)
            try:
                sock.connect(str(self.path))
            except OSError:  # the backlog is full: brokerd is behind, as meant
                sock.close()
                continue
            self._held.append(sock)
            self.opened += 1

    def end(self) -> None:
        self.stop.set()
        self._thread.join(10)
        for sock in self._held:
            sock.close()


def test_idle_connections_on_broker_sock_never_keep_the_owner_out(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    grants = tmp_path / "grants"
    grants.mkdir()
    config = write_config(tmp_path / "brokerd.toml", home, grants)
    broker, admin = Home(home).broker_socket, Home(home).admin_socket
    request = ToolRequest(session="s", call="c1", tool="read_file", arguments='{"path":"/x"}')
    with DaemonProcess(config, preexec=few_descriptors) as daemon:
        daemon.wait_serving([broker, admin])
        flood = Flood(broker)
        try:
            wait_until(lambda: flood.opened > 2 * LIMIT, 30, "the flood under way")
            answered = 0
            for n in range(ASKS):
                try:
                    answer = exchange(admin, Approvals(), f"a{n}", ASK_TIMEOUT_S)[-1].message
                except (OSError, ProtocolError):
                    continue
                answered += answer == ApprovalList(items=())
            assert answered == ASKS
        finally:
            flood.end()

        def served() -> bool:
            try:
                answer = exchange(broker, request, "c1")[-1].message
            except Exception:  # refused while the last idle places time out
                return False
            return isinstance(answer, DeniedResponse)

        wait_until(served, 30, "broker.sock serving again")
        assert daemon.stop() == 0
    log = daemon.stderr
    assert "Traceback" not in log
    # a connection brokerd served and the client left is one line (ipc.connection rule 5):
    # how many it had accepted when the flood ended is the scheduler's; every other line
    # (an accept refused, a descriptor short) is a few lines in all, never one each
    lines = log.splitlines()
    left = [line for line in lines if "event=peer_closed" in line or "event=idle_timeout" in line]
    assert len(left) <= flood.opened, log[-3000:]
    assert len(lines) - len(left) < 40, log[-3000:]
    assert "event=descriptors limit=128 broker_cap=8 admin_cap=16" in log
