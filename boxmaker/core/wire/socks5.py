"""The SOCKS5 handshake of the egress proxy (RFC 1928), sans I/O: bytes in, events out.

The proxy's side of one handshake. `Handshake.receive` takes the client's bytes in
any split; `Handshake.next_event` answers one of:

- `NeedData`: the bytes so far end inside a field; receive more;
- `Reply`: send these bytes to the client (the method-selection reply), then ask again;
- `Connect`: a well-formed CONNECT for a domain name, with its name and port;
- `Refuse`: the handshake is refused: the reason, the reply code (None when the
  greeting failed and no request reply is due) and the bytes to answer with.

`Connect` and `Refuse` are verdicts: once one is given, `next_event` gives it again
and nothing more is parsed. The name in a `Connect` is not judged here: whether it
is a host name, on the grant's list, on port 443 and resolving to public addresses
only is the egress proxy's policy (`boxmaker.sandbox.egress`). End of stream and
deadlines are the caller's too: a hang-up or a timeout gets no verdict.

The rules, in the order the fields arrive:

    greeting   VER NMETHODS   VER is not 5              refuse "not a SOCKS5 greeting",
                                                        no code, answer nothing
    methods    NMETHODS bytes none is 0x00 (no          refuse "no acceptable authentication
                              authentication), or       method", no code, answer 05 FF
                              NMETHODS is 0
                              else                      reply 05 00
    request    VER CMD RSV    VER is not 5 or RSV not 0 refuse 0x01 "malformed SOCKS5 request"
               ATYP           ATYP not 1, 3 or 4        refuse 0x08 "unknown address type"
    address    ATYP 3: a length byte and that many bytes, the name (ASCII; any other
               byte reads as U+FFFD, which the proxy's host-name check refuses);
               ATYP 1: 4 bytes; ATYP 4: 16 bytes
    port       2 bytes, big-endian
                              CMD is not 1 (CONNECT)    refuse 0x07 "only CONNECT"
                              ATYP is 1 or 4            refuse 0x08 "an IP address, not a
                                                        host name"
                              else                      connect (name, port)

Each row is applied when its whole field is in, not before: the greeting's VER is
judged with NMETHODS, and the command and an IP address type only once the address
and port are in, so that their refusal names them (`Refuse.host`, `Refuse.port`).
A refusal with a code is answered with a reply carrying it (`reply_bytes`).

Bytes past the request are not the handshake's: they are kept, unread, in
`trailing_data`. A client may send its first bytes for the upstream (a TLS hello)
before the CONNECT reply; after a `Connect` the proxy sends them upstream before
relaying anything else, as if they had come after the reply. After a `Refuse` they
are dropped with the connection. The buffer grows only by what the caller feeds:
the handshake itself is at most 2 + 255 + 4 + 1 + 255 + 2 = 519 bytes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import Enum, auto

# SOCKS5 reply codes (RFC 1928 section 6)
REPLY_SUCCEEDED = 0x00
REPLY_GENERAL_FAILURE = 0x01
REPLY_NOT_ALLOWED = 0x02
REPLY_HOST_UNREACHABLE = 0x04
REPLY_CONNECTION_REFUSED = 0x05
REPLY_COMMAND_NOT_SUPPORTED = 0x07
REPLY_ADDRESS_TYPE_NOT_SUPPORTED = 0x08

VERSION = 0x05
NO_AUTHENTICATION = 0x00
NO_ACCEPTABLE_METHOD = 0xFF
CONNECT = 0x01
ATYP_IPV4, ATYP_DOMAIN, ATYP_IPV6 = 0x01, 0x03, 0x04


def reply_bytes(code: int) -> bytes:
    """A SOCKS5 reply: VER, REP, RSV, ATYP=IPv4, BND.ADDR=0.0.0.0, BND.PORT=0."""
    return bytes([VERSION, code, 0x00, ATYP_IPV4, 0, 0, 0, 0, 0, 0])


@dataclass(frozen=True, slots=True)
class NeedData:
    """The bytes so far end inside a field: receive more."""


@dataclass(frozen=True, slots=True)
class Reply:
    """Send `data` to the client, then ask for the next event."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Connect:
    """A well-formed CONNECT request for the domain name `host` (not yet judged)."""

    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Refuse:
    """A refused handshake: why, the reply code (None before a request) and the answer.

    `host` and `port` are those of the request when it was read whole ("" and 0
    otherwise).
    """

    reason: str
    code: int | None
    answer: bytes
    host: str = ""
    port: int = 0


def refusal(code: int, reason: str, host: str = "", port: int = 0) -> Refuse:
    """A refusal answered with a SOCKS5 reply carrying `code`."""
    return Refuse(reason, code, reply_bytes(code), host, port)


Event = NeedData | Reply | Connect | Refuse

NEED_DATA = NeedData()


class _State(Enum):
    GREETING = auto()
    METHODS = auto()
    REQUEST = auto()
    NAME_LENGTH = auto()
    ADDRESS = auto()
    PORT = auto()


class Handshake:
    """The proxy's side of one SOCKS5 handshake; see the module docstring for its rules."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._state = _State.GREETING
        self._size = 2  # the bytes of the field the state reads
        self._verdict: Connect | Refuse | None = None
        self._command = 0
        self._atyp = 0
        self._host = ""

    def receive(self, data: bytes) -> None:
        """Add bytes read from the client (any split; empty is nothing)."""
        self._buffer += data

    @property
    def trailing_data(self) -> bytes:
        """The bytes received past the request (all unparsed bytes before a verdict)."""
        return bytes(self._buffer)

    def next_event(self) -> Event:
        """The next event the bytes so far allow; a verdict, once given, again."""
        while self._verdict is None:
            if len(self._buffer) < self._size:
                return NEED_DATA
            field = bytes(self._buffer[: self._size])
            del self._buffer[: self._size]
            event = self._advance(field)
            if isinstance(event, Connect | Refuse):
                self._verdict = event
            if event is not None:
                return event
        return self._verdict

    def _read(self, state: _State, size: int) -> None:
        self._state, self._size = state, size

    def _advance(self, field: bytes) -> Event | None:
        """Apply the rules to one whole field; the event it makes, if any."""
        match self._state:
            case _State.GREETING:
                version, count = field
                if version != VERSION:
                    return Refuse("not a SOCKS5 greeting", None, b"")
                self._read(_State.METHODS, count)
            case _State.METHODS:
                if NO_AUTHENTICATION not in field:
                    answer = bytes([VERSION, NO_ACCEPTABLE_METHOD])
                    return Refuse("no acceptable authentication method", None, answer)
                self._read(_State.REQUEST, 4)
                return Reply(bytes([VERSION, NO_AUTHENTICATION]))
            case _State.REQUEST:
                version, self._command, reserved, self._atyp = field
                if version != VERSION or reserved != 0:
                    return refusal(REPLY_GENERAL_FAILURE, "malformed SOCKS5 request")
                if self._atyp == ATYP_DOMAIN:
                    self._read(_State.NAME_LENGTH, 1)
                elif self._atyp == ATYP_IPV4:
                    self._read(_State.ADDRESS, 4)
                elif self._atyp == ATYP_IPV6:
                    self._read(_State.ADDRESS, 16)
                else:
                    return refusal(REPLY_ADDRESS_TYPE_NOT_SUPPORTED, "unknown address type")
            case _State.NAME_LENGTH:
                self._read(_State.ADDRESS, field[0])
            case _State.ADDRESS:
                if self._atyp == ATYP_DOMAIN:
                    self._host = field.decode("ascii", "replace")
                else:
                    self._host = str(ipaddress.ip_address(field))
                self._read(_State.PORT, 2)
            case _State.PORT:
                return self._judge(int.from_bytes(field, "big"))
        return None

    def _judge(self, port: int) -> Connect | Refuse:
        """The request is whole: the command, then the address type, decide."""
        if self._command != CONNECT:
            return refusal(REPLY_COMMAND_NOT_SUPPORTED, "only CONNECT", self._host, port)
        if self._atyp != ATYP_DOMAIN:
            reason = "an IP address, not a host name"
            return refusal(REPLY_ADDRESS_TYPE_NOT_SUPPORTED, reason, self._host, port)
        return Connect(self._host, port)
