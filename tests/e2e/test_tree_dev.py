"""The supervised tree in dev mode: install, supervisord, every role answering, a real turn.

Runs the real console scripts under the real supervisord with the embedded model
(so it is a model test, and slow): `bxctl install --dev`, `supervisord` with
brokerd, memoryd and loopd RUNNING and gatewayd EXITED (no Mattermost server is
configured, so it says so and stays stopped), `bxctl status`, `bxctl memory log`
over memoryd's owner socket, `bxctl chat --say`, `supervisorctl stop`/`start` of
brokerd, and the audit log verifying at the end.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from boxmaker.testing.waiting import wait_until

BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.e2e]


def _run(
    *argv: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def _wait(condition: Callable[[], bool], what: str, timeout: float = 240) -> None:
    """Poll `condition` (it runs a command) twice a second at most, until `timeout`."""
    wait_until(condition, timeout, what, interval_s=0.5)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    prefix = tmp_path / "bx"
    workspace = str(tmp_path / "workspace")
    done = _run(
        str(BIN / "bxctl"), "install", "--dev", "--prefix", str(prefix), "--workspace", workspace
    )
    assert done.returncode == 0, done.stdout + done.stderr
    loopd = prefix / "etc" / "loopd.toml"  # the owner's file: short replies for the test
    loopd.write_text(
        loopd.read_text().replace('path = ""', 'path = ""\nmax_tokens = 16\nthreads = 2')
        + "\n[turn]\nmax_tokens = 32\n"
    )
    conf = str(prefix / "etc" / "supervisord.conf")
    started = _run(str(BIN / "supervisord"), "-c", conf)
    assert started.returncode == 0, started.stderr
    env = {"BOXMAKER_HOME": str(prefix / "home"), "PATH": f"{BIN}:/usr/bin:/bin"}
    try:
        yield prefix, env
    finally:
        _run(str(BIN / "supervisorctl"), "-c", conf, "shutdown")


EXPECTED_STATES = {
    "brokerd": "RUNNING",
    "memoryd": "RUNNING",
    "loopd": "RUNNING",
    "gatewayd": "EXITED",
}


def _states(conf: str) -> dict[str, str]:
    """Each program's state, as `supervisorctl status` prints it."""
    lines = _run(str(BIN / "supervisorctl"), "-c", conf, "status").stdout.splitlines()
    fields = (line.split() for line in lines if line.startswith("boxmaker:"))
    return {f[0].removeprefix("boxmaker:"): f[1] for f in fields if len(f) > 1}


def _status(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return _run(str(BIN / "bxctl"), "status", env=env, timeout=30)


def test_the_tree_comes_up_answers_and_survives_a_restart(
    tree: tuple[Path, dict[str, str]],
) -> None:
    prefix, env = tree
    conf = str(prefix / "etc" / "supervisord.conf")
    _wait(lambda: _status(env).returncode == 0, "every role to answer")
    # supervisord calls a program RUNNING once it has stayed up for its startsecs;
    # gatewayd, not configured, exits 0 at once and stays EXITED (not BACKOFF, FATAL)
    _wait(
        lambda: _states(conf) == EXPECTED_STATES,
        f"supervisord to see {EXPECTED_STATES}",
        timeout=60,
    )
    gatewayd_log = (prefix / "log" / "gatewayd.log").read_text()
    assert gatewayd_log.count("event=not_configured") == 1, gatewayd_log  # started once
    assert gatewayd_log.rstrip().endswith("see runbook.md#gateway-not-configured")
    status = _status(env).stdout
    assert "memoryd: answers" in status
    # where loopd's model runs: this machine's CPU build, and the settings loopd planned
    loopd_line = next(line for line in status.splitlines() if line.startswith("loopd: answers"))
    assert "backend CPU (this build has no GPU backend); gpu_layers none" in loopd_line
    assert loopd_line.endswith("no layer offloaded (no GPU backend)")

    # memoryd answers the owner on its owner socket, as `bxctl memory log` asks it
    log = _run(str(BIN / "bxctl"), "memory", "log", env=env, timeout=30)
    assert log.returncode == 0, log.stdout + log.stderr
    owner_memory = prefix / "home" / "run" / "owner-memory" / "admin.sock"
    assert stat.S_IMODE(owner_memory.stat().st_mode) == 0o600  # dev mode: this user only
    assert stat.S_IMODE((prefix / "etc" / "memoryd.toml").stat().st_mode) == 0o600

    chat = _run(str(BIN / "bxctl"), "chat", "--say", "hello", env=env, timeout=300)
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.strip() != ""

    stopped = _run(str(BIN / "supervisorctl"), "-c", conf, "stop", "boxmaker:brokerd")
    assert stopped.returncode == 0, stopped.stdout
    down = _status(env)
    assert down.returncode == 1
    assert "brokerd: cannot reach brokerd" in down.stdout
    assert _run(str(BIN / "supervisorctl"), "-c", conf, "start", "boxmaker:brokerd").returncode == 0
    _wait(lambda: _status(env).returncode == 0, "brokerd to answer again", timeout=60)

    verify = _run(str(BIN / "bxctl"), "audit", "verify", "--home", str(prefix / "home"))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout.startswith("audit: ok")


def test_the_walk_through_reads_and_waits_for_the_owner(
    tree: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """scripts/demo, as scripts/run ends with it: an allowed read, an approved shell call."""
    prefix, env = tree
    _wait(lambda: _status(env).returncode == 0, "every role to answer")
    demo = Path(__file__).resolve().parents[2] / "scripts" / "demo"
    workspace = str(tmp_path / "workspace")
    walk = _run(str(demo), str(prefix), workspace, env=env, timeout=120)
    assert walk.returncode == 0, walk.stdout + walk.stderr
    shown = walk.stdout + walk.stderr
    assert f'[tool read_file {{"path":"{workspace}/notes/welcome.md"}}]' in shown
    assert "> # Welcome to boxmaker" in walk.stdout  # the note, quoted by the demo model
    assert "grant scratch-shell" in shown  # brokerd's two lines about the waiting call
    assert "(no terminal: scripts/demo answers as the owner would: bxctl approve" in shown
    assert "[result shell:" in shown
    assert "> [exit status 0]" in walk.stdout
    assert (tmp_path / "workspace" / "scratch" / "hello.txt").read_text() == (
        "written in the sandbox\n"
    )
    audit = [line for line in walk.stdout.splitlines() if line.startswith("  seq ")]
    events = [line.split("  ")[-1].split(", ")[0] for line in audit]  # without the sizes
    assert events == [
        "decision: read_file allowed (grant notes-read)",
        "result of seq 0: result",
        "decision: shell ask (grant scratch-shell)",
        "approval of seq 2: approved",
        "result of seq 2: result",
    ]
    assert walk.stdout.rstrip().splitlines()[-1].startswith("audit: ok, 5 records")


@pytest.fixture
def own_tree(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str], Path]]:
    """The dev tree with loopd.toml as `bxctl install` writes it: the embedded model
    with its shipped adapter and loopd's own reply budget."""
    prefix = tmp_path / "bx"
    workspace = tmp_path / "workspace"
    done = _run(
        str(BIN / "bxctl"),
        "install",
        "--dev",
        "--prefix",
        str(prefix),
        "--workspace",
        str(workspace),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    conf = str(prefix / "etc" / "supervisord.conf")
    started = _run(str(BIN / "supervisord"), "-c", conf)
    assert started.returncode == 0, started.stderr
    env = {"BOXMAKER_HOME": str(prefix / "home"), "PATH": f"{BIN}:/usr/bin:/bin"}
    try:
        yield prefix, env, workspace
    finally:
        _run(str(BIN / "supervisorctl"), "-c", conf, "shutdown")


def test_the_walk_through_is_the_models_own(own_tree: tuple[Path, dict[str, str], Path]) -> None:
    """scripts/walkthrough, as scripts/run ends with it: the owner's two requests typed
    as text, each call written by the embedded model with its adapter (issue 39)."""
    _prefix, env, workspace = own_tree
    _wait(lambda: _status(env).returncode == 0, "every role to answer")
    walk_script = Path(__file__).resolve().parents[2] / "scripts" / "walkthrough"
    walk = _run(str(walk_script), str(workspace), env=env, timeout=300)
    assert walk.returncode == 0, walk.stdout + walk.stderr
    said = walk.stdout
    note = workspace / "notes" / "welcome.md"
    assert f'the model itself called read_file {{"path": "{note}"}}' in said, said
    # whether its answer quotes the note, the walk-through says plainly either way (the
    # shipped adapter's answer does not yet: issue 39, the eval's grounded answers)
    quotes = "walk-through: the answer quotes welcome.md" in said
    assert quotes or "walk-through: the answer does not quote welcome.md" in said, said
    scratch = workspace / "scratch"
    assert f'the model itself called shell {{"command": "ls -la", "cwd": "{scratch}"}}' in said, (
        said
    )
    assert "(no terminal: scripts/walkthrough answers as the owner would" in said
    assert "walk-through: the owner answered approved" in said, said
    assert "walk-through: it ran: result" in said, said
    assert "got this one wrong" not in said
    assert "made no call" not in said
    assert said.rstrip().splitlines()[-1].startswith("audit: ok")
