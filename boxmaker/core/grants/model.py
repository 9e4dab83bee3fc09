"""The grant model: what one valid grant file says, and a loaded set of them. No I/O.

A grant is one TOML file, `<id>.toml`, naming one tool, a mode (`auto`, `ask`,
`deny`), the highest session taint it applies at, the label its results carry,
an optional expiry, the paths or hosts it covers, and its mode once the session
is untrusted (`when_untrusted`). Files are parsed and checked in
`boxmaker.core.grants.loading`; this module only holds the result.

`when_untrusted` never loosens a grant: once the session has read untrusted
content, the grant counts with the more restrictive of `mode` and
`when_untrusted`. Left out, it is its tool's default: the `when_untrusted`
column of the tool table (`boxmaker.core.grants.tools`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from boxmaker.core.labels import DataClass

if TYPE_CHECKING:  # the tool table names each tool's default Mode, so it imports this module
    from boxmaker.core.grants.tools import ToolName


class Mode(StrEnum):
    AUTO = "auto"
    ASK = "ask"
    DENY = "deny"

    @property
    def restrictiveness(self) -> int:
        """deny (2) beats ask (1) beats auto (0)."""
        return {Mode.AUTO: 0, Mode.ASK: 1, Mode.DENY: 2}[self]


@dataclass(frozen=True, slots=True)
class Grant:
    """One valid grant file. `sha256` is the hash of the file's bytes."""

    id: str
    tool: ToolName
    mode: Mode
    max_taint: DataClass
    result_class: DataClass
    untrusted: bool
    expires: str | None
    paths: tuple[str, ...]
    hosts: tuple[str, ...]
    sha256: str
    when_untrusted: Mode | None = None  # as written; None: the tool's default

    @property
    def untrusted_mode(self) -> Mode:
        """The grant's mode in an untrusted session: never looser than `mode`."""
        written = self.when_untrusted or self.tool.row.when_untrusted
        return max(self.mode, written, key=lambda m: m.restrictiveness)

    def mode_at(self, untrusted: bool) -> Mode:
        """The mode this grant counts with, for a session that is (or is not) untrusted."""
        return self.untrusted_mode if untrusted else self.mode


class GrantProblem(BaseModel):
    """One reason a grant file (or the directory) is invalid; also a wire value."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    file: str
    line: int | None = None
    problem: str

    def render(self) -> str:
        """`<file>:<line>: <problem>`, or `<file>: <problem>` when no line is known."""
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.problem}"


@dataclass(frozen=True, slots=True)
class GrantSet:
    """Every grant of a directory, or the problems that make the whole set invalid.

    A set with any problem is invalid as a whole: a mistyped deny grant that was
    skipped would silently turn into an allow wherever another grant matches.
    """

    grants: tuple[Grant, ...]
    problems: tuple[GrantProblem, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.problems

    def for_tool(self, tool: ToolName) -> tuple[Grant, ...]:
        return tuple(g for g in self.grants if g.tool is tool)
