"""`bxctl install`: lay out boxmaker on this machine, as root or for one user.

I/O: the user database, the file system, child processes (`loopd probe`, the boot
service). What the layout is, step by step, is `install_plan`'s; how each step is
applied, `install_steps`'s. This module reads the command line into a `Layout`
(root or dev; the owner's user, a workspace outside every reserved place, an
environment the role users can run), runs the plan's steps (each one said, `--dry-run`
only says them), and probes the model.

Last, it probes the model: `loopd probe` (as loopd's user in a root install)
loads it in a child process and generates a few tokens, so a llama-cpp-python
build that crashes on this CPU, or a broken model file, stops the install with
loopd's one line (see runbook.md#loopd-model-crashed) instead of a tree whose
loopd restarts in a loop. `--no-probe` skips it. Before that, it writes the
bytecode of boxmaker's modules (`Bytecode`), which the roles then load instead of
compiling them at each start.
"""

from __future__ import annotations

import argparse
import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

import boxmaker
from boxmaker.bxctl.boot_unit import (
    UNIT_NAME,
    not_booted_hint,
    start_steps,
    systemd_running,
    unsafe_path,
)
from boxmaker.bxctl.cli import EXIT_OK, CliError, Parser, out
from boxmaker.bxctl.install_plan import Layout, plan
from boxmaker.bxctl.install_steps import Command, Step
from boxmaker.core.grants.paths import path_problem
from boxmaker.core.grants.reserved import install_places, reserved_places, reserved_problem
from boxmaker.core.home.links import ROLE_USERS, Role


def add_parser(commands: Any) -> None:
    install: Parser = commands.add_parser("install", help="lay out boxmaker (root: real; else dev)")
    install.add_argument(
        "--prefix", type=Path, help="root: where etc/ and var/ go (default /); dev: the directory"
    )
    install.add_argument("--owner", help="root install: the owner's user (default: $SUDO_USER)")
    install.add_argument(
        "--dev", action="store_true", help="dev mode even as root: every role as you, in --prefix"
    )
    install.add_argument(
        "--workspace",
        type=Path,
        help="dev mode: the folder the example grants point at (default ~/boxmaker-workspace)",
    )
    install.add_argument("--dry-run", action="store_true", help="print the steps, change nothing")
    install.add_argument(
        "--no-probe", action="store_true", help="do not load the model to check that it runs"
    )
    install.set_defaults(handler=cmd_install)


def layout_for(args: argparse.Namespace) -> Layout:
    bin_dir = Path(sys.executable).parent
    if os.geteuid() == 0 and not args.dev:
        prefix: Path = args.prefix or Path("/")
        owner = args.owner or os.environ.get("SUDO_USER") or ""
        if not owner or owner == "root":
            raise CliError("a root install needs the owner's user: --owner NAME")
        try:
            pwd.getpwnam(owner)
        except KeyError as exc:
            raise CliError(f"no such user: {owner}") from exc
        _check_others_can_run(bin_dir)
        for place in (prefix, bin_dir):
            why = unsafe_path(place.absolute())
            if why is not None:
                raise CliError(
                    f"a root install writes a boot service that names {why}: install elsewhere"
                )
        return Layout(
            root=True,
            etc=prefix / "etc" / "boxmaker",
            home=prefix / "var" / "lib" / "boxmaker",
            log=prefix / "var" / "log" / "boxmaker",
            run=prefix / "run" / "boxmaker",
            bin=bin_dir,
            owner=owner,
        )
    if args.prefix is None:
        raise CliError("dev mode needs a directory: bxctl install --prefix DIR")
    prefix = args.prefix.resolve()
    layout = Layout(
        root=False,
        etc=prefix / "etc",
        home=prefix / "home",
        log=prefix / "log",
        run=prefix / "run",
        bin=bin_dir,
        owner=pwd.getpwuid(os.getuid()).pw_name,
        workspace=(args.workspace or Path.home() / "boxmaker-workspace").absolute(),
    )
    _check_workspace(layout)
    return layout


def _check_workspace(layout: Layout) -> None:
    """The workspace must be a plain path outside every place no grant may reach."""
    assert layout.workspace is not None
    text = str(layout.workspace)
    if path_problem(text) is not None or any(c in text for c in '"\\') or not text.isprintable():
        raise CliError(f"the workspace {text!r} is not a plain absolute path; use --workspace")
    places = reserved_places(
        [
            ("home", str(layout.home)),
            ("grants", str(layout.etc / "grants")),
            ("configuration", str(layout.etc)),
            *install_places(sys.prefix, boxmaker.__file__),
        ],
        os.path.realpath,
    )
    for path in (text, os.path.realpath(text)):
        problem = reserved_problem(path, places)
        if problem is not None:
            raise CliError(f"the workspace cannot be used: {problem}; choose --workspace elsewhere")


def _check_others_can_run(bin_dir: Path) -> None:
    """The role users must be able to run this environment's Python and scripts."""
    for target in (bin_dir / "python3", (bin_dir / "python3").resolve(), bin_dir / "brokerd"):
        for part in (target, *target.parents):
            if part.exists() and not part.stat().st_mode & 0o001:
                raise CliError(
                    f"the role users cannot run {target}: {part} is not open to others; install "
                    "boxmaker into a virtual environment they can read, e.g. "
                    "/usr/bin/python3 -m venv /opt/boxmaker (see README.md)"
                )


PROBE_TIMEOUT_S = 900.0  # the first probe assembles the embedded model


def probe_model(layout: Layout) -> str:
    """`loopd probe` with the installed configuration: its answer, or CliError with its line."""
    argv = [str(layout.bin / "loopd"), "probe", "--config", str(layout.etc / "loopd.toml")]
    if layout.root:
        argv = ["runuser", "-u", ROLE_USERS[Role.LOOPD], "--", *argv]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CliError(f"cannot probe the model with {argv[0]}: {exc}") from exc
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        last = lines[-1].removeprefix("loopd ERROR ") if lines else f"exit status {done.returncode}"
        raise CliError(f"the model does not run here: {last}")
    return done.stdout.strip()


def cmd_install(args: argparse.Namespace) -> int:
    layout = layout_for(args)
    steps = plan(layout)
    changed = sum(_run_step(step, args.dry_run) for step in steps)
    if not args.dry_run and not args.no_probe:
        out(probe_model(layout))
    # the boot service starts the tree only once the model is known to run here
    starts = start_steps(layout.etc, systemd_running()) if layout.root else []
    for step in starts:
        _run_step(step, args.dry_run)
    mode = "root install" if layout.root else "dev mode"
    if layout.root and not starts:  # before the summary, which stays the last line
        out(not_booted_hint(layout.bin, layout.etc, ROLE_USERS[Role.BROKERD], dry_run=args.dry_run))
    if args.dry_run:
        out(f"install ({mode}): dry run, nothing changed")
    elif starts:
        out(f"install ({mode}): {changed} changes; {UNIT_NAME} runs the tree, now and at boot")
    elif changed:
        start = f"supervisord -c {layout.etc}/supervisord.conf"
        out(f"install ({mode}): {changed} changes; start the tree with {start}")
    else:
        out(f"install ({mode}): nothing to change")
    return EXIT_OK


def _run_step(step: Step, dry_run: bool) -> bool:
    """Apply `step` unless it is in place (or this is a dry run), saying which; whether it
    changed something (a command is never counted: it checks for itself)."""
    if step.done():
        out(f"in place: {step.describe()}")
        return False
    if dry_run:
        out(f"would do: {step.describe()}")
        return False
    try:
        step.apply()
    except Exception as exc:
        raise CliError(f"install failed at {step.describe()}: {exc}") from exc
    if isinstance(step, Command):
        return False
    out(f"did:      {step.describe()}")
    return True
