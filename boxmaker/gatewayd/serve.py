"""gatewayd's start-up, its two halves, and its stop.

I/O: everything gatewayd touches, wired together here. In order:

    1. the bot token (`[secrets.mattermost_token]`), read before anything else:
       one that cannot be read stops gatewayd (exit 1, one line naming it);
    2. the stop signals blocked (`boxmaker.ipc.shell`), then the event loop, in
       its own thread: the watermark (`<home>/gateway/`,
       `gatewayd.watermark`: one that cannot be read or written stops gatewayd,
       exit 1), the Mattermost client, the bot's own user (`users/me`: a refused
       token stops gatewayd, exit 1), the owner's direct channel, a line in the
       thread of each turn a crash cut off, and the event stream
       (`gatewayd.mm_events`), caught up from the watermark, at most
       `[mattermost] catch_up_s` back;
    3. gateway.sock bound (brokerd's group in a root install) and served by
       threads of `boxmaker.ipc.serving`, which hand their Mattermost calls to
       the event loop (`gatewayd.approvals`);
    4. each event: an approval answer (`ApprovalDesk.on_event`), or else a turn
       (`gatewayd.turns`), each turn a task of its own, started only once the
       watermark on disk holds its post (a post it cannot record is refused in
       one line, never run).

SIGTERM or SIGINT stops it: gateway.sock closes, turns in flight are cancelled
(their posts keep what was streamed), the client closes, gateway.sock is
removed, the token is wiped; exit 0. If the event stream ends on its own (the
token was refused, or gatewayd cannot start), the main thread is woken and
gatewayd exits 1 with that line.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from boxmaker.core.errors import StartupError
from boxmaker.core.home.links import GATEWAY, Role
from boxmaker.core.runbook import Runbook
from boxmaker.gatewayd.approvals import ApprovalDesk
from boxmaker.gatewayd.config import TOKEN, GatewaydConfig
from boxmaker.gatewayd.mattermost import MattermostClient
from boxmaker.gatewayd.mm_events import EventStream, ReconnectPolicy
from boxmaker.gatewayd.mm_model import MattermostError, Posted, PostEdited, ReactionAdded
from boxmaker.gatewayd.turns import Chat as TurnChat
from boxmaker.gatewayd.turns import Owner, TurnRelay, is_turn
from boxmaker.gatewayd.watermark import Resume, Watermark
from boxmaker.gatewayd.watermark_file import Progress, WatermarkFile
from boxmaker.ipc.role import EXIT_CANNOT_START, EXIT_OK
from boxmaker.ipc.secrets import load_secrets
from boxmaker.ipc.shell import Endpoint, RoleSockets, serve_daemon

log = logging.getLogger(__name__)

GATEWAY_CAP = 64  # approvals held at once
READY_TIMEOUT_S = 60.0
CUT_OFF_BY_RESTART = (
    "gatewayd restarted while it was answering this message, so the answer may be cut"
    " short; the message was not run again (a turn may have run tools): send it again"
    " if you need the answer"
)
NOT_RECORDED = (
    "this message was not taken: gatewayd cannot record it in {}; send it again once it can"
)
STOP_TIMEOUT_S = 10.0


@dataclass
class Chat:
    """The event loop's half, started in its own thread."""

    config: GatewaydConfig
    token: str
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    ready: threading.Event = field(default_factory=threading.Event)
    failure: BaseException | None = None
    desk: ApprovalDesk | None = None
    on_failure: Callable[[], None] = lambda: None  # after start: wakes the main thread
    _main: asyncio.Task[None] | None = None
    _thread_: threading.Thread | None = None
    _turns: set[asyncio.Task[None]] = field(default_factory=set)

    def start(self) -> None:
        self._thread_ = threading.Thread(target=self._thread, name="mattermost", daemon=True)
        self._thread_.start()
        if not self.ready.wait(READY_TIMEOUT_S) and self.failure is None:
            self.failure = StartupError("no answer from Mattermost in time")
        if self.failure is not None:
            raise StartupError(f"cannot start the chat: {self.failure}") from self.failure

    def stop(self) -> None:
        """Cancel everything on the event loop and wait for it to close (bounded)."""
        if self._main is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._main.cancel)
        if self._thread_ is not None:
            self._thread_.join(STOP_TIMEOUT_S)

    def _thread(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self._main = self.loop.create_task(self._run())
            self.loop.run_until_complete(self._main)
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # reported to the main thread, which exits 1
            self.failure = exc
            log.error("event=chat_failed %s", exc)
            started = self.ready.is_set()
            self.ready.set()
            if started:
                self.on_failure()
        finally:
            if self.desk is not None:
                self.desk.close()
            _drain(self.loop)
            self.loop.close()

    async def _run(self) -> None:
        mattermost = self.config.mattermost
        policy = ReconnectPolicy()
        marks = WatermarkFile(self.config.state)
        loaded = marks.load()
        resume = Resume.after(
            loaded,
            now_ms=time.time_ns() // 1_000_000,
            catch_up_s=mattermost.catch_up_s,
            margin_ms=policy.margin_ms,
        )
        progress = Progress(marks, resume, (loaded or Watermark()).resumed())
        progress.save()  # before the cut-off turns are told (watermark rule 5)
        async with MattermostClient(mattermost.url, self.token) as client:
            me = await client.me()
            channel = await client.direct_channel(me.id, mattermost.owner)
            owner = Owner(user_id=mattermost.owner, channel_id=channel.id, bot_id=me.id)
            self.desk = ApprovalDesk(client, self.loop, owner)
            relay = TurnRelay(
                client,
                self.config.loop_socket,
                timeout_ms=self.config.loop.timeout_ms,
                edit_interval_ms=mattermost.edit_interval_ms,
            )
            log.info("event=chat bot=%s owner=%s channel=%s", me.id, owner.user_id, channel.id)
            for root in loaded.in_flight.values() if loaded else ():
                await _say(client, channel.id, root, CUT_OFF_BY_RESTART)
            since = resume.since_ms
            async with EventStream(client, [channel.id], since_ms=since, policy=policy) as stream:
                await stream.wait_live()
                if loaded is None:
                    progress.start_from(stream.delivery.watermark_ms)
                log.info("event=resumed since_ms=%s file=%s", since, marks.path)
                self.ready.set()
                try:
                    async for event in stream:
                        await self._take(event, owner, self.desk, relay, progress)
                finally:
                    turns = list(self._turns)
                    for task in turns:
                        task.cancel()
                    await asyncio.gather(*turns, return_exceptions=True)

    async def _take(
        self,
        event: Posted | PostEdited | ReactionAdded,
        owner: Owner,
        desk: ApprovalDesk,
        relay: TurnRelay,
        progress: Progress,
    ) -> None:
        if await desk.on_event(event):
            return
        if not isinstance(event, Posted) or not is_turn(event.post, owner):
            return
        post = event.post
        try:
            if not progress.take(post):  # taken before the restart, or older than catch_up_s
                log.info("event=turn_skipped post=%s create_at=%d", post.id, post.create_at)
                return
        except OSError as exc:  # never a turn that a restart could run a second time
            log.error("event=watermark_unwritable file=%s %s", progress.file.path, exc)
            root = post.root_id or post.id
            await _say(relay.chat, post.channel_id, root, NOT_RECORDED.format(progress.file.path))
            return
        task = asyncio.create_task(relay.relay(post), name=f"turn-{post.id}")
        self._turns.add(task)
        task.add_done_callback(lambda done: self._turn_done(done, post.id, progress))

    def _turn_done(self, task: asyncio.Task[None], post_id: str, progress: Progress) -> None:
        self._turns.discard(task)
        if task.cancelled():
            return  # cut off by a stop: still in flight, so the next start says so
        progress.finish(post_id)
        if (exc := task.exception()) is not None:
            log.error("event=turn_failed %s: %s", type(exc).__name__, exc)


async def _say(chat: TurnChat, channel_id: str, root: str, text: str) -> None:
    """One line of gatewayd's own in a thread; a failure is logged."""
    try:
        await chat.create_post(channel_id, text, root_id=root, props={"unsafe_links": "true"})
    except MattermostError as exc:
        log.error("event=notice_not_posted root=%s %s", root, exc)


def _drain(loop: asyncio.AbstractEventLoop) -> None:
    """Run what was handed to `loop` to its end, cancelled, so nothing is left unawaited."""
    for _ in range(3):
        loop.run_until_complete(asyncio.sleep(0))  # callbacks handed over become tasks
        tasks = asyncio.all_tasks(loop)
        if not tasks:
            break
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())


class Gatewayd:
    """gatewayd's two halves: what `serve` runs (`ipc.shell.serve_daemon`), and what
    tests start in their own process."""

    def __init__(
        self, config: GatewaydConfig, token: str, on_failure: Callable[[], None] = lambda: None
    ) -> None:
        self.config = config
        self.chat = Chat(config, token, on_failure=on_failure)
        endpoint = Endpoint(GATEWAY, config.gateway_socket, GATEWAY_CAP)
        self.sockets = RoleSockets(Role.GATEWAYD, (endpoint,), config.sockets.group_access)
        self.stopping = self.sockets.stopping

    def start(self) -> None:
        """The chat first (step 2), then gateway.sock (step 3); StartupError, with the
        chat stopped, if either cannot start."""
        self.chat.start()
        assert self.chat.desk is not None
        try:
            self.sockets.start({GATEWAY: self.chat.desk.handlers()})
        except StartupError:
            self.chat.stop()
            raise

    def stop(self) -> int:
        """Close gateway.sock, stop the chat, remove the socket; 1 if the chat had failed."""
        self.sockets.stop(self.chat.stop)
        failure = self.chat.failure
        if failure is None:
            return EXIT_OK
        if isinstance(failure, MattermostError):
            log.error("%s; %s", failure, Runbook.GATEWAY_NOT_CONFIGURED.pointer)
        return EXIT_CANNOT_START


def serve(config: GatewaydConfig) -> int:
    """Run gatewayd until SIGTERM; the exit status."""
    secrets = load_secrets({TOKEN: config.secrets[TOKEN]})
    try:
        # aiohttp takes the header as a str: a copy that cannot be wiped (core.home.secrets)
        token = secrets[TOKEN].reveal().decode("utf-8", "strict")
        daemon = Gatewayd(config, token, lambda: os.kill(os.getpid(), signal.SIGTERM))
        return serve_daemon(daemon, f"gateway={config.gateway_socket} loop={config.loop_socket}")
    finally:
        secrets.wipe()
