"""Strict parsing of a tool call's arguments into typed values. No I/O.

The model sends its arguments as JSON text. Each tool takes exactly the fields
of its row in the tool table (`core.grants.tools`); an unknown, missing, duplicated or
mistyped field, or a path or URL that fails its form check, raises `ArgsError`
with a one-line explanation (which brokerd forwards to the model as the
`invalid_arguments` detail). So do arguments over
`argument_size.MAX_ARGUMENT_BYTES` (65,536 bytes of UTF-8), checked before
anything is parsed. The tools and their fields are the table's (`core.grants.tools.TOOLS`);
the names of tools and their arguments classes are imported from there.

Unknown fields are named first, then missing ones, then each field is checked
in table order by its `Check`: `kind` is `memory` or `user`; `text`, `query`,
`entry` and each of `entries` are non-empty strings; `entries` holds 1 to 50
distinct ids; `limit` is an integer from 1 to 50, and so is `page` (which page
of a recall too large for one answer: memoryd's `recall_pages`). The memory
tools run in memoryd, not a sandbox (`docs/memoryd.md`); memoryd parses what
brokerd forwards with this same parser.

`canonical_arguments` serialises parsed arguments again, fields in table order,
compact: this is what the owner is shown when approving, so `\\u002fetc` and `/etc`
look the same because they mean the same. An optional field is written out even
when it holds its default (`limit` 5 and no `limit` mean the same), unless its
row leaves the default out: an absent `cwd`, and `page` 1 (so a recall's
canonical form is as it was before pages).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

from boxmaker.core.errors import ArgsError
from boxmaker.core.grants.argument_size import size_problem
from boxmaker.core.grants.hosts import Url, parse_url
from boxmaker.core.grants.paths import path_problem
from boxmaker.core.grants.tools import (
    MAX_RECALL,
    Check,
    ToolArgs,
    ToolName,
    row_of,
)

MEMORY_KINDS = ("memory", "user")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ArgsError(f"duplicate field `{key}`")
        seen[key] = value
    return seen


def _expected(names: tuple[str, ...]) -> str:
    if len(names) == 1:
        return f"expected `{names[0]}`"
    return "expected one of " + ", ".join(f"`{n}`" for n in names)


# one decoder for every call: `json.loads` with a hook builds a new one each time
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates)


def _load_object(raw: str) -> dict[str, Any]:
    try:
        value = _DECODER.decode(raw)
    except ArgsError:
        raise
    except (ValueError, RecursionError) as exc:
        raise ArgsError(f"the arguments are not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ArgsError("the arguments must be a JSON object")
    return value


def _string(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ArgsError(f"invalid type for `{name}`: expected a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ArgsError(f"`{name}` holds a lone surrogate (\\ud800 to \\udfff)") from exc
    return value


def _filled(value: Any, name: str) -> str:
    text = _string(value, name)
    if not text:
        raise ArgsError(f"`{name}` is empty")
    return text


def _path(value: Any, name: str) -> str:
    text = _string(value, name)
    problem = path_problem(text)
    if problem is not None:
        raise ArgsError(f"`{name}` is not a valid absolute path: {problem}")
    return text


def _url(value: Any, name: str) -> Url:
    text = _string(value, name)
    try:
        return parse_url(text)
    except ValueError as exc:
        raise ArgsError(f"`{name}` is not allowed: {exc}") from exc


def _kind(value: Any, name: str) -> str:
    if _string(value, name) not in MEMORY_KINDS:
        raise ArgsError(f"`{name}` must be `memory` or `user`")
    return str(value)


def _entries(value: Any, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ArgsError(f"invalid type for `{name}`: expected a list of non-empty strings")
    if not 1 <= len(value) <= MAX_RECALL:
        raise ArgsError(f"`{name}` must name 1 to {MAX_RECALL} entries")
    if len(set(value)) != len(value):
        raise ArgsError(f"`{name}` names an entry twice")
    for item in value:
        _string(item, name)  # a lone surrogate is refused here too
    return tuple(value)


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ArgsError(f"invalid type for `{name}`: expected true or false")
    return value


def _count(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ArgsError(f"invalid type for `{name}`: expected an integer")
    if not 1 <= value <= MAX_RECALL:
        raise ArgsError(f"`{name}` must be from 1 to {MAX_RECALL}")
    return value


_CHECKS: dict[Check, Callable[[Any, str], Any]] = {
    Check.STRING: _string,
    Check.TEXT: _filled,
    Check.PATH: _path,
    Check.URL: _url,
    Check.MEMORY_KIND: _kind,
    Check.ENTRY_IDS: _entries,
    Check.FLAG: _flag,
    Check.COUNT: _count,
}


def parse_arguments(tool: ToolName, raw: str) -> ToolArgs:
    """The typed arguments of a call to `tool`; `ArgsError` says what is wrong."""
    too_large = size_problem(raw)
    if too_large is not None:
        raise ArgsError(too_large)
    obj = _load_object(raw)
    fields = tool.row.fields
    known = tuple(f.name for f in fields)
    for name in obj:
        if name not in known:
            raise ArgsError(f"unknown field `{name}`, {_expected(known)}")
    for field in fields:
        if field.required and field.name not in obj:
            raise ArgsError(f"missing field `{field.name}`")
    values: dict[str, Any] = {}
    for field in fields:
        value = obj.get(field.name)
        absent = field.name not in obj or (value is None and field.null_is_absent)
        values[field.name] = field.default if absent else _CHECKS[field.check](value, field.name)
    return tool.row.args(**values)


def _json_value(value: object) -> object:
    if isinstance(value, Url):
        return value.text
    if isinstance(value, tuple):
        return list(value)
    return value


def argument_fields(args: ToolArgs) -> dict[str, object]:
    """The parsed arguments as JSON values, fields in table order (the module docstring)."""
    fields: dict[str, object] = {}
    for field in row_of(args).fields:
        value = getattr(args, field.name)
        if field.default_left_out and value == field.default:
            continue
        fields[field.name] = _json_value(value)
    return fields


def canonical_arguments(args: ToolArgs) -> str:
    """`argument_fields` as compact JSON: what the owner approves, and a digest binds."""
    return orjson.dumps(argument_fields(args)).decode()
