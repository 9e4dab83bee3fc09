"""The known markers are one table (`core.model.known_markers`): the dialect's extra
stops, the reasoning pairs and the marker shapes are all read from it."""

from __future__ import annotations

from boxmaker.core.model import known_markers as km
from boxmaker.core.model.marker_shapes import is_marker_shaped
from boxmaker.core.model.reasoning import ReasoningMarkers


def test_every_known_marker_has_a_markers_shape() -> None:
    # so a vocabulary token spelling one is on loopd's marker list, and neutralised
    texts = [m.text for m in km.KNOWN] + [m.closes for m in km.KNOWN if m.closes]
    assert [t for t in texts if not is_marker_shaped(t)] == []


def test_the_stops_and_reasoning_pairs_are_the_tables() -> None:
    assert tuple(m.text for m in km.KNOWN if m.use is km.Use.STOP) == km.STOPS
    pairs = [(m.text, m.closes) for m in km.KNOWN if m.use is km.Use.REASONING]
    assert list(km.REASONING_PAIRS) == pairs
    closers = [close for _, close in km.REASONING_PAIRS]
    assert len(set(closers)) == len(closers)  # a template's pair is found by its closer
    for opener, closer in km.REASONING_PAIRS:
        ReasoningMarkers(opener, closer)  # a pair the reasoning reader takes


def test_no_text_is_listed_twice_and_every_row_says_who_writes_it() -> None:
    texts = [m.text for m in km.KNOWN]
    assert len(set(texts)) == len(texts)
    assert all(m.who and (m.closes is None) == (m.use is km.Use.STOP) for m in km.KNOWN)
