"""brokerd.toml into a typed `BrokerdConfig`. Reads the file and the environment once.

Every key has a default, so a file names only what differs; an unknown key, a
wrong type or an unknown `BOXMAKER_*` variable is a `ConfigError` with one line
saying which. `home` defaults to `BOXMAKER_HOME`, then `/var/lib/boxmaker`; a
socket path that is absent or empty means its default under `home`.

    [paths]      home, grants
    [sockets]    broker, admin, group_access
    [approvals]  ttl_ms
    [audit]      checkpoint_every_s (a checkpoint of the audit log this often, kept in
                 <home>/audit/checkpoint.json; 0 = only on request)
    [runner]     backend ("bwrap", the default; "podman"; "refusing"), timeout_ms, memory_mb,
                 pids, output_bytes (at most MAX_OUTPUT_BYTES), ca_file, rootfs (Podman's)
    [memory]     socket (memoryd's broker-memory socket; "" = the default under home,
                 "none" = no memory tools: each allowed call fails), timeout_ms
    [gateway]    socket (gatewayd's gateway.sock, for approvals over chat; "" = the
                 default under home, "none" = no approvals over chat), timeout_ms
                 (to connect and have an approval posted, and to send its outcome)
    [secrets.<name>]  one of credential, env, file (`boxmaker.core.home.secrets`); read at
                 start by `serve`, which stops on one it cannot read. brokerd uses none yet

`output_bytes` is capped at 262,144 so that a tool's output stays well under the
1 MiB frame in the usual case; output whose JSON escaping would still overflow
the frame (control characters escape to six bytes each) is cut further by
brokerd and marked truncated (`core.wire.frame_fit`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field

from boxmaker.core.home.layout import HOME_VARIABLE, client_socket, socket_path
from boxmaker.core.home.links import (
    BROKER_MEMORY,
    GATEWAY,
    LINKS,
    LOOP_BROKER,
    OWNER_BROKER,
    Link,
    Role,
    links_of,
)
from boxmaker.core.home.secrets import SecretsTable
from boxmaker.core.home.settings_check import RoleSettingsBase, Section
from boxmaker.ipc.config_file import read_config

MAX_OUTPUT_BYTES = 262_144
KNOWN_VARIABLES = (HOME_VARIABLE,)


class PathsSection(Section):
    home: str = ""
    grants: str = "/etc/boxmaker/grants"


class SocketsSection(Section):
    broker: str = ""
    admin: str = ""
    # true in a root install, false in dev mode: each link's modes (`core.home.links`)
    group_access: bool = False


class ApprovalsSection(Section):
    ttl_ms: int = Field(default=900_000, ge=1)


class AuditSection(Section):
    checkpoint_every_s: float = Field(default=300.0, ge=0)


class RunnerSection(Section):
    backend: Literal["refusing", "bwrap", "podman"] = "bwrap"
    timeout_ms: int = Field(default=60_000, ge=1)
    memory_mb: int = Field(default=512, ge=16)
    pids: int = Field(default=64, ge=1)
    output_bytes: int = Field(default=MAX_OUTPUT_BYTES, ge=1, le=MAX_OUTPUT_BYTES)
    ca_file: str = "/etc/ssl/certs/ca-certificates.crt"
    rootfs: str = "/var/lib/boxmaker-sandbox/rootfs"


class MemorySection(Section):
    socket: str = ""
    timeout_ms: int = Field(default=10_000, ge=1)


class GatewaySection(Section):
    socket: str = ""
    timeout_ms: int = Field(default=10_000, ge=1)


class BrokerdConfig(RoleSettingsBase):
    """Everything brokerd reads from brokerd.toml, with defaults filled in."""

    paths: PathsSection = PathsSection()
    sockets: SocketsSection = SocketsSection()
    approvals: ApprovalsSection = ApprovalsSection()
    audit: AuditSection = AuditSection()
    runner: RunnerSection = RunnerSection()
    memory: MemorySection = MemorySection()
    gateway: GatewaySection = GatewaySection()
    secrets: SecretsTable = Field(default_factory=dict)  # where to read them, never values

    @property
    def home(self) -> Path:
        return Path(self.paths.home)

    @property
    def grants_dir(self) -> Path:
        return Path(self.paths.grants)

    @property
    def broker_socket(self) -> Path:
        return socket_path(self.home, LOOP_BROKER, self.sockets.broker)

    @property
    def admin_socket(self) -> Path:
        return socket_path(self.home, OWNER_BROKER, self.sockets.admin)

    @property
    def memory_socket(self) -> Path | None:
        """memoryd's socket for memory tool calls; None when `[memory] socket = "none"`."""
        return client_socket(self.home, BROKER_MEMORY, self.memory.socket)

    @property
    def gateway_socket(self) -> Path | None:
        """gatewayd's socket for approvals over chat; None when `[gateway] socket = "none"`."""
        return client_socket(self.home, GATEWAY, self.gateway.socket)

    def sockets_used(self, links: Iterable[Link] = LINKS) -> list[Path]:
        """The socket of each link of `links` brokerd serves or reaches, but those set to
        "none": a link with no key here is at its default under home."""
        configured = {
            LOOP_BROKER: self.broker_socket,
            OWNER_BROKER: self.admin_socket,
            BROKER_MEMORY: self.memory_socket,
            GATEWAY: self.gateway_socket,
        }
        found = (
            configured.get(link, socket_path(self.home, link))
            for link in links_of(Role.BROKERD, links)
        )
        return [path for path in found if path is not None]


def load_config(path: Path | None, environ: Mapping[str, str]) -> BrokerdConfig:
    """brokerd.toml at `path` (None: every default), with `environ` for BOXMAKER_HOME."""
    return read_config(BrokerdConfig, path, environ, "brokerd", KNOWN_VARIABLES)
