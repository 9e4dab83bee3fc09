"""`bxctl model check [PATH]`: what loopd would do with a GGUF file, before the tree uses it.

I/O: runs loopd's own check (`loopd check PATH`, boxmaker.loopd.model_check) as a
child process and passes its lines and exit status on. bxctl imports no role, and the
check needs what only loopd has (llama-cpp-python, its dialect and marker rules), so
it asks loopd's console script, the one installed beside bxctl, as `supervisorctl` is
asked for the tree. Nothing is started or written; no daemon need run.

It ends: loopd's check stops itself after `--timeout` seconds (its report in a child
process bounded in time and memory, `boxmaker.loopd.check_process`); should loopd's
check itself not end by `--timeout` and a margin, bxctl kills it (its whole process
group) and says so in one line. Every line loopd prints is passed on escaped
(`core.display.escape.escape_arguments`: loopd escapes the file's text already; this is the
terminal's guard), so nothing of a model file reaches the terminal as control.

Exit status: loopd's (0: loopd would start on the file; 1: it would not, each
problem on its line with its runbook pointer, or the check ran past its bounds; 2:
the file cannot be read), or 2 when loopd's console script cannot be found.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from boxmaker.bxctl.cli import EXIT_USAGE, CliError, Parser, out
from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.runbook import Runbook

TIMEOUT_S = 120.0  # loopd check's own default
MARGIN_S = 30.0  # loopd check's start (configuration, the embedded model's assembly)


def loopd_script() -> str:
    """loopd's console script: the one beside this Python's, else the one on PATH."""
    beside = Path(sys.executable).parent / "loopd"
    if beside.is_file():
        return str(beside)
    found = shutil.which("loopd")
    if found is None:
        raise CliError("loopd's console script is not installed; install boxmaker", EXIT_USAGE)
    return found


def cmd_check(args: Any) -> int:
    command = [loopd_script(), "check", "--timeout", f"{args.timeout:g}"]
    if args.path is not None:
        command.append(str(Path(args.path).absolute()))
    if args.config is not None:
        command += ["--config", str(args.config)]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=args.timeout + MARGIN_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # loopd check and its child
            stdout, _ = process.communicate()
            for line in _lines(stdout):
                out(line)
            pointer = Runbook.LOOPD_TEMPLATE_REFUSED.pointer
            out(f"problem: loopd check did not end in {args.timeout + MARGIN_S:g} s; {pointer}")
            return 1
    for line in _lines(stdout):
        out(line)
    if process.returncode not in (0, 1, 2):  # loopd crashed: its last line says how
        last = (_lines(stderr) or ["no message"])[-1]
        raise CliError(f"loopd check failed ({process.returncode}): {last}")
    if process.returncode != 0 and not stdout.strip():  # loopd refused to start: its log
        last = (_lines(stderr) or ["no message"])[-1]
        raise CliError(f"loopd check failed: {last}", process.returncode)
    return process.returncode


def _lines(data: bytes) -> list[str]:
    return [escape_arguments(line) for line in data.decode("utf-8", "replace").splitlines()]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 86_400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 to 86400)")
    return value


def add_parser(commands: Any) -> None:
    group: Parser = commands.add_parser("model", help="check a model file before using it")
    sub = group.add_subparsers(dest="model_command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    check = sub.add_parser(
        "check",
        help="what loopd would do with a GGUF file (exit 1 if it would refuse it)",
        description=(
            "Read the GGUF file's vocabulary and metadata (no weights) and print what loopd"
            " would do with it: architecture and trained context, the chat template (used,"
            " or the hand-written format that stands in, and why), every template the file"
            " holds (each run in loopd's sandbox), the tool-call syntax and reasoning"
            " markers, the marker self-test, loopd's prompt for a sample conversation"
            " against the template's own rendering, the text the template adds to every"
            " prompt, the memory the weights and the KV cache take, and the context loopd"
            " would give the model ([model] context, 0 = the trained context within [model]"
            " memory_mib). Starts nothing. Exit 0 when loopd would start on the file, 1 when"
            " it would not (or the check ran past --timeout or its memory), 2 when it"
            " cannot be read."
        ),
    )
    check.add_argument(
        "path",
        metavar="PATH",
        nargs="?",
        help="the GGUF model file (default: the model loopd.toml names, or the embedded one)",
    )
    check.add_argument("--config", type=Path, help="loopd.toml (default: every default)")
    check.add_argument(
        "--timeout",
        type=_seconds,
        default=TIMEOUT_S,
        metavar="SECONDS",
        help=f"stop the check after this long (default {TIMEOUT_S:g})",
    )
    check.set_defaults(handler=cmd_check)
