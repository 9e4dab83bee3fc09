"""A role's configuration file read into its settings: the one `load_config` of every role.

I/O: reads the TOML file (pydantic-settings' TOML source) once. The checks of
what it says (unknown keys and variables, types, `[paths] home`'s default) are
`boxmaker.core.home.settings_check.settings_from`'s; this module only finds and
parses the file, and says in one line when it cannot: no such file (`check
--config`), or not TOML (with the parser's line and column).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypeVar, cast

from pydantic_settings import BaseSettings, TomlConfigSettingsSource

from boxmaker.core.errors import ConfigError
from boxmaker.core.home.layout import DEFAULT_HOME, HOME_VARIABLE
from boxmaker.core.home.settings_check import RoleSettings, settings_from

S = TypeVar("S", bound=RoleSettings)


def read_config(
    cls: type[S],
    path: Path | None,
    environ: Mapping[str, str],
    role: str,
    known: Iterable[str] = (HOME_VARIABLE,),
) -> S:
    """`role`'s settings from the file at `path` (None: every default) and `environ`."""
    data: dict[str, object] = {}
    if path is not None:
        if not path.is_file():
            raise ConfigError(f"{path}: cannot read the configuration file; check --config")
        try:
            settings = cast(type[BaseSettings], cls)  # each role's class is one
            data = TomlConfigSettingsSource(settings, toml_file=path)()
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    return settings_from(cls, data, str(path), environ, role, known, str(DEFAULT_HOME))
