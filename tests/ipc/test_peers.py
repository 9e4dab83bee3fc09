"""The kinds a link keeps for some client roles, checked by the peer's uid (`ipc.peers`).

Here as the user running the tests: a socket whose `Peers` say this uid is the
owner answers the kept kinds, one that names another uid (or no owner) answers
them `forbidden`, and the open kinds are answered to every peer. The same rules
with real users of a root install's group are `tests/loopd/test_loop_owner_kinds.py`.
"""

from __future__ import annotations

import logging
import os
import pwd
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from boxmaker.core.errors import ErrorCode, StartupError
from boxmaker.core.home.links import LOOP, ROLE_USERS, Role
from boxmaker.core.wire.common import Error, Status, StatusReport
from boxmaker.core.wire.loop import SessionList, Sessions
from boxmaker.ipc.connection import Handlers, SocketRules, answering
from boxmaker.ipc.peers import DEV_PEERS, NO_OWNER, Peers, peer_uid, peers_for
from boxmaker.ipc.serving import bind_socket, serve_forever
from boxmaker.ipc.shell import Endpoint, RoleSockets
from boxmaker.testing.homes import make_home
from boxmaker.testing.sockets import exchange

# loop.sock's rule 5 on two kinds: `sessions` kept for the owner, `status` open
LINK = replace(
    LOOP,
    socket="peers.sock",
    accepts=("sessions", "status"),
    senders=(("sessions", (Role.OWNER,)),),
)
REPORT = StatusReport(role="loopd", version="0", started="2026-11-30T12:00:00.000Z", detail="t")
HANDLERS: Handlers = {
    Sessions: answering(lambda _: SessionList(items=())),
    Status: answering(lambda _: REPORT),
}
ME = os.getuid()
FORBIDDEN = Error(
    code=ErrorCode.FORBIDDEN,
    message=f"sessions on peers.sock is for the owner only, and this peer (uid {ME}) is not;"
    " see runbook.md#socket-owner-only",
)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[Peers], Path]]:
    """Serve LINK with the `Peers` given; the socket's path."""
    stopping = threading.Event()
    listening: list[socket.socket] = []

    def start(peers: Peers) -> Path:
        path = make_home(tmp_path) / "run" / "peers" / "peers.sock"
        listening.append(bind_socket(path))
        serve_forever(listening[-1], SocketRules(LINK, 4, peers=peers), HANDLERS, stopping)
        return path

    yield start
    stopping.set()
    for sock in listening:
        sock.close()


@pytest.mark.parametrize(
    ("peers", "owner"),
    [
        pytest.param(Peers(owner_uid=ME), True, id="root-install-this-uid-the-owner"),
        pytest.param(DEV_PEERS, True, id="dev-mode-everyone-the-owner"),
        pytest.param(Peers(owner_uid=ME + 1), False, id="root-install-another-uid-the-owner"),
        pytest.param(NO_OWNER, False, id="root-install-no-owner-named"),
    ],
)
def test_a_kept_kind_is_answered_to_the_owner_alone_and_an_open_one_to_all(
    serve: Callable[[Peers], Path],
    peers: Peers,
    owner: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = serve(peers)
    caplog.set_level(logging.ERROR, logger="boxmaker.ipc.connection")
    answer = exchange(path, Sessions())[-1].message
    assert answer == (SessionList(items=()) if owner else FORBIDDEN)
    assert exchange(path, Status())[-1].message == REPORT  # open: whoever connects
    forbidden = [r.getMessage() for r in caplog.records if "event=forbidden" in r.getMessage()]
    expected = f"event=forbidden kind=sessions socket=peers.sock peer_uid={ME}"
    assert forbidden == ([] if owner else [f"{expected} see runbook.md#socket-owner-only"])


def test_the_peer_uid_is_the_connecting_process_s() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        assert peer_uid(left) == peer_uid(right) == ME


@pytest.mark.parametrize(
    ("peer", "kinds"),
    [
        pytest.param(
            Role.OWNER,
            ("turn", "compact", "cancel", "sessions", "session_show", "status"),
            id="owner",
        ),
        pytest.param(Role.GATEWAYD, ("turn", "status"), id="gatewayd"),
        pytest.param(None, ("turn", "status"), id="another-member"),
    ],
)
def test_loop_sock_keeps_the_owner_s_kinds(peer: Role | None, kinds: tuple[str, ...]) -> None:
    assert LOOP.kinds_of(peer) == kinds
    assert not LOOP.may_send(Role.OWNER, "approvals")  # not accepted at all


def test_in_dev_mode_every_peer_is_the_owner() -> None:
    peers = peers_for(group_access=False, owner="whoever")
    assert peers == DEV_PEERS
    assert {peers.role_of(uid) for uid in (0, ME, 65534)} == {Role.OWNER}


def test_a_root_install_knows_the_owner_by_uid_alone() -> None:
    me = pwd.getpwuid(ME).pw_name
    peers = peers_for(group_access=True, owner=me)
    assert peers == Peers(owner_uid=ME)
    assert peers.role_of(ME) is Role.OWNER
    assert peers.role_of(ME + 1) is None
    assert peers_for(group_access=True, owner="") == NO_OWNER
    assert NO_OWNER.role_of(ME) is None
    assert not NO_OWNER.knows_owner


@pytest.mark.parametrize("user", sorted(ROLE_USERS.values()))
def test_a_role_s_user_is_never_the_owner(user: str) -> None:
    with pytest.raises(StartupError, match="is a role's user"):
        peers_for(group_access=True, owner=user)


def test_an_owner_that_is_no_user_stops_the_start() -> None:
    with pytest.raises(StartupError, match="there is no such user"):
        peers_for(group_access=True, owner="bx-no-such-owner")


def test_a_root_install_that_names_no_owner_says_so_at_start_and_refuses_all(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = make_home(tmp_path) / "run" / "peers" / "peers.sock"
    sockets = RoleSockets(Role.LOOPD, (Endpoint(LINK, path, 4),), group_access=True)
    caplog.set_level(logging.WARNING, logger="boxmaker.ipc.shell")
    sockets.start({LINK: HANDLERS})
    try:
        assert exchange(path, Sessions())[-1].message == FORBIDDEN
        assert exchange(path, Status())[-1].message == REPORT
    finally:
        sockets.stop()
    (line,) = [r.getMessage() for r in caplog.records if "event=no_owner" in r.getMessage()]
    assert line == (
        "event=no_owner socket=peers.sock kinds=sessions refused to every peer: [sockets]"
        " owner_user names no user; see runbook.md#socket-owner-only"
    )


def test_a_role_s_user_named_owner_stops_the_start_before_anything_is_bound(
    tmp_path: Path,
) -> None:
    path = make_home(tmp_path) / "run" / "peers" / "peers.sock"
    endpoint = Endpoint(LINK, path, 4)
    sockets = RoleSockets(Role.LOOPD, (endpoint,), group_access=True, owner="bx-gateway")
    with pytest.raises(StartupError, match="'bx-gateway' is a role's user"):
        sockets.start({LINK: HANDLERS})
    assert not path.exists()
