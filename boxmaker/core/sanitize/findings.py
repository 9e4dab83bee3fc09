"""What the sanitizer answers: an action, a finding, a neutralised text, a rule. Pure; no I/O.

These are the contract between the sanitizer and its callers (memoryd, loopd,
`bxctl sanitize check`, bench/sanitize.py); the package re-exports them. An
excerpt is one printable line and never holds a whole secret: `printable` below
makes it so.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

EXCERPT_LIMIT = 60  # characters of an excerpt before its middle is cut


class Action(StrEnum):
    REFUSE = "refuse"
    NEUTRALISE = "neutralise"
    FLAG = "flag"


@dataclass(frozen=True, slots=True)
class Finding:
    action: Action
    rule: str
    start: int  # code-point offset into the text
    excerpt: str  # printable, one line, never a whole secret


@dataclass(frozen=True, slots=True)
class Neutralised:
    text: str
    count: int  # how many tags were disarmed


class Rule(NamedTuple):
    """One row of the rule table: what the rule does, in one sentence."""

    action: Action
    description: str


def printable(text: str, limit: int = EXCERPT_LIMIT) -> str:
    """`text` as one printable line: whitespace runs become one space, other hidden
    characters U+FFFD, and past `limit` characters the middle becomes ` … `."""
    words = "".join(
        " " if char.isspace() else char if char.isprintable() else "\ufffd" for char in text
    ).split()
    line = " ".join(words)
    if len(line) <= limit:
        return line
    head = (limit - 3) // 2
    return f"{line[:head]} … {line[len(line) - (limit - 3 - head) :]}"
