"""The spec's end-to-end test, in two processes: the real `brokerd` console script on a
temporary home, and loopd's turn loop (in this process) with the scripted model.

The model calls call_tool for read_file with no grant. brokerd decides no_grant and
writes one Decision record before answering; loopd turns the denial into the text
the model reads next. Two processes over the real socket: loopd never imports
brokerd, and the test shows the two agree on the wire.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from boxmaker.core.audit.records import DecisionEvent
from boxmaker.core.grants.decisions import DeniedRecord, DenyReason
from boxmaker.core.home.layout import Home
from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.model.dialect import from_format
from boxmaker.core.wire.loop import Event, ToolDeniedEvent, ToolResultEvent
from boxmaker.loopd.broker_port import BrokerPort
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.session_log import SessionLogs
from boxmaker.loopd.turn import TurnLoop
from boxmaker.testing.homes import make_home, read_records, verify_log, write_config
from boxmaker.testing.processes import DaemonProcess
from boxmaker.testing.scripted_model import ScriptedModel

pytestmark = pytest.mark.e2e

DENIED = "Denied: no grant allows this call."


def test_a_call_with_no_grant_is_denied_audited_once_and_explained_to_the_model(
    tmp_path: Path,
) -> None:
    home = make_home(tmp_path)
    try:
        grants = tmp_path / "grants"
        grants.mkdir()
        config = write_config(tmp_path / "brokerd.toml", home, grants)
        arguments = {"path": "/home/owner/notes/a.md"}
        model = ScriptedModel(
            [
                json.dumps(
                    {
                        "name": "call_tool",
                        "arguments": {"name": "read_file", "arguments": arguments},
                    }
                ),
                "I may not read that file.",
            ]
        )
        with DaemonProcess(config) as brokerd:
            brokerd.wait_serving([Home(home).broker_socket, Home(home).admin_socket])
            loop = TurnLoop(
                model,
                from_format(GEMMA),
                SessionLogs(home),
                BrokerPort(Home(home).broker_socket, 10_000),
                TurnLimits(),
            )
            events: list[Event] = []
            done = loop.run("chat-1", "read my notes", False, events.append)
            status = brokerd.stop()
        assert status == 0, brokerd.stderr
        assert brokerd.stopped_cleanly

        assert done.content == "I may not read that file."
        assert DENIED in model.prompt_text(1)
        assert DENIED not in model.prompt_text(0)
        assert ToolDeniedEvent(name="read_file", reason=DenyReason.NO_GRANT) in events
        (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
        assert (result.name, result.content) == ("call_tool", DENIED)

        report = verify_log(home)
        assert report.ok, report.failure
        assert report.records == 1
        assert report.torn_tail is None
        (record,) = read_records(home)
        event = record.event
        assert isinstance(event, DecisionEvent)
        assert event.outcome == DeniedRecord(reason=DenyReason.NO_GRANT)
        assert (event.session, event.tool) == ("chat-1", "read_file")
        assert json.loads(event.arguments) == arguments
        assert event.call == result.call  # the call id loopd chose is the one audited
        assert event.grant is None
    finally:
        if home.parent != tmp_path:
            shutil.rmtree(home.parent)
