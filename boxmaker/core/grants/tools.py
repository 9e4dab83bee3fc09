"""The tool table: every tool brokerd decides on, stated once. No I/O.

A row (`Tool`) says everything about one tool that is not its code:

    name            what the model calls it, what a grant file's `tool` names
    description     what the model is shown for it (`find_tool`)
    fields          its arguments, in the order they are shown and written again:
                    each with its check (`Check`, which also gives its JSON type),
                    the words the model is shown, whether it is required, and for
                    an optional one its value when absent
    args            the class its parsed arguments are (`core.grants.args.parse_arguments`)
    paths, hosts    what a grant for it takes in `constraints` (`Constraint`)
    when_untrusted  its grants' mode in an untrusted session when a grant leaves
                    `when_untrusted` out (`core.grants.model`): `ask` for the tools that
                    write or reach out, and for the identity writes (memory_add,
                    memory_replace, memory_consolidate, which change every new
                    session's prompt); `auto` for read_file, memory_recall and
                    memory_note (memoryd lowers a note from an untrusted session
                    to an untrusted note)
    runs_in         where it runs: the sandbox's toolkit (`sandbox/toolkit.py`),
                    or memoryd (`memoryd/handlers.py`), which brokerd hands it to

Everything that lists tools reads `TOOLS` when it is asked, never a copy made at
import: argument parsing and the canonical form (`core.grants.args`), grant loading
(`core.grants.loading`), policy, the schemas loopd shows the model
(`loopd.tools`), the wire's memory calls (`core.wire.memory.MemoryCall`) and the
toolkit's request (`sandbox.calls`). So a row added to `TOOLS` (a test adds one
with `monkeypatch.setitem`) is a tool everywhere at once. A tool is then its row,
its arguments class and its code; a tool whose code is missing where it runs is
refused there (the toolkit answers NO_SUCH_TOOL).

`ToolName` is a name the table holds: built only from a row's name, one
instance per name, so tools compare with `is` as enum members do. Its constants
(`ToolName.SHELL`) are declared for mypy and filled from the table, and the
module refuses to load if the declarations and the production rows differ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from boxmaker.core.grants.hosts import Url
from boxmaker.core.grants.model import Mode

MAX_RECALL = 50  # entries in one recall, and ids in one consolidation
DEFAULT_RECALL = 5


class Check(StrEnum):
    """How a field's value is checked (`core.grants.args` holds the checks); JSON type in
    brackets."""

    STRING = "string"  # any string (string)
    TEXT = "text"  # a non-empty string (string)
    PATH = "path"  # a valid absolute path, `core.grants.paths` (string)
    URL = "url"  # an allowed https URL, `core.grants.hosts.parse_url` (string)
    MEMORY_KIND = "memory_kind"  # `memory` or `user` (string)
    ENTRY_IDS = "entry_ids"  # 1 to MAX_RECALL distinct non-empty strings (array)
    FLAG = "flag"  # true or false (boolean)
    COUNT = "count"  # an integer from 1 to MAX_RECALL (integer)

    @property
    def json_type(self) -> str:
        """The JSON type a value of this check is (the brackets above)."""
        return _JSON_TYPES.get(self, "string")


_JSON_TYPES = {Check.ENTRY_IDS: "array", Check.FLAG: "boolean", Check.COUNT: "integer"}


class Constraint(StrEnum):
    """What a grant of a tool takes in one of `constraints.paths` and `constraints.hosts`."""

    REQUIRED = "required"  # at least one entry
    OPTIONAL = "optional"
    EMPTY = "empty"  # none: the grant covers every call to its tool


class RunsIn(StrEnum):
    SANDBOX = "sandbox"
    MEMORYD = "memoryd"


@dataclass(frozen=True, slots=True)
class ToolField:
    """One argument of a tool."""

    name: str
    check: Check
    description: str  # what the model is shown
    required: bool = True
    default: object = None  # an optional field's value when it is absent
    null_is_absent: bool = False  # a JSON null means absent (shell's cwd)
    default_left_out: bool = False  # the canonical form leaves the default out


@dataclass(frozen=True, slots=True)
class Tool:
    """One row of the table (the module docstring)."""

    name: str
    description: str
    fields: tuple[ToolField, ...]
    args: Callable[..., ToolArgs]  # the arguments class, built with one keyword per field
    runs_in: RunsIn
    when_untrusted: Mode
    paths: Constraint = Constraint.EMPTY
    hosts: Constraint = Constraint.EMPTY


# --- the arguments classes ------------------------------------------------------------


class ToolArgs:
    """A call's parsed arguments: every tool's arguments class derives from this."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ReadFileArgs(ToolArgs):
    path: str


@dataclass(frozen=True, slots=True)
class WriteFileArgs(ToolArgs):
    path: str
    content: str


@dataclass(frozen=True, slots=True)
class ShellArgs(ToolArgs):
    command: str
    cwd: str | None


@dataclass(frozen=True, slots=True)
class HttpFetchArgs(ToolArgs):
    url: Url


@dataclass(frozen=True, slots=True)
class MemoryAddArgs(ToolArgs):
    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class MemoryReplaceArgs(ToolArgs):
    kind: str
    entry: str
    text: str


@dataclass(frozen=True, slots=True)
class MemoryConsolidateArgs(ToolArgs):
    kind: str
    entries: tuple[str, ...]
    text: str


@dataclass(frozen=True, slots=True)
class MemoryNoteArgs(ToolArgs):
    text: str
    untrusted: bool


@dataclass(frozen=True, slots=True)
class MemoryRecallArgs(ToolArgs):
    query: str
    limit: int
    page: int = 1


MemoryArgs = MemoryAddArgs | MemoryReplaceArgs | MemoryConsolidateArgs | MemoryNoteArgs
SandboxArgs = ReadFileArgs | WriteFileArgs | ShellArgs | HttpFetchArgs

# --- the table ------------------------------------------------------------------------

_FILE = ToolField("path", Check.PATH, "absolute path of the file")
_KIND = ToolField("kind", Check.MEMORY_KIND, "memory or user")

TOOLS: dict[str, Tool] = {
    row.name: row
    for row in (
        Tool(
            "read_file",
            "Read a text file. The owner's grants decide which paths.",
            (_FILE,),
            ReadFileArgs,
            RunsIn.SANDBOX,
            when_untrusted=Mode.AUTO,
            paths=Constraint.REQUIRED,
        ),
        Tool(
            "write_file",
            "Write a text file, replacing it. The owner's grants decide where.",
            (_FILE, ToolField("content", Check.STRING, "the text to write")),
            WriteFileArgs,
            RunsIn.SANDBOX,
            when_untrusted=Mode.ASK,
            paths=Constraint.REQUIRED,
        ),
        Tool(
            "shell",
            "Run a shell command in a sandbox with no network.",
            (
                ToolField("command", Check.STRING, "the command"),
                ToolField(
                    "cwd",
                    Check.PATH,
                    "optional absolute working directory",
                    required=False,
                    null_is_absent=True,
                    default_left_out=True,
                ),
            ),
            ShellArgs,
            RunsIn.SANDBOX,
            when_untrusted=Mode.ASK,
            paths=Constraint.OPTIONAL,
        ),
        Tool(
            "http_fetch",
            "Fetch an https:// URL from a host the owner allows.",
            (ToolField("url", Check.URL, "an https:// URL"),),
            HttpFetchArgs,
            RunsIn.SANDBOX,
            when_untrusted=Mode.ASK,
            hosts=Constraint.REQUIRED,
        ),
        Tool(
            "memory_add",
            "Remember a lasting fact: about your work (kind memory) or the owner (kind user).",
            (_KIND, ToolField("text", Check.TEXT, "the fact, one short paragraph")),
            MemoryAddArgs,
            RunsIn.MEMORYD,
            when_untrusted=Mode.ASK,
        ),
        Tool(
            "memory_replace",
            "Replace one remembered entry, named by its id, with new text.",
            (
                _KIND,
                ToolField("entry", Check.TEXT, "the entry's id"),
                ToolField("text", Check.TEXT, "new text"),
            ),
            MemoryReplaceArgs,
            RunsIn.MEMORYD,
            when_untrusted=Mode.ASK,
        ),
        Tool(
            "memory_consolidate",
            "Merge several remembered entries, named by their ids, into one.",
            (
                _KIND,
                ToolField("entries", Check.ENTRY_IDS, "the ids to merge, a list"),
                ToolField("text", Check.TEXT, "the merged text"),
            ),
            MemoryConsolidateArgs,
            RunsIn.MEMORYD,
            when_untrusted=Mode.ASK,
        ),
        Tool(
            "memory_note",
            "Save a note for later; untrusted true when it comes from something you read.",
            (
                ToolField("text", Check.TEXT, "the note"),
                ToolField(
                    "untrusted",
                    Check.FLAG,
                    "optional, true or false",
                    required=False,
                    default=False,
                ),
            ),
            MemoryNoteArgs,
            RunsIn.MEMORYD,
            when_untrusted=Mode.AUTO,
        ),
        Tool(
            "memory_recall",
            "Search remembered entries and notes; the best matches come back.",
            (
                ToolField("query", Check.TEXT, "words to search for"),
                ToolField(
                    "limit",
                    Check.COUNT,
                    f"optional, 1 to {MAX_RECALL} ({DEFAULT_RECALL})",
                    required=False,
                    default=DEFAULT_RECALL,
                ),
                ToolField(
                    "page",
                    Check.COUNT,
                    "optional: the page an answer too long for one asks for next (1)",
                    required=False,
                    default=1,
                    default_left_out=True,  # a recall's canonical form is as before pages
                ),
            ),
            MemoryRecallArgs,
            RunsIn.MEMORYD,
            when_untrusted=Mode.AUTO,
        ),
    )
}

# --- names ----------------------------------------------------------------------------

_INTERNED: dict[str, ToolName] = {}


class ToolName(str):
    """The name of a row of `TOOLS`; `ToolName(text)` raises ValueError for any other text."""

    __slots__ = ()

    READ_FILE: ClassVar[ToolName]
    WRITE_FILE: ClassVar[ToolName]
    SHELL: ClassVar[ToolName]
    HTTP_FETCH: ClassVar[ToolName]
    MEMORY_ADD: ClassVar[ToolName]
    MEMORY_REPLACE: ClassVar[ToolName]
    MEMORY_CONSOLIDATE: ClassVar[ToolName]
    MEMORY_NOTE: ClassVar[ToolName]
    MEMORY_RECALL: ClassVar[ToolName]

    def __new__(cls, text: str) -> ToolName:
        if text not in TOOLS:
            raise ValueError(f"{text!r} is not a tool")
        name = _INTERNED.get(text)
        if name is None:
            name = _INTERNED[text] = str.__new__(cls, text)
        return name

    @property
    def value(self) -> str:
        """The name as a plain string (as an enum member's `value`)."""
        return str.__str__(self)

    @property
    def row(self) -> Tool:
        return TOOLS[self]

    @property
    def is_memory(self) -> bool:
        """A memory tool: run by memoryd, never in a sandbox."""
        return self.row.runs_in is RunsIn.MEMORYD

    def __repr__(self) -> str:
        return f"ToolName({self.value!r})"


def tool_name(text: str) -> ToolName | None:
    """The tool called `text`, or None if the table has no such row."""
    return ToolName(text) if text in TOOLS else None


def tool_names(runs_in: RunsIn | None = None) -> tuple[ToolName, ...]:
    """Every tool in table order, or those that run in `runs_in`."""
    return tuple(ToolName(n) for n, row in TOOLS.items() if runs_in in (None, row.runs_in))


def row_of(args: ToolArgs) -> Tool:
    """The row whose arguments class `args` is."""
    for row in TOOLS.values():
        if row.args is type(args):
            return row
    raise TypeError(f"{type(args).__name__} is no tool's arguments class")


def _fill_constants() -> None:
    """`ToolName.READ_FILE` and the rest, from the rows; their declarations must match."""
    declared = {n for n, kind in vars(ToolName)["__annotations__"].items() if "ClassVar" in kind}
    if declared != {name.upper() for name in TOOLS}:
        raise ImportError("ToolName's constants are not the tool table's rows")
    for name in TOOLS:
        setattr(ToolName, name.upper(), ToolName(name))


_fill_constants()
