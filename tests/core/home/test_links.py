"""The link table (`core.home.links`) against design.md's contracts: paths, users, groups, modes."""

from __future__ import annotations

from pathlib import Path

import pytest

from boxmaker.core.home.layout import Home, client_socket, socket_path
from boxmaker.core.home.links import (
    BROKER_MEMORY,
    DEV,
    GATEWAY,
    LINKS,
    LOOP,
    LOOP_BROKER,
    LOOP_MEMORY,
    OWNER_BROKER,
    OWNER_MEMORY,
    ROLE_USERS,
    ROOT,
    Link,
    Role,
    kind_of,
    links_of,
)
from boxmaker.core.strict import Strict
from boxmaker.core.wire.broker import ToolRequest
from boxmaker.core.wire.common import Error
from boxmaker.core.wire.envelope import message_kinds

ROOT_DIR = Path("/var/lib/boxmaker")


PLACES = [
    (LOOP_BROKER, "loop-broker/broker.sock", "brokerd", "bx-loop-broker"),
    (OWNER_BROKER, "owner-broker/admin.sock", "brokerd", "bx-owner-broker"),
    (LOOP, "loop/loop.sock", "loopd", "bx-loop-clients"),
    (LOOP_MEMORY, "loop-memory/memory.sock", "memoryd", "bx-loop-memory"),
    (BROKER_MEMORY, "broker-memory/memory.sock", "memoryd", "bx-broker-memory"),
    (OWNER_MEMORY, "owner-memory/admin.sock", "memoryd", "bx-owner-memory"),
    (GATEWAY, "gateway/gateway.sock", "gatewayd", "bx-broker-gateway"),
]


@pytest.mark.parametrize(
    ("link", "path", "server", "group"), [pytest.param(*p, id=p[0].directory) for p in PLACES]
)
def test_each_link_is_where_design_md_puts_it(
    link: Link, path: str, server: str, group: str
) -> None:
    assert Home(ROOT_DIR).socket(link) == ROOT_DIR / "run" / path
    assert (link.server, link.group) == (server, group)


def test_the_named_places_of_a_home_are_the_tables() -> None:
    home = Home(ROOT_DIR)
    named = [
        (home.broker_socket, LOOP_BROKER),
        (home.admin_socket, OWNER_BROKER),
        (home.loop_socket, LOOP),
        (home.loop_memory_socket, LOOP_MEMORY),
        (home.broker_memory_socket, BROKER_MEMORY),
        (home.owner_memory_socket, OWNER_MEMORY),
        (home.gateway_socket, GATEWAY),
    ]
    for path, link in named:
        assert path == home.socket(link) == home.link_directory(link) / link.socket
    assert {link for _, link in named} == set(LINKS)


def test_the_modes_are_design_md_s_and_every_link_has_them() -> None:
    # a root install: set-group-id 2750 so the socket keeps the link's group, 0660 for it
    assert (ROOT.directory, ROOT.socket) == (0o2750, 0o660)
    assert (DEV.directory, DEV.socket) == (0o700, 0o600)  # dev mode: this user only
    for link in LINKS:
        assert (link.modes(group_access=True), link.modes(group_access=False)) == (ROOT, DEV)


def test_the_clients_are_design_md_s() -> None:
    clients = {link.directory: set(link.clients) for link in LINKS}
    assert clients == {
        "loop-broker": {Role.LOOPD},
        "owner-broker": {Role.OWNER},
        "loop": {Role.OWNER, Role.GATEWAYD},  # bxctl chat, and the owner's chat messages
        "loop-memory": {Role.LOOPD},
        "broker-memory": {Role.BROKERD},
        "owner-memory": {Role.OWNER},
        "gateway": {Role.BROKERD},
    }
    assert ROLE_USERS == {
        Role.BROKERD: "bx-broker",
        Role.MEMORYD: "bx-memory",
        Role.LOOPD: "bx-loop",
        Role.GATEWAYD: "bx-gateway",
    }


def test_every_row_is_one_of_its_own() -> None:
    assert len({link.directory for link in LINKS}) == len(LINKS)
    assert len({link.group for link in LINKS}) == len(LINKS)
    for link in LINKS:
        assert link.server in ROLE_USERS, link  # the owner serves nothing
        assert link.server not in link.clients, link
        assert link.accepts, link
        assert set(link.accepts) <= set(message_kinds()), link
        assert len(set(link.accepts)) == len(link.accepts), link
        for kind, roles in link.senders:  # rule 5: kinds it accepts, kept for its clients
            assert kind in link.accepts, (link, kind)
            assert roles, (link, kind)
            assert set(roles) <= set(link.clients), (link, kind)


def test_loop_sock_keeps_the_session_kinds_for_the_owner() -> None:
    kept = dict(LOOP.senders)
    assert kept == dict.fromkeys(("compact", "cancel", "sessions", "session_show"), (Role.OWNER,))
    assert LOOP.kinds_of(Role.GATEWAYD) == LOOP.kinds_of(None) == ("turn", "status")
    assert LOOP.kinds_of(Role.OWNER) == LOOP.accepts
    for link in LINKS:  # every other link keeps nothing: its group is its clients
        assert link is LOOP or not link.senders, link


def test_kinds_are_the_wire_names() -> None:
    assert OWNER_BROKER.accepts[:2] == ("approvals", "check_grants")
    assert kind_of(ToolRequest) == "tool_request"
    assert kind_of(Error) == "error"


def test_links_of_a_role_are_those_it_serves_or_reaches() -> None:
    assert links_of(Role.BROKERD) == (LOOP_BROKER, OWNER_BROKER, BROKER_MEMORY, GATEWAY)
    assert links_of(Role.OWNER) == (OWNER_BROKER, LOOP, OWNER_MEMORY)
    extra = Link("x", "x.sock", Role.LOOPD, (Role.BROKERD,), "bx-x", ("status",), LOOP.busy)
    assert links_of(Role.BROKERD, (*LINKS, extra))[-1] == extra


def test_a_configured_path_wins_and_none_means_no_link() -> None:
    assert socket_path(ROOT_DIR, OWNER_BROKER) == ROOT_DIR / "run" / "owner-broker" / "admin.sock"
    assert socket_path(ROOT_DIR, OWNER_BROKER, "/tmp/a.sock") == Path("/tmp/a.sock")
    assert client_socket(ROOT_DIR, GATEWAY, "none") is None
    assert client_socket(ROOT_DIR, GATEWAY, "") == ROOT_DIR / "run" / "gateway" / "gateway.sock"


class NoKind(Strict):
    text: str


def test_a_class_without_a_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="NoKind is not a message kind"):
        kind_of(NoKind)
