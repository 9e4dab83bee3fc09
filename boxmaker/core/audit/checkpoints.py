"""Audit checkpoints: a record's seq and hash, held outside the box. Pure; no I/O.

A hash chain proves that nothing inside it changed, but not that nothing was cut
off its end: whoever can write the log can drop its last records, or rewrite them
and compute the chain again. A checkpoint pins the chain's head at a moment
(Certificate Transparency's signed tree heads, journald's sealing): kept where
the box cannot reach it, it shows any later log that lacks that record, or holds
a different one at its seq. The sealed lines of a checkpoint file are a chain of
their own, so the file cannot lose a line unseen either.

    Checkpoint: (seq, head, time): the seq of the log's last record, the sha256 of
        its line (the chain's head), and when it was taken (None for a head
        named on the command line, `--expect-head SEQ:HASH`).
    Line: `SEQ:HEAD TIME`, one per checkpoint, in a checkpoint file kept outside
        `<home>`. Blank lines and lines starting with `#` are the owner's notes
        and are skipped.
    Sealed line (v2): `SEQ:HEAD TIME prev=<64 hex> key=<16 hex> sig=<88 base64>`.
        `sig` is an Ed25519 signature over `signed_payload`: the bytes
        `boxmaker audit checkpoint v2\n`, then the line up to (not including)
        ` key=`. `key` names the signing key (bxctl/seal.py); it is not signed.
    The chain: `prev` is the sha256 (`line_hash`) of the ASCII bytes of the
        previous sealed line of the same file, without its newline; the first
        sealed line's prev is GENESIS (64 zeros). Plain lines are outside the
        chain. A sealed line whose prev is not the hash of the sealed line before
        it breaks the chain at that line: a line was deleted, moved, inserted or
        edited there. Nothing in the chain shows its own end: dropping the last
        lines leaves a good chain, which only a head seen before can show
        (`rollback_problem`).
    v1 sealed lines (`SEQ:HEAD TIME key=.. sig=..`, signed alone over
        `boxmaker audit checkpoint v1\n` and `SEQ:HEAD TIME`) are refused: a
        chain cannot vouch for them, so any of them could be deleted unseen.
    Head file: the newest checkpoint line that `bxctl audit verify` accepted, a
        `#` note and that line (`encode_head`), kept by the owner outside `<home>`.
    checkpoint.json: brokerd's own copy of the last checkpoint it emitted,
        `{"seq":..,"head":..,"time":..}`, beside the log.
    A checkpoint holds against a log when a record that verified has its seq and
        its line hashes to its head. Otherwise the record is missing (the log
        ends before it) or differs (something else stands at that seq): the log
        was cut or rewritten after the checkpoint was taken.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import orjson

from boxmaker.core.hashes import ZERO_HASH, check_hash, sha256_hex

SIGNED_PREFIX = b"boxmaker audit checkpoint v2\n"  # domain separation for the signature
GENESIS = ZERO_HASH  # the prev of a file's first sealed line
_HASH = re.compile(r"[0-9a-f]{64}")
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
    """What a sealed line adds: the hash of the sealed line before it (GENESIS for the
    first), the signing key's id, and the signature, base64."""

    prev: str
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
    return f"{checkpoint.text} prev={seal.prev} key={seal.key_id} sig={seal.sig}"


def parse_line(text: str) -> CheckpointLine | None:
    """A checkpoint file's line; None for a blank line or a note; ValueError if neither."""
    stripped = text.strip()
    if not stripped or stripped.startswith("#"):
        return None
    words = stripped.split(" ")
    if len(words) == 4 and words[2].startswith("key=") and words[3].startswith("sig="):
        raise ValueError(
            "a v1 sealed line, signed alone (not chained, so it could be deleted unseen):"
            " make it a note (put `# ` before it) and take a new sealed checkpoint with"
            " `bxctl audit checkpoint --append FILE --key KEYFILE`"
        )
    if len(words) not in (2, 5):
        raise ValueError(
            "not a checkpoint line: expected `SEQ:HEAD TIME [prev=HASH key=ID sig=SIG]`"
        )
    head = parse_head(words[0])
    check_timestamp = _timestamps()
    try:
        time = check_timestamp(words[1])
    except ValueError as exc:
        raise ValueError(f"not a timestamp: {words[1]!r}") from exc
    checkpoint = Checkpoint(head.seq, head.head, time)
    if len(words) == 2:
        return CheckpointLine(checkpoint, None)
    return CheckpointLine(checkpoint, _seal(words[2:]))


def _seal(words: list[str]) -> Seal:
    """A sealed line's `prev=.. key=.. sig=..`; ValueError naming the word that is wrong."""
    prev, key, sig = (w.partition("=") for w in words)
    if prev[:2] != ("prev", "=") or _HASH.fullmatch(prev[2]) is None:
        raise ValueError("not a prev: expected prev= and 64 lowercase hex")
    if key[:2] != ("key", "=") or _KEY_ID.fullmatch(key[2]) is None:
        raise ValueError("not a key id: expected key= and 16 lowercase hex")
    if sig[:2] != ("sig", "=") or _SIG.fullmatch(sig[2]) is None:
        raise ValueError("not a signature: expected sig= and 88 characters of base64")
    return Seal(prev[2], key[2], sig[2])


def signed_payload(checkpoint: Checkpoint, prev: str) -> bytes:
    """The bytes a sealed line's signature covers: a fixed prefix, then `SEQ:HEAD TIME
    prev=HASH`."""
    return SIGNED_PREFIX + f"{checkpoint.text} prev={prev}".encode("ascii")


def line_hash(line: CheckpointLine) -> str:
    """The sha256 of the line's ASCII bytes, as the next sealed line's prev names it."""
    return sha256_hex(format_line(line.checkpoint, line.seal).encode("ascii"))


def chain_head(lines: Iterable[CheckpointLine]) -> str:
    """The prev a sealed line appended after `lines` must carry."""
    head = GENESIS
    for line in lines:
        if line.seal is not None:
            head = line_hash(line)
    return head


def chain_problems(lines: Iterable[tuple[int, CheckpointLine]]) -> Iterator[tuple[int, str]]:
    """(line number, what is wrong) for each sealed line of one file, in order, whose
    prev is not the hash of the sealed line before it. The chain goes on from the
    broken line, so one deleted line is one problem, named at the line after it."""
    expected = GENESIS
    for number, line in lines:
        if line.seal is None:
            continue
        seq, prev = line.checkpoint.seq, line.seal.prev
        if prev != expected and expected == GENESIS:
            yield (
                number,
                (
                    f"seq {seq}: the first sealed line does not start the chain (its prev is"
                    " not the genesis value): the sealed lines before it were deleted"
                ),
            )
        elif prev != expected:
            yield (
                number,
                (
                    f"seq {seq}: breaks the chain: its prev is {prev}, but the sealed line"
                    f" before it hashes to {expected}: a line was deleted, moved, inserted"
                    " or edited here"
                ),
            )
        expected = line_hash(line)


def rollback_problem(newest: Checkpoint, seen: Checkpoint, source: str) -> str | None:
    """What is wrong when the newest checkpoint of the files named is older than a head
    seen before (`source` says where), or None."""
    if newest.seq >= seen.seq:
        return None
    return (
        f"rolled back: the newest checkpoint is seq {newest.seq}, older than seq"
        f" {seen.seq} seen before ({source})"
    )


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


HEAD_NOTE = "# the newest audit checkpoint bxctl audit verify accepted (docs/audit-checkpoints.md)"


def encode_head(line: CheckpointLine) -> bytes:
    """The head file's bytes: a note, then the line."""
    return f"{HEAD_NOTE}\n{format_line(line.checkpoint, line.seal)}\n".encode("ascii")


def decode_head(data: bytes) -> CheckpointLine:
    """The head file's line; ValueError if it does not hold exactly one checkpoint line."""
    try:
        lines = [parse_line(text) for text in data.decode("ascii").splitlines()]
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not a head file ({exc})") from exc
    found = [line for line in lines if line is not None]
    if len(found) != 1:
        raise ValueError(f"not a head file (it holds {len(found)} checkpoint lines, not 1)")
    return found[0]


def _timestamps() -> Callable[[str], str]:
    """`check_timestamp`, imported only when needed: its module imports pydantic, which
    a plain `bxctl audit verify` does without (bxctl/audit_cmd.py)."""
    from boxmaker.core.timestamps import check_timestamp

    return check_timestamp
