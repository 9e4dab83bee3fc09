"""The console's status line: where a chat session stands, in one line. No I/O.

    chat-1 · context 1,240/8,192 (15%) · 21.4 tok/s · taint private · untrusted · 1 waiting

What loopd measured (the prompt's tokens, the reply's rate) comes from its `usage`
events; the taint, the untrusted flag and the waiting approvals come from brokerd,
whose word decides them. A figure not known yet is left out, and one brokerd could not
give is `?`. The session id is the owner's own (or one `bxctl chat` made); it is
escaped all the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.labels import DataClass

SEPARATOR = " · "


@dataclass(frozen=True)
class Standing:
    session: str
    used: int | None = None  # the last prompt and its reply, in tokens
    context: int | None = None  # the model's context; None: not known
    rate: float | None = None  # the last reply's tokens a second
    taint: DataClass | None = None  # brokerd's; None: not asked yet, or it did not answer
    untrusted: bool | None = None
    waiting: int | None = None  # approvals waiting for the owner in this session
    broker_answered: bool = True  # False: brokerd could not be asked
    working_s: float | None = None  # seconds the running turn has taken; None: none runs


def rate_of(generated: int, seconds: float) -> float | None:
    """Tokens a second from a reply's count and its first-to-last-token time."""
    if generated < 2 or seconds <= 0:
        return None
    return (generated - 1) / seconds


def status_line(standing: Standing) -> str:
    """`standing` as one line (see the module docstring)."""
    parts = [escape_arguments(standing.session)]
    if standing.working_s is not None:
        parts.append(f"working {standing.working_s:.0f}s")
    if standing.used is not None:
        if standing.context:
            share = 100 * standing.used / standing.context
            parts.append(f"context {standing.used:,}/{standing.context:,} ({share:.0f}%)")
        else:
            parts.append(f"context {standing.used:,}")
    if standing.rate is not None:
        parts.append(f"{standing.rate:.1f} tok/s")
    if not standing.broker_answered:
        parts.append("taint ?")
    elif standing.taint is not None:
        parts.append(f"taint {standing.taint.value}")
    if standing.untrusted:
        parts.append("untrusted")
    if standing.waiting:
        parts.append(f"{standing.waiting} waiting")
    return SEPARATOR.join(parts)
