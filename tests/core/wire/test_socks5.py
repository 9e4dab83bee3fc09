"""The SOCKS5 handshake parser: any split gives the same events, garbage is refused or
waits and never raises, only a domain name connects, and each refusal by example.

The properties check the parser against `oracle`, a deliberately naive reading of
the whole stream at once, written from the rules in `boxmaker.core.wire.socks5`'s
docstring with its own byte offsets and literal answers.
"""

from __future__ import annotations

import ipaddress
import itertools

import hypothesis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.core.wire.socks5 import (
    Connect,
    Event,
    Handshake,
    NeedData,
    Refuse,
    Reply,
)

EXAMPLES = 2000  # the issue asks CI to run at least 2,000 for each property

METHOD_OK = b"\x05\x00"
NO_METHOD = b"\x05\xff"
GREETING = b"\x05\x01\x00"


def _reply(code: int) -> bytes:
    return bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0])


def _refuse(reason: str, code: int, host: str = "", port: int = 0) -> Refuse:
    return Refuse(reason, code, _reply(code), host, port)


def _request(atyp: int, address: bytes, port: int = 443, command: int = 1) -> bytes:
    return bytes([5, command, 0, atyp]) + address + port.to_bytes(2, "big")


def _name(host: bytes) -> bytes:
    return bytes([len(host)]) + host


# ---------------------------------------------------------------------------
# the oracle, and running the parser


def oracle(stream: bytes) -> tuple[list[Event], bytes | None]:
    """The events a whole `stream` makes (NeedData last when it ends early), and the
    bytes past the request when it connects (None otherwise)."""
    if len(stream) < 2:
        return [NeedData()], None
    if stream[0] != 5:
        return [Refuse("not a SOCKS5 greeting", None, b"")], None
    count = stream[1]
    if len(stream) < 2 + count:
        return [NeedData()], None
    if 0 not in stream[2 : 2 + count]:
        return [Refuse("no acceptable authentication method", None, NO_METHOD)], None
    said: list[Event] = [Reply(METHOD_OK)]
    request = stream[2 + count :]
    if len(request) < 4:
        return [*said, NeedData()], None
    version, command, reserved, atyp = request[:4]
    if version != 5 or reserved != 0:
        return [*said, _refuse("malformed SOCKS5 request", 0x01)], None
    if atyp == 3:
        if len(request) < 5:
            return [*said, NeedData()], None
        start, size = 5, request[4]
    elif atyp == 1:
        start, size = 4, 4
    elif atyp == 4:
        start, size = 4, 16
    else:
        return [*said, _refuse("unknown address type", 0x08)], None
    end = start + size + 2
    if len(request) < end:
        return [*said, NeedData()], None
    raw = request[start : start + size]
    host = raw.decode("ascii", "replace") if atyp == 3 else str(ipaddress.ip_address(raw))
    port = request[end - 2] * 256 + request[end - 1]
    if command != 1:
        return [*said, _refuse("only CONNECT", 0x07, host, port)], None
    if atyp != 3:
        return [*said, _refuse("an IP address, not a host name", 0x08, host, port)], None
    return [*said, Connect(host, port)], request[end:]


def run(pieces: list[bytes]) -> tuple[list[Event], bytes]:
    """Feed `pieces` one by one, asking for events after each: every event but the
    NeedData between pieces, and the trailing data at the end."""
    handshake = Handshake()
    said: list[Event] = []
    for piece in pieces:
        handshake.receive(piece)
        if said and isinstance(said[-1], Connect | Refuse):
            continue  # a verdict is final: later bytes only trail
        if said and isinstance(said[-1], NeedData):
            said.pop()
        while True:
            said.append(handshake.next_event())
            if not isinstance(said[-1], Reply):
                break
    return said, handshake.trailing_data


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def check_against_oracle(stream: bytes, cuts: list[int]) -> list[Event]:
    """The parser, fed `stream` whole and in pieces, agrees with the oracle."""
    whole, trailing = run([stream])
    assert run(split(stream, cuts)) == (whole, trailing)
    expected, past = oracle(stream)
    assert whole == expected
    if past is not None:
        assert trailing == past
    hypothesis.event(type(whole[-1]).__name__)  # the outcomes, in --hypothesis-show-statistics
    return whole


# ---------------------------------------------------------------------------
# strategies


# Strategies built once: the composites below run for every example.
BYTE = st.integers(0, 255)
PORT = st.one_of(st.just(443), st.integers(0, 65535))
OFTEN = st.sampled_from((True,) * 7 + (False,))  # a small integer range is drawn unevenly
ATYP = st.sampled_from((3, 3, 3, 3, 1, 4, None))  # None: any byte
NOT_A_DOMAIN = st.one_of(
    st.sampled_from((1, 4)), st.sampled_from([t for t in range(256) if t != 3])
)
METHODS = st.binary(max_size=12).map(lambda m: m.replace(b"\x00", b"\x01"))
NAME = st.one_of(
    st.sampled_from((b"allowed.test", b"a.allowed.test", b"", b"x" * 255)),
    st.binary(max_size=255),
)
IPV4, IPV6 = st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16)
TAIL = st.binary(max_size=64)
CUTS = st.lists(st.integers(0, 1 << 16), max_size=12)


def mostly(draw: st.DrawFn, good: int) -> int:
    """`good` about seven times in eight, any byte otherwise."""
    return good if draw(OFTEN) else draw(BYTE)


@st.composite
def greetings(draw: st.DrawFn) -> bytes:
    """A greeting that offers no authentication about seven times in eight."""
    methods = draw(METHODS)
    if draw(OFTEN):
        at = draw(BYTE) % (len(methods) + 1)
        methods = methods[:at] + b"\x00" + methods[at:]
    return bytes([mostly(draw, 5), len(methods)]) + methods


def address(draw: st.DrawFn, atyp: int) -> bytes:
    """An address of type `atyp` and a port: any bytes for an unknown type."""
    if atyp == 3:
        raw = _name(draw(NAME))
    elif atyp in (1, 4):
        raw = draw(IPV4 if atyp == 1 else IPV6)
    else:
        return draw(TAIL)
    return raw + draw(PORT).to_bytes(2, "big")


@st.composite
def handshakes(draw: st.DrawFn) -> bytes:
    """A greeting and a request, mostly well formed, and maybe early data after it."""
    atyp = draw(ATYP)
    if atyp is None:
        atyp = draw(BYTE)
    request = bytes([mostly(draw, 5), mostly(draw, 1), mostly(draw, 0), atyp])
    return draw(greetings()) + request + address(draw, atyp) + draw(TAIL)


@st.composite
def non_domain_requests(draw: st.DrawFn) -> bytes:
    """A greeting and a request whose address type is anything but a domain name."""
    atyp = draw(NOT_A_DOMAIN)
    request = bytes([mostly(draw, 5), mostly(draw, 1), mostly(draw, 0), atyp])
    return draw(greetings()) + request + address(draw, atyp) + draw(TAIL)


garbage = st.one_of(
    TAIL,
    st.tuples(
        st.sampled_from([b"\x05", GREETING, GREETING + b"\x05", GREETING + b"\x05\x01\x00"]),
        TAIL,
    ).map(b"".join),
)


def cuts_of(data: st.DataObject, stream: bytes) -> list[int]:
    """Where to cut `stream`: a few places, or between every byte about one time in eight."""
    if not data.draw(OFTEN):
        return list(range(len(stream) + 1))
    return [cut % (len(stream) + 1) for cut in data.draw(CUTS)]


# ---------------------------------------------------------------------------
# properties


@settings(max_examples=EXAMPLES, deadline=None)
@given(handshakes(), st.data())
def test_any_split_of_a_handshake_gives_the_same_events(stream: bytes, data: st.DataObject) -> None:
    check_against_oracle(stream, cuts_of(data, stream))


@settings(max_examples=EXAMPLES, deadline=None)
@given(garbage, st.data())
def test_garbage_is_refused_or_waits_and_never_raises(stream: bytes, data: st.DataObject) -> None:
    said = check_against_oracle(stream, cuts_of(data, stream))
    assert all(isinstance(e, Reply | NeedData | Refuse | Connect) for e in said)
    # a connect is only ever a well-formed CONNECT for a domain name (the oracle's)
    assert isinstance(said[-1], NeedData | Refuse) or oracle(stream)[1] is not None


@settings(max_examples=EXAMPLES, deadline=None)
@given(non_domain_requests(), st.data())
def test_an_address_type_other_than_a_domain_name_never_connects(
    stream: bytes, data: st.DataObject
) -> None:
    said = check_against_oracle(stream, cuts_of(data, stream))
    assert not any(isinstance(e, Connect) for e in said)


# ---------------------------------------------------------------------------
# each refusal, by example


@pytest.mark.parametrize(
    ("stream", "said"),
    [
        (b"\x04\x01\x00", [Refuse("not a SOCKS5 greeting", None, b"")]),
        (b"\x00\x00", [Refuse("not a SOCKS5 greeting", None, b"")]),
        (b"\x05\x01\x02", [Refuse("no acceptable authentication method", None, NO_METHOD)]),
        (b"\x05\x00", [Refuse("no acceptable authentication method", None, NO_METHOD)]),
        (
            GREETING + b"\x04\x01\x00\x03",
            [Reply(METHOD_OK), _refuse("malformed SOCKS5 request", 0x01)],
        ),
        (
            GREETING + b"\x05\x01\x01\x03",
            [Reply(METHOD_OK), _refuse("malformed SOCKS5 request", 0x01)],
        ),
        (
            GREETING + b"\x05\x01\x00\x09",
            [Reply(METHOD_OK), _refuse("unknown address type", 0x08)],
        ),
        (
            GREETING + b"\x05\x01\x00\x00",
            [Reply(METHOD_OK), _refuse("unknown address type", 0x08)],
        ),
        (
            GREETING + _request(3, _name(b"allowed.test"), command=2),
            [Reply(METHOD_OK), _refuse("only CONNECT", 0x07, "allowed.test", 443)],
        ),
        (
            GREETING + _request(3, _name(b"allowed.test"), 53, command=3),
            [Reply(METHOD_OK), _refuse("only CONNECT", 0x07, "allowed.test", 53)],
        ),
        (
            GREETING + _request(1, bytes([127, 0, 0, 1])),
            [Reply(METHOD_OK), _refuse("an IP address, not a host name", 0x08, "127.0.0.1", 443)],
        ),
        (
            GREETING + _request(4, bytes(15) + b"\x01", 8443),
            [Reply(METHOD_OK), _refuse("an IP address, not a host name", 0x08, "::1", 8443)],
        ),
        (
            GREETING + _request(1, bytes([10, 0, 0, 1]), command=2),
            [Reply(METHOD_OK), _refuse("only CONNECT", 0x07, "10.0.0.1", 443)],
        ),
        (
            GREETING + b"\x05\x02\x00\x09",
            [Reply(METHOD_OK), _refuse("unknown address type", 0x08)],
        ),
        (
            GREETING + b"\x04\x02\x00\x09",
            [Reply(METHOD_OK), _refuse("malformed SOCKS5 request", 0x01)],
        ),
    ],
    ids=[
        "socks4-greeting",
        "version-0",
        "no-acceptable-method",
        "no-methods",
        "request-version-4",
        "reserved-not-zero",
        "unknown-address-type",
        "address-type-0",
        "bind-command",
        "udp-associate-command",
        "ipv4",
        "ipv6",
        "command-before-address-type",
        "unknown-address-type-before-command",
        "version-before-address-type",
    ],
)
def test_each_refusal(stream: bytes, said: list[Event]) -> None:
    handshake = Handshake()
    handshake.receive(stream)
    assert [handshake.next_event() for _ in said] == said
    assert handshake.next_event() == said[-1]  # a verdict is given again, and only it
    assert oracle(stream)[0] == said


def test_a_domain_name_connects_and_keeps_the_bytes_past_the_request() -> None:
    handshake = Handshake()
    handshake.receive(GREETING + _request(3, _name(b"allowed.test")) + b"\x16\x03\x01")
    assert handshake.next_event() == Reply(METHOD_OK)
    assert handshake.next_event() == Connect("allowed.test", 443)
    assert handshake.trailing_data == b"\x16\x03\x01"
    handshake.receive(b"more")  # after the verdict nothing is parsed: it only trails
    assert handshake.next_event() == Connect("allowed.test", 443)
    assert handshake.trailing_data == b"\x16\x03\x01more"


def test_the_method_reply_waits_for_every_offered_method() -> None:
    handshake = Handshake()
    handshake.receive(b"\x05\x03\x02\x00")
    assert handshake.next_event() == NeedData()
    handshake.receive(b"\x01")
    assert handshake.next_event() == Reply(METHOD_OK)
    assert handshake.next_event() == NeedData()
    assert handshake.trailing_data == b""


@pytest.mark.parametrize(
    "stream",
    [
        b"",
        b"\x05",
        b"\x05\x02\x00",
        GREETING + b"\x05\x01\x00",
        GREETING + b"\x05\x01\x00\x03",
        GREETING + b"\x05\x01\x00\x03\x0callowed",
        GREETING + b"\x05\x01\x00\x03\x0callowed.test\x01",
        GREETING + b"\x05\x01\x00\x01\x7f\x00\x00\x01",
    ],
    ids=[
        "empty",
        "version-only",
        "a-method-missing",
        "request-header-cut",
        "no-name-length",
        "name-cut",
        "port-cut",
        "ipv4-port-missing",
    ],
)
def test_a_cut_handshake_waits_for_more(stream: bytes) -> None:
    said, _ = run([stream])
    assert said[-1] == NeedData()
    assert not any(isinstance(e, Refuse | Connect) for e in said)


@pytest.mark.parametrize(
    ("name", "host"),
    [(b"", ""), (b"allowed.test\xff", "allowed.test\ufffd"), (b"127.0.0.1", "127.0.0.1")],
    ids=["empty-name", "non-ascii", "ip-literal-as-name"],
)
def test_a_domain_name_is_not_judged_here(name: bytes, host: str) -> None:
    """The proxy's `_admit` refuses these (not a host name); the parser only reads them."""
    said, _ = run([GREETING + _request(3, _name(name))])
    assert said == [Reply(METHOD_OK), Connect(host, 443)]
