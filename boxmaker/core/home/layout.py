"""Every path of a boxmaker home, from one place. Pure; no I/O.

design.md sections 4 and 6 are its specification. `<home>` is `BOXMAKER_HOME`,
else /var/lib/boxmaker:

    <home>/run/<directory>/<socket>      each link's socket (`boxmaker.core.home.links`)
    <home>/run/egress/                   brokerd's per-call egress proxies
    <home>/audit/YYYY-MM-DD.jsonl        the audit log; <home>/audit/.lock
    <home>/broker/sessions/<id>.json     brokerd's session state
    <home>/loop/sessions/<id>.jsonl      loopd's session logs
    <home>/models/                       the embedded model, assembled at first start
    <home>/memory/                       memoryd's files and journal
    <home>/gateway/watermark.json        gatewayd's place in the Mattermost stream

A link's modes, in dev mode and in a root install, are the link table's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from boxmaker.core.home.links import (
    BROKER_MEMORY,
    GATEWAY,
    LOOP,
    LOOP_BROKER,
    LOOP_MEMORY,
    OWNER_BROKER,
    OWNER_MEMORY,
    Link,
)

HOME_VARIABLE = "BOXMAKER_HOME"
DEFAULT_HOME = Path("/var/lib/boxmaker")
NO_SOCKET = "none"  # a client's socket key set to this: the role does without that link


def home_from(environ: Mapping[str, str]) -> Path:
    """The home `environ` names (`BOXMAKER_HOME`, when set and not empty), else the default."""
    return Path(environ.get(HOME_VARIABLE) or DEFAULT_HOME)


def socket_path(home: Path, link: Link, configured: str = "") -> Path:
    """A role's path for `link`'s socket: `configured` (its key) unless absent or empty,
    else the link's socket under `home`."""
    return Path(configured) if configured else Home(home).socket(link)


def client_socket(home: Path, link: Link, configured: str = "") -> Path | None:
    """`socket_path` for a link a role is a client of, or None when `configured` is
    NO_SOCKET: the role does without it."""
    return None if configured == NO_SOCKET else socket_path(home, link, configured)


@dataclass(frozen=True, slots=True)
class Home:
    """The places under one home."""

    root: Path

    @property
    def run(self) -> Path:
        return self.root / "run"

    def link_directory(self, link: Link) -> Path:
        return self.run / link.directory

    def socket(self, link: Link) -> Path:
        return self.link_directory(link) / link.socket

    @property
    def broker_socket(self) -> Path:
        return self.socket(LOOP_BROKER)

    @property
    def admin_socket(self) -> Path:
        return self.socket(OWNER_BROKER)

    @property
    def loop_socket(self) -> Path:
        return self.socket(LOOP)

    @property
    def loop_memory_socket(self) -> Path:
        return self.socket(LOOP_MEMORY)

    @property
    def broker_memory_socket(self) -> Path:
        return self.socket(BROKER_MEMORY)

    @property
    def owner_memory_socket(self) -> Path:
        return self.socket(OWNER_MEMORY)

    @property
    def gateway_socket(self) -> Path:
        return self.socket(GATEWAY)

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
