"""Parsing and checking grant files into a `GrantSet`. No I/O of its own.

The caller lists the directory and reads files; `load_grant_dir` takes those two
operations as functions, so brokerd and `bxctl grants check --dir` share every
rule and differ only in where the bytes come from. brokerd keeps each file's
parse while the file is unchanged (`brokerd.grants_dir`) and builds the set with
`assemble_grant_set`, the same assembly `load_grant_dir` uses.

A file is invalid if any of these holds (the problem names the file and, where
the TOML text shows one, the line):

    1  it cannot be read, is not UTF-8, or is not a valid grant (TOML, types,
       unknown fields)
    2  its stem is not 1 to 64 characters of [a-z0-9-]
    3  `tool` is not one of the tools (a row of `core.grants.tools.TOOLS`)
    4  `secret` is set
    5  `constraints.patterns` is not empty
    6  a constraint the tool does not take is present, or a required one missing
       (the row's `paths` and `hosts`)
    7  a path is not a valid absolute path, or is /
    8  a host is not a valid host pattern
    9  a deny grant's max_taint is not secret
   10  a path is, contains or lies under one of boxmaker's own places
       (`boxmaker.core.grants.reserved`: home, audit log, grants, sockets, install
       prefix), which the caller passes in as `reserved`

Only files whose names end in `.toml` are read; anything else is ignored.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from boxmaker.core.grants.hosts import host_pattern_problem
from boxmaker.core.grants.model import Grant, GrantProblem, GrantSet, Mode
from boxmaker.core.grants.paths import path_problem
from boxmaker.core.grants.reserved import Place, reserved_problem
from boxmaker.core.grants.tools import TOOLS, Constraint, ToolName, tool_name
from boxmaker.core.hashes import sha256_hex
from boxmaker.core.labels import DataClass
from boxmaker.core.timestamps import Timestamp

_STEM = re.compile(r"[a-z0-9-]{1,64}")
_TOML_LINE = re.compile(r"\s*\(at line (\d+), column \d+\)|\s*\(at end of document\)")


class _Constraints(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    paths: list[str] = []
    hosts: list[str] = []
    patterns: list[str] = []


class _GrantFile(BaseModel):
    """The shape of a grant file, before the rules that need more than types."""

    model_config = ConfigDict(extra="forbid", strict=True)

    tool: str
    mode: Literal["auto", "ask", "deny"]
    max_taint: Literal["public", "private", "secret"]
    result_class: Literal["public", "private", "secret"]
    untrusted: bool = False
    when_untrusted: Literal["auto", "ask", "deny"] | None = None
    expires: Timestamp | None = None
    secret: Any = None
    constraints: _Constraints = _Constraints()


# one file's grant, or None and every problem found in it
CheckedFile = tuple[Grant | None, list[GrantProblem]]


def load_grant_dir(
    list_names: Callable[[], Iterable[str]],
    read: Callable[[str], bytes],
    directory: str,
    reserved: Iterable[Place] = (),
) -> GrantSet:
    """Every `*.toml` grant that `list_names` yields, read with `read`.

    An `OSError` from `list_names` makes the set invalid with one problem naming
    `directory`; an `OSError` from `read` is a problem of that file.
    """
    places = tuple(reserved)

    def check(raw_name: str, name: str) -> CheckedFile:
        try:
            content = read(raw_name)
        except OSError as exc:
            return unreadable(name, exc)
        return parse_grant_file(name, content, places)

    return assemble_grant_set(list_names, check, directory)


def assemble_grant_set(
    list_names: Callable[[], Iterable[str]],
    check: Callable[[str, str], CheckedFile],
    directory: str,
) -> GrantSet:
    """The set of the `*.toml` files that `list_names` yields, in name order.

    `check(raw_name, name)` gives each file's grant or problems (`name` is how a
    problem shows it); `load_grant_dir` reads and parses every file, brokerd's
    `GrantsDir` may answer from its cache. Everything about the set as a whole is
    decided here, for both: which names count, their order, and that an `OSError`
    from `list_names` makes the set invalid with one problem naming `directory`.
    """
    try:
        names = sorted(n for n in list_names() if n.endswith(".toml"))
    except OSError as exc:
        problem = f"the grants directory cannot be read: {exc.strerror or exc}"
        return GrantSet(grants=(), problems=(GrantProblem(file=directory, problem=problem),))
    grants: list[Grant] = []
    problems: list[GrantProblem] = []
    for raw_name in names:
        # a name that is not UTF-8 is shown with backslash escapes, never mangled
        name = raw_name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        grant, found = check(raw_name, name)
        problems.extend(found)
        if grant is not None:
            grants.append(grant)
    return GrantSet(grants=tuple(grants), problems=tuple(problems))


def unreadable(name: str, exc: OSError) -> CheckedFile:
    """The problem of a file that cannot be read (or examined) at all."""
    return None, [GrantProblem(file=name, problem=f"cannot be read: {exc.strerror or exc}")]


def parse_grant_file(name: str, content: bytes, reserved: Iterable[Place] = ()) -> CheckedFile:
    """The grant in file `name`, or None and every problem found in it."""
    problems: list[GrantProblem] = []

    def problem(text: str, line: int | None = None) -> None:
        problems.append(GrantProblem(file=name, line=line, problem=text))

    stem = name.removesuffix(".toml")
    if _STEM.fullmatch(stem) is None:
        problem("the file name must be 1 to 64 characters of a-z, 0-9 and - before .toml")
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        problem("is not UTF-8")
        return None, problems
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _TOML_LINE.search(message)
        if match is None:
            line = None
        elif match.group(1):
            line = int(match.group(1))
        else:  # "at end of document"
            line = len(text.splitlines()) or 1
        problem(f"is not valid TOML: {_TOML_LINE.sub('', message)}", line)
        return None, problems
    try:
        shape = _GrantFile.model_validate(raw)
    except ValidationError as exc:
        for error in exc.errors():
            problem(_shape_problem(error), key_line(text, error["loc"]))
        return None, problems
    tool = _check_rules(shape, text, problem)
    for path in shape.constraints.paths:
        if path == "/" or path_problem(path) is not None:
            continue  # rule 7 said so already
        if (why := reserved_problem(path, reserved)) is not None:
            problem(why, key_line(text, ("constraints", "paths")))
    if problems or tool is None:
        return None, problems
    grant = Grant(
        id=stem,
        tool=tool,
        mode=Mode(shape.mode),
        max_taint=DataClass(shape.max_taint),
        result_class=DataClass(shape.result_class),
        untrusted=shape.untrusted,
        expires=shape.expires,
        paths=tuple(shape.constraints.paths),
        hosts=tuple(shape.constraints.hosts),
        sha256=sha256_hex(content),
        when_untrusted=None if shape.when_untrusted is None else Mode(shape.when_untrusted),
    )
    return grant, problems


def _shape_problem(error: Any) -> str:
    field = ".".join(str(part) for part in error["loc"] if isinstance(part, str))
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"unknown field `{field}`"
    if kind == "missing":
        return f"missing field `{field}`"
    if kind == "literal_error":
        return f"`{field}` must be {error['ctx']['expected']}"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"`{field}`: {message}"


def _check_rules(
    shape: _GrantFile, text: str, problem: Callable[[str, int | None], None]
) -> ToolName | None:
    """Rules 3 to 9; reports each problem and returns the tool when it is known."""
    tool = tool_name(shape.tool)
    if tool is None:
        problem(
            "`tool` must be one of " + ", ".join(TOOLS),
            key_line(text, ("tool",)),
        )
    if shape.secret is not None:
        problem("secrets are not supported", key_line(text, ("secret",)))
    if shape.constraints.patterns:
        problem("patterns are not supported", key_line(text, ("constraints", "patterns")))
    if tool is not None:
        row = tool.row
        for field, rule in (("paths", row.paths), ("hosts", row.hosts)):
            values: list[str] = getattr(shape.constraints, field)
            if rule is Constraint.REQUIRED and not values:
                problem(f"a {tool} grant needs at least one entry in constraints.{field}", None)
            if rule is Constraint.EMPTY and values:
                problem(
                    f"a {tool} grant takes no constraints.{field}",
                    key_line(text, ("constraints", field)),
                )
    for path in shape.constraints.paths:
        where = key_line(text, ("constraints", "paths"))
        if path == "/":
            problem("a grant of the whole file system is not supported", where)
        elif (why := path_problem(path)) is not None:
            problem(f"the path {path!r} is not a valid absolute path: {why}", where)
    for host in shape.constraints.hosts:
        if (why := host_pattern_problem(host)) is not None:
            problem(
                f"the host {host!r} is not a valid host pattern: {why}",
                key_line(text, ("constraints", "hosts")),
            )
    if shape.mode == "deny" and shape.max_taint != "secret":
        problem(
            'a deny grant must apply at every taint: set max_taint = "secret"',
            key_line(text, ("max_taint",)),
        )
    return tool


_HEADER = re.compile(r"\s*\[\s*([A-Za-z0-9_\-\"'. ]+?)\s*\]\s*(#.*)?")
_KEY = re.compile(r"\s*[\"']?([A-Za-z0-9_-]+)[\"']?\s*(?:\.\s*[\"']?([A-Za-z0-9_-]+)[\"']?\s*)?=")


def key_line(text: str, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line where the field at `loc` is written, if the text shows it.

    Understands `[table]` headers and `table.key =` dotted keys; for a key inside
    an inline table it falls back to the line of the table's own key.
    """
    names = [part for part in loc if isinstance(part, str)]
    if not names:
        return None
    table, key = (None, names[0]) if len(names) == 1 else (names[0], names[1])
    current: str | None = None
    fallback: int | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.fullmatch(line)
        if header is not None and not line.lstrip().startswith("[["):
            current = header.group(1).strip("\"' ")
            if table is not None and current == table and fallback is None:
                fallback = number
            continue
        found = _KEY.match(line)
        if found is None:
            continue
        first, second = found.group(1), found.group(2)
        here = (current, first) if second is None else (first, second)
        if current is not None and second is not None:
            here = (current, first)
        if here == (table, key):
            return number
        if table is not None and current is None and first == table and fallback is None:
            fallback = number
    return fallback
