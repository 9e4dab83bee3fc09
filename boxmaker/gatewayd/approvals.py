"""gateway.sock: brokerd's approvals posted in the owner's chat, the owner's answers sent back.

I/O: gateway.sock connections (threads of `boxmaker.ipc.serving`) and Mattermost
(through the client, on gatewayd's event loop). What counts as an answer, and
every text posted, is `gatewayd.approval_rules` (pure); this module keeps the
table of posts and moves messages:

1. `approval_request`: post `post_text(item)` in the owner's direct channel
   (props `unsafe_links`, though the post holds no live link), add the post to
   the table, answer `approval_posted {post}` (not final) and hold the
   connection. A post that cannot be made is `error {code: unavailable}`.
2. A chat event (`on_event`, on the event loop) is judged against the table
   under its lock; a counted answer takes its post out of the table in the
   same step (only the first answer counts) and hands it to the held
   connection, which answers `approval_reply` (final). An owner's reply in an
   approval thread that does not count is answered in the thread with why.
3. The held connection also ends, taking its post out of the table (so no
   later answer counts), when brokerd goes away (it settled the call another
   way, or stopped) or the approval has expired.
4. `approval_outcome`: the post is edited to `outcome_text`, and taken out of
   the table if it is still there; answered `ok`.

The table lives in memory: a gatewayd restart forgets its posts, and their
calls are answered with `bxctl` or expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from boxmaker.core.errors import ErrorCode
from boxmaker.core.timestamps import format_timestamp
from boxmaker.core.wire.broker_admin import PendingApproval
from boxmaker.core.wire.common import Error, Ok
from boxmaker.core.wire.gateway import (
    ApprovalOutcome,
    ApprovalPosted,
    ApprovalReply,
    ApprovalRequest,
    ReplyAnswer,
)
from boxmaker.gatewayd import approval_rules as rules
from boxmaker.gatewayd.mm_model import MattermostError, Posted, PostEdited, ReactionAdded
from boxmaker.gatewayd.turns import Chat, Owner
from boxmaker.ipc.connection import Connection, Handlers

log = logging.getLogger(__name__)

CHECK_EVERY_S = 1.0
POST_TIMEOUT_S = 30.0
REMEMBERED_POSTS = 1000  # approval posts whose threads are never turns
UNSAFE = {"unsafe_links": "true"}

T = TypeVar("T")
Answer = rules.Approve | rules.Refuse


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


@dataclass
class _Waiting:
    item: PendingApproval
    post: str
    answers: queue.Queue[Answer] = field(default_factory=lambda: queue.Queue(maxsize=1))


class ApprovalDesk:
    """The approval posts this gatewayd made, and the connections waiting on them."""

    def __init__(
        self,
        chat: Chat,
        loop: asyncio.AbstractEventLoop,
        owner: Owner,
        clock: Callable[[], str] = _now,
    ) -> None:
        self.chat = chat
        self.owner = owner
        self._loop = loop
        self._clock = clock
        self._lock = threading.Lock()
        self._posts: dict[str, rules.PostedApproval] = {}  # pending: answers may count
        self._waiting: dict[str, _Waiting] = {}  # by post id
        self._items: dict[int, tuple[PendingApproval, str]] = {}  # by approval: its post
        self._made: deque[str] = deque(maxlen=REMEMBERED_POSTS)
        self._in_flight = 0  # approval posts being made (touched on the event loop only)
        self._settled = asyncio.Event()  # set while none is
        self._settled.set()
        self._submit = threading.Lock()
        self._closing = False

    # --- gateway.sock (threads) ---------------------------------------------------------

    def handlers(self) -> Handlers:
        """gateway.sock's handler of each kind it accepts (`core.home.links.GATEWAY`)."""
        return {ApprovalRequest: self._request, ApprovalOutcome: self._answer_outcome}

    def _answer_outcome(self, conn: Connection, outcome: ApprovalOutcome) -> None:
        self._outcome(outcome)
        conn.send(Ok(), final=True)

    def _request(self, conn: Connection, request: ApprovalRequest) -> None:
        item = request.item()
        try:
            waiting = self._run(self._post(item))
        except (MattermostError, TimeoutError) as exc:
            log.error("event=approval_not_posted approval=%d %s", item.approval, exc)
            conn.send(Error(code=ErrorCode.UNAVAILABLE, message=f"cannot post: {exc}"), final=True)
            return
        log.info("event=approval_posted approval=%d post=%s", item.approval, waiting.post)
        try:
            conn.send(ApprovalPosted(approval=item.approval, post=waiting.post), final=False)
            answer = self._wait(conn, waiting)
            if answer is not None:
                conn.send(_reply(answer, self.owner.user_id), final=True)
        finally:
            self._forget_pending(waiting.post)

    async def _post(self, item: PendingApproval) -> _Waiting:
        """Make the post and put it in the table, on the event loop: events wait
        meanwhile (`on_event`), so an answer can never come before its post is known."""
        self._in_flight += 1
        self._settled.clear()
        try:
            text = rules.post_text(item)
            post = await self.chat.create_post(self.owner.channel_id, text, props=UNSAFE)
            waiting = _Waiting(item, post.id)
            with self._lock:
                self._posts[post.id] = rules.PostedApproval(
                    post.id, item.approval, item.expires, rules.shows_arguments(item)
                )
                self._waiting[post.id] = waiting
                self._items[item.approval] = (item, post.id)
                self._made.append(post.id)
            return waiting
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._settled.set()

    def _wait(self, conn: Connection, waiting: _Waiting) -> Answer | None:
        """The owner's counted answer; None when brokerd went away or it expired."""
        while True:
            try:
                return waiting.answers.get(timeout=CHECK_EVERY_S)
            except queue.Empty:
                pass
            if conn.peer_gone():
                log.info("event=approval_released approval=%d", waiting.item.approval)
                return None
            if self._clock() >= waiting.item.expires:
                log.info("event=approval_expired approval=%d", waiting.item.approval)
                return None

    def _outcome(self, outcome: ApprovalOutcome) -> None:
        with self._lock:
            known = self._items.pop(outcome.approval, None)
        if known is None:
            log.info("event=outcome_unknown approval=%d", outcome.approval)
            return
        item, post = known
        self._forget_pending(post)
        try:
            self._run(self.chat.patch_post(post, rules.outcome_text(item, outcome), UNSAFE))
        except (MattermostError, TimeoutError) as exc:
            log.error("event=outcome_not_posted approval=%d %s", outcome.approval, exc)

    def _forget_pending(self, post: str) -> None:
        with self._lock:
            self._posts.pop(post, None)
            self._waiting.pop(post, None)

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """`coroutine` run on the event loop, its result waited for here (a thread)."""
        with self._submit:
            if self._closing:  # the loop is being stopped: nothing new goes on it
                coroutine.close()
                raise MattermostError("gatewayd", None, "stopping")
            future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(POST_TIMEOUT_S)

    def close(self) -> None:
        """From now on nothing is handed to the event loop (it is about to stop)."""
        with self._submit:
            self._closing = True

    # --- chat events (the event loop) ------------------------------------------------------

    def is_approval_thread(self, root_id: str) -> bool:
        """Is `root_id` an approval post this gatewayd made (its replies are never turns)?"""
        with self._lock:
            return root_id in self._made

    async def on_event(self, event: Posted | PostEdited | ReactionAdded) -> bool:
        """Rule 2; True when the event was about an approval post (handled here)."""
        if self._in_flight:  # it may answer the post being made: wait until it is known
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), POST_TIMEOUT_S)
        judged = _judged_event(event)
        target = judged.post_id if isinstance(judged, rules.ReactionAdded) else judged.root_id
        if not target or not self.is_approval_thread(target):
            return False
        with self._lock:
            judgement = rules.judge(
                judged, self._posts, self.owner.user_id, self.owner.channel_id, self._clock()
            )
            waiting = None
            if not isinstance(judgement, rules.Ignore):
                self._posts.pop(judgement.post, None)
                waiting = self._waiting.pop(judgement.post, None)
        if isinstance(judgement, rules.Ignore):
            log.info("event=answer_ignored post=%s why=%s", target, judgement.why)
            if isinstance(judged, rules.Posted) and _owner_wrote(judged, self.owner):
                await self._say(target, f"Not counted: {judgement.why}.")
            return True
        if waiting is None:  # brokerd stopped waiting just now
            await self._say(target, "Not counted: this approval is no longer waiting.")
            return True
        waiting.answers.put_nowait(judgement)
        log.info("event=answer_counted approval=%d post=%s", judgement.approval, target)
        return True

    async def _say(self, root: str, text: str) -> None:
        try:
            await self.chat.create_post(self.owner.channel_id, text, root_id=root, props=UNSAFE)
        except MattermostError as exc:
            log.error("event=notice_not_posted post=%s %s", root, exc)


def _judged_event(event: Posted | PostEdited | ReactionAdded) -> rules.Event:
    if isinstance(event, ReactionAdded):
        reaction = event.reaction
        return rules.ReactionAdded(
            reaction.user_id, reaction.post_id, reaction.emoji_name, event.channel_id
        )
    post = event.post
    return rules.Posted(
        user_id=post.user_id,
        channel_id=post.channel_id,
        root_id=post.root_id,
        message=post.message,
        is_edit=isinstance(event, PostEdited) or bool(post.edit_at),
        type=post.type,
        from_webhook=bool(post.props.get("from_webhook")),
    )


def _owner_wrote(event: rules.Posted, owner: Owner) -> bool:
    return (
        event.user_id == owner.user_id
        and event.channel_id == owner.channel_id
        and not event.is_edit
        and not event.type
    )


def _reply(answer: Answer, owner: str) -> ApprovalReply:
    if isinstance(answer, rules.Approve):
        return ApprovalReply(
            approval=answer.approval, answer=ReplyAnswer.APPROVE, by=owner, post=answer.post
        )
    return ApprovalReply(
        approval=answer.approval,
        answer=ReplyAnswer.REFUSE,
        by=owner,
        post=answer.post,
        reason=answer.reason,
    )
