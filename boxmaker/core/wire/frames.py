"""Length-prefixed frames, sans I/O: bytes in, payloads out.

A frame is a 4-byte big-endian length N, 1 <= N <= the limit (1,048,576 on the
sockets, `MAX_FRAME`; a link of its own, such as the template worker's pipe, may
set another), then exactly N bytes. `FrameDecoder.feed` takes any split of the
stream and returns the complete payloads so far; a bad prefix raises
`ProtocolError` as soon as the 4 bytes are in, before any of the body is
buffered. After an error the decoder stays failed. `encode_frame` is given our
own payloads: one that cannot be a frame is our mistake, a `MisuseError`
(`FrameTooLargeError` when it is over the limit).
"""

from __future__ import annotations

from typing import NoReturn

from boxmaker.core.errors import ErrorCode, FrameTooLargeError, MisuseError, ProtocolError

MAX_FRAME = 1_048_576
PREFIX = 4


def encode_frame(payload: bytes, limit: int = MAX_FRAME) -> bytes:
    """`payload` with its length prefix; MisuseError if it cannot be one frame."""
    if not payload:
        raise MisuseError("a frame cannot be empty")
    if len(payload) > limit:
        raise FrameTooLargeError(f"a frame of {len(payload)} bytes is over {limit}")
    return len(payload).to_bytes(PREFIX, "big") + payload


class FrameDecoder:
    """Feed it bytes; it yields whole payloads or raises the one protocol error."""

    def __init__(self, limit: int = MAX_FRAME) -> None:
        self._limit = limit
        self._buffer = bytearray()
        self._length: int | None = None
        self._error: ProtocolError | None = None

    @property
    def idle(self) -> bool:
        """True when no partial frame is buffered (a clean place for the stream to end)."""
        return not self._buffer and self._length is None

    def feed(self, data: bytes) -> list[bytes]:
        if self._error is not None:
            raise self._error
        self._buffer += data
        frames: list[bytes] = []
        while True:
            if self._length is None:
                if len(self._buffer) < PREFIX:
                    return frames
                length = int.from_bytes(self._buffer[:PREFIX], "big")
                del self._buffer[:PREFIX]
                if length == 0:
                    self._fail(ErrorCode.MALFORMED, "a frame cannot be empty")
                if length > self._limit:
                    self._fail(
                        ErrorCode.TOO_LARGE, f"a frame of {length} bytes is over {self._limit}"
                    )
                self._length = length
            if len(self._buffer) < self._length:
                return frames
            frames.append(bytes(self._buffer[: self._length]))
            del self._buffer[: self._length]
            self._length = None

    def _fail(self, code: ErrorCode, message: str) -> NoReturn:
        self._buffer.clear()
        self._error = ProtocolError(code, message)
        raise self._error
