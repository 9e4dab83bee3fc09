"""Every path of a boxmaker home, and every mode, from one place. Pure; no I/O.

design.md sections 4 and 6 are its specification. `<home>` is `BOXMAKER_HOME`,
else /var/lib/boxmaker:

    <home>/run/loop-broker/broker.sock   brokerd, for loopd (and memoryd)
    <home>/run/owner-broker/admin.sock   brokerd, for the owner (bxctl, gatewayd)
    <home>/run/loop/loop.sock            loopd, for its clients
    <home>/run/loop-memory/memory.sock   memoryd, for loopd (the memory block)
    <home>/run/broker-memory/memory.sock memoryd, for brokerd (memory tool calls)
    <home>/run/owner-memory/admin.sock   memoryd, for the owner (bxctl memory)
    <home>/run/gateway/gateway.sock      gatewayd, for brokerd (approvals over chat)
    <home>/run/egress/                   brokerd's per-call egress proxies
    <home>/audit/YYYY-MM-DD.jsonl        the audit log; <home>/audit/.lock
    <home>/broker/sessions/<id>.json     brokerd's session state
    <home>/loop/sessions/<id>.jsonl      loopd's session logs
    <home>/models/                       the embedded model, assembled at first start
    <home>/memory/                       memoryd's files and journal
    <home>/gateway/watermark.json        gatewayd's place in the Mattermost stream

A link's directory and socket have one of two mode pairs: shared (a root install:
the directory 2750, set-group-id so the socket keeps the link's group, and the
socket 0660, for the group holding only the client role's user) or private (dev
mode: 0700 and 0600, this user only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

HOME_VARIABLE = "BOXMAKER_HOME"
DEFAULT_HOME = Path("/var/lib/boxmaker")


@dataclass(frozen=True, slots=True)
class LinkModes:
    """The modes of a link's directory and of its socket."""

    directory: int
    socket: int


SHARED = LinkModes(directory=0o2750, socket=0o660)
PRIVATE = LinkModes(directory=0o700, socket=0o600)


def link_modes(group_access: bool) -> LinkModes:
    """SHARED in a root install (`[sockets] group_access = true`), else PRIVATE."""
    return SHARED if group_access else PRIVATE


def home_from(environ: Mapping[str, str]) -> Path:
    """The home `environ` names (`BOXMAKER_HOME`, when set and not empty), else the default."""
    return Path(environ.get(HOME_VARIABLE) or DEFAULT_HOME)


@dataclass(frozen=True, slots=True)
class Home:
    """The places under one home."""

    root: Path

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def broker_socket(self) -> Path:
        return self.run / "loop-broker" / "broker.sock"

    @property
    def admin_socket(self) -> Path:
        return self.run / "owner-broker" / "admin.sock"

    @property
    def loop_socket(self) -> Path:
        return self.run / "loop" / "loop.sock"

    @property
    def loop_memory_socket(self) -> Path:
        return self.run / "loop-memory" / "memory.sock"

    @property
    def broker_memory_socket(self) -> Path:
        return self.run / "broker-memory" / "memory.sock"

    @property
    def owner_memory_socket(self) -> Path:
        return self.run / "owner-memory" / "admin.sock"

    @property
    def gateway_socket(self) -> Path:
        return self.run / "gateway" / "gateway.sock"

    @property
    def egress(self) -> Path:
        return self.run / "egress"

    @property
    def audit(self) -> Path:
        return self.root / "audit"

    @property
    def broker_sessions(self) -> Path:
        return self.root / "broker" / "sessions"

    @property
    def loop_sessions(self) -> Path:
        return self.root / "loop" / "sessions"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def memory(self) -> Path:
        return self.root / "memory"

    @property
    def gateway(self) -> Path:
        return self.root / "gateway"
