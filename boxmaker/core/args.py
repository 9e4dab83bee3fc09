"""Strict parsing of a tool call's arguments into typed values. No I/O.

The model sends its arguments as JSON text. Each tool takes exactly the fields in
the table below; an unknown, missing, duplicated or mistyped field, or a path or
URL that fails its form check, raises `ArgsError` with a one-line explanation
(which brokerd forwards to the model as the `invalid_arguments` detail). So do
arguments over `argument_size.MAX_ARGUMENT_BYTES` (65,536 bytes of UTF-8), checked
before anything is parsed.

    tool                fields
    read_file           path
    write_file          path, content
    shell               command, cwd (optional; null means absent)
    http_fetch          url
    memory_add          kind, text
    memory_replace      kind, entry, text
    memory_consolidate  kind, entries, text
    memory_note         text, untrusted (optional, false)
    memory_recall       query, limit (optional, 5), page (optional, 1)

The memory tools run in memoryd, not a sandbox (`docs/memoryd.md`): `kind` is
`memory` or `user`; `text`, `query`, `entry` and each of `entries` are non-empty
strings; `entries` holds 1 to 50 distinct ids; `limit` is an integer from 1 to
50, and so is `page` (which page of a recall too large for one answer: memoryd's
`recall_pages`). memoryd parses what brokerd forwards with this same parser.

`canonical_arguments` serialises parsed arguments again, fields in table order,
compact: this is what the owner is shown when approving, so `\\u002fetc` and `/etc`
look the same because they mean the same (an optional memory field is always
written out: `limit` 5 and no `limit` mean the same; but `page` only past the
first, so a recall's canonical form is as it was before pages).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from boxmaker.core.argument_size import size_problem
from boxmaker.core.errors import ArgsError
from boxmaker.core.hosts import Url, parse_url
from boxmaker.core.paths import path_problem


class ToolName(StrEnum):
    READ_FILE = "read_file"
    WRITE_FILE = "write_file"
    SHELL = "shell"
    HTTP_FETCH = "http_fetch"
    MEMORY_ADD = "memory_add"
    MEMORY_REPLACE = "memory_replace"
    MEMORY_CONSOLIDATE = "memory_consolidate"
    MEMORY_NOTE = "memory_note"
    MEMORY_RECALL = "memory_recall"

    @property
    def is_memory(self) -> bool:
        """A memory tool: run by memoryd, never in a sandbox."""
        return self.value.startswith("memory_")


SANDBOX_TOOLS = (ToolName.READ_FILE, ToolName.WRITE_FILE, ToolName.SHELL, ToolName.HTTP_FETCH)
MEMORY_TOOLS = tuple(t for t in ToolName if t.is_memory)
MEMORY_KINDS = ("memory", "user")
MAX_RECALL = 50  # entries in one recall, and ids in one consolidation
DEFAULT_RECALL = 5


def tool_name(text: str) -> ToolName | None:
    """The tool called `text`, or None if it is not one of the nine."""
    try:
        return ToolName(text)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class ReadFileArgs:
    path: str


@dataclass(frozen=True, slots=True)
class WriteFileArgs:
    path: str
    content: str


@dataclass(frozen=True, slots=True)
class ShellArgs:
    command: str
    cwd: str | None


@dataclass(frozen=True, slots=True)
class HttpFetchArgs:
    url: Url


@dataclass(frozen=True, slots=True)
class MemoryAddArgs:
    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class MemoryReplaceArgs:
    kind: str
    entry: str
    text: str


@dataclass(frozen=True, slots=True)
class MemoryConsolidateArgs:
    kind: str
    entries: tuple[str, ...]
    text: str


@dataclass(frozen=True, slots=True)
class MemoryNoteArgs:
    text: str
    untrusted: bool


@dataclass(frozen=True, slots=True)
class MemoryRecallArgs:
    query: str
    limit: int
    page: int = 1


MemoryArgs = MemoryAddArgs | MemoryReplaceArgs | MemoryConsolidateArgs | MemoryNoteArgs
SandboxArgs = ReadFileArgs | WriteFileArgs | ShellArgs | HttpFetchArgs
ToolArgs = SandboxArgs | MemoryArgs | MemoryRecallArgs

_FIELDS: dict[ToolName, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # tool: (required fields, optional fields), in the order they are shown
    ToolName.READ_FILE: (("path",), ()),
    ToolName.WRITE_FILE: (("path", "content"), ()),
    ToolName.SHELL: (("command",), ("cwd",)),
    ToolName.HTTP_FETCH: (("url",), ()),
    ToolName.MEMORY_ADD: (("kind", "text"), ()),
    ToolName.MEMORY_REPLACE: (("kind", "entry", "text"), ()),
    ToolName.MEMORY_CONSOLIDATE: (("kind", "entries", "text"), ()),
    ToolName.MEMORY_NOTE: (("text",), ("untrusted",)),
    ToolName.MEMORY_RECALL: (("query",), ("limit", "page")),
}


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


def _string(obj: dict[str, Any], name: str) -> str:
    value = obj[name]
    if not isinstance(value, str):
        raise ArgsError(f"invalid type for `{name}`: expected a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ArgsError(f"`{name}` holds a lone surrogate (\\ud800 to \\udfff)") from exc
    return value


def _filled(obj: dict[str, Any], name: str) -> str:
    value = _string(obj, name)
    if not value:
        raise ArgsError(f"`{name}` is empty")
    return value


def _kind(obj: dict[str, Any]) -> str:
    value = _string(obj, "kind")
    if value not in MEMORY_KINDS:
        raise ArgsError("`kind` must be `memory` or `user`")
    return value


def _entries(obj: dict[str, Any]) -> tuple[str, ...]:
    value = obj["entries"]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ArgsError("invalid type for `entries`: expected a list of non-empty strings")
    if not 1 <= len(value) <= MAX_RECALL:
        raise ArgsError(f"`entries` must name 1 to {MAX_RECALL} entries")
    if len(set(value)) != len(value):
        raise ArgsError("`entries` names an entry twice")
    for item in value:
        _string({"entries": item}, "entries")  # a lone surrogate is refused here too
    return tuple(value)


def _flag(obj: dict[str, Any], name: str) -> bool:
    value = obj.get(name, False)
    if not isinstance(value, bool):
        raise ArgsError(f"invalid type for `{name}`: expected true or false")
    return value


def _limit(obj: dict[str, Any], name: str = "limit", default: int = DEFAULT_RECALL) -> int:
    value = obj.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ArgsError(f"invalid type for `{name}`: expected an integer")
    if not 1 <= value <= MAX_RECALL:
        raise ArgsError(f"`{name}` must be from 1 to {MAX_RECALL}")
    return value


def _memory(tool: ToolName, obj: dict[str, Any]) -> MemoryArgs | MemoryRecallArgs:
    if tool is ToolName.MEMORY_ADD:
        return MemoryAddArgs(kind=_kind(obj), text=_filled(obj, "text"))
    if tool is ToolName.MEMORY_REPLACE:
        return MemoryReplaceArgs(
            kind=_kind(obj), entry=_filled(obj, "entry"), text=_filled(obj, "text")
        )
    if tool is ToolName.MEMORY_CONSOLIDATE:
        return MemoryConsolidateArgs(
            kind=_kind(obj), entries=_entries(obj), text=_filled(obj, "text")
        )
    if tool is ToolName.MEMORY_NOTE:
        return MemoryNoteArgs(text=_filled(obj, "text"), untrusted=_flag(obj, "untrusted"))
    return MemoryRecallArgs(
        query=_filled(obj, "query"), limit=_limit(obj), page=_limit(obj, "page", 1)
    )


def _path(obj: dict[str, Any], name: str) -> str:
    value = _string(obj, name)
    problem = path_problem(value)
    if problem is not None:
        raise ArgsError(f"`{name}` is not a valid absolute path: {problem}")
    return value


def parse_arguments(tool: ToolName, raw: str) -> ToolArgs:
    """The typed arguments of a call to `tool`; `ArgsError` says what is wrong."""
    too_large = size_problem(raw)
    if too_large is not None:
        raise ArgsError(too_large)
    obj = _load_object(raw)
    required, optional = _FIELDS[tool]
    known = required + optional
    for name in obj:
        if name not in known:
            raise ArgsError(f"unknown field `{name}`, {_expected(known)}")
    for name in required:
        if name not in obj:
            raise ArgsError(f"missing field `{name}`")
    if tool.is_memory:
        return _memory(tool, obj)
    if tool is ToolName.READ_FILE:
        return ReadFileArgs(path=_path(obj, "path"))
    if tool is ToolName.WRITE_FILE:
        return WriteFileArgs(path=_path(obj, "path"), content=_string(obj, "content"))
    if tool is ToolName.SHELL:
        cwd = None if obj.get("cwd") is None else _path(obj, "cwd")
        return ShellArgs(command=_string(obj, "command"), cwd=cwd)
    url = _string(obj, "url")
    try:
        return HttpFetchArgs(url=parse_url(url))
    except ValueError as exc:
        raise ArgsError(f"`url` is not allowed: {exc}") from exc


def canonical_arguments(args: ToolArgs) -> str:
    """The parsed arguments as compact JSON, fields in table order, absent cwd left out."""
    fields: dict[str, object]
    match args:
        case ReadFileArgs(path=path):
            fields = {"path": path}
        case WriteFileArgs(path=path, content=content):
            fields = {"path": path, "content": content}
        case ShellArgs(command=command, cwd=cwd):
            fields = {"command": command} if cwd is None else {"command": command, "cwd": cwd}
        case HttpFetchArgs(url=url):
            fields = {"url": url.text}
        case MemoryAddArgs(kind=kind, text=text):
            fields = {"kind": kind, "text": text}
        case MemoryReplaceArgs(kind=kind, entry=entry, text=text):
            fields = {"kind": kind, "entry": entry, "text": text}
        case MemoryConsolidateArgs(kind=kind, entries=entries, text=text):
            fields = {"kind": kind, "entries": list(entries), "text": text}
        case MemoryNoteArgs(text=text, untrusted=untrusted):
            fields = {"text": text, "untrusted": untrusted}
        case MemoryRecallArgs(query=query, limit=limit, page=page):
            fields = {"query": query, "limit": limit}
            if page != 1:
                fields["page"] = page
    return orjson.dumps(fields).decode()
