"""Audit checkpoints: a record's seq and hash, held outside the box. Pure; no I/O.

A hash chain proves that nothing inside it changed, but not that nothing was cut
off its end: whoever can write the log can drop its last records, or rewrite them
and compute the chain again. A checkpoint pins the chain's head at a moment
(Certificate Transparency's signed tree heads, journald's sealing): kept where
the box cannot reach it, it shows any later log that lacks that record, or holds
a different one at its seq.

    Checkpoint: (seq, head, time): the seq of the log's last record, the sha256 of
        its line (the chain's head), and when it was taken (None for a head
        named on the command line, `--expect-head SEQ:HASH`).
    Line: `SEQ:HEAD TIME`, one per checkpoint, in a checkpoint file kept outside
        `<home>`; a sealed one carries `key=<key id> sig=<base64>` after it: an
        Ed25519 signature over `signed_payload`. Blank lines and lines starting
        with `#` are the owner's notes and are skipped.
    checkpoint.json: brokerd's own copy of the last checkpoint it emitted,
        `{"seq":..,"head":..,"time":..}`, beside the log.
    A checkpoint holds against a log when a record that verified has its seq and
        its line hashes to its head. Otherwise the record is missing (the log
        ends before it) or differs (something else stands at that seq): the log
        was cut or rewritten after the checkpoint was taken.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import orjson

from boxmaker.core.hashes import check_hash

SIGNED_PREFIX = b"boxmaker audit checkpoint v1\n"  # domain separation for the signature
_HEAD = re.compile(r"(0|[1-9][0-9]{0,19}):([0-9a-f]{64})")
_KEY_ID = re.compile(r"[0-9a-f]{16}")
_SIG = re.compile(r"[A-Za-z0-9+/]{86}==")  # 64 bytes of Ed25519 signature, base64


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A record the log must keep: its seq, its line's sha256, when it was taken."""

    seq: int
    head: str
    time: str | None = None

    @property
    def text(self) -> str:
        """`SEQ:HEAD TIME` (`SEQ:HEAD` without a time): the line, and what is signed."""
        pinned = f"{self.seq}:{self.head}"
        return pinned if self.time is None else f"{pinned} {self.time}"


@dataclass(frozen=True, slots=True)
class Seal:
    """A checkpoint line's signature: the signing key's id and the signature, base64."""

    key_id: str
    sig: str


@dataclass(frozen=True, slots=True)
class CheckpointLine:
    checkpoint: Checkpoint
    seal: Seal | None


def parse_head(text: str) -> Checkpoint:
    """`SEQ:HASH` as `--expect-head` takes it; ValueError naming what is wrong."""
    match = _HEAD.fullmatch(text)
    if match is None:
        raise ValueError(f"not SEQ:HASH (a seq, a colon, 64 lowercase hex): {text!r}")
    return Checkpoint(int(match[1]), match[2])


def format_line(checkpoint: Checkpoint, seal: Seal | None = None) -> str:
    """The checkpoint file's line for `checkpoint`, sealed or not."""
    if seal is None:
        return checkpoint.text
    return f"{checkpoint.text} key={seal.key_id} sig={seal.sig}"


def parse_line(text: str) -> CheckpointLine | None:
    """A checkpoint file's line; None for a blank line or a note; ValueError if neither."""
    stripped = text.strip()
    if not stripped or stripped.startswith("#"):
        return None
    words = stripped.split(" ")
    if len(words) not in (2, 4):
        raise ValueError("not a checkpoint line: expected `SEQ:HEAD TIME [key=ID sig=SIG]`")
    head = parse_head(words[0])
    check_timestamp = _timestamps()
    try:
        time = check_timestamp(words[1])
    except ValueError as exc:
        raise ValueError(f"not a timestamp: {words[1]!r}") from exc
    checkpoint = Checkpoint(head.seq, head.head, time)
    if len(words) == 2:
        return CheckpointLine(checkpoint, None)
    key, sig = words[2].removeprefix("key="), words[3].removeprefix("sig=")
    if not words[2].startswith("key=") or _KEY_ID.fullmatch(key) is None:
        raise ValueError("not a key id: expected key= and 16 lowercase hex")
    if not words[3].startswith("sig=") or _SIG.fullmatch(sig) is None:
        raise ValueError("not a signature: expected sig= and 88 characters of base64")
    return CheckpointLine(checkpoint, Seal(key, sig))


def signed_payload(checkpoint: Checkpoint) -> bytes:
    """The bytes a sealed line's signature covers: a fixed prefix, then `SEQ:HEAD TIME`."""
    return SIGNED_PREFIX + checkpoint.text.encode("ascii")


def problem(checkpoint: Checkpoint, heads: Mapping[int, str], last_seq: int | None) -> str | None:
    """What is wrong with the log at `checkpoint`, or None if it holds.

    `heads` maps seqs to the hashes of the records that verified (at least those
    of the checkpoints asked about); `last_seq` is the seq of the log's last
    record (None if it has none).
    """
    found = heads.get(checkpoint.seq)
    if found == checkpoint.head:
        return None
    if found is not None:
        return (
            f"record {checkpoint.seq} differs: its hash is {found},"
            f" the checkpoint says {checkpoint.head}"
        )
    if last_seq is None:
        return f"record {checkpoint.seq} is missing: the log has no records"
    if last_seq < checkpoint.seq:
        return f"record {checkpoint.seq} is missing: the log ends at seq {last_seq}"
    return f"record {checkpoint.seq} is missing: no record that verified has that seq"


def encode_state(checkpoint: Checkpoint) -> bytes:
    """checkpoint.json's bytes (with a newline)."""
    state = {"seq": checkpoint.seq, "head": checkpoint.head, "time": checkpoint.time}
    return orjson.dumps(state) + b"\n"


def decode_state(data: bytes) -> Checkpoint:
    """checkpoint.json's checkpoint; ValueError if it is not one."""
    try:
        state = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(state, dict) or set(state) != {"seq", "head", "time"}:
        raise ValueError('expected {"seq":..,"head":..,"time":..}')
    seq, head, time = state["seq"], state["head"], state["time"]
    if type(seq) is not int or not 0 <= seq < 2**64:
        raise ValueError("seq is not a seq")
    if not isinstance(head, str) or not isinstance(time, str):
        raise ValueError("head and time are strings")
    return Checkpoint(seq, check_hash(head), _timestamps()(time))


def _timestamps() -> Callable[[str], str]:
    """`check_timestamp`, imported only when needed: its module imports pydantic, which
    a plain `bxctl audit verify` does without (bxctl/audit_cmd.py)."""
    from boxmaker.core.timestamps import check_timestamp

    return check_timestamp
