"""Approvals over chat, end to end in one process: brokerd, gatewayd and the fake Mattermost.

brokerd (in process, real sockets, real ledger) posts each ask to gatewayd on
gateway.sock; gatewayd posts it in the owner's direct channel on the fake
server; the owner answers there, or with bxctl; brokerd runs (or not) the call
and reports the outcome, which gatewayd shows on the post.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from boxmaker.core.audit.records import ApprovalAnswer, ApprovalEvent
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.wire.broker import (
    DeniedResponse,
    PendingApprovalResponse,
    ResultResponse,
    ToolRequest,
)
from boxmaker.core.wire.broker_admin import Approve
from boxmaker.gatewayd.config import GatewaydConfig, MattermostSection, PathsSection
from boxmaker.gatewayd.serve import Gatewayd
from boxmaker.ipc.shell import now
from boxmaker.testing.daemons import InProcessBrokerd, running_brokerd
from boxmaker.testing.fake_mattermost import BOT_TOKEN, FakeMattermost
from boxmaker.testing.fake_mattermost_web import running
from boxmaker.testing.homes import write_grant
from boxmaker.testing.sockets import OpenCall
from boxmaker.testing.waiting import wait_until


@dataclass
class Tree:
    fake: FakeMattermost
    brokerd: InProcessBrokerd
    gatewayd: Gatewayd
    scratch: Path

    @property
    def dm(self) -> str:
        return self.fake.direct(self.fake.bot, self.fake.owner)

    def call(self, n: int = 1) -> OpenCall:
        arguments = orjson.dumps({"command": "make", "cwd": str(self.scratch)}).decode()
        request = ToolRequest(session="chat-1", call=f"c{n}", tool="shell", arguments=arguments)
        return self.brokerd.open_call(request)

    def approval_post(self, approval: int) -> dict[str, Any]:
        def posted() -> dict[str, Any]:
            with self.fake.lock:
                for post in self.fake.posts.values():
                    if f"Approval {approval} is waiting" in post["message"]:
                        return dict(post)
            return {}

        return wait_until(posted, 10.0, f"approval {approval} posted")

    def post(self, post_id: str) -> dict[str, Any]:
        with self.fake.lock:
            return dict(self.fake.posts[post_id])

    def approval_record(self, approval: int) -> ApprovalEvent:
        (event,) = [
            r.event
            for r in self.brokerd.records()
            if isinstance(r.event, ApprovalEvent) and r.event.decision == approval
        ]
        return event


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    scratch = tmp_path / "scratch"
    write_grant(
        tmp_path / "grants", "scratch-shell", tool="shell", mode="ask", paths=[str(scratch)]
    )
    fake = FakeMattermost(auth_cutoff_s=0.5)
    with running(fake) as url, running_brokerd(tmp_path, clock=now) as brokerd:
        config = GatewaydConfig(
            paths=PathsSection(home=str(brokerd.home)),
            mattermost=MattermostSection(url=url, owner=fake.owner.id, edit_interval_ms=100),
        )
        gatewayd = Gatewayd(config, BOT_TOKEN)
        gatewayd.start()
        try:
            yield Tree(fake, brokerd, gatewayd, scratch)
        finally:
            gatewayd.stop()


def waiting_for(call: OpenCall) -> int:
    first = call.first().message
    assert isinstance(first, PendingApprovalResponse)
    return first.approval


def test_a_reaction_from_the_owner_approves_and_the_post_shows_it(tree: Tree) -> None:
    with tree.call() as call:
        approval = waiting_for(call)
        post = tree.approval_post(approval)
        assert post["channel_id"] == tree.dm
        assert post["props"]["unsafe_links"] == "true"
        tree.fake.react_as(tree.fake.owner, post["id"], "white_check_mark")
        answer = call.final().message
    assert isinstance(answer, ResultResponse)
    assert tree.brokerd.runtime.count == 1
    record = tree.approval_record(approval)
    assert record.answer is ApprovalAnswer.APPROVED
    assert (record.by, record.post) == (tree.fake.owner.id, post["id"])
    wait_until(
        lambda: "approved in chat" in tree.post(post["id"])["message"], 10.0, "the outcome shown"
    )


def test_a_refuse_reply_with_a_reason_refuses(tree: Tree) -> None:
    with tree.call() as call:
        approval = waiting_for(call)
        post = tree.approval_post(approval)
        tree.fake.post_as(tree.fake.owner, tree.dm, f"refuse {approval} not today", post["id"])
        answer = call.final().message
    assert answer == DeniedResponse(reason=DenyReason.APPROVAL_REFUSED)
    assert tree.brokerd.runtime.count == 0
    record = tree.approval_record(approval)
    assert (record.answer, record.reason, record.post) == (
        ApprovalAnswer.REFUSED,
        "not today",
        post["id"],
    )


def test_forged_and_wrong_answers_do_not_approve(tree: Tree) -> None:
    with tree.call() as call:
        approval = waiting_for(call)
        post = tree.approval_post(approval)
        fake = tree.fake
        fake.react_as(fake.owner, post["id"], "tada")  # not an answer
        fake.post_as(fake.owner, tree.dm, f"approve {approval + 1}", post["id"])  # wrong id
        reply = fake.post_as(fake.owner, tree.dm, "looks fine", post["id"])
        fake.edit_as(fake.owner, reply["id"], f"approve {approval}")  # an edit
        wait_until(
            lambda: (
                # the two replies; a reaction or an edit gets no notice
                len([p for p in fake.posts.values() if p["message"].startswith("Not counted")]) >= 2
            ),
            10.0,
            "two not-counted notices",
        )
        assert tree.brokerd.runtime.count == 0
        assert tree.brokerd.daemon.table.items()  # still waiting
        tree.brokerd.admin(Approve(approval=approval))  # bxctl still works
        answer = call.final().message
    assert isinstance(answer, ResultResponse)
    assert tree.approval_record(approval).by == "bxctl"
    wait_until(
        lambda: "approved with bxctl" in tree.post(post["id"])["message"],
        10.0,
        "the outcome shown",
    )
    fake.react_as(fake.owner, post["id"], "white_check_mark")  # too late: nothing happens
    assert tree.brokerd.runtime.count == 1
    assert [r.event for r in tree.brokerd.records() if isinstance(r.event, ApprovalEvent)] == [
        tree.approval_record(approval)
    ]


def test_an_answer_in_the_thread_is_never_a_turn(tree: Tree, tmp_path: Path) -> None:
    with tree.call() as call:
        approval = waiting_for(call)
        post = tree.approval_post(approval)
        tree.fake.post_as(tree.fake.owner, tree.dm, f"approve {approval}", post["id"])
        assert isinstance(call.final().message, ResultResponse)
    # gatewayd answered in no thread other than with the outcome: no turn was tried
    replies = [p for p in tree.fake.posts.values() if p["root_id"] == post["id"]]
    assert [p["user_id"] for p in replies] == [tree.fake.owner.id]
