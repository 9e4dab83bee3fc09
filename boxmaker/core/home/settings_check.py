"""Checks shared by every role's settings, as pure functions. No I/O.

pydantic-settings ignores environment variables it does not know, so a mistyped
`BOXMAKER_HOEM` would silently fall back to a default. Each role passes its
environment here at startup and refuses to start on an unknown one. A variable
of the build (`BUILD_VARIABLES`) is known to every role and used by none: an owner
who exports it for scripts/build-llama-cpp still starts the tree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, Self, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from boxmaker.core.errors import ConfigError
from boxmaker.core.home.layout import HOME_VARIABLE

PREFIX = "BOXMAKER_"
# read by scripts/build-llama-cpp (extra CMake flags for llama-cpp-python), not a role
BUILD_VARIABLES = ("BOXMAKER_LLAMA_CMAKE_ARGS",)


def unknown_variables(environ: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """The `BOXMAKER_*` names in `environ` not in `known` nor the build's, sorted."""
    allowed = set(known) | set(BUILD_VARIABLES)
    return sorted(name for name in environ if name.startswith(PREFIX) and name not in allowed)


def describe_validation_error(exc: ValidationError, source: str) -> str:
    """One line naming the first bad key of `source` and what is wrong with it."""
    first: Any = exc.errors(include_url=False, include_input=False)[0]
    key = ".".join(str(part) for part in first["loc"])
    if first["type"] == "extra_forbidden":
        what = f"unknown key `{key}`"
    elif first["type"] == "missing":
        what = f"missing key `{key}`"
    else:
        what = f"`{key}`: {str(first['msg']).removeprefix('Value error, ')}"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{source}: {what}{more}"


class _Paths(Protocol):
    home: str


class RoleSettings(Protocol):
    """What every role's settings class has: a `[paths] home` and pydantic's copy."""

    @property
    def paths(self) -> _Paths: ...

    @classmethod
    def model_validate(cls, obj: Any) -> Self: ...

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Self: ...


S = TypeVar("S", bound=RoleSettings)


def settings_from(
    cls: type[S],
    data: Mapping[str, object],
    source: str,
    environ: Mapping[str, str],
    role: str,
    known: Iterable[str] = (HOME_VARIABLE,),
    default_home: str = "/var/lib/boxmaker",
) -> S:
    """A role's settings from its file's `data`: unknown variables and keys refused.

    `[paths] home` defaults to `BOXMAKER_HOME`, then `default_home`.
    """
    names = tuple(known)
    unknown = unknown_variables(environ, names)
    if unknown:
        raise ConfigError(
            f"unknown environment variable {unknown[0]}; {role} knows {', '.join(names)}"
        )
    try:
        settings = cls.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, source)) from exc
    if settings.paths.home:
        return settings
    home = environ.get("BOXMAKER_HOME") or default_home
    paths = settings.paths
    assert isinstance(paths, BaseModel)
    return settings.model_copy(update={"paths": paths.model_copy(update={"home": home})})


class Section(BaseModel):
    """A table of a role's TOML file: unknown keys refused, no coercion."""

    model_config = ConfigDict(extra="forbid", strict=True)


class RoleSettingsBase(BaseSettings):
    """Base of every role's settings: unknown keys refused, and no source but the file.

    The role reads its TOML file itself and hands the data to `settings_from`;
    environment variables are not a source (a typo in one would pass unnoticed),
    except BOXMAKER_HOME, which `settings_from` applies.
    """

    model_config = SettingsConfigDict(extra="forbid", frozen=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)
