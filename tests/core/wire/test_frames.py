"""The frame codec: any split decodes the same, garbage fails only one way, limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.core.errors import ErrorCode, FrameTooLargeError, MisuseError, ProtocolError
from boxmaker.core.wire.envelope import decode_envelope
from boxmaker.core.wire.frames import MAX_FRAME, FrameDecoder, encode_frame

payloads = st.lists(st.binary(min_size=1, max_size=300), max_size=8)


def _decode_in_pieces(stream: bytes, cuts: list[int]) -> list[bytes]:
    decoder = FrameDecoder()
    frames: list[bytes] = []
    start = 0
    for cut in [*sorted(cuts), len(stream)]:
        frames.extend(decoder.feed(stream[start:cut]))
        start = cut
    assert decoder.idle
    return frames


@settings(max_examples=2000, deadline=None)
@given(payloads, st.data())
def test_any_split_decodes_to_the_same_frames(frames: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(p) for p in frames)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    assert _decode_in_pieces(stream, cuts) == frames


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=10))
def test_arbitrary_bytes_yield_frames_or_a_protocol_error(chunks: list[bytes]) -> None:
    decoder = FrameDecoder()
    codes: list[ErrorCode] = []
    try:
        for chunk in chunks:
            for frame in decoder.feed(chunk):
                assert 1 <= len(frame) <= MAX_FRAME
                try:
                    decode_envelope(frame)
                except ProtocolError as exc:
                    codes.append(exc.code)
    except ProtocolError as exc:
        codes.append(exc.code)
    assert set(codes) <= {ErrorCode.MALFORMED, ErrorCode.TOO_LARGE}


def test_a_length_over_the_limit_is_refused_from_the_prefix_alone() -> None:
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError) as caught:
        decoder.feed((MAX_FRAME + 1).to_bytes(4, "big"))
    assert caught.value.code is ErrorCode.TOO_LARGE
    assert decoder.idle  # nothing of the body was waited for or kept


def test_the_largest_frame_passes() -> None:
    payload = b"x" * MAX_FRAME
    assert FrameDecoder().feed(encode_frame(payload)) == [payload]


def test_a_zero_length_frame_is_malformed() -> None:
    with pytest.raises(ProtocolError) as caught:
        FrameDecoder().feed(b"\x00\x00\x00\x00")
    assert caught.value.code is ErrorCode.MALFORMED


def test_a_failed_decoder_stays_failed() -> None:
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError):
        decoder.feed(b"\xff\xff\xff\xff")
    with pytest.raises(ProtocolError):
        decoder.feed(encode_frame(b"{}"))


@pytest.mark.parametrize(
    ("payload", "error"),
    [(b"", MisuseError), (b"x" * (MAX_FRAME + 1), FrameTooLargeError)],
    ids=["empty", "over-the-limit"],
)
def test_encode_refuses_what_cannot_be_one_frame(payload: bytes, error: type[MisuseError]) -> None:
    """Our own payload, not the peer's bytes: a MisuseError, never a ProtocolError."""
    with pytest.raises(error) as caught:
        encode_frame(payload)
    assert not isinstance(caught.value, ProtocolError)


def test_a_partial_frame_is_not_idle() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(encode_frame(b"abc")[:5]) == []
    assert not decoder.idle
