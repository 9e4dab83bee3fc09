"""A reply's streamed text, paced (boxmaker.loopd.pacing): each rule of its docstring.

The clock is a list the test moves by hand; the last test runs the turn loop with
the scripted model and the default interval.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.model.dialect import from_format
from boxmaker.core.wire.loop import ContentEvent, Event, ReasoningEvent
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.pacing import Paced
from boxmaker.loopd.session_log import SessionLogs
from boxmaker.loopd.turn import TurnLoop
from boxmaker.testing.scripted_model import ScriptedModel


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def paced(interval: float = 0.05) -> tuple[Paced, list[Event], Clock]:
    sent: list[Event] = []
    clock = Clock()
    return Paced(sent.append, interval, clock), sent, clock


def test_the_first_text_goes_out_at_once() -> None:
    pacer, sent, _ = paced()
    pacer.add(ContentEvent, "Hel")
    assert sent == [ContentEvent(text="Hel")]


def test_text_within_the_interval_waits_and_goes_out_merged() -> None:
    pacer, sent, clock = paced()
    pacer.add(ContentEvent, "Hel")
    clock.now += 0.01
    pacer.add(ContentEvent, "lo, ")
    clock.now += 0.01
    pacer.add(ContentEvent, "owner")
    assert sent == [ContentEvent(text="Hel")]
    clock.now += 0.05
    pacer.add(ContentEvent, ".")
    assert sent == [ContentEvent(text="Hel"), ContentEvent(text="lo, owner.")]


def test_a_tick_sends_what_is_due_when_nothing_new_was_released() -> None:
    pacer, sent, clock = paced()
    pacer.add(ContentEvent, "Let me look.")
    clock.now += 0.01
    pacer.add(ContentEvent, " Now")
    pacer.tick()  # not due yet
    assert len(sent) == 1
    clock.now += 0.06  # the model writes a tool call: its pieces release nothing
    pacer.tick()
    assert sent[-1] == ContentEvent(text=" Now")


def test_reasoning_and_content_never_merge() -> None:
    pacer, sent, clock = paced()
    pacer.add(ReasoningEvent, "think")
    clock.now += 0.001
    pacer.add(ReasoningEvent, "ing")
    pacer.add(ContentEvent, "The answer")
    pacer.flush()
    assert sent == [
        ReasoningEvent(text="think"),
        ReasoningEvent(text="ing"),
        ContentEvent(text="The answer"),
    ]


def test_flush_sends_what_waits_and_nothing_twice() -> None:
    pacer, sent, clock = paced()
    pacer.add(ContentEvent, "a")
    clock.now += 0.001
    pacer.add(ContentEvent, "b")
    pacer.flush()
    pacer.flush()
    assert sent == [ContentEvent(text="a"), ContentEvent(text="b")]


def test_an_interval_of_zero_sends_every_text() -> None:
    pacer, sent, _ = paced(0.0)
    for piece in ("a", "b", "c"):
        pacer.add(ContentEvent, piece)
    assert [e.text for e in sent if isinstance(e, ContentEvent)] == ["a", "b", "c"]


def test_empty_text_is_never_an_event() -> None:
    pacer, sent, _ = paced()
    pacer.add(ContentEvent, "")
    pacer.flush()
    assert sent == []


@given(
    st.lists(
        st.tuples(st.booleans(), st.text(min_size=0, max_size=5), st.floats(0, 0.2)),
        max_size=40,
    )
)
def test_the_texts_sent_are_the_texts_given_in_order(
    pieces: list[tuple[bool, str, float]],
) -> None:
    pacer, sent, clock = paced()
    given_texts: list[tuple[str, str]] = []
    for is_content, text, step in pieces:
        clock.now += step
        kind = ContentEvent if is_content else ReasoningEvent
        pacer.add(kind, text)
        if text:
            given_texts.append((kind.__name__, text))
        pacer.tick()
    pacer.flush()

    def runs(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
        merged: list[tuple[str, str]] = []
        for kind, text in items:
            if merged and merged[-1][0] == kind:
                merged[-1] = (kind, merged[-1][1] + text)
            else:
                merged.append((kind, text))
        return merged

    got = [(type(e).__name__, e.text) for e in sent if isinstance(e, ContentEvent | ReasoningEvent)]
    assert all(text for _, text in got)
    assert runs(got) == runs(given_texts)


def test_the_turn_loop_paces_a_fast_model(tmp_path: Path) -> None:
    # the scripted model writes a character at a time, far inside the interval
    model = ScriptedModel(["Hello, owner."])
    loop = TurnLoop(model, from_format(GEMMA), SessionLogs(tmp_path), None, TurnLimits())
    events: list[Event] = []
    done = loop.run("s", "hi", False, events.append)
    contents = [e.text for e in events if isinstance(e, ContentEvent)]
    assert contents[0] == "H"  # at once
    assert "".join(contents) == done.content == "Hello, owner."
    assert len(contents) < len("Hello, owner.")  # merged
