"""Where gatewayd stands in the owner's channel, kept across a restart. Pure; no I/O.

Only the owner's posts that became turns count here (`turns.is_turn`); the
in-run bookkeeping of every event is `mm_delivery`'s. The rules:

1. **Taken before the answer.** A post is *taken* when it is handed to its
   turn, before the answer post is made: the mark's `newest_ms` moves up to the
   post's `create_at` (never back) and its id joins `recent` and `in_flight`.
   The mark is on disk before the turn starts, so a crash can never lead to a
   second answer; at worst a message is cut off, and rule 5 says so.
2. **`recent` covers the margin**: it holds the taken posts created no more than
   `margin_ms` before `newest_ms` (the window a catch-up looks back over,
   `mm_delivery` rule 3), at most `MAX_RECENT`, the oldest dropped first.
3. **What a restart answers** (`Resume.answers`): a post that is not in the
   loaded mark's `recent`, was created no more than `margin_ms` before its
   `newest_ms` (older ones were all seen by the last run), and is not older
   than `floor_ms`, the start's clock less `catch_up_s` (rule 4).
4. **The catch-up starts** at the later of `newest_ms` and the floor
   (`Resume.since_ms`); with no mark (none on disk, or a damaged one) there is
   no catch-up: the stream starts from now, as on a first start.
5. **A turn cut off** (gatewayd killed or stopped while it ran) stays in
   `in_flight`. The next start clears it from the mark, saves that, and only
   then tells the owner in its thread: once, and never running it again (a
   turn may have run tools). A turn that ends in any other way (answered,
   refused, loopd unreachable) leaves `in_flight` (`finished`).
6. **The file** is one JSON object, `{"version": 1, "newest_ms": <int>,
   "recent": {<post id>: <create_at>}, "in_flight": {<post id>: <thread
   root id>}}`, ids as Mattermost's (26 of a-z and 0-9). Anything else, or more
   than `MAX_BYTES`, is damaged (`WatermarkError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from boxmaker.core.errors import DamagedError

MAX_RECENT = 1000
MAX_BYTES = 256 * 1024
VERSION = 1

_Id = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]{26}$")]
_Ms = Annotated[int, Field(ge=0)]


class WatermarkError(DamagedError, ValueError):
    """A watermark file that cannot be read as one (rule 6)."""


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    version: Literal[1]
    newest_ms: _Ms
    recent: dict[_Id, _Ms] = Field(max_length=MAX_RECENT)
    in_flight: dict[_Id, _Id] = Field(max_length=MAX_RECENT)


@dataclass(frozen=True)
class Watermark:
    """The newest post taken, the ones taken near it, and the turns not yet finished."""

    newest_ms: int = 0
    recent: Mapping[str, int] = field(default_factory=dict)  # post id -> create_at
    in_flight: Mapping[str, str] = field(default_factory=dict)  # post id -> thread root

    def taken(self, post_id: str, create_at: int, root_id: str, margin_ms: int) -> Watermark:
        """Rules 1 and 2: the mark once `post_id` is handed to its turn."""
        newest = max(self.newest_ms, create_at)
        recent = {**self.recent, post_id: create_at}
        kept = sorted(
            ((at, pid) for pid, at in recent.items() if at >= newest - margin_ms), reverse=True
        )[:MAX_RECENT]
        in_flight = {**self.in_flight, post_id: root_id}
        return Watermark(newest, {pid: at for at, pid in kept}, in_flight)

    def finished(self, post_id: str) -> Watermark:
        """Rule 5: the turn of `post_id` ended (whatever its answer said)."""
        in_flight = {pid: root for pid, root in self.in_flight.items() if pid != post_id}
        return Watermark(self.newest_ms, self.recent, in_flight)

    def resumed(self) -> Watermark:
        """Rule 5: the mark a start saves before telling the owner of its cut-off turns."""
        return Watermark(self.newest_ms, self.recent, {})


@dataclass(frozen=True)
class Resume:
    """What one start answers of what it catches up (rules 3 and 4)."""

    mark: Watermark | None
    floor_ms: int
    margin_ms: int

    @classmethod
    def after(
        cls, mark: Watermark | None, *, now_ms: int, catch_up_s: int, margin_ms: int
    ) -> Resume:
        return cls(mark, now_ms - catch_up_s * 1000, margin_ms)

    @property
    def since_ms(self) -> int | None:
        """Where the first catch-up starts; None: no catch-up, start from now."""
        if self.mark is None:
            return None
        return max(self.mark.newest_ms, self.floor_ms, 0)

    def answers(self, post_id: str, create_at: int) -> bool:
        """Rule 3: whether this start may take the post (never one taken before)."""
        if self.mark is None:
            return True  # no catch-up: the stream delivers only what comes after the start
        if post_id in self.mark.recent or create_at < self.floor_ms:
            return False
        return create_at >= self.mark.newest_ms - self.margin_ms


def encode_watermark(mark: Watermark) -> bytes:
    """Rule 6's object, keys sorted, one line."""
    body = {
        "version": VERSION,
        "newest_ms": mark.newest_ms,
        "recent": dict(mark.recent),
        "in_flight": dict(mark.in_flight),
    }
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)


def decode_watermark(data: bytes) -> Watermark:
    """Rule 6; `WatermarkError` saying what is wrong."""
    if len(data) > MAX_BYTES:
        raise WatermarkError(f"more than {MAX_BYTES} bytes")
    try:
        parsed = _File.model_validate(orjson.loads(data))
    except orjson.JSONDecodeError as exc:
        raise WatermarkError(f"not JSON: {exc}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the object"
        raise WatermarkError(f"{where}: {first['msg']}") from exc
    return Watermark(parsed.newest_ms, dict(parsed.recent), dict(parsed.in_flight))
