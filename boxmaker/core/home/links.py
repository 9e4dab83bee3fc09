"""Every link between boxmaker's roles, stated once. Pure; no I/O.

A link is one Unix socket under `<home>/run/<directory>/` (design.md sections 3,
4 and 6): one role serves it, its client roles reach it, and it accepts a fixed
set of message kinds. `LINKS` has one row per link; everything that names a link
reads it: `core.home.layout` (the socket's path), each role's configuration (its
default path), `ipc.connection` and `ipc.serving` (the kinds a request may be, the
busy answer, the check that a socket's handlers are exactly its kinds), `bxctl
install` (the users, groups and directories of a root install), brokerd's reserved
places and the root-install test.

Whom the kernel admits, by these rules:

    1. A root install gives each role of ROLE_USERS its own user; the owner's
       links are for the owner's own user (the one named at install).
    2. A link's directory belongs to its serving role's user and to the link's
       group, which holds exactly the users of its client roles.
    3. The modes: `root` in a root install (the directory 2750, set-group-id so
       that the socket keeps the link's group, and the socket 0660: the serving
       user and the group); `dev` in dev mode, where every role runs as one user
       (0700 and 0600, that user only). Every row takes ROOT and DEV, the defaults.
    4. A request of a kind the link does not accept is answered `forbidden`, and
       a socket serves only with a handler for each kind it accepts and for no
       other (`ipc.connection`, `ipc.serving`).
    5. Which kinds each peer may send: a kind named in `senders` only by the
       client roles named with it, any other accepted kind by every peer the
       kernel admits. The kernel cannot tell a group's members apart, so the
       serving role does, by the peer's credentials (`ipc.peers`): in a root
       install a peer is the owner when its uid is the owner's user's, never by
       its group, and gatewayd's user is never the owner; in dev mode every peer
       is the owner (the one user). A kind a peer may not send is answered
       `forbidden` as in rule 4. loop.sock's `sessions`, `session_show`,
       `compact` and `cancel` are the owner's: they read every session's log (a
       secret session's values included), rewrite one or stop its turn; gatewayd sends `turn` and
       `status`, as any member of its group may.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from boxmaker.core.runbook import Runbook


class Role(StrEnum):
    """Who serves or reaches a link. Values are the roles' names (in answers and logs)."""

    BROKERD = "brokerd"
    MEMORYD = "memoryd"
    LOOPD = "loopd"
    GATEWAYD = "gatewayd"
    OWNER = "owner"  # bxctl, as the owner's own user


# rule 1: each role's user in a root install, in the order the install makes them
ROLE_USERS: dict[Role, str] = {
    Role.BROKERD: "bx-broker",
    Role.MEMORYD: "bx-memory",
    Role.LOOPD: "bx-loop",
    Role.GATEWAYD: "bx-gateway",
}


@dataclass(frozen=True, slots=True)
class LinkModes:
    """The modes of a link's directory and of its socket."""

    directory: int
    socket: int


ROOT = LinkModes(directory=0o2750, socket=0o660)  # rule 3: the serving user and the group
DEV = LinkModes(directory=0o700, socket=0o600)  # rule 3: this user only


@dataclass(frozen=True, slots=True)
class Link:
    """One row of the table: a socket, who serves and reaches it, and what it accepts."""

    directory: str  # under <home>/run/
    socket: str  # the socket's file name, as answers and log lines name it
    server: Role
    clients: tuple[Role, ...]
    group: str  # a root install's group of the directory: the clients' users (rule 2)
    accepts: tuple[str, ...]  # the kinds a request may be, as the wire names them (rule 4)
    busy: Runbook  # where a refusal over the socket's cap points
    unknown_id: str = "unknown"  # the id of an error answered before a request was read
    root: LinkModes = ROOT
    dev: LinkModes = DEV
    # rule 5: the kinds only some client roles may send, each with those roles
    senders: tuple[tuple[str, tuple[Role, ...]], ...] = ()

    def modes(self, group_access: bool) -> LinkModes:
        """`root` in a root install (`[sockets] group_access = true`), else `dev`."""
        return self.root if group_access else self.dev

    def senders_of(self, kind: str) -> tuple[Role, ...] | None:
        """The client roles that alone may send `kind` (rule 5); None: every peer may."""
        for named, roles in self.senders:
            if named == kind:
                return roles
        return None

    def may_send(self, peer: Role | None, kind: str) -> bool:
        """Whether a peer that is `peer` (None: no client role in particular) may send
        `kind`: one the link accepts (rule 4), and open to every peer or to `peer`'s
        role (rule 5)."""
        if kind not in self.accepts:
            return False
        roles = self.senders_of(kind)
        return roles is None or peer in roles

    def kinds_of(self, peer: Role | None) -> tuple[str, ...]:
        """The kinds a peer that is `peer` may send, in `accepts` order."""
        return tuple(kind for kind in self.accepts if self.may_send(peer, kind))


def kind_of(message: type[Any]) -> str:
    """The wire name of a message class of `core.wire` (its `kind` field's one value).

    (The table names kinds by these names, not by their classes, so that what reads
    only paths, such as `bxctl audit verify` through `core.home.layout`, loads no pydantic.)"""
    fields = getattr(message, "model_fields", {})
    field = fields.get("kind")
    kind = None if field is None else field.default
    if not isinstance(kind, str):
        raise TypeError(f"{message.__name__} is not a message kind")
    return kind


LOOP_BROKER = Link(
    "loop-broker",
    "broker.sock",
    Role.BROKERD,
    (Role.LOOPD,),
    "bx-loop-broker",
    ("tool_request",),
    Runbook.BROKER_BUSY,
)
OWNER_BROKER = Link(
    "owner-broker",
    "admin.sock",
    Role.BROKERD,
    (Role.OWNER,),
    "bx-owner-broker",
    ("approvals", "check_grants", "status", "approve", "refuse", "checkpoint", "session_states"),
    Runbook.BROKER_BUSY,
)
# two clients: the owner (`bxctl chat`) and gatewayd (the owner's Mattermost messages)
LOOP = Link(
    "loop",
    "loop.sock",
    Role.LOOPD,
    (Role.OWNER, Role.GATEWAYD),
    "bx-loop-clients",
    ("turn", "compact", "cancel", "sessions", "session_show", "status"),
    Runbook.LOOPD_BUSY,
    unknown_id="turn",
    # rule 5: every session's log, rewriting one, and stopping one's turn are the
    # owner's alone (gatewayd stops its own turn by closing its connection)
    senders=tuple(
        (kind, (Role.OWNER,)) for kind in ("compact", "cancel", "sessions", "session_show")
    ),
)
LOOP_MEMORY = Link(
    "loop-memory",
    "memory.sock",
    Role.MEMORYD,
    (Role.LOOPD,),
    "bx-loop-memory",
    ("memory_block", "session_updated", "status"),
    Runbook.MEMORYD_BUSY,
)
BROKER_MEMORY = Link(
    "broker-memory",
    "memory.sock",
    Role.MEMORYD,
    (Role.BROKERD,),
    "bx-broker-memory",
    ("memory_call", "status"),
    Runbook.MEMORYD_BUSY,
)
OWNER_MEMORY = Link(
    "owner-memory",
    "admin.sock",
    Role.MEMORYD,
    (Role.OWNER,),
    "bx-owner-memory",
    ("reindex", "memory_log", "status"),
    Runbook.MEMORYD_BUSY,
)
GATEWAY = Link(
    "gateway",
    "gateway.sock",
    Role.GATEWAYD,
    (Role.BROKERD,),
    "bx-broker-gateway",
    ("approval_request", "approval_outcome"),
    Runbook.GATEWAY_UNREACHABLE,
)

LINKS: tuple[Link, ...] = (
    LOOP_BROKER,
    OWNER_BROKER,
    LOOP,
    LOOP_MEMORY,
    BROKER_MEMORY,
    OWNER_MEMORY,
    GATEWAY,
)


def links_of(role: Role, links: Iterable[Link] = LINKS) -> tuple[Link, ...]:
    """The links `role` serves or is a client of, in table order."""
    return tuple(link for link in links if role is link.server or role in link.clients)
