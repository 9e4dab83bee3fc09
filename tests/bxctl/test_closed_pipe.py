"""Every bxctl command ends a closed pipe quietly: no traceback, `EXIT_CLOSED_PIPE`.

The real console script writes to a pipe whose reader has gone: closed before bxctl
starts (every write fails, the first one or the interpreter's last flush), or
after one byte was read from more than the pipe holds (`| head -c1`).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from boxmaker.bxctl.cli import EXIT_CLOSED_PIPE
from boxmaker.core.audit.records import DecisionEvent, encode_line
from boxmaker.core.grants.decisions import AllowedRecord
from boxmaker.core.hashes import ZERO_HASH
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.loop import ContentEvent
from boxmaker.testing.peer_scripts import fake_loopd_script
from boxmaker.testing.processes import clean_environment, console_script
from boxmaker.testing.sockets import ScriptedServer

EXAMPLES = Path(__file__).resolve().parents[2] / "grants.example"
LONG = 3_000  # records: the report is larger than a pipe holds (64 KiB)


def write_long_log(home: Path, records: int = LONG) -> None:
    """A sound log of `records` decisions, each still unfinished, as the writer spells it."""
    (home / "audit").mkdir(parents=True)
    prev = ZERO_HASH
    with (home / "audit" / "2026-11-30.jsonl").open("wb") as log:
        for seq in range(records):
            event = DecisionEvent(
                session="chat-1",
                call=f"c{seq}",
                tool="read_file",
                arguments='{"path":"/x"}',
                outcome=AllowedRecord(),
                taint=DataClass.PRIVATE,
                untrusted=False,
            )
            line = encode_line(seq, "2026-11-30T08:00:00.000Z", prev, event)
            log.write(line + b"\n")
            prev = hashlib.sha256(line).hexdigest()


@pytest.fixture
def long_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    write_long_log(home)
    return home


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[ScriptedServer]:
    script = fake_loopd_script([ContentEvent(text="done")], "done")
    with ScriptedServer(tmp_path / "fl" / "loop.sock", script) as server:
        yield server


def chat(loop: ScriptedServer, tmp_path: Path, *extra: str) -> list[str]:
    admin = tmp_path / "no-brokerd" / "admin.sock"
    return ["chat", "--socket", str(loop.path), "--admin-socket", str(admin), *extra]


def environment(buffered: bool) -> dict[str, str]:
    """Python buffers stdout on a pipe (the last flush fails), unless told not to (a write)."""
    env = clean_environment()
    env.pop("PYTHONUNBUFFERED", None)
    return env if buffered else {**env, "PYTHONUNBUFFERED": "1"}


@pytest.fixture(params=[True, False], ids=["buffered", "unbuffered"])
def buffered(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def to_a_closed_pipe(
    args: Sequence[str], buffered: bool, *, stderr_too: bool = False, stdin: str = ""
) -> tuple[int, str]:
    """bxctl with stdout (and stderr, `stderr_too`) a pipe nobody reads: status, stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before bxctl writes a byte
    try:
        done = subprocess.run(
            [*console_script("bxctl"), *args],
            input=stdin.encode(),
            stdout=write_end,
            stderr=write_end if stderr_too else subprocess.PIPE,
            env=environment(buffered),
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    return done.returncode, (done.stderr or b"").decode()


Command = Callable[[Path, Path, ScriptedServer], list[str]]
COMMANDS: dict[str, Command] = {
    "help": lambda tmp, home, loop: ["--help"],
    "grants check": lambda tmp, home, loop: ["grants", "check", "--dir", str(EXAMPLES)],
    "grants explain": lambda tmp, home, loop: [
        *["grants", "explain", "--dir", str(EXAMPLES), "--tool", "read_file"],
        *["--arguments", '{"path":"/home/owner/notes/a.md"}'],
    ],
    "audit verify": lambda tmp, home, loop: ["audit", "verify", "--home", str(home)],
    "chat --say": lambda tmp, home, loop: chat(loop, tmp, "--say", "hi"),
    "chat --json --say": lambda tmp, home, loop: chat(loop, tmp, "--json", "--say", "hi"),
    "chat": lambda tmp, home, loop: chat(loop, tmp),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_closed_stdout_ends_quietly(
    command: str, buffered: bool, tmp_path: Path, long_home: Path, loop: ScriptedServer
) -> None:
    args = COMMANDS[command](tmp_path, long_home, loop)
    status, err = to_a_closed_pipe(args, buffered, stdin="hi\n")
    assert "Traceback" not in err
    assert "Error" not in err  # nor Python's "Exception ignored ... BrokenPipeError"
    assert status == EXIT_CLOSED_PIPE, err
    if command.startswith("chat"):  # the events went to stderr, which is fine
        assert "done" in err
    else:
        assert err == ""  # nothing is printed: the reader went away


@pytest.mark.parametrize(
    "command", ["grants check", "chat --say", "chat"], ids=["grants check", "chat --say", "chat"]
)
def test_a_closed_stdout_and_stderr_end_quietly(
    command: str, buffered: bool, tmp_path: Path, long_home: Path, loop: ScriptedServer
) -> None:
    args = COMMANDS[command](tmp_path, long_home, loop)
    status, _ = to_a_closed_pipe(args, buffered, stderr_too=True, stdin="hi\n")
    assert status == EXIT_CLOSED_PIPE  # not 120, Python's status for a failed last flush


def test_an_error_line_to_a_closed_stderr_ends_quietly(buffered: bool, tmp_path: Path) -> None:
    args = ["grants", "check", "--dir", str(tmp_path / "missing")]
    status, _ = to_a_closed_pipe(args, buffered, stderr_too=True)
    assert status == EXIT_CLOSED_PIPE


def test_a_reader_that_goes_away_mid_report_ends_quietly(
    buffered: bool, tmp_path: Path, long_home: Path
) -> None:
    """`bxctl audit verify | head -c1`: the pipe fills, then its reader closes it."""
    errors = tmp_path / "stderr.txt"
    with errors.open("wb") as err:
        process = subprocess.Popen(
            [*console_script("bxctl"), "audit", "verify", "--home", str(long_home)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            env=environment(buffered),
        )
        assert process.stdout is not None
        assert process.stdout.read(1) == b"a"  # "audit: ok, ..."
        process.stdout.close()
        status = process.wait(60)
    assert errors.read_text() == ""
    assert status == EXIT_CLOSED_PIPE


def test_the_long_report_is_larger_than_a_pipe_holds(long_home: Path) -> None:
    """So the test above closes its pipe while bxctl still has lines to write."""
    done = subprocess.run(
        [*console_script("bxctl"), "audit", "verify", "--home", str(long_home)],
        capture_output=True,
        env=clean_environment(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"audit: ok, 3000 records, head ")
    assert len(done.stdout) > 2 * 65_536
