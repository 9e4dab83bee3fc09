"""Scripts for a `ScriptedServer`: a fake brokerd's answers and a fake loopd's turns.

I/O: only what a `Peer` does (its connection). No role imports this module.

    answer, answer_with_id, pending_then,   how a fake brokerd answers a
    never_answer, close_early, sequence     tool_request
    fake_loopd_script                       a fake loopd: scripted turn events,
                                            then turn_done
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from boxmaker.core.timestamps import format_timestamp
from boxmaker.core.wire.broker import PendingApprovalResponse
from boxmaker.core.wire.envelope import Message
from boxmaker.core.wire.loop import Event, Turn, TurnDone, TurnEvent
from boxmaker.testing.sockets import Peer, Script

# --- a fake brokerd ------------------------------------------------------------------


def in_ms(ms: int) -> str:
    """The timestamp `ms` milliseconds from now."""
    return format_timestamp(datetime.now(UTC) + timedelta(milliseconds=ms))


def answer(message: Message) -> Script:
    """Answer every request with `message`, final."""

    def script(peer: Peer) -> None:
        peer.send(message, final=True)

    return script


def answer_with_id(message: Message, request_id: str) -> Script:
    """Answer with `message`, final, under an id that is not the request's."""

    def script(peer: Peer) -> None:
        peer.send(message, final=True, request_id=request_id)

    return script


def pending_then(
    final: Message | None,
    *,
    approval: int = 41,
    expires_in_ms: int = 900_000,
    after_expiry_ms: int | None = None,
    until: threading.Event | None = None,
) -> Script:
    """A pending_approval frame, then `final` (None: nothing more, the connection held).

    `after_expiry_ms`: send the final frame only once the clock is that far past
    the pending frame's `expires`. `until`: send it only once this event is set.
    """

    def script(peer: Peer) -> None:
        expires = in_ms(expires_in_ms)
        peer.send(PendingApprovalResponse(approval=approval, expires=expires), final=False)
        if until is not None:
            until.wait(60.0)
        if after_expiry_ms is not None:
            peer.wait_past(expires, after_expiry_ms)
        if final is None:
            peer.hold()
        else:
            peer.send(final, final=True)

    return script


def never_answer(peer: Peer) -> None:
    """Accept the request and answer nothing, holding the connection."""
    peer.hold()


def close_early(peer: Peer) -> None:
    """Read the request and close the connection without a word."""


def sequence(*scripts: Script) -> Script:
    """The first connection gets the first script, the next the next; the last repeats."""
    lock = threading.Lock()
    remaining = list(scripts)

    def script(peer: Peer) -> None:
        with lock:
            chosen = remaining.pop(0) if len(remaining) > 1 else remaining[0]
        chosen(peer)

    return script


# --- a fake loopd --------------------------------------------------------------------


def fake_loopd_script(events: Sequence[Event], content: str = "done") -> Script:
    """A loopd that answers every turn with `events`, then turn_done with `content`."""

    def script(peer: Peer) -> None:
        turn = peer.request.message
        assert isinstance(turn, Turn), f"a fake loopd got {turn.kind}"
        for event in events:
            peer.send(TurnEvent(event=event), final=False)
        peer.send(TurnDone(session=turn.session, content=content, untrusted=False), final=True)

    return script
