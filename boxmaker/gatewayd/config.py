"""gatewayd.toml into a typed `GatewaydConfig`. Reads the file and the environment once.

Every key has a default; an unknown key, a wrong type or an unknown `BOXMAKER_*`
variable is a `ConfigError` naming it. `home` defaults to `BOXMAKER_HOME`, then
`/var/lib/boxmaker`. An empty socket path means its default under home.

    [paths]       home
    [mattermost]  url (https://host, the server; "" = not configured: gatewayd
                  says so and exits 0), owner (the owner's user id, 26 characters
                  of a-z and 0-9: only its direct messages are turns, only its
                  answers approve), edit_interval_ms (the least time between two
                  edits of a streamed reply), catch_up_s (after a restart, the
                  owner's messages sent while gatewayd was down are answered
                  if no older than this; 0 to 604800, default 3600)
    [loop]        socket (loopd's loop.sock), timeout_ms (the longest wait for
                  loopd's next answer in a turn)
    [sockets]     gateway (gateway.sock, for brokerd), group_access
    [secrets.mattermost_token]  where the bot's token is read (`core.home.secrets`);
                  required once `url` is set
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from boxmaker.core.errors import ConfigError
from boxmaker.core.home.layout import HOME_VARIABLE, Home, socket_path
from boxmaker.core.home.links import GATEWAY, LOOP
from boxmaker.core.home.secrets import SecretsTable
from boxmaker.core.home.settings_check import RoleSettingsBase, Section
from boxmaker.ipc.config_file import read_config

KNOWN_VARIABLES = (HOME_VARIABLE,)
TOKEN = "mattermost_token"  # noqa: S105 (the secret's name in gatewayd.toml, not a value)
_USER_ID = re.compile(r"[a-z0-9]{26}")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_CATCH_UP_S = 7 * 24 * 3600  # a week: older messages are not answered after a restart


class PathsSection(Section):
    home: str = ""


class MattermostSection(Section):
    url: str = ""
    owner: str = ""
    edit_interval_ms: int = Field(default=1000, ge=100)
    catch_up_s: int = Field(default=3600, ge=0, le=MAX_CATCH_UP_S)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value:
            return value
        parts = urlsplit(value)
        local = parts.scheme == "http" and parts.hostname in LOCAL_HOSTS
        if not (parts.scheme == "https" or local) or not parts.hostname:
            raise ValueError("must be https://<host> (plain http only to this machine)")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError("must be the server's address only, no query, fragment or user")
        return value.rstrip("/")

    @field_validator("owner")
    @classmethod
    def _owner(cls, value: str) -> str:
        if value and _USER_ID.fullmatch(value) is None:
            raise ValueError("must be a Mattermost user id: 26 characters of a-z and 0-9")
        return value


class LoopSection(Section):
    socket: str = ""
    timeout_ms: int = Field(default=300_000, ge=1)


class SocketsSection(Section):
    gateway: str = ""
    # true in a root install, false in dev mode: each link's modes (`core.home.links`)
    group_access: bool = False


class GatewaydConfig(RoleSettingsBase):
    paths: PathsSection = PathsSection()
    mattermost: MattermostSection = MattermostSection()
    loop: LoopSection = LoopSection()
    sockets: SocketsSection = SocketsSection()
    secrets: SecretsTable = Field(default_factory=dict)  # where to read them, never values

    @property
    def home(self) -> Path:
        return Path(self.paths.home)

    @property
    def configured(self) -> bool:
        return bool(self.mattermost.url)

    @property
    def state(self) -> Path:
        """gatewayd's own directory under home (its watermark)."""
        return Home(self.home).gateway

    @property
    def gateway_socket(self) -> Path:
        return socket_path(self.home, GATEWAY, self.sockets.gateway)

    @property
    def loop_socket(self) -> Path:
        return socket_path(self.home, LOOP, self.loop.socket)


def load_config(path: Path | None, environ: Mapping[str, str]) -> GatewaydConfig:
    """gatewayd.toml at `path` (None: every default), with `environ` for BOXMAKER_HOME."""
    config = read_config(GatewaydConfig, path, environ, "gatewayd", KNOWN_VARIABLES)
    if config.configured:
        if not config.mattermost.owner:
            raise ConfigError(f"{path}: [mattermost] owner: set the owner's user id")
        if TOKEN not in config.secrets:
            raise ConfigError(
                f"{path}: [secrets.{TOKEN}]: say where the bot's token is read from"
                " (credential, env or file)"
            )
    return config
