"""The link table is the one source of each link's facts, and of each socket's kinds.

A link added to the table (here a test-only row, and no other edit) is in the
layout, the root install's plan (its group and its directory), the rules a
socket is served by (its kinds, its forbidden and busy answers) and brokerd's
reserved places. And for every socket of the table, the kinds its link accepts
are exactly the kinds its role handles: each role's own handler maps, built by
the roles' constructors, are compared with the table.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from boxmaker.brokerd.config import BrokerdConfig, PathsSection
from boxmaker.bxctl.install_plan import Layout, plan
from boxmaker.bxctl.install_steps import Directory, Group
from boxmaker.core.errors import ErrorCode, StartupError
from boxmaker.core.home.layout import Home, socket_path
from boxmaker.core.home.links import GATEWAY, LINKS, Link, Role, kind_of
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.broker_admin import Approvals
from boxmaker.core.wire.common import Error, Status, StatusReport
from boxmaker.core.wire.connection import ClientConnection
from boxmaker.core.wire.envelope import decode_envelope
from boxmaker.core.wire.frames import FrameDecoder
from boxmaker.core.wire.memory import Reindex, Reindexed
from boxmaker.gatewayd.approvals import ApprovalDesk
from boxmaker.gatewayd.mattermost import MattermostClient
from boxmaker.gatewayd.turns import Owner
from boxmaker.ipc.connection import Handlers, SocketRules, answering
from boxmaker.ipc.serving import bind_socket, refuse, serve_forever
from boxmaker.memoryd.config import MemorydConfig
from boxmaker.memoryd.config import PathsSection as MemorydPaths
from boxmaker.memoryd.handlers import MemoryHandlers
from boxmaker.memoryd.recall import RecallIndex
from boxmaker.memoryd.serve import Memoryd
from boxmaker.memoryd.store import MemoryStore
from boxmaker.testing.daemons import running_brokerd, running_loopd
from boxmaker.testing.homes import make_home
from boxmaker.testing.scripted_model import ScriptedModel
from boxmaker.testing.sockets import exchange

TEST_LINK = Link(
    "test-memory",
    "test.sock",
    Role.MEMORYD,
    (Role.LOOPD, Role.OWNER),
    "bx-test-memory",
    ("status", "reindex"),
    Runbook.MEMORYD_BUSY,
)
WITH_TEST_LINK = (*LINKS, TEST_LINK)
REPORT = StatusReport(role="memoryd", version="0", started="2026-11-30T12:00:00.000Z", detail="t")


def report(_: Status) -> StatusReport:
    return REPORT


def reindexed(_: Reindex) -> Reindexed:
    return Reindexed(entries=0)


# --- a link added to the table -------------------------------------------------------


def test_an_added_link_is_in_the_layout_and_the_root_install_plan(tmp_path: Path) -> None:
    home = tmp_path / "home"
    directory = home / "run" / "test-memory"
    assert Home(home).socket(TEST_LINK) == directory / "test.sock"
    assert socket_path(home, TEST_LINK) == directory / "test.sock"  # a role's default for it

    owner = pwd.getpwuid(os.getuid()).pw_name
    layout = Layout(
        root=True,
        etc=tmp_path / "etc",
        home=home,
        log=tmp_path / "log",
        run=tmp_path / "run",
        bin=Path("/opt/boxmaker/bin"),
        owner=owner,
    )
    for links, added in ((WITH_TEST_LINK, True), (LINKS, False)):
        steps = plan(layout, links)
        groups = {step.name: step.members for step in steps if isinstance(step, Group)}
        modes = {s.path: (s.owner, s.group, s.mode) for s in steps if isinstance(s, Directory)}
        if added:  # its clients' users; its server's user, its group and 2750
            assert groups["bx-test-memory"] == ("bx-loop", owner)
            assert modes[directory] == ("bx-memory", "bx-test-memory", 0o2750)
        else:
            assert "bx-test-memory" not in groups
            assert directory not in modes


@pytest.fixture
def stopping() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def test_an_added_link_is_served_by_its_rules(tmp_path: Path, stopping: threading.Event) -> None:
    path = Home(make_home(tmp_path)).socket(TEST_LINK)
    listening = bind_socket(path, TEST_LINK.modes(group_access=False))
    try:
        handlers: Handlers = {Status: answering(report), Reindex: answering(reindexed)}
        serve_forever(listening, SocketRules(TEST_LINK, 2), handlers, stopping)
        assert exchange(path, Status())[-1].message == REPORT
        assert exchange(path, Reindex())[-1].message == Reindexed(entries=0)
        forbidden = exchange(path, Approvals(), "a1")[-1].message
        assert forbidden == Error(
            code=ErrorCode.FORBIDDEN, message="approvals is not accepted on test.sock"
        )
    finally:
        listening.close()


def test_an_added_link_refuses_over_its_cap_with_its_busy_pointer() -> None:
    server, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with client:
        client.sendall(ClientConnection("r1").request(Status()))
        refuse(server, SocketRules(TEST_LINK, 3))  # the leader's refusal of one over the cap
        (frame,) = FrameDecoder().feed(client.recv(65536))
    answer = decode_envelope(frame)
    assert (answer.id, answer.final) == ("r1", True)
    assert answer.message == Error(
        code=ErrorCode.UNAVAILABLE,
        message="memoryd is serving its limit of 3 connections on test.sock; try again"
        " later, see runbook.md#memoryd-busy",
    )


def test_an_added_link_is_not_served_without_a_handler_for_each_kind(
    tmp_path: Path, stopping: threading.Event
) -> None:
    listening = bind_socket(Home(make_home(tmp_path)).socket(TEST_LINK))
    try:
        with pytest.raises(
            StartupError, match=re.escape("test-memory/test.sock: no handler for reindex")
        ):
            serve_forever(
                listening, SocketRules(TEST_LINK, 2), {Status: answering(report)}, stopping
            )
    finally:
        listening.close()


def test_an_added_link_brokerd_reaches_is_one_of_its_reserved_places(tmp_path: Path) -> None:
    reached = replace(TEST_LINK, clients=(Role.BROKERD,))
    config = BrokerdConfig(paths=PathsSection(home=str(tmp_path), grants=str(tmp_path / "g")))
    assert Home(tmp_path).socket(reached) in config.sockets_used((*LINKS, reached))
    assert Home(tmp_path).socket(reached) not in config.sockets_used()
    assert Home(tmp_path).socket(TEST_LINK) not in config.sockets_used(WITH_TEST_LINK)


# --- every socket: the kinds accepted are the kinds handled ----------------------------


def brokerd_handlers(base: Path) -> dict[Link, Handlers]:
    with running_brokerd(base) as brokerd:
        return brokerd.daemon.handlers()


def loopd_handlers(base: Path) -> dict[Link, Handlers]:
    with running_loopd(base, ScriptedModel()) as loopd:
        return loopd.daemon.server.handlers()


def memoryd_handlers(base: Path) -> dict[Link, Handlers]:
    config = MemorydConfig(paths=MemorydPaths(home=str(base)))
    handlers = MemoryHandlers(
        MemoryStore(config.memory_directory, lambda: datetime.now(UTC)),
        RecallIndex(config.memory_directory),
    )
    return Memoryd(config, handlers).handlers()


def gatewayd_handlers() -> dict[Link, Handlers]:
    loop = asyncio.new_event_loop()
    try:
        chat = MattermostClient("https://chat.invalid", "token")  # not connected: never used
        desk = ApprovalDesk(
            chat, loop, Owner(user_id="o" * 26, channel_id="c" * 26, bot_id="b" * 26)
        )
        return {GATEWAY: desk.handlers()}
    finally:
        loop.close()


def test_every_socket_handles_exactly_the_kinds_its_link_accepts(tmp_path: Path) -> None:
    by_role = {
        Role.BROKERD: brokerd_handlers(tmp_path / "b"),
        Role.LOOPD: loopd_handlers(tmp_path / "l"),
        Role.MEMORYD: memoryd_handlers(tmp_path),
        Role.GATEWAYD: gatewayd_handlers(),
    }
    served = [link for maps in by_role.values() for link in maps]
    assert sorted(served, key=LINKS.index) == list(LINKS)  # each link served, and once
    for role, maps in by_role.items():
        for link, handlers in maps.items():
            assert link.server is role, link.directory
            assert sorted(map(kind_of, handlers)) == sorted(link.accepts), link.directory
