"""The Mattermost client: REST v4 over aiohttp, and the WebSocket's opening.

I/O: HTTP(S) to the one server named by `url`. The bot token travels only in the
`Authorization: Bearer` header (REST and the WebSocket's upgrade request alike),
never in a URL; it is not part of any message, log line or exception.

The rules for a request, in the order they apply:

1. Every request carries the token and follows no redirect (a 3xx is an error,
   so the header never reaches another URL).
2. A 2xx answer is the result. 401 is `MattermostAuthError`; any other 4xx but
   429 is `MattermostError` at once: the request was wrong, and sending it again
   cannot help.
3. 429, 5xx and a failed connection (refused, reset, timed out) are tried again,
   at most `RetryPolicy.attempts` times in all. The wait before try n+1 is:
   for a 429, its `Retry-After` (seconds), else its `X-RateLimit-Reset` (the
   seconds until the limit resets, as Mattermost sends it), capped at
   `max_retry_after_s`; otherwise capped exponential back-off with jitter
   (`Backoff`). Waits go through the `sleep` and `random` given, so tests run
   them on no clock.
4. Retrying is safe for every request here: reads, `patch_post` (it sends the
   whole message and every prop, so twice is the same as once), `direct_channel`
   and reactions (the server returns what exists). `create_post` sends a fresh
   `pending_post_id` for each post and the same one on every retry of it: the
   server remembers it for 30 s (`PendingPostIDsCacheTTL`) and answers a second
   create with the first post, so a retry after an answer lost on the way back
   cannot post twice. The default policy's waits for 5xx and connection errors
   add up to at most 7.5 s, well inside that window; a 429 is refused before the
   post is handled, so a long Retry-After cannot double-post either.

The WebSocket itself (reading events, reconnecting, catching up) is
`mm_events`; this module only opens it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from random import Random
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

import aiohttp
import orjson

from boxmaker.gatewayd.mm_model import (
    Channel,
    MattermostAuthError,
    MattermostError,
    Post,
    Reaction,
    User,
    parse,
    posts_from_list,
)

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

API = "/api/v4"


@dataclass(frozen=True)
class Backoff:
    """Capped exponential back-off with "equal jitter": the wait before retry n
    (from 0) is `c/2 + uniform(0, c/2)` with `c = min(cap_s, base_s * 2**n)`, so
    waits grow, never pass the cap, and clients that failed together spread out."""

    base_s: float = 0.5
    cap_s: float = 8.0

    def delay(self, attempt: int, rnd: Random) -> float:
        ceiling = min(self.cap_s, self.base_s * 2 ** min(attempt, 62))
        return float(ceiling / 2 + rnd.uniform(0, ceiling / 2))


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a REST request is tried (rule 3 above)."""

    attempts: int = 5
    backoff: Backoff = field(default_factory=Backoff)
    max_retry_after_s: float = 60.0
    timeout_s: float = 30.0


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait a 429 asks for, in seconds: Retry-After, else X-RateLimit-Reset."""
    for name in ("Retry-After", "X-RateLimit-Reset"):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value.strip())
        except ValueError:
            continue  # an HTTP-date Retry-After: fall back to the back-off
        if seconds >= 0 and seconds == seconds:  # not NaN
            return seconds
    return None


def _server_says(body: bytes) -> str:
    """The error id of Mattermost's error answer (`{"id": "api...."}`), if any."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "refused"
    error_id = value.get("id") if isinstance(value, dict) else None
    if isinstance(error_id, str) and error_id.isascii() and error_id.isprintable():
        return f"refused ({error_id[:100]})"
    return "refused"


class MattermostClient:
    """REST v4 calls as the bot. Use as `async with MattermostClient(url, token) as mm:`."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        retry: RetryPolicy | None = None,
        random: Random | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
            raise ValueError("the Mattermost url must be http(s)://host[:port][/path]")
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self.retry = retry or RetryPolicy()
        self.random = random or Random()  # noqa: S311  (jitter, not a secret)
        self.sleep = sleep
        self._session: aiohttp.ClientSession | None = None
        self._me: User | None = None

    def __repr__(self) -> str:
        return f"MattermostClient({self.url!r})"

    async def __aenter__(self) -> Self:
        timeout = aiohttp.ClientTimeout(total=self.retry.timeout_s)
        self._session = aiohttp.ClientSession(timeout=timeout)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- REST calls ---------------------------------------------------------------

    async def me(self, *, fresh: bool = False) -> User:
        """The bot's own user (GET /users/me); remembered after the first call
        unless `fresh` (which also checks that the token is still accepted)."""
        if self._me is None or fresh:
            self._me = parse(User, await self._call("GET", "/users/me"), "GET /users/me")
        return self._me

    async def direct_channel(self, user_a: str, user_b: str) -> Channel:
        """The direct channel of two users, made if it does not exist yet."""
        endpoint = "/channels/direct"
        answer = await self._call("POST", endpoint, body=[user_a, user_b])
        return parse(Channel, answer, f"POST {endpoint}")

    async def create_post(
        self,
        channel_id: str,
        message: str,
        *,
        root_id: str | None = None,
        props: Mapping[str, Any] | None = None,
    ) -> Post:
        """A new post; retried with the same `pending_post_id` (rule 4)."""
        body: dict[str, Any] = {
            "channel_id": channel_id,
            "message": message,
            "pending_post_id": uuid.uuid4().hex,
        }
        if root_id:
            body["root_id"] = root_id
        if props is not None:
            body["props"] = dict(props)
        return parse(Post, await self._call("POST", "/posts", body=body), "POST /posts")

    async def get_post(self, post_id: str) -> Post:
        endpoint = f"/posts/{post_id}"
        return parse(Post, await self._call("GET", endpoint), f"GET {endpoint}")

    async def patch_post(self, post_id: str, message: str, props: Mapping[str, Any]) -> Post:
        """Replace a post's message and ALL its props (Mattermost replaces props
        wholesale: a prop left out is removed)."""
        endpoint = f"/posts/{post_id}/patch"
        body = {"message": message, "props": dict(props)}
        return parse(Post, await self._call("PUT", endpoint, body=body), f"PUT {endpoint}")

    async def posts_since(self, channel_id: str, since_ms: int) -> list[Post]:
        """Posts of a channel created or changed (edited, reacted to, deleted) after
        `since_ms`, oldest first. The server answers at most 1000."""
        endpoint = f"/channels/{channel_id}/posts"
        answer = await self._call("GET", endpoint, params={"since": str(max(since_ms, 1))})
        return posts_from_list(answer, f"GET {endpoint}")

    async def recent_posts(self, channel_id: str, count: int = 1) -> list[Post]:
        """The channel's newest `count` posts (1 to 200), oldest first."""
        endpoint = f"/channels/{channel_id}/posts"
        params = {"page": "0", "per_page": str(min(max(count, 1), 200))}
        return posts_from_list(await self._call("GET", endpoint, params=params), f"GET {endpoint}")

    async def reactions(self, post_id: str) -> list[Reaction]:
        endpoint = f"/posts/{post_id}/reactions"
        answer = await self._call("GET", endpoint)
        if answer is None:
            return []
        if not isinstance(answer, list):
            raise MattermostError(f"GET {endpoint}", 200, "unreadable reaction list")
        return [parse(Reaction, item, f"GET {endpoint}", 200) for item in answer]

    async def add_reaction(self, post_id: str, emoji_name: str) -> Reaction:
        """The bot's reaction on a post (the server keeps one per user and emoji)."""
        body = {"user_id": (await self.me()).id, "post_id": post_id, "emoji_name": emoji_name}
        return parse(Reaction, await self._call("POST", "/reactions", body=body), "POST /reactions")

    # --- the WebSocket's opening -------------------------------------------------

    async def open_websocket(self, *, heartbeat_s: float) -> aiohttp.ClientWebSocketResponse:
        """The WebSocket at /api/v4/websocket, authenticated by the header. The
        server upgrades even a connection it does not trust; `mm_events` waits
        for `hello` to know it was accepted."""
        endpoint = "GET /websocket"
        scheme, rest = self.url.split("://", 1)
        url = f"{'wss' if scheme == 'https' else 'ws'}://{rest}{API}/websocket"
        try:
            return await self._session_now().ws_connect(
                url, headers=self._headers, heartbeat=heartbeat_s, max_msg_size=4 * 2**20
            )
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status == 401:
                raise MattermostAuthError(endpoint, 401, "the bot token was refused") from exc
            raise MattermostError(endpoint, exc.status, "upgrade refused") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise MattermostError(endpoint, None, f"cannot connect ({type(exc).__name__})") from exc

    # --- one request, with its retries -------------------------------------------

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("MattermostClient is used outside `async with`")
        return self._session

    async def _call(
        self, method: str, path: str, *, body: object = None, params: dict[str, str] | None = None
    ) -> Any:
        endpoint = f"{method} {path}"
        session = self._session_now()
        data = None if body is None else orjson.dumps(body)
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        attempts = max(self.retry.attempts, 1)
        for attempt in range(attempts):
            final = attempt == attempts - 1
            try:
                async with session.request(
                    method,
                    f"{self.url}{API}{path}",
                    data=data,
                    params=params,
                    headers=headers,
                    allow_redirects=False,
                ) as response:
                    status, answer = response.status, await response.read()
                    wait = retry_after(response.headers) if status == 429 else None
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
                if final:
                    what = f"no answer after {attempts} tries ({type(exc).__name__})"
                    raise MattermostError(endpoint, None, what) from exc
                log.warning("mattermost_retry endpoint=%r error=%s", endpoint, type(exc).__name__)
                await self.sleep(self.retry.backoff.delay(attempt, self.random))
                continue
            if 200 <= status < 300:
                return _decoded(answer, endpoint, status)
            if status == 401:
                raise MattermostAuthError(endpoint, status, "the bot token was refused")
            if status != 429 and status < 500:
                raise MattermostError(endpoint, status, _server_says(answer))
            if final:
                raise MattermostError(endpoint, status, f"gave up after {attempts} tries")
            if wait is None:
                wait = self.retry.backoff.delay(attempt, self.random)
            wait = min(wait, self.retry.max_retry_after_s)
            log.warning(
                "mattermost_retry endpoint=%r status=%d wait_s=%.2f", endpoint, status, wait
            )
            await self.sleep(wait)
        raise AssertionError("unreachable: the last try returns or raises")


def _decoded(answer: bytes, endpoint: str, status: int) -> Any:
    if not answer.strip():
        return None
    try:
        return orjson.loads(answer)
    except orjson.JSONDecodeError as exc:
        raise MattermostError(endpoint, status, "the answer is not JSON") from exc
