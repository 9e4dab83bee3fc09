"""The owner's direct messages as turns to loopd; each answer one post, edited as it streams.

I/O: loopd's loop.sock (one connection per turn, `boxmaker.ipc.client`, read in
a worker thread) and Mattermost (the client). The rules:

1. **Which posts are turns** (`is_turn`): a new post (never an edit) in the
   owner's direct-message channel with the bot, written by the owner's user
   id, of no special type (system messages have one), not from a webhook or an
   integration (`props.from_webhook`, `props.from_bot`, `props.override_username`).
   Everything else is ignored: other users, other channels, the bot's own
   posts. Replies in the thread of an approval post are the approvals'
   (`gatewayd.approvals`), never turns.
2. **Sessions follow threads**: a top-level post starts session `mm-<post id>`;
   a reply in its thread resumes `mm-<root id>`. The answer is posted in the
   thread, so a conversation reads as one thread.
3. **Streaming**: the answer post is made at once (`…`), then patched with the
   whole text so far, escaped from scratch (`core.display.reply_escape`), at most once
   every `edit_interval_ms`. While the turn runs nobody knows yet whether it
   will read untrusted content, so every streamed edit is escaped as
   untrusted (links as code, `unsafe_links`), with `…` where the notice would
   be. The last edit escapes the final
   content for the turn's real trust (`turn_done.untrusted`): a clean turn's
   links become links only then; an untrusted turn's stay code, with the
   notice line. Images are code in every edit. Props are sent whole on every
   patch (Mattermost replaces them).
4. **Compaction**: when loopd compacts the session during the turn
   (`context_compacted`), one post of its own in the thread says so, `context
   compacted: 1,812 -> 604 tokens` (loopd's two numbers, nothing the model
   wrote), while the answer post goes on streaming.
5. **Long replies**: a final reply whose escaped text passes one post's length
   (16,383 characters) goes on in follow-up posts in the thread, each escaped
   from scratch, every part but the last saying it goes on
   (`core.display.reply_parts`); while it streams, the answer post shows its first part.
6. **Failures** are said in the answer post in one line: loopd unreachable,
   busy or refusing the turn (its error's own text), or a turn cut off; with
   `see runbook.md#loopd-unavailable` where loopd could not be reached. The
   owner's message is never retried by itself: a turn may have run tools.
7. **`/compact` is refused** (`is_compact`: a post that is `/compact` and nothing
   else, spaces aside): one post of gatewayd's own in the thread names the
   owner's command, `bxctl sessions compact mm-<root id>`, and nothing goes to
   loopd. Compacting is the owner's alone on loop.sock (`core.home.links` rule 5: it
   rewrites a session's history into a summary the model writes), and
   gatewayd's user is not the owner; a thread that grows long is compacted by
   loopd itself during a turn (rule 4). Sent as a turn instead, it would be
   text for the model, not a compaction.
8. **`stop` stops the thread's running turn** (`is_stop`: a reply in the thread that
   is `stop` and nothing else, case and spaces aside, while that session's turn
   runs): gatewayd closes the turn's connection, loopd stops the reply at its next
   token and keeps what it wrote, and the answer post ends with what was written so
   far and `STOPPED_NOTE`. The `stop` post goes to loopd as nothing. With no turn of
   the thread running it is an ordinary message. gatewayd shutting down closes every
   turn's connection, which stops them the same way (issue 42).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from boxmaker.core.display.reply_escape import NOTICE, escape_reply
from boxmaker.core.display.reply_parts import MAX_POST_CHARS, split_reply
from boxmaker.core.errors import RequestError
from boxmaker.core.model.compaction_plan import compacted_line
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.common import Error
from boxmaker.core.wire.envelope import Envelope
from boxmaker.core.wire.loop import ContentEvent, ContextCompactedEvent, Turn, TurnDone, TurnEvent
from boxmaker.gatewayd.mm_model import MattermostError, Post
from boxmaker.ipc.client import Request

log = logging.getLogger(__name__)

STARTED = "…"
SESSION_PREFIX = "mm-"
UNREACHABLE = (
    f"loopd is not answering, so this message was not taken; {Runbook.LOOPD_UNAVAILABLE.pointer}"
)
CUT_OFF = "the answer was cut off: loopd stopped before the end of the turn"
_NOT_TURNS = ("from_webhook", "from_bot", "override_username")
STOP = "stop"
STOPPED_NOTE = "(stopped by the owner)"
COMPACT = "/compact"
COMPACT_REFUSED = (
    "`/compact` is not taken in chat: compacting is the owner's, from the terminal:"
    " `bxctl sessions compact {session}`. loopd compacts a long thread by itself."
)


class Chat(Protocol):
    """What the relay needs of Mattermost (`MattermostClient` has it)."""

    async def create_post(
        self,
        channel_id: str,
        message: str,
        *,
        root_id: str | None = None,
        props: Mapping[str, Any] | None = None,
    ) -> Post: ...

    async def patch_post(self, post_id: str, message: str, props: Mapping[str, Any]) -> Post: ...


@dataclass(frozen=True)
class Owner:
    user_id: str  # the owner's Mattermost user id
    channel_id: str  # the owner's direct-message channel with the bot
    bot_id: str


def is_turn(post: Post, owner: Owner) -> bool:
    """Rule 1 (less the approval threads, which the caller asks about first)."""
    if post.user_id != owner.user_id or post.user_id == owner.bot_id:
        return False
    if post.channel_id != owner.channel_id or post.type:
        return False
    return not any(post.props.get(key) for key in _NOT_TURNS)


def is_compact(post: Post) -> bool:
    """Rule 7: the post asks for a compaction, which gatewayd does not send."""
    return post.message.strip() == COMPACT


def is_stop(post: Post) -> bool:
    """Rule 8: a reply in a thread asking to stop its turn."""
    return bool(post.root_id) and post.message.strip().lower() == STOP


def session_of(post: Post) -> tuple[str, bool]:
    """Rule 2: the session id, and whether it resumes."""
    return SESSION_PREFIX + (post.root_id or post.id), bool(post.root_id)


def rendered(text: str, untrusted: bool) -> tuple[str, dict[str, str]]:
    """A reply's text as posted, and the props that go with it."""
    escaped = escape_reply(text, untrusted)
    return escaped.message, ({"unsafe_links": "true"} if escaped.unsafe_links else {})


def streaming(text: str) -> tuple[str, dict[str, str]]:
    """Part of a reply, as posted while the turn runs (rule 3): escaped as untrusted,
    with `…` where the notice goes, since the turn's trust is not known yet; past one
    post's length, its first part only (rule 5)."""
    # the first part is within the first MAX_POST_CHARS characters (escaping never
    # shortens): looking no further keeps each edit's work bounded however long the reply
    message = split_reply(text[:MAX_POST_CHARS], True)[0]
    return message.removesuffix(NOTICE) + STARTED, {"unsafe_links": "true"}


class TurnRelay:
    """Runs one owner post as a turn and streams its answer into one post."""

    def __init__(
        self,
        chat: Chat,
        loop_socket: Path,
        *,
        timeout_ms: int,
        edit_interval_ms: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.chat = chat
        self.loop_socket = loop_socket
        self.timeout_s = timeout_ms / 1000
        self.edit_interval_s = edit_interval_ms / 1000
        self._monotonic = monotonic
        self._stops: dict[str, threading.Event] = {}  # the running turns' (rule 8)

    async def relay(self, post: Post) -> None:
        session, resume = session_of(post)
        root = post.root_id or post.id
        if is_stop(post) and session in self._stops:  # rule 8
            self._stops[session].set()
            log.info("event=turn_stop_asked session=%s post=%s", session, post.id)
            return
        if is_compact(post):  # rule 7
            await self._say(post.channel_id, root, COMPACT_REFUSED.format(session=session))
            log.info("event=compact_refused session=%s post=%s", session, post.id)
            return
        answer = await self.chat.create_post(
            post.channel_id, STARTED, root_id=root, props={"unsafe_links": "true"}
        )
        log.info("event=turn session=%s post=%s resume=%s", session, post.id, resume)
        stop = self._stops.setdefault(session, threading.Event())
        try:
            text, final, untrusted = await self._stream(
                post, answer.id, Turn(session=session, text=post.message, resume=resume), stop
            )
        except asyncio.CancelledError:
            stop.set()  # gatewayd is stopping: the reader closes the turn's connection now
            log.info("event=turn_stopped_by_shutdown session=%s post=%s", session, post.id)
            raise
        finally:
            self._stops.pop(session, None)
        if final is None and stop.is_set():
            final = f"{text}\n\n{STOPPED_NOTE}" if text else STOPPED_NOTE
        if final is None:
            final = f"{text}\n\n{CUT_OFF}" if text else CUT_OFF
        first, *more = split_reply(final, untrusted)
        props = {"unsafe_links": "true"} if untrusted else {}
        await self._patch(answer.id, first, props)
        for part in more:  # a reply longer than a post goes on in the thread (rule 5)
            await self._say(post.channel_id, root, part, props)
        log.info(
            "event=turn_posted session=%s post=%s untrusted=%s posts=%d",
            session,
            answer.id,
            untrusted,
            1 + len(more),
        )

    async def _stream(
        self, post: Post, answer_id: str, turn: Turn, stop: threading.Event
    ) -> tuple[str, str | None, bool]:
        """The turn's answers into the answer post as they come (rules 3, 4 and 6): the
        text streamed, the final content (None: none came) and its trust."""
        root = post.root_id or post.id
        text, final, untrusted = "", None, True
        shown, last_edit = "", self._monotonic()
        answers = self._read(turn, stop)
        while True:
            wait = None  # nothing new to show: wait for loopd as long as it takes
            if text != shown:
                wait = max(0.0, last_edit + self.edit_interval_s - self._monotonic())
            try:
                item = await asyncio.wait_for(answers.get(), wait)
            except TimeoutError:  # text waiting to be shown, and the interval is up
                await self._patch(answer_id, *streaming(text))
                shown, last_edit = text, self._monotonic()
                continue
            if item is None:
                break
            if isinstance(item, str):  # the turn could not be run: say why
                final = item
                continue
            said = item.message
            if isinstance(said, TurnEvent) and isinstance(said.event, ContentEvent):
                text += said.event.text
            elif isinstance(said, TurnEvent) and isinstance(said.event, ContextCompactedEvent):
                await self._say(
                    post.channel_id, root, compacted_line(said.event.before, said.event.after)
                )
                log.info("event=compaction_posted session=%s", turn.session)
            elif isinstance(said, TurnDone):
                final, untrusted = said.content, said.untrusted
            elif isinstance(said, Error):
                final = f"loopd could not take this message: {said.message}"
        return text, final, untrusted

    async def _say(
        self, channel_id: str, root: str, message: str, props: dict[str, str] | None = None
    ) -> None:
        """One post of gatewayd's own in the thread; a failure is logged, not the turn's."""
        try:
            await self.chat.create_post(channel_id, message, root_id=root, props=props)
        except MattermostError as exc:
            log.error("event=post_failed root=%s %s", root, exc)

    async def _patch(self, post_id: str, message: str, props: dict[str, str]) -> None:
        try:
            await self.chat.patch_post(post_id, message, props)
        except MattermostError as exc:
            log.error("event=edit_failed post=%s %s", post_id, exc)

    def _read(self, turn: Turn, stop: threading.Event) -> asyncio.Queue[Envelope | str | None]:
        """loopd's answers to `turn` as they come, read by a thread: a str when the
        turn could not be run, None after the last (or once `stop` is set: the
        connection closes, and loopd stops the turn)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Envelope | str | None] = asyncio.Queue()

        def put(item: Envelope | str | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: gatewayd is stopping
                loop.call_soon_threadsafe(queue.put_nowait, item)

        def read() -> None:
            try:
                sent = Request(
                    self.loop_socket,
                    turn,
                    f"turn-{turn.session}",
                    self.timeout_s,
                    cancelled=stop.is_set,
                )
                for envelope in sent.answers():
                    sent.wait(self.timeout_s)  # each answer moves the deadline
                    put(envelope)
            except RequestError as exc:
                log.error(
                    "event=loopd_unavailable socket=%s why=%s %s",
                    self.loop_socket,
                    exc,
                    Runbook.LOOPD_UNAVAILABLE.pointer,
                )
                put(UNREACHABLE)
            finally:
                put(None)

        threading.Thread(target=read, name=f"turn-{turn.session}", daemon=True).start()
        return queue
