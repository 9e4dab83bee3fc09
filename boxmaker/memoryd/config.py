"""memoryd.toml into a typed `MemorydConfig`. Reads the file and the environment once.

Every key has a default; an unknown key, a wrong type or an unknown `BOXMAKER_*`
variable is a `ConfigError` naming it. `home` defaults to `BOXMAKER_HOME`, then
`/var/lib/boxmaker`. An empty socket path means its default under home
(`boxmaker.core.home.layout.Home`).

    [paths]   home
    [sockets] loop (`core.home.links.LOOP_MEMORY`), broker (BROKER_MEMORY), owner
              (OWNER_MEMORY), group_access
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from boxmaker.core.home.layout import HOME_VARIABLE, Home, socket_path
from boxmaker.core.home.links import BROKER_MEMORY, LOOP_MEMORY, OWNER_MEMORY
from boxmaker.core.home.settings_check import RoleSettingsBase, Section
from boxmaker.ipc.config_file import read_config

KNOWN_VARIABLES = (HOME_VARIABLE,)


class PathsSection(Section):
    home: str = ""


class SocketsSection(Section):
    loop: str = ""
    broker: str = ""
    owner: str = ""
    # true in a root install, false in dev mode: each link's modes (`core.home.links`)
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
        return socket_path(self.home, LOOP_MEMORY, self.sockets.loop)

    @property
    def broker_socket(self) -> Path:
        return socket_path(self.home, BROKER_MEMORY, self.sockets.broker)

    @property
    def owner_socket(self) -> Path:
        return socket_path(self.home, OWNER_MEMORY, self.sockets.owner)


def load_config(path: Path | None, environ: Mapping[str, str]) -> MemorydConfig:
    """memoryd.toml at `path` (None: every default), with `environ` for BOXMAKER_HOME."""
    return read_config(MemorydConfig, path, environ, "memoryd", KNOWN_VARIABLES)
