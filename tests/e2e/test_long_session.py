"""A 40-turn session on the embedded model at a context of 2,048: it never runs out.

The real brokerd (`backend = "bwrap"`: each read_file runs in the sandbox) and
loop.sock served in this process over the real embedded Gemma 3 270M, its own
chat template, at a context of 2,048 tokens, with loopd's own budgets for that
context (`loopd.main.turn_limits`). The owner asks forty times for a note of
64 KiB; the model cannot call tools, so its calls are written for it
(`testing.forced_model`), and everything else it writes (its answers, the
compactions' summaries) is its own. The session must never end for lack of
context, compact at least twice, show the owner every compaction, keep each
result whole in its log and cut in the prompt; after a restart of loopd the next
prompt is the same token for token; brokerd's audit log verifies.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from support.llama import require_llama_cpp
from support.skips import skip_or_fail

from boxmaker.core.home.layout import HOME_VARIABLE, Home
from boxmaker.core.wire.loop import ContextCompactedEvent, ToolResultEvent, TurnDone, TurnEvent
from boxmaker.loopd.config import LoopdConfig, ModelSection, PathsSection, TurnSection
from boxmaker.loopd.dialects import choose_dialect
from boxmaker.loopd.main import turn_limits
from boxmaker.loopd.session_log import SessionLogs, ToolEntry
from boxmaker.loopd.startup import load_model
from boxmaker.sandbox.bwrap import BwrapRuntime
from boxmaker.testing.daemons import start_loopd
from boxmaker.testing.forced_model import ForcedModel
from boxmaker.testing.homes import make_home, verify_log, write_config, write_grant
from boxmaker.testing.processes import DaemonProcess

pytestmark = [pytest.mark.e2e, pytest.mark.model, pytest.mark.slow]

require_llama_cpp("the long-session test on the embedded model")
MISSING = BwrapRuntime.preflight()
if MISSING:
    skip_or_fail("bubblewrap cannot run here: " + "; ".join(MISSING), allow_module_level=True)

TURNS = 40
NOTE_BYTES = 65_536
SESSION = "long-1"
ASKED = re.compile(r"Read note (\d+)[^<]*<end_of_turn>\s*<start_of_turn>model\s*$")


def note(n: int) -> str:
    """64 KiB of numbered lines; the last line says which note it is."""
    lines: list[str] = []
    size = 0
    number = 0
    while size < NOTE_BYTES - 64:
        line = f"note {n} line {number}: the quick brown fox jumps over the lazy dog"
        lines.append(line)
        size += len(line) + 1
        number += 1
    body = "\n".join(lines) + "\n"
    tail = f"end of note {n}\n"
    return body + "x" * (NOTE_BYTES - len(body) - len(tail)) + tail


def forced(notes: Path) -> Callable[[str], str | None]:
    def force(tail: str) -> str | None:
        """The call to read note N, when the owner's words just before the model's
        turn ask for it (a tool result there: the model answers on its own)."""
        asked = ASKED.search(tail)
        if asked is None:
            return None
        path = str(notes / f"{asked.group(1)}.md")
        arguments = {"name": "read_file", "arguments": {"path": path}}
        return json.dumps({"name": "call_tool", "arguments": arguments})

    return force


def test_forty_turns_of_64_kib_results_compact_and_never_end(tmp_path: Path) -> None:
    assert MISSING == [], MISSING
    # a short path: the model's call to read a note must fit its reply budget
    notes = Path(tempfile.mkdtemp(prefix="bx", dir="/tmp"))
    try:
        run_session(tmp_path, notes)
    finally:
        shutil.rmtree(notes)


def run_session(tmp_path: Path, notes: Path) -> None:
    for n in range(TURNS):
        (notes / f"{n}.md").write_text(note(n), encoding="utf-8")
    grants = tmp_path / "grants"
    write_grant(grants, "notes-read", tool="read_file", result_class="private", paths=[str(notes)])
    home = make_home(tmp_path)
    place = Home(home)
    broker_config = write_config(tmp_path / "brokerd.toml", home, grants, backend="bwrap")
    config = LoopdConfig(
        paths=PathsSection(home=str(home)),
        model=ModelSection(context=2_048, max_tokens=64, seed=1, temperature=0.0),
        turn=TurnSection(max_tokens=200, summary_tokens=96, keep_turns=1),
    )
    limits = turn_limits(config)
    assert limits.context == 2_048
    model = load_model(config)
    dialect, _ = choose_dialect(config, model)
    force = forced(notes)
    with DaemonProcess(broker_config) as brokerd:
        brokerd.wait_serving([place.broker_socket, place.admin_socket])
        loopd = start_loopd(
            tmp_path,
            ForcedModel(model, force),
            home=home,
            broker_socket=place.broker_socket,
            limits=limits,
            dialect=dialect,
        )
        compactions: list[ContextCompactedEvent] = []
        results: list[ToolResultEvent] = []
        try:
            for n in range(TURNS):
                answers = loopd.turn(
                    SESSION,
                    f"Read note {n} and tell me its last line.",
                    resume=n > 0,
                    timeout_s=300,
                )
                done = answers[-1].message
                assert isinstance(done, TurnDone), done
                assert not done.content.startswith("The turn stopped"), (n, done.content)
                events = [a.message.event for a in answers if isinstance(a.message, TurnEvent)]
                compactions += [e for e in events if isinstance(e, ContextCompactedEvent)]
                results += [e for e in events if isinstance(e, ToolResultEvent)]
            before_restart = loopd.daemon.turns.prompt(SessionLogs(home).open(SESSION))
        finally:
            loopd.stop()
        assert len(compactions) >= 2, compactions
        assert all(e.after < e.before <= 2_048 for e in compactions)
        # each result whole in the log, and cut to its budget in what the model read
        assert len(results) == TURNS
        logged = [e for e in SessionLogs(home).open(SESSION).entries if isinstance(e, ToolEntry)]
        reads = [e for e in logged if e.content.startswith("note ")]
        assert len(reads) == TURNS
        assert all(len(e.content.encode()) == NOTE_BYTES for e in reads)
        assert all(e.shown is not None and "end of note" in e.shown for e in reads)
        # a restart of loopd: a new turn loop over the same log builds the same prompt
        loopd = start_loopd(
            tmp_path,
            ForcedModel(model, force),
            home=home,
            broker_socket=place.broker_socket,
            limits=limits,
            dialect=dialect,
        )
        try:
            assert loopd.daemon.turns.prompt(SessionLogs(home).open(SESSION)) == before_restart
            sessions = bxctl("sessions", home=home)
            answers = loopd.turn(SESSION, "Read note 0 again.", resume=True, timeout_s=300)
            assert isinstance(answers[-1].message, TurnDone)
        finally:
            loopd.stop()
    assert sessions.returncode == 0, sessions.stderr
    [row] = [line for line in sessions.stdout.splitlines() if line.startswith(SESSION)]
    columns = row.split()
    assert columns[3] == str(len(compactions)), row  # its compactions, as loopd counts them
    assert columns[4:6] == ["private", "no"], row  # brokerd's taint, and trusted
    assert verify_log(home).failure is None
    audit = bxctl("audit", "verify", "--home", str(home))
    assert audit.returncode == 0, audit.stderr
    assert audit.stdout.startswith("audit: ok"), audit.stdout


def bxctl(*args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """bxctl as the owner runs it: its sockets under `home` (BOXMAKER_HOME)."""
    command = [str(Path(sys.executable).parent / "bxctl"), *args]
    env = {**os.environ, HOME_VARIABLE: str(home)} if home is not None else None
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60, env=env)
