"""The template worker's pipe protocol (core.wire.template_wire): any split decodes the same,
garbage fails only one way, every kind round-trips, limits hold before the body is in."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.core.errors import ErrorCode, FrameTooLargeError, ProtocolError
from boxmaker.core.wire.template_wire import (
    KINDS,
    Compile,
    Decoder,
    Done,
    Message,
    Ready,
    Refused,
    Render,
    Unknown,
    encode,
)

LIMIT = 1 << 20
texts = st.text(max_size=40)  # lone surrogates included: a conversation may hold one
values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(
        Compile,
        id=st.integers(0, 2**31),
        source=texts,
        max_steps=st.integers(0, 10**9),
        max_seconds=st.floats(0, 100),
        max_output=st.integers(0, 1 << 30),
    ),
    st.builds(
        Render,
        id=st.integers(0, 2**31),
        messages=st.lists(st.dictionaries(texts, values, max_size=4), max_size=4),
        tools=st.none() | st.lists(st.dictionaries(texts, values, max_size=3), max_size=3),
        add_generation_prompt=st.booleans(),
        bos_token=texts,
        eos_token=texts,
        now=texts,
        extra=st.dictionaries(texts, values, max_size=3),
    ),
    st.just(Ready()),
    st.builds(Done, text=texts),
    st.builds(Refused, reason=texts),
    st.just(Unknown()),
)


def _in_pieces(stream: bytes, cuts: list[int]) -> list[Message]:
    decoder = Decoder(LIMIT)
    decoded: list[Message] = []
    start = 0
    for cut in [*sorted(cuts), len(stream)]:
        decoded.extend(decoder.feed(stream[start:cut]))
        start = cut
    assert decoder.idle
    return decoded


@settings(max_examples=500, deadline=None)
@given(st.lists(messages, max_size=6), st.data())
def test_any_split_decodes_to_the_same_messages(sent: list[Message], data: st.DataObject) -> None:
    stream = b"".join(encode(message, LIMIT) for message in sent)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    assert _in_pieces(stream, cuts) == sent


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=10))
def test_arbitrary_bytes_yield_messages_or_one_protocol_error(chunks: list[bytes]) -> None:
    decoder = Decoder(LIMIT)
    failed: ProtocolError | None = None
    for chunk in chunks:
        try:
            for message in decoder.feed(chunk):
                assert isinstance(message, Compile | Render | Ready | Done | Refused | Unknown)
        except ProtocolError as exc:
            failed = exc
            break
    if failed is not None:  # and the decoder stays failed
        with pytest.raises(ProtocolError):
            decoder.feed(b"")


@settings(max_examples=500, deadline=None)
@given(values)
def test_any_json_body_is_a_message_or_malformed(body: object) -> None:
    payload = json.dumps(body).encode()
    codes: list[ErrorCode] = []
    try:
        Decoder(LIMIT).feed(len(payload).to_bytes(4, "big") + payload)
    except ProtocolError as exc:
        codes.append(exc.code)
    assert codes in ([], [ErrorCode.MALFORMED])


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"kind": "done"}, id="a-field-missing"),
        pytest.param({"kind": "done", "text": "x", "more": 1}, id="a-field-more"),
        pytest.param({"kind": "done", "text": 1}, id="mistyped"),
        pytest.param(
            {
                "kind": "compile",
                "id": True,
                "source": "",
                "max_steps": 1,
                "max_seconds": 1,
                "max_output": 1,
            },
            id="a-truth-for-a-number",
        ),
        pytest.param({"kind": "teleport"}, id="an-unknown-kind"),
        pytest.param({"text": "x"}, id="no-kind"),
        pytest.param([1, 2], id="not-an-object"),
    ],
)
def test_a_body_off_its_row_is_malformed(body: object) -> None:
    payload = json.dumps(body).encode()
    with pytest.raises(ProtocolError) as refused:
        Decoder(LIMIT).feed(len(payload).to_bytes(4, "big") + payload)
    assert refused.value.code is ErrorCode.MALFORMED


def test_a_length_over_the_limit_fails_before_the_body_is_in() -> None:
    decoder = Decoder(100)
    with pytest.raises(ProtocolError) as refused:
        decoder.feed((101).to_bytes(4, "big"))
    assert refused.value.code is ErrorCode.TOO_LARGE


def test_an_empty_frame_is_malformed() -> None:
    with pytest.raises(ProtocolError) as refused:
        Decoder(LIMIT).feed(b"\0\0\0\0")
    assert refused.value.code is ErrorCode.MALFORMED


def test_our_own_message_over_the_limit_is_our_mistake_and_nothing_is_made() -> None:
    with pytest.raises(FrameTooLargeError):
        encode(Done("x" * 200), 100)


def test_every_kind_has_a_row_and_every_row_a_kind() -> None:
    assert {row[0] for row in KINDS.values()} == {Compile, Render, Ready, Done, Refused, Unknown}
    for message, fields in KINDS.values():
        assert set(fields) == set(message.__dataclass_fields__)
