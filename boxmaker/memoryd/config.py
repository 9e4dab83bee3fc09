"""memoryd.toml into a typed `MemorydConfig`. Reads the file and the environment once.

Every key has a default; an unknown key, a wrong type or an unknown `BOXMAKER_*`
variable is a `ConfigError` naming it. `home` defaults to `BOXMAKER_HOME`, then
`/var/lib/boxmaker`. An empty socket path means its default under home
(`boxmaker.core.layout.Home`).

    [paths]   home
    [sockets] loop (loop-memory/memory.sock), broker (broker-memory/memory.sock),
              owner (owner-memory/admin.sock), group_access
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from boxmaker.core.layout import HOME_VARIABLE, Home
from boxmaker.core.settings_check import RoleSettingsBase, Section
from boxmaker.ipc.config_file import read_config

KNOWN_VARIABLES = (HOME_VARIABLE,)


class PathsSection(Section):
    home: str = ""


class SocketsSection(Section):
    loop: str = ""
    broker: str = ""
    owner: str = ""
    # true in a root install: directories 2750 and sockets 0660, shared with the
    # client role's group; false (dev mode): 0700 and 0600, this user only
    group_access: bool = False


class MemorydConfig(RoleSettingsBase):
    paths: PathsSection = PathsSection()
    sockets: SocketsSection = SocketsSection()

    @property
    def home(self) -> Path:
        return Path(self.paths.home)

    @property
    def memory_directory(self) -> Path:
        return Home(self.home).memory

    @property
    def loop_socket(self) -> Path:
        return Path(self.sockets.loop or Home(self.home).loop_memory_socket)

    @property
    def broker_socket(self) -> Path:
        return Path(self.sockets.broker or Home(self.home).broker_memory_socket)

    @property
    def owner_socket(self) -> Path:
        return Path(self.sockets.owner or Home(self.home).owner_memory_socket)


def load_config(path: Path | None, environ: Mapping[str, str]) -> MemorydConfig:
    """memoryd.toml at `path` (None: every default), with `environ` for BOXMAKER_HOME."""
    return read_config(MemorydConfig, path, environ, "memoryd", KNOWN_VARIABLES)
