"""The grant model: what one valid grant file says, and a loaded set of them. No I/O.

A grant is one TOML file, `<id>.toml`, naming one tool, a mode (`auto`, `ask`,
`deny`), the highest session taint it applies at, the label its results carry,
an optional expiry, and the paths or hosts it covers. Files are parsed and
checked in `boxmaker.core.grant_loading`; this module only holds the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from boxmaker.core.args import ToolName
from boxmaker.core.labels import DataClass


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
