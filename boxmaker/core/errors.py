"""The exception tree: every exception class in boxmaker, drawn here. No I/O.

    BoxmakerError
    ├── ProtocolError      the peer sent something we refuse; carries a wire ErrorCode
    ├── MisuseError        our own code broke a rule of an API it calls (a bug, never the
    │   │                  peer's ProtocolError): an answer after the final one, a second
    │   │                  request, an empty frame
    │   └── FrameTooLargeError   a payload of ours over one frame (core/wire/frames); nothing was
    │                            sent (ipc's client raises RequestTooLargeError for it)
    ├── ArgsError          a tool's arguments do not parse or fail the form checks (ValueError)
    ├── ConfigError        a configuration file or variable is wrong (ValueError)
    │   ├── ContextFitError    `[model] context` or `memory_mib` cannot be honoured
    │   │                      (core/model/context_fit)
    │   ├── OffloadError       the GPU keys ask for what this build cannot do (core/model/offload)
    │   └── RpcEndpointError   an rpc-server loopd will not use (core/model/rpc_endpoints)
    ├── StartupError       a role cannot start: one line saying what to do (exit status 1)
    ├── DamagedError       a file a role keeps does not read back; the text names the file
    │   │                  (and the line)
    │   ├── RecordError            an audit line (core/audit/records; ValueError)
    │   ├── StateUnreadableError   a session's state file (brokerd/session_state)
    │   ├── SessionLogDamagedError a session's log (loopd/session_log)
    │   ├── JournalDamagedError    memoryd's journal (memoryd/journal; ValueError)
    │   ├── MemoryFileDamagedError a memory file (memoryd/files; ValueError)
    │   └── WatermarkError         a watermark file (gatewayd/watermark; ValueError)
    ├── UnavailableError   something a role needs cannot be had now; the text says what
    │   ├── AuditUnavailableError      the audit log cannot be written (brokerd/audit_writer)
    │   ├── AuditLockedError           another brokerd holds the audit log (the same)
    │   ├── LedgerPoisonedError        an earlier audit write failed (brokerd/ledger)
    │   ├── CheckpointUnavailableError no checkpoint can be taken (brokerd/audit_checkpoint)
    │   ├── MemoryUnavailableError     memoryd gave no memory block (loopd/memory_port)
    │   ├── CgroupError                per-call cgroups cannot be made (sandbox/cgroups)
    │   ├── ServerUnreachableError     a model server cannot be reached, broke off, or
    │   │                              answered with an HTTP error (loopd/server_link)
    │   ├── ServedReplyError           a model server's events break the protocol
    │   │                              (core/model/served)
    │   └── ModelUnavailableError      the model could not finish a reply: the turn ends
    │                                  (loopd/model)
    ├── TemplateError      the model's chat template cannot be rendered
    │   │                  (core/model/template_sandbox; ValueError)
    │   └── TemplateUnusableError  it renders, not so loopd can follow it
    │                              (core/model/template_prompt)
    ├── ContextFullError   the conversation no longer fits the model's context (loopd/model)
    ├── TurnRefusedError   a turn cannot start; carries the wire code (loopd/turn)
    ├── NoRoomError        the system turn and the owner's last turn alone pass the
    │                      compaction threshold: the turn ends (loopd/compaction)
    ├── NoSuchSessionError `session_show` of a session with no log (loopd/session_view)
    ├── HoldError          a call's path cannot be held; the call fails (sandbox/held)
    ├── MattermostError    a request to Mattermost failed (gatewayd/mm_model)
    │   └── MattermostAuthError  the server refused the bot token
    ├── CliError           bxctl: one line for the owner, then an exit status (bxctl/cli)
    ├── PeerClosedError    the client closed before its request was complete (ipc/connection;
    │                      ConnectionError)
    ├── ApiError           the fake Mattermost's error answer (testing/fake_mattermost)
    ├── OpensslMissingError  no openssl, so no test CA (testing/tls; RuntimeError)
    └── RequestError       our own request on a socket got no final answer: the client's
        │                  side, kept apart from ProtocolError (the peer's fault, answered
        │                  on the wire)
        ├── UnreachableError       nothing listens at the path (missing, refused)
        ├── NotAllowedError        the kernel refused the connection (the socket's modes)
        ├── TimedOutError          no final answer by the deadline
        ├── RequestTooLargeError   the request does not fit in a frame (nothing was sent)
        └── BrokenError            the connection failed, or the peer broke the protocol

A class defined in another module derives from the class drawn above it and
keeps the built-in base its callers catch it by (named after it). Private
classes (`_HangUpError` and the like, which never leave their module) derive
from a class of this tree and are not drawn. The one exception is the sandbox
toolkit's `ToolError`: the toolkit runs inside the sandbox on its own and
imports nothing of boxmaker. tests/core/test_errors.py holds the tree to this.

Expected outcomes (a denial, an ask, a failed tool call, a bad grant file) are
values, not exceptions. "We were wrong" is any other exception (a MisuseError
among them): it is logged with its traceback and answered as `internal`, never
echoed to a peer.
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


class MisuseError(BoxmakerError):
    """Our own code broke a rule of an API it calls: a bug, not the peer's fault."""


class FrameTooLargeError(MisuseError):
    """A payload of ours does not fit in one frame; nothing was sent."""


class ArgsError(BoxmakerError, ValueError):
    """A tool call's arguments were refused; the text explains why in one line."""


class ConfigError(BoxmakerError, ValueError):
    """A configuration file, key or variable is wrong; the text says which and what to do."""


class StartupError(BoxmakerError):
    """A role cannot start; the text is one line saying what to do."""


class DamagedError(BoxmakerError):
    """A file a role keeps does not read back; the text names the file (and the line)."""


class UnavailableError(BoxmakerError):
    """Something a role needs cannot be had now; the text says what, in one line."""


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
