"""The one server against arbitrary byte trickles and splits: every connection ends by its deadline.

A real server (`serve_forever` on a real Unix socket, a request deadline of
DEADLINE_S) is fed, by hypothesis, a request frame, a frame of garbage, raw bytes,
or a frame cut short, in arbitrary pieces with pauses between them. Whatever
comes, the server must close the connection by the deadline (plus scheduling
slack), having said either nothing or exactly one final frame: the answer to a
whole request, or a protocol error. It must never hang on a trickle (a per-read
timeout would), answer twice, or answer a request it never got whole.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boxmaker.core.errors import ErrorCode
from boxmaker.core.home.links import OWNER_BROKER
from boxmaker.core.wire.broker_admin import Approvals
from boxmaker.core.wire.common import Error, Ok, Status
from boxmaker.core.wire.connection import ClientConnection
from boxmaker.core.wire.envelope import decode_envelope
from boxmaker.core.wire.frames import FrameDecoder, encode_frame
from boxmaker.ipc.connection import Connection, SocketRules
from boxmaker.ipc.serving import bind_socket, serve_forever

DEADLINE_S = 0.3
SLACK_S = 1.5  # a busy machine may be slow to schedule the accept or the close
RULES = SocketRules(replace(OWNER_BROKER, socket="t.sock", accepts=("approvals",)), 16, DEADLINE_S)


def answer_ok(conn: Connection, _: Approvals) -> None:
    conn.send(Ok(), final=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = Path(tmp_path_factory.mktemp("trickle")) / "run" / "t.sock"
    listening = bind_socket(path)
    stopping = threading.Event()
    serve_forever(listening, RULES, {Approvals: answer_ok}, stopping)
    yield path
    stopping.set()
    listening.close()


def frame(message: Approvals | Status, request_id: str) -> bytes:
    return ClientConnection(request_id).request(message)


payloads = st.one_of(
    st.just(frame(Approvals(), "r1")),
    st.just(frame(Status(), "r2")),  # a kind this socket does not accept
    st.binary(max_size=64).map(lambda b: encode_frame(b) if b else b""),  # garbage in a frame
    st.binary(min_size=1, max_size=64),  # raw bytes, perhaps a huge length prefix
    st.builds(
        lambda f, n: f[: max(1, len(f) - n)], st.just(frame(Approvals(), "r3")), st.integers(1, 20)
    ),
)


def pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def talk(path: Path, chunks: list[bytes], pauses: list[float]) -> tuple[bytes, float]:
    """Send the chunks with the pauses between them; what came back, and when it closed."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        start = time.monotonic()
        for n, chunk in enumerate(chunks):
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break  # the server has closed already (an error, or its deadline)
            time.sleep(pauses[n % len(pauses)] if pauses else 0)
        sock.settimeout(DEADLINE_S + SLACK_S)
        received = b""
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            received += data
        return received, time.monotonic() - start


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    payload=payloads,
    cuts=st.lists(st.integers(0, 200), max_size=8),
    pauses=st.lists(st.floats(0, 0.06), max_size=4),
)
def test_every_connection_ends_by_its_deadline_with_a_frame_or_nothing(
    server: Path, payload: bytes, cuts: list[int], pauses: list[float]
) -> None:
    chunks = pieces(payload, cuts)
    received, took = talk(server, chunks, pauses)
    sending = sum(pauses[n % len(pauses)] for n in range(len(chunks))) if pauses else 0.0
    # closed by the deadline, or at once after an answer given before the sending ended
    assert took <= max(DEADLINE_S, sending) + SLACK_S, (took, chunks)
    decoder = FrameDecoder()
    frames = decoder.feed(received)
    assert decoder.idle, received  # never half a frame
    assert len(frames) <= 1, frames
    if not frames:
        return  # closed without a word: the deadline passed, or nothing came whole
    envelope = decode_envelope(frames[0])
    assert envelope.final
    if payload == frame(Approvals(), "r1") and envelope.message == Ok():
        assert envelope.id == "r1"
        return
    assert isinstance(envelope.message, Error), envelope
    if payload == frame(Status(), "r2"):
        assert envelope.message.code is ErrorCode.FORBIDDEN
    else:
        assert envelope.message.code in (ErrorCode.MALFORMED, ErrorCode.TOO_LARGE)


def test_a_byte_every_tenth_of_a_second_is_cut_off_at_the_deadline(server: Path) -> None:
    """The trickle a per-read timeout never ends: one byte at a time, each in time."""
    whole = frame(Approvals(), "slow")
    received, took = talk(server, [whole[i : i + 1] for i in range(len(whole))], [0.1])
    assert received == b""  # never complete, never answered
    assert took < len(whole) * 0.1  # cut off long before the trickle would have ended
