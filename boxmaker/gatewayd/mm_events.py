"""The bot's events from Mattermost's WebSocket, each delivered exactly once.

I/O: the WebSocket at /api/v4/websocket (opened by `MattermostClient`), and the
REST calls of the catch-up. Decoding frames is `mm_model` and deciding what is
new is `mm_delivery`, both pure; this module only moves bytes and waits.

How a stream runs (a task started by `async with EventStream(...)`):

1. Open the socket with the token in the `Authorization` header, and wait for
   `hello` (at most `hello_timeout_s`). A socket closed or silent before
   `hello` is a failed connection; the token is then checked with a fresh
   `users/me`, and a 401 ends the stream with `MattermostAuthError` (what the
   server does with a bad token: it upgrades, then cuts the connection off).
2. After `hello`: on the first connection without `since_ms`, the newest post
   of each watched channel sets where history ends; on every later connection
   (and the first one with `since_ms`), a catch-up over REST (`posts_since`
   from `Delivery.since()` for each watched channel, and the reactions of posts
   changed since then) delivers what the socket missed. Only then is the
   stream live (`wait_live`) and the socket's frames read.
3. Frames carry `seq`, counted from 0 (`hello`) on each connection. A gap, or a
   frame that cannot be decoded, is answered by a catch-up, so nothing is lost
   in between. Events of channels not watched are ignored, as are event kinds
   other than `posted`, `post_edited` and `reaction_added`.
4. A drop (closed, reset, heartbeat missed, a catch-up that failed after its
   retries) leads to a new connection after `ReconnectPolicy.backoff`'s wait
   (capped exponential back-off with jitter); the count of waits starts again
   after each `hello`. It tries for as long as the stream is open; only a
   refused token ends it.

Events wait in an unbounded queue for the reader (`async for event in stream`);
a stream that ended raises its error on every later read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import aiohttp

from boxmaker.gatewayd.mattermost import Backoff, MattermostClient
from boxmaker.gatewayd.mm_delivery import Delivery
from boxmaker.gatewayd.mm_model import (
    Event,
    Frame,
    Hello,
    MattermostAuthError,
    MattermostError,
    Post,
    Reaction,
    ReactionAdded,
    decode_event,
)

log = logging.getLogger(__name__)

CATCH_UP_PAGE = 1000  # the most posts Mattermost answers to one `since` request
CATCH_UP_PAGES = 20  # pages per channel per catch-up, at most


@dataclass(frozen=True)
class ReconnectPolicy:
    """How the stream reconnects, and how far back a catch-up looks."""

    backoff: Backoff = field(default_factory=lambda: Backoff(base_s=0.5, cap_s=30.0))
    hello_timeout_s: float = 10.0
    heartbeat_s: float = 30.0
    margin_ms: int = 5000


class EventStream:
    """`posted`, `post_edited` and `reaction_added` of the watched channels."""

    def __init__(
        self,
        client: MattermostClient,
        channel_ids: Iterable[str],
        *,
        since_ms: int | None = None,
        policy: ReconnectPolicy | None = None,
    ) -> None:
        self.client = client
        self.channels = frozenset(channel_ids)
        if not self.channels:
            raise ValueError("an EventStream watches at least one channel")
        self.policy = policy or ReconnectPolicy()
        self.delivery = Delivery(since_ms=since_ms, margin_ms=self.policy.margin_ms)
        self.connections = 0  # connections that reached `hello`
        self.catch_ups = 0
        self.user_id = ""  # the bot, as `hello` names it
        self._seq: int | None = None
        self._queue: asyncio.Queue[Event | BaseException] = asyncio.Queue()
        self._live = asyncio.Event()
        self._ended: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._run(), name="mattermost-events")
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Event:
        if self._ended is not None and self._queue.empty():
            raise self._ended
        item = await self._queue.get()
        if isinstance(item, BaseException):
            self._ended = item
            raise item
        return item

    async def wait_live(self) -> None:
        """Until a connection has said `hello` and caught up (rule 2)."""
        await self._live.wait()

    @property
    def live(self) -> bool:
        return self._live.is_set()

    # --- the task ---------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._connect_forever()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the reader sees it, whatever it is
            self._queue.put_nowait(exc)

    async def _connect_forever(self) -> None:
        waits = 0
        while True:
            try:
                socket = await self.client.open_websocket(heartbeat_s=self.policy.heartbeat_s)
            except MattermostAuthError:
                raise
            except MattermostError as exc:
                log.warning("mattermost_connect_failed error=%s", exc)
            else:
                try:
                    if await self._session(socket):
                        waits = 0
                finally:
                    self._live.clear()
                    await socket.close()
            wait = self.policy.backoff.delay(waits, self.client.random)
            waits += 1
            log.info("mattermost_reconnect wait_s=%.2f", wait)
            await self.client.sleep(wait)

    async def _session(self, socket: aiohttp.ClientWebSocketResponse) -> bool:
        """One connection: hello, catch-up, frames. False if it never said hello."""
        hello = await self._hello(socket)
        if hello is None:
            await self.client.me(fresh=True)  # MattermostAuthError if the token is refused
            log.warning("mattermost_no_hello")
            return False
        self.connections += 1
        self.user_id = hello.user_id
        try:
            if self.delivery.started:
                await self._catch_up()
            else:
                newest = [await self.client.recent_posts(channel) for channel in self.channels]
                self.delivery.start_at([post for posts in newest for post in posts])
        except MattermostAuthError:
            raise
        except MattermostError as exc:
            log.warning("mattermost_catch_up_failed error=%s", exc)
            return True
        self._live.set()
        log.info("mattermost_live connection=%d", self.connections)
        await self._read(socket)
        log.warning("mattermost_dropped connection=%d", self.connections)
        return True

    async def _hello(self, socket: aiohttp.ClientWebSocketResponse) -> Hello | None:
        try:
            async with asyncio.timeout(self.policy.hello_timeout_s):
                async for message in socket:
                    if message.type is not aiohttp.WSMsgType.TEXT:
                        return None
                    frame = decode_event(message.data)
                    if isinstance(frame.event, Hello):
                        self._seq = frame.seq
                        return frame.event
        except (TimeoutError, MattermostError):
            return None
        return None

    async def _read(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        async for message in socket:
            if message.type is not aiohttp.WSMsgType.TEXT:
                return  # ERROR (binary frames are not Mattermost's)
            try:
                frame = decode_event(message.data)
            except MattermostError as exc:
                log.warning("mattermost_bad_frame error=%s", exc)
                await self._catch_up()
                continue
            await self._take(frame)

    async def _take(self, frame: Frame) -> None:
        if frame.seq is not None:
            if self._seq is not None and frame.seq != self._seq + 1:
                log.warning("mattermost_seq_gap expected=%d got=%d", self._seq + 1, frame.seq)
                self._seq = frame.seq
                await self._catch_up()
            self._seq = frame.seq
        event = frame.event
        if event is None or isinstance(event, Hello):
            return
        channel = event.channel_id if isinstance(event, ReactionAdded) else event.post.channel_id
        if channel in self.channels and self.delivery.fresh(event):
            self._queue.put_nowait(event)

    async def _catch_up(self) -> None:
        """Deliver what changed since `Delivery.since()` in the watched channels."""
        since = self.delivery.since()
        self.catch_ups += 1
        for channel in sorted(self.channels):
            posts = await self._posts_since(channel, since)
            reactions: dict[str, list[Reaction]] = {}
            for post in posts:
                if Delivery.wants_reactions(post, since):
                    reactions[post.id] = await self.client.reactions(post.id)
            for event in self.delivery.replay(since, posts, reactions):
                self._queue.put_nowait(event)
        log.info("mattermost_caught_up since=%d", since)

    async def _posts_since(self, channel: str, since: int) -> list[Post]:
        """Every post changed after `since`, paging while the server's limit is hit."""
        found: dict[str, Post] = {}
        start = since
        for _ in range(CATCH_UP_PAGES):
            page = await self.client.posts_since(channel, start)
            found.update((post.id, post) for post in page)
            if len(page) < CATCH_UP_PAGE:
                break
            start = max(post.update_at for post in page)
        return sorted(found.values(), key=lambda post: post.create_at)  # stable: server order
