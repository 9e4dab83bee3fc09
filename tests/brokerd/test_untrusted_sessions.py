"""Untrusted sessions ask before they act: `when_untrusted`, through brokerd.

brokerd runs in this process on real sockets with a real audit writer and the
recording runtime. The session first reads a file under a grant marked
untrusted (its result makes the session untrusted); then calls on `auto`
grants ask, deny or run as each grant's `when_untrusted` says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.brokerd.session_state import SessionStore
from boxmaker.core.audit.records import DecisionEvent
from boxmaker.core.grants.decisions import AllowedRecord, AskRecord, DeniedRecord, DenyReason
from boxmaker.core.wire.broker import (
    DeniedResponse,
    PendingApprovalResponse,
    ResultResponse,
    ToolRequest,
)
from boxmaker.core.wire.broker_admin import (
    ApprovalList,
    Approvals,
    Approve,
    ApproveResult,
    Refuse,
    UntrustedBy,
)
from boxmaker.testing.daemons import InProcessBrokerd, running_brokerd
from boxmaker.testing.homes import write_grant

SESSION = "chat-1"


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    return {name: tmp_path / name for name in ("web", "notes", "scratch")}


@pytest.fixture
def brokerd(tmp_path: Path, places: dict[str, Path]) -> Iterator[InProcessBrokerd]:
    grants = tmp_path / "grants"
    # a read whose result is untrusted: content that may hold injected instructions
    write_grant(grants, "web-read", tool="read_file", untrusted=True, paths=[str(places["web"])])
    write_grant(grants, "notes-read", tool="read_file", paths=[str(places["notes"])])
    write_grant(grants, "scratch-write", tool="write_file", paths=[str(places["scratch"])])
    write_grant(grants, "scratch-shell", tool="shell", paths=[str(places["scratch"])])
    write_grant(grants, "docs-fetch", tool="http_fetch", hosts=["docs.python.org"])
    with running_brokerd(tmp_path) as b:
        yield b


def request(tool: str, arguments: dict[str, str], call: str) -> ToolRequest:
    raw = orjson.dumps(arguments).decode()
    return ToolRequest(session=SESSION, call=call, tool=tool, arguments=raw)


def read_untrusted(b: InProcessBrokerd, places: dict[str, Path]) -> None:
    answers = b.tool(request("read_file", {"path": str(places["web"] / "page")}, "r1"), "r1")
    result = answers[-1].message
    assert isinstance(result, ResultResponse)
    assert result.untrusted
    assert SessionStore(b.home).read(SESSION).untrusted


def decision_of(b: InProcessBrokerd, call: str) -> DecisionEvent:
    (event,) = [
        r.event for r in b.records() if isinstance(r.event, DecisionEvent) and r.event.call == call
    ]
    return event


def write_args(places: dict[str, Path]) -> dict[str, str]:
    return {"path": str(places["scratch"] / "a"), "content": "x"}


def shell_args(places: dict[str, Path]) -> dict[str, str]:
    return {"command": "make", "cwd": str(places["scratch"])}


def fetch_args(places: dict[str, Path]) -> dict[str, str]:
    return {"url": "https://docs.python.org/3/"}


CALLS: dict[str, tuple[str, Callable[[dict[str, Path]], dict[str, str]]]] = {
    "write": ("write_file", write_args),
    "shell": ("shell", shell_args),
    "fetch": ("http_fetch", fetch_args),
}


@pytest.mark.parametrize("kind", list(CALLS))
def test_after_an_untrusted_read_an_auto_grant_asks(
    brokerd: InProcessBrokerd, places: dict[str, Path], kind: str
) -> None:
    tool, arguments = CALLS[kind]
    # trusted, the call runs on its auto grant
    before = brokerd.tool(request(tool, arguments(places), "c0"), "c0")[-1].message
    assert isinstance(before, ResultResponse)
    read_untrusted(brokerd, places)
    with brokerd.open_call(request(tool, arguments(places), "c1")) as call:
        first = call.first()
        assert not first.final
        assert isinstance(first.message, PendingApprovalResponse)
        assert brokerd.runtime.count == 2  # the call before, and the read
        listing = brokerd.admin(Approvals())[-1].message
        assert isinstance(listing, ApprovalList)
        (item,) = listing.items
        assert item.tool == tool
        assert item.untrusted_by == UntrustedBy(session=SESSION, call="r1", tool="read_file")
        decision = decision_of(brokerd, "c1")
        assert decision.outcome == AskRecord(why="untrusted")
        assert decision.untrusted
        # approving runs it, under the grant it asked under
        approved = brokerd.admin(Approve(approval=first.message.approval))[-1].message
        assert approved == ApproveResult(outcome=AllowedRecord())
        assert isinstance(call.final().message, ResultResponse)
    assert brokerd.runtime.count == 3
    assert decision_of(brokerd, "c0").outcome == AllowedRecord()


def test_after_an_untrusted_read_a_read_stays_auto(
    brokerd: InProcessBrokerd, places: dict[str, Path]
) -> None:
    read_untrusted(brokerd, places)
    answers = brokerd.tool(request("read_file", {"path": str(places["notes"] / "a")}, "c1"), "c1")
    assert [a.final for a in answers] == [True]
    assert isinstance(answers[0].message, ResultResponse)
    assert decision_of(brokerd, "c1").outcome == AllowedRecord()


@pytest.mark.parametrize(
    ("when", "outcome"),
    [
        ("deny", DeniedRecord(reason=DenyReason.UNTRUSTED_SESSION)),
        ("auto", AllowedRecord()),
    ],
    ids=["deny-denies", "auto-keeps-auto"],
)
def test_when_untrusted_written_in_the_grant(
    brokerd: InProcessBrokerd, places: dict[str, Path], when: str, outcome: object
) -> None:
    write_grant(
        brokerd.grants_dir,
        "scratch-write",
        tool="write_file",
        paths=[str(places["scratch"])],
        when_untrusted=when,
    )
    read_untrusted(brokerd, places)
    write = request("write_file", {"path": str(places["scratch"] / "a"), "content": "x"}, "c1")
    answers = brokerd.tool(write, "c1")
    assert [a.final for a in answers] == [True]
    if when == "deny":
        assert answers[0].message == DeniedResponse(reason=DenyReason.UNTRUSTED_SESSION)
        assert brokerd.runtime.count == 1
    else:
        assert isinstance(answers[0].message, ResultResponse)
        assert brokerd.runtime.count == 2
    decision = decision_of(brokerd, "c1")
    assert decision.outcome == outcome
    assert decision.grant == "scratch-write"


def test_a_session_that_turns_untrusted_after_the_ask_shows_it_in_the_list(
    tmp_path: Path, places: dict[str, Path]
) -> None:
    grants = tmp_path / "grants"
    write_grant(grants, "web-read", tool="read_file", untrusted=True, paths=[str(places["web"])])
    write_grant(
        grants, "scratch-ask", tool="write_file", mode="ask", paths=[str(places["scratch"])]
    )
    with (
        running_brokerd(tmp_path, grants_dir=grants) as b,
        b.open_call(request("write_file", write_args(places), "w1")) as call,
    ):
        first = call.first()
        assert isinstance(first.message, PendingApprovalResponse)
        before = b.admin(Approvals())[-1].message
        assert isinstance(before, ApprovalList)
        assert before.items[0].untrusted_by is None  # trusted when it asked
        read_untrusted(b, places)  # the same session reads untrusted content meanwhile
        after = b.admin(Approvals())[-1].message
        assert isinstance(after, ApprovalList)
        (item,) = after.items
        assert item.untrusted_by == UntrustedBy(session=SESSION, call="r1", tool="read_file")
        b.admin(Refuse(approval=first.message.approval))
