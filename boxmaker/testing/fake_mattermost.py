"""A stateful fake of the Mattermost server: users, direct channels, posts, reactions.

Built from the API reference (REST v4 and the WebSocket) for gatewayd's tests:
Mattermost itself cannot run here, so this stands in for it and behaves like it,
state and all (design.md section 8). The state and the test controls are this
module; the HTTP and WebSocket handlers are `fake_mattermost_web`. I/O: none
here; `fake_mattermost_web.running(fake)` serves it on 127.0.0.1 from a thread.

What it models, as the server does:

- Three users: the bot (`bot`), the owner (`owner`) and someone else (`other`).
  Only the bot's token is accepted (`Authorization: Bearer` or `Token`);
  anything else is 401 with Mattermost's error body.
- Direct channels: `POST /channels/direct` makes (or returns) the channel of
  two users, named `<id1>__<id2>` with the ids sorted; its id is derived from
  that name, so it is the same in every run. The bot reads and posts only in
  channels it belongs to (403 otherwise).
- Posts with `create_at`, `update_at`, `edit_at`, `delete_at` from the fake's
  clock (milliseconds). `pending_post_id` de-duplication as the server's
  `deduplicateCreatePost`: a second create with the same pending id within 30 s
  answers the first post (201) and posts nothing; the pending id is echoed in
  the create answer and the `posted` event, not stored (the server does not
  store it either). `PUT /posts/{id}/patch` replaces the message and, when
  given, all the props; only the author may patch. `GET
  /channels/{id}/posts?since=` answers every post whose `update_at` is after
  `since` (newest first, at most 1000), else a page (`page`, `per_page`).
- Reactions: one per (user, post, emoji); adding one sets the post's
  `has_reactions` and moves its `update_at`, so `since` finds it.
- The WebSocket (`fake_mattermost_web`): a token in the header makes the
  connection authenticated at once; otherwise it may send
  `authentication_challenge` and is cut off (closed without `hello`) after
  `auth_cutoff_s` (5 s on the server). `hello` comes first, with seq 0; then
  `posted`, `post_edited` and `reaction_added` for the channels the bot belongs
  to, with seq counting up per connection. Actions the client sends are
  answered `{"status": "OK", "seq_reply": n}`.

Test controls: `post_as`, `edit_as`, `react_as` (as any user, through the same
code as REST), `drop_websockets()` (abort every socket mid-stream),
`restart()` (drop, and forget what lives in the server's memory: socket state
and the pending-post-id cache), `fail_next(n, status)` (429 with Retry-After,
or 5xx, before the request is handled or, `after=True`, after it was), the
record of every REST call (`calls`), and the FETCH RECORD: for every post
created or patched, what the real server and its clients would fetch
(`boxmaker.testing.fetch_simulator.fetches`), as `fetched[post_id]` (latest
version) and `fetch_history`, with each version's text in `message_history`.

Not modelled: teams and public channels, files, threads' counts, deleting,
editing by REST `PUT /posts/{id}` (only patch), rate limits other than those
injected, the server's own link previews (the fetch record says what they
would fetch), the token in a query string or cookie, and the in-flight state of
de-duplication (a create here is atomic, so the server's "pending" 500 never
happens).
"""

from __future__ import annotations

import hashlib
import importlib
import threading
import time
from base64 import b32encode
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from boxmaker.core.errors import BoxmakerError

BOT_TOKEN = "fake-bot-token-0123456789"  # noqa: S105  (a fake's token)
PENDING_TTL_MS = 30_000  # the server's PendingPostIDsCacheTTL
MAX_MESSAGE = 16_383  # runes (PostMessageMaxRunesV2)
SINCE_LIMIT = 1000


def make_id(*parts: str) -> str:
    """A Mattermost-shaped id (26 lowercase base32 characters) derived from `parts`."""
    digest = hashlib.sha256("\0".join(parts).encode()).digest()
    return b32encode(digest).decode().lower()[:26]


class ApiError(BoxmakerError):
    """An error answer: status and Mattermost's error id."""

    def __init__(self, status: int, error_id: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_id = error_id
        self.message = message

    def body(self) -> dict[str, Any]:
        return {
            "id": self.error_id,
            "message": self.message,
            "detailed_error": "",
            "request_id": "",
            "status_code": self.status,
        }


@dataclass(frozen=True)
class FakeUser:
    id: str
    username: str
    is_bot: bool = False

    def json(self) -> dict[str, Any]:
        return {"id": self.id, "username": self.username, "is_bot": self.is_bot, "roles": ""}


@dataclass(frozen=True)
class RestCall:
    """One REST request as the fake saw it (the token itself is never kept)."""

    method: str
    path: str
    query: dict[str, str]
    status: int
    authorized: bool
    pending_post_id: str | None = None


@dataclass
class Failure:
    status: int
    retry_after: float | None
    after: bool


@dataclass
class Channel:
    id: str
    name: str
    members: tuple[str, str]

    def json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "type": "D", "display_name": "", "team_id": ""}


@dataclass
class Broadcast:
    """An event to send to the bot's sockets (seq is added per connection)."""

    event: str
    data: dict[str, Any]
    channel_id: str = ""
    user_id: str = ""

    def frame(self) -> dict[str, Any]:
        broadcast = {
            "omit_users": None,
            "user_id": self.user_id,
            "channel_id": self.channel_id,
            "team_id": "",
            "connection_id": "",
        }
        return {"event": self.event, "data": self.data, "broadcast": broadcast}


class Sockets(Protocol):
    """What the fake asks of its web face (`fake_mattermost_web.Server`) while one serves
    it: the WebSocket events to send, and dropping every socket."""

    def broadcast(self, broadcast: Broadcast) -> None: ...

    def drop_all(self) -> None: ...


@dataclass
class FakeMattermost:
    """The server's state, its test controls and its records. Thread-safe."""

    bot_token: str = BOT_TOKEN
    clock: Callable[[], int] = field(default=lambda: time.time_ns() // 1_000_000)
    auth_cutoff_s: float = 5.0
    previews: bool = True

    def __post_init__(self) -> None:
        self.bot = FakeUser(make_id("user", "bot"), "boxmaker", is_bot=True)
        self.owner = FakeUser(make_id("user", "owner"), "kyle")
        self.other = FakeUser(make_id("user", "other"), "mallory")
        self.users = {user.id: user for user in (self.bot, self.owner, self.other)}
        self.lock = threading.RLock()
        self.channels: dict[str, Channel] = {}
        self.posts: dict[str, dict[str, Any]] = {}
        self.reactions: dict[str, list[dict[str, Any]]] = {}
        self.calls: list[RestCall] = []
        self.fetched: dict[str, list[str]] = {}
        self.fetch_history: list[tuple[str, list[str]]] = []
        self.message_history: list[tuple[str, str]] = []  # (post id, message) per version
        self.failures: deque[Failure] = deque()
        self.pending: dict[str, tuple[str, int]] = {}  # pending id -> (post id, when)
        self.ws_accepted = 0  # connections that got `hello`
        self.ws_cut_off = 0  # connections closed for want of authentication
        self.server: Sockets | None = None  # its web face while one serves it
        self._serial = 0

    # --- test controls -----------------------------------------------------------

    def direct(self, a: FakeUser | str, b: FakeUser | str) -> str:
        """The id of the direct channel of two users (made if needed)."""
        with self.lock:
            return self.make_direct(_uid(a), _uid(b)).id

    def post_as(
        self,
        user: FakeUser | str,
        channel_id: str,
        message: str,
        root_id: str | None = None,
        props: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A post by `user`, as if made in the webapp; the `posted` event follows."""
        body = {"channel_id": channel_id, "message": message, "root_id": root_id or ""}
        return self.create_post(_uid(user), {**body, "props": props or {}})

    def edit_as(
        self, user: FakeUser | str, post_id: str, message: str, props: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        patch: dict[str, Any] = {"message": message}
        if props is not None:
            patch["props"] = props
        return self.patch_post(_uid(user), post_id, patch)

    def react_as(self, user: FakeUser | str, post_id: str, emoji: str) -> dict[str, Any]:
        return self.add_reaction(_uid(user), post_id, emoji)

    def fail_next(
        self, n: int, status: int, *, retry_after: float | None = 1, after: bool = False
    ) -> None:
        """The next `n` REST requests answer `status`: before they are handled, or
        after (`after=True`: the work is done and the answer lost on the way)."""
        with self.lock:
            shown = retry_after if status == 429 else None
            self.failures.extend(Failure(status, shown, after) for _ in range(n))

    def drop_websockets(self) -> None:
        """Abort every open socket (no close frame), as a network drop does."""
        if self.server is not None:
            self.server.drop_all()

    def restart(self) -> None:
        """Drop every socket and forget what the server keeps only in memory."""
        self.drop_websockets()
        with self.lock:
            self.pending.clear()

    def calls_to(self, method: str, path: str) -> list[RestCall]:
        with self.lock:
            return [call for call in self.calls if (call.method, call.path) == (method, path)]

    # --- the model (REST handlers and controls both come here) -------------------

    def token_ok(self, header: str | None) -> bool:
        scheme, _, value = (header or "").partition(" ")
        return scheme.lower() in ("bearer", "token") and value.strip() == self.bot_token

    def now(self) -> int:
        return int(self.clock())

    def make_direct(self, a: str, b: str) -> Channel:
        if a not in self.users or b not in self.users:
            raise ApiError(400, "api.channel.create_direct_channel.invalid_user.app_error", "user")
        first, second = sorted((a, b))
        name = f"{first}__{second}"
        channel_id = make_id("channel", name)
        if channel_id not in self.channels:
            self.channels[channel_id] = Channel(channel_id, name, (first, second))
        return self.channels[channel_id]

    def member_channel(self, user_id: str, channel_id: str) -> Channel:
        channel = self.channels.get(channel_id)
        if channel is None:
            raise ApiError(404, "app.channel.get.existing.app_error", "no such channel")
        if user_id not in channel.members:
            raise ApiError(403, "api.context.permissions.app_error", "not a member")
        return channel

    def create_post(self, user_id: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            message, props = body.get("message", ""), body.get("props") or {}
            channel_id, root_id = body.get("channel_id", ""), body.get("root_id") or ""
            pending_id = body.get("pending_post_id") or ""
            if not isinstance(message, str) or not isinstance(props, dict):
                raise ApiError(400, "api.context.invalid_body_param.app_error", "post")
            channel = self.member_channel(user_id, channel_id)
            now = self.now()
            known = self.pending.get(pending_id) if pending_id else None
            if known is not None and now - known[1] < PENDING_TTL_MS:
                return {**self.posts[known[0]], "pending_post_id": pending_id}
            if root_id and self.posts.get(root_id, {}).get("channel_id") != channel.id:
                raise ApiError(400, "api.post.create_post.root_id.app_error", "root_id")
            if len(message) > MAX_MESSAGE:
                raise ApiError(400, "model.post.is_valid.message_length.app_error", "too long")
            self._serial += 1
            post_id = make_id("post", str(self._serial))
            post = {
                "id": post_id, "create_at": now, "update_at": now, "edit_at": 0,
                "delete_at": 0, "is_pinned": False, "user_id": user_id,
                "channel_id": channel.id, "root_id": root_id, "original_id": "",
                "message": message, "type": "", "props": dict(props), "hashtags": "",
                "pending_post_id": "", "reply_count": 0, "metadata": {},
            }  # fmt: skip
            self.posts[post_id] = post
            if pending_id:
                self.pending[pending_id] = (post_id, now)
            self._record_fetches(post)
            created = {**post, "pending_post_id": pending_id}
            sender = self.users[user_id].username
            data = {
                "channel_display_name": "",
                "channel_name": channel.name,
                "channel_type": "D",
                "post": orjson.dumps(created).decode(),
                "sender_name": f"@{sender}",
                "set_online": True,
                "team_id": "",
            }
            self._send(Broadcast("posted", data, channel_id=channel.id), channel)
            return created

    def get_post(self, user_id: str, post_id: str) -> dict[str, Any]:
        with self.lock:
            post = self.posts.get(post_id)
            if post is None or post["delete_at"]:
                raise ApiError(404, "app.post.get.app_error", "no such post")
            self.member_channel(user_id, post["channel_id"])
            return self._shown(post)

    def patch_post(self, user_id: str, post_id: str, patch: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            post = self.posts.get(post_id)
            if post is None or post["delete_at"]:
                raise ApiError(404, "app.post.get.app_error", "no such post")
            channel = self.member_channel(user_id, post["channel_id"])
            if post["user_id"] != user_id:
                raise ApiError(403, "api.context.permissions.app_error", "not the author")
            message, props = patch.get("message"), patch.get("props")
            if message is not None and not isinstance(message, str):
                raise ApiError(400, "api.context.invalid_body_param.app_error", "message")
            if props is not None and not isinstance(props, dict):
                raise ApiError(400, "api.context.invalid_body_param.app_error", "props")
            if message is not None:
                if len(message) > MAX_MESSAGE:
                    raise ApiError(400, "model.post.is_valid.message_length.app_error", "long")
                post["message"] = message
            if props is not None:
                post["props"] = dict(props)  # wholesale, as PostPatch.Props
            now = self.now()
            post["edit_at"] = post["update_at"] = now
            self._record_fetches(post)
            shown = self._shown(post)
            data = {"post": orjson.dumps(shown).decode()}
            self._send(Broadcast("post_edited", data, channel_id=channel.id), channel)
            return shown

    def posts_of(self, user_id: str, channel_id: str, query: dict[str, str]) -> dict[str, Any]:
        with self.lock:
            self.member_channel(user_id, channel_id)
            mine = [post for post in self.posts.values() if post["channel_id"] == channel_id]
            mine.reverse()  # newest first; a stable sort keeps that within a millisecond
            mine.sort(key=lambda post: post["create_at"], reverse=True)
            since = _int(query.get("since", "0"))
            if since > 0:
                chosen = [post for post in mine if post["update_at"] > since][:SINCE_LIMIT]
            else:
                per_page = min(max(_int(query.get("per_page", "60")), 0), 200)
                live = [post for post in mine if not post["delete_at"]]
                page = _int(query.get("page", "0"))
                chosen = live[page * per_page : (page + 1) * per_page]
            return {
                "order": [post["id"] for post in chosen],
                "posts": {post["id"]: self._shown(post) for post in chosen},
                "next_post_id": "",
                "prev_post_id": "",
                "has_next": False,
            }

    def add_reaction(self, user_id: str, post_id: str, emoji: str) -> dict[str, Any]:
        with self.lock:
            post = self.posts.get(post_id)
            if post is None or post["delete_at"]:
                raise ApiError(404, "app.post.get.app_error", "no such post")
            channel = self.member_channel(user_id, post["channel_id"])
            if not emoji or not emoji.replace("_", "").replace("-", "").replace("+", "").isalnum():
                raise ApiError(400, "model.reaction.is_valid.emoji_name.app_error", "emoji")
            held = self.reactions.setdefault(post_id, [])
            for reaction in held:
                if (reaction["user_id"], reaction["emoji_name"]) == (user_id, emoji):
                    return dict(reaction)
            now = self.now()
            reaction = {
                "user_id": user_id,
                "post_id": post_id,
                "emoji_name": emoji,
                "create_at": now,
                "update_at": now,
                "delete_at": 0,
                "remote_id": "",
                "channel_id": channel.id,
            }
            held.append(reaction)
            post["has_reactions"] = True
            post["update_at"] = now
            data = {"reaction": orjson.dumps(reaction).decode()}
            self._send(Broadcast("reaction_added", data, channel_id=channel.id), channel)
            return dict(reaction)

    def reactions_of(self, user_id: str, post_id: str) -> list[dict[str, Any]]:
        with self.lock:
            post = self.posts.get(post_id)
            if post is None:
                raise ApiError(404, "app.post.get.app_error", "no such post")
            self.member_channel(user_id, post["channel_id"])
            return [dict(reaction) for reaction in self.reactions.get(post_id, [])]

    # --- inside ------------------------------------------------------------------

    def _shown(self, post: dict[str, Any]) -> dict[str, Any]:
        shown = dict(post)
        if not shown.get("has_reactions"):
            shown.pop("has_reactions", None)
        return shown

    def _send(self, broadcast: Broadcast, channel: Channel) -> None:
        """To the bot's sockets, in the order the changes were made (the lock's)."""
        if self.server is not None and self.bot.id in channel.members:
            self.server.broadcast(broadcast)

    def _record_fetches(self, post: dict[str, Any]) -> None:
        # imported when first used: another part of the tree, and only the fetch
        # record needs it
        simulator = importlib.import_module("boxmaker.testing.fetch_simulator")
        urls = list(simulator.fetches(post["message"], post["props"], previews=self.previews))
        self.fetched[post["id"]] = urls
        self.fetch_history.append((post["id"], urls))
        self.message_history.append((post["id"], post["message"]))


def _uid(user: FakeUser | str) -> str:
    return user.id if isinstance(user, FakeUser) else user


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise ApiError(400, "api.context.invalid_url_param.app_error", "a number") from exc
