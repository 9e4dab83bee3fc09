"""Mattermost's objects and WebSocket events as gatewayd reads them. Pure; no I/O.

What the server sends is parsed here into small frozen values, and nothing else
in gatewayd reads Mattermost's JSON:

- REST answers: `User` (users/me), `Channel` (channels/direct), `Post`,
  `Reaction`, and a post list (`{"order": [...], "posts": {id: post}}`, the
  answer of `channels/{id}/posts`), read by `posts_from_list` oldest first.
  Fields gatewayd does not use are ignored (the server adds fields over
  versions); a field it uses with the wrong type is refused.
- WebSocket frames (`decode_event`): one JSON object per text frame,
  `{"event": name, "data": {...}, "broadcast": {...}, "seq": n}`. `posted` and
  `post_edited` carry the post as a JSON string in `data.post`; `reaction_added`
  carries the reaction as a JSON string in `data.reaction` and the channel in
  `broadcast.channel_id`. `hello` (seq 0, the first frame of an authenticated
  connection) names the bot in `broadcast.user_id`. A reply to an action the
  client sent (`{"status": ..., "seq_reply": n}`) and every other event are
  `None`: ignored. Anything that is not such an object is `MattermostError`.

The exception tree (subclasses of core's `BoxmakerError`):

    MattermostError        a request failed or the server's answer is unreadable:
    │                      one line naming the endpoint and the status, never the token
    └── MattermostAuthError  the server refused the token (401): not retried
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from boxmaker.core.errors import BoxmakerError


class MattermostError(BoxmakerError):
    """A request to Mattermost failed; `status` is the HTTP status (None: no answer)."""

    def __init__(self, endpoint: str, status: int | None, what: str) -> None:
        shown = "no answer" if status is None else f"status {status}"
        super().__init__(f"mattermost: {endpoint}: {shown}: {what}")
        self.endpoint = endpoint
        self.status = status


class MattermostAuthError(MattermostError):
    """The server refused the bot token (401); retrying cannot help."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


_M = TypeVar("_M", bound=_Model)


class User(_Model):
    id: str
    username: str = ""
    is_bot: bool = False


class Channel(_Model):
    id: str
    name: str = ""
    type: str = ""


class Post(_Model):
    id: str
    channel_id: str
    user_id: str
    message: str = ""
    root_id: str = ""
    type: str = ""
    props: dict[str, Any] = Field(default_factory=dict)
    create_at: int = 0
    update_at: int = 0
    edit_at: int = 0
    delete_at: int = 0
    has_reactions: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)  # embeds, images: the server's reading
    pending_post_id: str = ""


class Reaction(_Model):
    user_id: str
    post_id: str
    emoji_name: str
    create_at: int = 0


@dataclass(frozen=True)
class Hello:
    """The first frame of an authenticated connection."""

    user_id: str
    server_version: str


@dataclass(frozen=True)
class Posted:
    """A new post. `replayed`: found by the catch-up after a drop, not on the socket."""

    post: Post
    replayed: bool = False


@dataclass(frozen=True)
class PostEdited:
    """A post's message or props changed (the latest version only)."""

    post: Post
    replayed: bool = False


@dataclass(frozen=True)
class ReactionAdded:
    reaction: Reaction
    channel_id: str
    replayed: bool = False


Event = Posted | PostEdited | ReactionAdded


@dataclass(frozen=True)
class Frame:
    """One decoded WebSocket frame: its `seq` (None for action replies) and event."""

    seq: int | None
    event: Hello | Event | None


def parse(model: type[_M], value: object, endpoint: str, status: int | None = None) -> _M:
    """`value` (decoded JSON) as `model`; MattermostError naming `endpoint` if it is not one."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        what = f"unreadable {model.__name__.lower()} ({exc.error_count()} problems)"
        raise MattermostError(endpoint, status, what) from exc


def posts_from_list(value: object, endpoint: str) -> list[Post]:
    """The posts of a post list, oldest first: by `create_at`, and in the reverse
    of the server's `order` (newest first) where two share a millisecond."""
    if not isinstance(value, dict):
        raise MattermostError(endpoint, 200, "unreadable post list")
    posts, order = value.get("posts") or {}, value.get("order") or []
    if not isinstance(posts, dict) or not isinstance(order, list):
        raise MattermostError(endpoint, 200, "unreadable post list")
    found = {key: parse(Post, item, endpoint, 200) for key, item in posts.items()}
    rank = {post_id: i for i, post_id in enumerate(reversed(order)) if post_id in found}
    return sorted(found.values(), key=lambda post: (post.create_at, rank.get(post.id, -1)))


def _json(text: str | bytes, what: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise MattermostError("websocket", None, f"{what} is not JSON") from exc


def decode_event(text: str | bytes) -> Frame:
    """One text frame of the WebSocket as a `Frame`; MattermostError if it is not one."""
    frame = _json(text, "a frame")
    if not isinstance(frame, dict):
        raise MattermostError("websocket", None, "a frame is not a JSON object")
    if "seq_reply" in frame:
        return Frame(None, None)
    seq, name, data = frame.get("seq"), frame.get("event"), frame.get("data") or {}
    broadcast = frame.get("broadcast") or {}
    if not isinstance(seq, int) or isinstance(seq, bool) or not isinstance(name, str):
        raise MattermostError("websocket", None, "an event without seq or name")
    if not isinstance(data, dict) or not isinstance(broadcast, dict):
        raise MattermostError("websocket", None, f"event {name!r} with unreadable data")
    return Frame(seq, _event(name, data, broadcast))


def _event(name: str, data: dict[str, Any], broadcast: dict[str, Any]) -> Hello | Event | None:
    endpoint = f"websocket {name}"
    if name == "hello":
        user_id, version = broadcast.get("user_id", ""), data.get("server_version", "")
        if not isinstance(user_id, str) or not isinstance(version, str):
            raise MattermostError(endpoint, None, "unreadable hello")
        return Hello(user_id, version)
    if name in ("posted", "post_edited"):
        post = parse(Post, _embedded(data, "post", endpoint), endpoint)
        return Posted(post) if name == "posted" else PostEdited(post)
    if name == "reaction_added":
        reaction = parse(Reaction, _embedded(data, "reaction", endpoint), endpoint)
        channel_id = broadcast.get("channel_id", "")
        if not isinstance(channel_id, str):
            raise MattermostError(endpoint, None, "unreadable broadcast")
        return ReactionAdded(reaction, channel_id)
    return None


def _embedded(data: dict[str, Any], key: str, endpoint: str) -> Any:
    """`data[key]`, which the server sends as a JSON string holding an object."""
    text = data.get(key)
    if not isinstance(text, str):
        raise MattermostError(endpoint, None, f"data.{key} is not a JSON string")
    return _json(text, f"data.{key}")
