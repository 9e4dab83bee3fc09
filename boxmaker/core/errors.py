"""The exception tree shared by every role. No I/O.

    BoxmakerError
    ├── ProtocolError      the peer sent something we refuse; carries a wire ErrorCode
    ├── ArgsError          a tool's arguments do not parse or fail the form checks (ValueError)
    ├── ConfigError        a configuration file or variable is wrong (ValueError)
    ├── StartupError       a role cannot start: one line saying what to do (exit status 1)
    └── RequestError       our own request on a socket got no final answer: the client's
        │                  side, kept apart from ProtocolError (the peer's fault, answered
        │                  on the wire)
        ├── UnreachableError       nothing listens at the path (missing, refused)
        ├── NotAllowedError        the kernel refused the connection (the socket's modes)
        ├── TimedOutError          no final answer by the deadline
        ├── RequestTooLargeError   the request does not fit in a frame (nothing was sent)
        └── BrokenError            the connection failed, or the peer broke the protocol

Expected outcomes (a denial, an ask, a failed tool call, a bad grant file) are
values, not exceptions. "We were wrong" is any other exception: it is logged with
its traceback and answered as `internal`, never echoed to a peer.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Wire error codes. Values are never renamed."""

    MALFORMED = "malformed"
    TOO_LARGE = "too_large"
    FORBIDDEN = "forbidden"
    NO_SUCH_APPROVAL = "no_such_approval"
    DIGEST_MISMATCH = "digest_mismatch"  # approve --digest: not that approval's; still pending
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"


class BoxmakerError(Exception):
    """The root of boxmaker's own exceptions."""


class ProtocolError(BoxmakerError):
    """The peer was wrong: answered with `code` and a one-line `message`."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ArgsError(BoxmakerError, ValueError):
    """A tool call's arguments were refused; the text explains why in one line."""


class ConfigError(BoxmakerError, ValueError):
    """A configuration file, key or variable is wrong; the text says which and what to do."""


class StartupError(BoxmakerError):
    """A role cannot start; the text is one line saying what to do."""


class RequestError(BoxmakerError):
    """A request we sent on a socket got no final answer; the text says why in one line."""


class UnreachableError(RequestError):
    """Nothing listens at the socket's path (it is missing, or the connection is refused)."""


class NotAllowedError(RequestError):
    """The kernel refused the connection: this user may not use the socket."""


class TimedOutError(RequestError):
    """No final answer came by the deadline."""


class RequestTooLargeError(RequestError):
    """The request does not fit in one frame; nothing was sent."""


class BrokenError(RequestError):
    """The connection failed, closed early, or the peer broke the protocol."""
