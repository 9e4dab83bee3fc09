"""Checks shared by every role's settings, as pure functions. No I/O.

pydantic-settings ignores environment variables it does not know, so a mistyped
`BOXMAKER_HOEM` would silently fall back to a default. Each role passes its
environment here at startup and refuses to start on an unknown one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

PREFIX = "BOXMAKER_"


def unknown_variables(environ: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """The `BOXMAKER_*` names in `environ` that are not in `known`, sorted."""
    allowed = set(known)
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
