"""Through the real brokerd with `backend = "bwrap"`: tools run for real, and are recorded.

An allowed read_file returns the file's content with its grant's label and raises
the session's taint on disk; an allowed shell call in a scratch grant runs `echo`;
the audit log then verifies with Decision and Result records. Needs bubblewrap and
per-call cgroups: where the host lacks them the test says so and is skipped, except
in CI, which prepares the host and must run it.
"""

from __future__ import annotations

from pathlib import Path

import orjson
from support.skips import skip_or_fail

from boxmaker.core.audit.records import DecisionEvent, ResultEvent
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker import ResultResponse, ToolRequest
from boxmaker.sandbox.bwrap import BwrapRuntime
from boxmaker.testing.homes import make_home, read_records, verify_log, write_config, write_grant
from boxmaker.testing.processes import DaemonProcess
from boxmaker.testing.sockets import exchange

MISSING = BwrapRuntime.preflight()
if MISSING:
    skip_or_fail("bubblewrap cannot run here: " + "; ".join(MISSING), allow_module_level=True)


def _call(socket: Path, call: str, tool: str, arguments: dict[str, str]) -> ResultResponse:
    request = ToolRequest(
        session="chat-1", call=call, tool=tool, arguments=orjson.dumps(arguments).decode()
    )
    final = exchange(socket, request, call)[-1].message
    assert isinstance(final, ResultResponse), final
    return final


def test_read_file_and_shell_run_for_real(tmp_path: Path) -> None:
    assert MISSING == [], MISSING
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("the owner's notes\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    grants = tmp_path / "grants"
    write_grant(grants, "notes-read", tool="read_file", result_class="secret", paths=[str(notes)])
    write_grant(grants, "scratch-shell", tool="shell", paths=[str(scratch)])
    home = make_home(tmp_path)
    config = write_config(tmp_path / "brokerd.toml", home, grants, backend="bwrap")
    broker = home / "run" / "loop-broker" / "broker.sock"
    with DaemonProcess(config) as daemon:
        daemon.wait_serving([broker])
        read = _call(broker, "c1", "read_file", {"path": str(notes / "a.md")})
        shell = _call(
            broker, "c2", "shell", {"command": "echo hello from the sandbox", "cwd": str(scratch)}
        )
    assert read.content == "the owner's notes\n"
    assert read.class_ is DataClass.SECRET
    assert shell.content == "hello from the sandbox\n\n[exit status 0]"
    state = orjson.loads((home / "broker" / "sessions" / "chat-1.json").read_bytes())
    assert state == {"taint": "secret", "untrusted": False}
    report = verify_log(home)
    assert report.failure is None
    assert report.unfinished == ()
    kinds = [type(r.event) for r in read_records(home)]
    assert kinds == [DecisionEvent, ResultEvent, DecisionEvent, ResultEvent]
