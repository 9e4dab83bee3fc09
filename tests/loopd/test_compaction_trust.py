"""A compaction in an untrusted session: brokerd still has it untrusted, and the next write asks.

brokerd runs in this process on real sockets with a real audit writer and the
recording runtime; the turn loop talks to it through the real BrokerPort. The
session reads a page under a grant marked untrusted, talks on until its prompt
is compacted, then asks for a write on an `auto` grant: brokerd must ask the
owner (`when_untrusted`), not run it, and the decision record says why.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from boxmaker.brokerd.session_state import SessionStore
from boxmaker.core.audit.records import DecisionEvent
from boxmaker.core.grants.decisions import AskRecord
from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.model.compaction_plan import MEMORY_CHANCE, SUMMARY_INSTRUCTION
from boxmaker.core.model.dialect import from_format
from boxmaker.core.wire.broker_admin import Refuse
from boxmaker.core.wire.loop import ApprovalPendingEvent, ContextCompactedEvent, Event
from boxmaker.loopd.broker_port import BrokerPort
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.session_log import SessionLogs
from boxmaker.loopd.turn import TurnLoop
from boxmaker.testing.daemons import running_brokerd
from boxmaker.testing.homes import write_grant
from boxmaker.testing.scripted_model import ScriptedModel
from boxmaker.testing.waiting import wait_until

SESSION = "chat-1"
LIMITS = TurnLimits(stream_interval_s=0, context=3_000, summary_tokens=200)


def call_tool(tool: str, arguments: dict[str, object]) -> str:
    return json.dumps({"name": "call_tool", "arguments": {"name": tool, "arguments": arguments}})


def test_a_compacted_untrusted_session_stays_untrusted_and_its_next_write_asks(
    tmp_path: Path,
) -> None:
    web, scratch = tmp_path / "web", tmp_path / "scratch"
    grants = tmp_path / "grants"
    write_grant(grants, "web-read", tool="read_file", untrusted=True, paths=[str(web)])
    write_grant(grants, "scratch-write", tool="write_file", paths=[str(scratch)])
    read = call_tool("read_file", {"path": str(web / "page")})
    write = call_tool("write_file", {"path": str(scratch / "a"), "content": "x"})

    def reply(prompt: str) -> str:
        last = prompt.rsplit("<start_of_turn>user", 1)[-1]
        if SUMMARY_INSTRUCTION in last:
            return "The owner read a web page; nothing else was done."
        if MEMORY_CHANCE in last:
            return "nothing to save"
        if "read the page<end_of_turn>" in last and "[result of" not in last:
            return read
        if "write it<end_of_turn>" in last and "[result of" not in last:
            return write
        return "Noted. " + "x" * 200

    with running_brokerd(tmp_path, grants_dir=grants) as brokerd:
        port = BrokerPort(brokerd.broker_socket, 10_000)
        model = ScriptedModel([reply] * 200)
        loop = TurnLoop(model, from_format(GEMMA), SessionLogs(brokerd.home), port, LIMITS)
        events: list[Event] = []
        loop.run(SESSION, "read the page", False, events.append)
        assert SessionStore(brokerd.home).read(SESSION).untrusted
        for n in range(10):
            loop.run(SESSION, f"message {n}: " + "m" * 250, True, events.append)
        assert [e for e in events if isinstance(e, ContextCompactedEvent)], "no compaction"
        assert SessionLogs(brokerd.home).open(SESSION).compaction is not None
        state = SessionStore(brokerd.home).read(SESSION)
        assert state.untrusted  # compaction never touched brokerd's state
        # the next side effect asks: the owner refuses it, and the turn ends
        asked: list[Event] = []
        turn = threading.Thread(
            target=lambda: loop.run(SESSION, "write it", True, asked.append), daemon=True
        )
        turn.start()
        wait_until(lambda: any(isinstance(e, ApprovalPendingEvent) for e in asked), 10.0)
        [pending] = [e for e in asked if isinstance(e, ApprovalPendingEvent)]
        assert pending.tool == "write_file"
        brokerd.admin(Refuse(approval=pending.approval, reason="not now"))
        turn.join(10.0)
        assert not turn.is_alive()
        decisions = [
            r.event
            for r in brokerd.records()
            if isinstance(r.event, DecisionEvent) and r.event.tool == "write_file"
        ]
        assert [d.outcome for d in decisions] == [AskRecord(why="untrusted")]
        assert decisions[0].untrusted
        assert brokerd.runtime.count == 1  # the read only: the write never ran
