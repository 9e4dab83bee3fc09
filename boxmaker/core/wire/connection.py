"""One request per connection, sans I/O: the rules of design.md section 3 as two state machines.

The client sends one envelope with `final: true`. The server answers with zero
or more `final: false` envelopes and one `final: true` envelope, all carrying the
request's id, then closes. These classes turn bytes into envelopes and back and
enforce those rules; reading and writing the socket is the caller's.

    ServerConnection: AWAITING_REQUEST --request--> ANSWERING --final--> CLOSED
    ClientConnection: SENDING --request--> AWAITING_ANSWER --final--> CLOSED

Anything out of order from the peer raises `ProtocolError`, and the connection is
then unusable. Our own side breaking the rules (an answer after the final one, or
with no request; a second request) is a bug: `MisuseError`, never the peer's error.
"""

from __future__ import annotations

from boxmaker.core.errors import ErrorCode, MisuseError, ProtocolError
from boxmaker.core.wire.envelope import (
    Envelope,
    Message,
    decode_envelope,
    encode_answer,
    encode_envelope,
)
from boxmaker.core.wire.frames import FrameDecoder, encode_frame


class ServerConnection:
    """The server's side: one request in, answers out."""

    def __init__(self) -> None:
        self._decoder = FrameDecoder()
        self._request: Envelope | None = None
        self._closed = False

    @property
    def request(self) -> Envelope | None:
        return self._request

    def receive(self, data: bytes) -> Envelope | None:
        """Feed bytes read from the client; the request once it is complete.

        An empty `data` means the client closed its side. Bytes after the request
        are a protocol error: one request per connection.
        """
        if self._request is not None:
            if data:
                raise ProtocolError(ErrorCode.MALFORMED, "one request per connection")
            return None
        if not data:
            if self._decoder.idle:
                raise ProtocolError(ErrorCode.MALFORMED, "the connection closed with no request")
            raise ProtocolError(ErrorCode.MALFORMED, "the connection closed inside a frame")
        frames = self._decoder.feed(data)
        if not frames:
            return None
        if len(frames) > 1 or not self._decoder.idle:
            raise ProtocolError(ErrorCode.MALFORMED, "one request per connection")
        envelope = decode_envelope(frames[0])
        if not envelope.final:
            raise ProtocolError(ErrorCode.MALFORMED, "a request must be sent with final: true")
        self._request = envelope
        return envelope

    def answer(self, message: Message, *, final: bool, request_id: str | None = None) -> bytes:
        """The bytes of one answer; after a final one, nothing more may be sent.

        `request_id` is for an error sent before a request could be read.
        """
        if self._closed:
            raise MisuseError("the final answer was already sent")
        ident = request_id if self._request is None else self._request.id
        if ident is None:
            raise MisuseError("no request to answer")
        self._closed = final
        return encode_frame(encode_answer(ident, final, message))


class ClientConnection:
    """The client's side: one request out, answers in, each checked against the request."""

    def __init__(self, request_id: str) -> None:
        self._id = request_id
        self._decoder = FrameDecoder()
        self._sent = False
        self._done = False

    @property
    def done(self) -> bool:
        """True once the final answer has arrived."""
        return self._done

    def request(self, message: Message) -> bytes:
        if self._sent:
            raise MisuseError("one request per connection")
        self._sent = True
        return encode_frame(encode_envelope(Envelope(id=self._id, final=True, message=message)))

    def receive(self, data: bytes) -> list[Envelope]:
        """Feed bytes read from the server; the answers they complete, in order.

        An empty `data` means the server closed: before the final answer that is a
        protocol error (`unavailable`).
        """
        if not data:
            if not self._done:
                raise ProtocolError(
                    ErrorCode.UNAVAILABLE, "the server closed before its final answer"
                )
            return []
        if self._done:
            raise ProtocolError(ErrorCode.MALFORMED, "the server sent more after its final answer")
        answers: list[Envelope] = []
        for frame in self._decoder.feed(data):
            if self._done:
                raise ProtocolError(
                    ErrorCode.MALFORMED, "the server sent more after its final answer"
                )
            envelope = decode_envelope(frame)
            if envelope.id != self._id:
                raise ProtocolError(
                    ErrorCode.MALFORMED, f"an answer for {envelope.id!r}, not for {self._id!r}"
                )
            self._done = envelope.final
            answers.append(envelope)
        return answers
