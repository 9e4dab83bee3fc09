"""The tmux pane helper's exit status: what the console tests judge a chat's end by.

tmux marks a pane dead when its program's terminal closes, which can come before it
has reaped the program; and Debian's tmux, built with libutempter, sometimes misses
the program's SIGCHLD and never reaps it (a short Python program in 20 here; a chat
that ended with status 0 in 6, and in CI). The helper waits for the status, and
nudges the server with a SIGCHLD of its own. That miss cannot be made to happen on
purpose, so it is tried where it happens: the console tests' chats end on it often
enough (tests/bxctl/test_console.py asks each for its status 0).
"""

from __future__ import annotations

import os

from support.skips import skip_or_fail

from boxmaker.testing.tmux import TmuxPane, tmux_available

if not tmux_available():
    skip_or_fail(
        "tmux is not installed (scripts/install-host-packages installs it)", allow_module_level=True
    )

ENV = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}


def test_a_program_that_closes_its_terminal_before_it_exits_has_its_status() -> None:
    # the race made certain: the terminal closes 0.3 s before the program ends
    # (tmux hangs up on it when it closes: ignored, as a program already ending)
    program = "trap '' HUP; sleep 0.05; exec </dev/null >/dev/null 2>&1; sleep 0.3; exit 3"
    with TmuxPane(["sh", "-c", program], ENV) as term:
        assert term.exit_status() == 3


def test_a_program_a_signal_ends_has_minus_the_signals_number() -> None:
    with TmuxPane(["sh", "-c", "sleep 0.05; kill -INT $$"], ENV) as term:
        assert term.exit_status() == -2
