"""The fake Mattermost server's HTTP face: REST v4 routes and the WebSocket.

I/O: an aiohttp server on 127.0.0.1 (an ephemeral port), run by an event loop
on its own thread, so a test (and the client it tests, on the test's own loop)
talks to it over real TCP. What the routes do is `fake_mattermost.FakeMattermost`;
this module parses requests, injects the failures asked for, records each call,
and keeps the sockets (authentication, `hello`, `seq`, broadcasts, drops).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from boxmaker.testing.fake_mattermost import ApiError, Broadcast, FakeMattermost, RestCall

SERVER_VERSION = "10.5.0.fake"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Route = Callable[[web.Request, str], Awaitable[Any]]

# what a create asked for, kept on the request for the call record
PENDING_POST_ID = web.RequestKey("pending_post_id", str)


@dataclass(eq=False)
class _Socket:
    ws: web.WebSocketResponse
    transport: asyncio.BaseTransport | None
    queue: asyncio.Queue[tuple[dict[str, Any], bool]] = field(default_factory=asyncio.Queue)
    seq: int = 0


def _json(status: int, value: object, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, body=orjson.dumps(value), content_type="application/json", headers=headers
    )


async def _body(request: web.Request) -> Any:
    try:
        return orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, "api.context.invalid_body_param.app_error", "not JSON") from exc


@contextmanager
def running(fake: FakeMattermost) -> Iterator[str]:
    """Serve `fake` on 127.0.0.1 (an ephemeral port) from a thread; yields the base URL.
    While it serves, the fake reaches its sockets through `fake.server`."""
    server = Server(fake)
    fake.server = server
    try:
        with server.serving() as url:
            yield url
    finally:
        fake.server = None


class Server:
    """Serves one FakeMattermost; `serving()` runs it and yields the base URL."""

    def __init__(self, fake: FakeMattermost) -> None:
        self.fake = fake
        self.loop: asyncio.AbstractEventLoop | None = None
        self._live: set[_Socket] = set()  # authenticated: they get broadcasts
        self._all: set[_Socket] = set()

    # --- called from any thread (under the fake's lock, for ordering) ------------

    def broadcast(self, broadcast: Broadcast) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._deliver, broadcast.frame())

    def drop_all(self) -> None:
        if self.loop is not None:
            asyncio.run_coroutine_threadsafe(self._abort_all(), self.loop).result(30)

    @contextmanager
    def serving(self) -> Iterator[str]:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="fake-mattermost", daemon=True)
        thread.start()
        self.loop = loop
        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=1.0)
        try:
            port = asyncio.run_coroutine_threadsafe(self._start(runner), loop).result(30)
            yield f"http://127.0.0.1:{port}"
        finally:
            asyncio.run_coroutine_threadsafe(self._stop(runner), loop).result(30)
            self.loop = None
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
            loop.close()

    # --- on the server's loop ----------------------------------------------------

    async def _start(self, runner: web.AppRunner) -> int:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        assert isinstance(port, int)
        return port

    async def _stop(self, runner: web.AppRunner) -> None:
        await self._abort_all()
        await runner.cleanup()

    def _deliver(self, frame: dict[str, Any]) -> None:
        for socket in list(self._live):
            socket.queue.put_nowait((frame, True))

    async def _abort_all(self) -> None:
        for socket in list(self._all):
            if isinstance(socket.transport, asyncio.Transport):
                socket.transport.abort()
        self._live.clear()
        self._all.clear()

    def _app(self) -> web.Application:
        @web.middleware
        async def rest(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.path == "/api/v4/websocket":
                return await handler(request)
            return await self._rest(request, handler)

        app = web.Application(middlewares=[rest])
        add = app.router
        add.add_get("/api/v4/users/me", self._route(self._me))
        add.add_post("/api/v4/channels/direct", self._route(self._direct))
        add.add_get("/api/v4/channels/{channel_id}/posts", self._route(self._channel_posts))
        add.add_post("/api/v4/posts", self._route(self._create))
        add.add_get("/api/v4/posts/{post_id}", self._route(self._get_post))
        add.add_put("/api/v4/posts/{post_id}/patch", self._route(self._patch))
        add.add_post("/api/v4/reactions", self._route(self._react))
        add.add_get("/api/v4/posts/{post_id}/reactions", self._route(self._reactions))
        add.add_get("/api/v4/websocket", self._websocket)
        return app

    async def _rest(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        fake = self.fake
        with fake.lock:
            failure = fake.failures.popleft() if fake.failures else None
        authorized = fake.token_ok(request.headers.get("Authorization"))
        response: web.StreamResponse
        if failure is not None and not failure.after:
            response = self._failure(failure.status, failure.retry_after)
        elif not authorized:
            error = ApiError(401, "api.context.session_expired.app_error", "Invalid session")
            response = _json(401, error.body())
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                response = exc
            if failure is not None:
                response = self._failure(failure.status, failure.retry_after)
        call = RestCall(
            request.method,
            request.path,
            dict(request.query),
            response.status,
            authorized,
            request.get(PENDING_POST_ID),
        )
        with fake.lock:
            fake.calls.append(call)
        return response

    @staticmethod
    def _failure(status: int, retry_after: float | None) -> web.Response:
        headers: dict[str, str] = {}
        if status == 429 and retry_after is not None:
            shown = str(int(retry_after)) if retry_after == int(retry_after) else str(retry_after)
            headers = {"Retry-After": shown, "X-RateLimit-Reset": shown}
            headers |= {"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0"}
        error = ApiError(status, "fake.injected_failure", "injected by fail_next")
        return _json(status, error.body(), headers)

    def _route(self, route: Route) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                value = await route(request, self.fake.bot.id)
            except ApiError as exc:
                return _json(exc.status, exc.body())
            status = 201 if request.method == "POST" else 200
            return _json(status, value)

        return handle

    async def _me(self, request: web.Request, user: str) -> Any:
        return self.fake.users[user].json()

    async def _direct(self, request: web.Request, user: str) -> Any:
        pair = await _body(request)
        if not (
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(u, str) for u in pair)
        ):
            raise ApiError(400, "api.context.invalid_body_param.app_error", "user_ids")
        if user not in pair:
            raise ApiError(403, "api.context.permissions.app_error", "not one of the pair")
        with self.fake.lock:
            return self.fake.make_direct(pair[0], pair[1]).json()

    async def _channel_posts(self, request: web.Request, user: str) -> Any:
        return self.fake.posts_of(user, request.match_info["channel_id"], dict(request.query))

    async def _create(self, request: web.Request, user: str) -> Any:
        body = await _body(request)
        if not isinstance(body, dict):
            raise ApiError(400, "api.context.invalid_body_param.app_error", "post")
        pending = body.get("pending_post_id")
        if isinstance(pending, str):
            request[PENDING_POST_ID] = pending
        return self.fake.create_post(user, body)

    async def _get_post(self, request: web.Request, user: str) -> Any:
        return self.fake.get_post(user, request.match_info["post_id"])

    async def _patch(self, request: web.Request, user: str) -> Any:
        patch = await _body(request)
        if not isinstance(patch, dict):
            raise ApiError(400, "api.context.invalid_body_param.app_error", "patch")
        return self.fake.patch_post(user, request.match_info["post_id"], patch)

    async def _react(self, request: web.Request, user: str) -> Any:
        body = await _body(request)
        if not isinstance(body, dict) or body.get("user_id") != user:
            raise ApiError(403, "api.context.permissions.app_error", "user_id")
        post_id, emoji = body.get("post_id"), body.get("emoji_name")
        if not isinstance(post_id, str) or not isinstance(emoji, str):
            raise ApiError(400, "api.context.invalid_body_param.app_error", "reaction")
        return self.fake.add_reaction(user, post_id, emoji)

    async def _reactions(self, request: web.Request, user: str) -> Any:
        return self.fake.reactions_of(user, request.match_info["post_id"])

    # --- the WebSocket -----------------------------------------------------------

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        socket = _Socket(ws, request.transport)
        self._all.add(socket)
        writer: asyncio.Task[None] | None = None
        try:
            header_ok = self.fake.token_ok(request.headers.get("Authorization"))
            if not (header_ok or await self._challenge(socket)):
                with self.fake.lock:
                    self.fake.ws_cut_off += 1
                return ws
            hello = Broadcast("hello", {"server_version": SERVER_VERSION}, user_id=self.fake.bot.id)
            socket.queue.put_nowait((hello.frame(), True))
            self._live.add(socket)  # after hello, with no await between: hello is seq 0
            with self.fake.lock:
                self.fake.ws_accepted += 1
            writer = asyncio.create_task(self._write(socket))
            async for message in ws:
                action = _action(message.data) if message.type is WSMsgType.TEXT else None
                if action is not None:
                    socket.queue.put_nowait(({"status": "OK", "seq_reply": action[0]}, False))
        finally:
            self._live.discard(socket)
            self._all.discard(socket)
            if writer is not None:
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer
            with contextlib.suppress(ConnectionError):
                await ws.close()
        return ws

    async def _challenge(self, socket: _Socket) -> bool:
        """Wait for a valid `authentication_challenge` until the cutoff."""
        try:
            async with asyncio.timeout(self.fake.auth_cutoff_s):
                async for message in socket.ws:
                    action = _action(message.data) if message.type is WSMsgType.TEXT else None
                    if action is None or action[1] != "authentication_challenge":
                        continue
                    seq, _, token = action
                    if self.fake.token_ok(f"Bearer {token}"):
                        await socket.ws.send_str(
                            orjson.dumps({"status": "OK", "seq_reply": seq}).decode()
                        )
                        return True
                    refused = {"status": "FAIL", "seq_reply": seq, "error": {"id": "auth"}}
                    await socket.ws.send_str(orjson.dumps(refused).decode())
        except TimeoutError:
            pass
        return False

    async def _write(self, socket: _Socket) -> None:
        while True:
            frame, numbered = await socket.queue.get()
            if numbered:
                frame = {**frame, "seq": socket.seq}
                socket.seq += 1
            try:
                await socket.ws.send_str(orjson.dumps(frame).decode())
            except ConnectionError:
                return


def _action(text: object) -> tuple[int, str, str] | None:
    """(seq, action, token) of a client's action frame; None if it is not one."""
    try:
        value = orjson.loads(text) if isinstance(text, str | bytes) else None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    seq, action, data = value.get("seq"), value.get("action"), value.get("data") or {}
    if not isinstance(seq, int) or not isinstance(action, str) or not isinstance(data, dict):
        return None
    token = data.get("token")
    return seq, action, token if isinstance(token, str) else ""
