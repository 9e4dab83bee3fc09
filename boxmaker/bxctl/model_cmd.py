"""`bxctl model check [PATH]`: what loopd would do with a GGUF file, before the tree uses it.

I/O: runs loopd's own check (`loopd check PATH`, boxmaker.loopd.model_check) as a
child process and passes its lines and exit status on. bxctl imports no role, and the
check needs what only loopd has (llama-cpp-python, its dialect and marker rules), so
it asks loopd's console script, the one installed beside bxctl, as `supervisorctl` is
asked for the tree. Nothing is started or written; no daemon need run.

Exit status: loopd's (0: loopd would start on the file; 1: it would not, each
problem on its line with its runbook pointer; 2: the file cannot be read), or 2 when
loopd's console script cannot be found.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from boxmaker.bxctl.cli import EXIT_USAGE, CliError, Parser, out


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
    command = [loopd_script(), "check"]
    if args.path is not None:
        command.append(str(Path(args.path).absolute()))
    if args.config is not None:
        command += ["--config", str(args.config)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        out(line)
    if done.returncode not in (0, 1, 2):  # loopd crashed: its last line says how
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise CliError(f"loopd check failed ({done.returncode}): {last}")
    return done.returncode


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
            " or the hand-written format that stands in, and why), the tool-call syntax and"
            " reasoning markers, the marker self-test, loopd's prompt for a sample"
            " conversation against the template's own rendering, the memory the weights"
            " and the KV cache take, and the context loopd would give the model ([model]"
            " context, 0 = the trained context within [model] memory_mib). Starts nothing."
            " Exit 0 when loopd would start on the file, 1 when it would not, 2 when it"
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
    check.set_defaults(handler=cmd_check)
