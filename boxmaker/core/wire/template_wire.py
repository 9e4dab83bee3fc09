"""The template worker's pipe protocol, sans I/O: messages to bytes, and bytes back to messages.

Pure; no I/O. `boxmaker.ipc.template_worker` (the parent, loopd's side) and
`boxmaker.ipc.template_child` (the child that runs the template) speak it over
the child's stdin and stdout. The rules:

1. **Frames.** A frame is a 4-byte big-endian length N, 1 <= N <= the
   decoder's limit, then N bytes: one JSON object in UTF-8 (a lone surrogate
   passes through, as a conversation's text may hold one). A length over the
   limit is a `ProtocolError` (`too_large`) as soon as its 4 bytes are in,
   before any of the body is buffered.
2. **Messages.** Each object has a `kind`, one of `KINDS`, and exactly the
   fields that kind's row lists, each of its type; anything else is a
   `ProtocolError` (`malformed`). After an error the decoder stays failed.
3. **Turns.** The child says `ready` once, when it has started. Then the parent
   sends one `compile` or `render` at a time and the child answers each with
   exactly one `done` (the rendered text; "" for a compile), `refused` (one
   line saying why) or `unknown` (a render of a template it does not hold:
   compile it, then render again).
4. `encode` is given our own messages: one over the limit is our mistake, a
   `FrameTooLargeError` (nothing is sent).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from boxmaker.core.errors import ErrorCode, ProtocolError
from boxmaker.core.wire.frames import FrameDecoder, encode_frame


@dataclass(frozen=True, slots=True)
class Compile:
    id: int
    source: str
    max_steps: int
    max_seconds: float
    max_output: int


@dataclass(frozen=True, slots=True)
class Render:
    id: int
    messages: list[Any]
    tools: list[Any] | None
    add_generation_prompt: bool
    bos_token: str
    eos_token: str
    now: str  # ISO 8601, as datetime.isoformat writes it
    extra: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Ready:
    pass


@dataclass(frozen=True, slots=True)
class Done:
    text: str


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str


@dataclass(frozen=True, slots=True)
class Unknown:
    pass


Message = Compile | Render | Ready | Done | Refused | Unknown

_NUMBER = (int, float)

# Rule 2: each kind, its message, and each field's accepted JSON types
KINDS: dict[str, tuple[type[Message], dict[str, tuple[type, ...]]]] = {
    "compile": (
        Compile,
        {
            "id": (int,),
            "source": (str,),
            "max_steps": (int,),
            "max_seconds": _NUMBER,
            "max_output": (int,),
        },
    ),
    "render": (
        Render,
        {
            "id": (int,),
            "messages": (list,),
            "tools": (list, type(None)),
            "add_generation_prompt": (bool,),
            "bos_token": (str,),
            "eos_token": (str,),
            "now": (str,),
            "extra": (dict,),
        },
    ),
    "ready": (Ready, {}),
    "done": (Done, {"text": (str,)}),
    "refused": (Refused, {"reason": (str,)}),
    "unknown": (Unknown, {}),
}
_KIND_OF = {message: kind for kind, (message, _) in KINDS.items()}


def encode(message: Message, limit: int) -> bytes:
    """`message` as one frame (rule 1); FrameTooLargeError if it is over `limit`."""
    body = {"kind": _KIND_OF[type(message)]}
    body.update({f.name: getattr(message, f.name) for f in fields(message)})
    payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", "surrogatepass"
    )
    return encode_frame(payload, limit)


def decode(payload: bytes) -> Message:
    """One frame's body as its message (rule 2); ProtocolError if it is not one."""
    try:
        body = json.loads(payload.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(ErrorCode.MALFORMED, "a template frame is not JSON") from exc
    if not isinstance(body, dict):
        raise ProtocolError(ErrorCode.MALFORMED, "a template frame is not an object")
    row = KINDS.get(body.pop("kind", None)) if isinstance(body.get("kind"), str) else None
    if row is None:
        raise ProtocolError(ErrorCode.MALFORMED, "a template frame has no known kind")
    message, types = row
    if set(body) != set(types):
        raise ProtocolError(ErrorCode.MALFORMED, "a template frame has other fields")
    for name, accepted in types.items():
        value = body[name]
        if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
            raise ProtocolError(ErrorCode.MALFORMED, f"a template frame's {name} is mistyped")
    return message(**body)


class Decoder:
    """Feed it bytes; it returns whole messages or raises the one protocol error (the
    frames are `core.wire.frames`', with this link's limit)."""

    def __init__(self, limit: int) -> None:
        self._frames = FrameDecoder(limit)
        self._error: ProtocolError | None = None

    @property
    def idle(self) -> bool:
        """True when no partial frame is buffered."""
        return self._frames.idle

    def feed(self, data: bytes) -> list[Message]:
        if self._error is not None:
            raise self._error
        messages: list[Message] = []
        for payload in self._frames.feed(data):
            try:
                messages.append(decode(payload))
            except ProtocolError as exc:
                self._error = exc
                raise
        return messages
