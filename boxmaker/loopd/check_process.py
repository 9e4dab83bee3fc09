"""`loopd check` as a process that always ends: the report (`loopd.model_check`) in a child,
bounded in time and memory, and one line with a runbook pointer for whatever stops it.

I/O: runs `python -m boxmaker.loopd.check_process [--config C] [--path P]` as a child
process and prints what it printed; as that child, reads the model file and prints the
report. A model file is hostile input: its templates run in loopd's sandbox, whose own
bounds are the first line of defence; this is the last, whatever path jinja2 takes. The
rules:

1. **Time.** The parent waits `timeout_s` (`loopd check --timeout`, 120 s by default)
   for the child, then kills it. The child's CPU time is also capped (RLIMIT_CPU, the
   timeout and a margin), so a child whose parent is gone ends too.
2. **Memory.** Once the child has read the file's vocabulary and metadata and asked the
   GPU driver where the model would go (llama.cpp's and the driver's own allocations),
   its address space may grow by `CHECK_MEMORY_MIB` (256 MiB, RLIMIT_AS, soft limit)
   and no more: a template that asks for more meets MemoryError, whatever it called.
3. **Progress.** Before each step that runs the file's text the child writes
   `checking: <runbook anchor> <what>` to stderr: the parent names the last step in its
   line when the child never ends or dies, and sends the owner to that entry.
4. **One line each.** The child prints its report's lines as they are known (the
   parent passes them on, and keeps those printed when it has to stop the child); what
   the bounds stop is one `problem:` line: `the check did not end in N s while checking
   <what>`, `checking <what> took more than 256 MiB of memory`, `the check was killed
   by <signal> while checking <what>`, or `the check failed: <its last line>`, each with
   its pointer, exit status 1. A file that cannot be read is one `loopd:` line, with
   runbook.md#loopd-model-unreadable, exit status 2. Every text from the file is
   escaped (`core.display.escape.escape_arguments`); a traceback is never printed.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.errors import ConfigError
from boxmaker.core.runbook import Runbook
from boxmaker.loopd.config import LoopdConfig, load_config

CHECK_TIMEOUT_S = 120.0
CHECK_MEMORY_MIB = 256
CPU_MARGIN_S = 10  # the child's CPU cap past the parent's wall-clock timeout
PROGRESS = "checking: "
FAILED = "failed: "  # the child's stderr line for an exception of its own
EXIT_FAILED = 3  # the child's exit status for that
UNREADABLE = Runbook.LOOPD_MODEL_UNREADABLE.pointer


def run_check(
    path: Path | None,
    config: LoopdConfig,
    config_file: Path | None = None,
    timeout_s: float = CHECK_TIMEOUT_S,
) -> int:
    """`loopd check`: print the report the child prints, or the line that stopped it;
    the exit status (`model_check`'s, or 1 when a bound stopped it). `path` None: the
    model loopd.toml names, `config` (loaded from `config_file`) is the child's too."""
    from boxmaker.loopd.model_check import model_path  # assembles the embedded model

    checked = path if path is not None else model_path(config)
    if not checked.is_file():
        shown = escape_arguments(str(checked))
        print(f"loopd: {shown} is not a file; name a GGUF model file; {UNREADABLE}")
        return 2
    command = [sys.executable, "-m", "boxmaker.loopd.check_process", "--timeout", f"{timeout_s}"]
    if config_file is not None:
        command += ["--config", str(config_file)]
    if path is not None:
        command += ["--path", str(path)]
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout_s, check=False)
        status, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:  # run() killed the child
        status, stdout, stderr = None, exc.stdout or b"", exc.stderr or b""
    said = _lines(stdout)
    if status in (0, 1, 2) and said:
        for line in said:
            print(line)
        return status
    complete = said if stdout.endswith(b"\n") else said[:-1]
    for line in complete:
        print(line)
    print(judge(status, _lines(stderr), timeout_s))
    return 1


def _lines(data: bytes) -> list[str]:
    """The child's output as escaped lines (it escapes the file's text; this is a guard)."""
    return [escape_arguments(line) for line in data.decode("utf-8", "replace").splitlines()]


def judge(status: int | None, stderr: Sequence[str], timeout_s: float) -> str:
    """The one line for a child that timed out (`status` None), died, or failed (pure)."""
    steps = [line[len(PROGRESS) :] for line in stderr if line.startswith(PROGRESS)]
    anchor, _, what = (steps[-1] if steps else "").partition(" ")
    try:
        pointer = Runbook(anchor).pointer
    except ValueError:
        pointer, what = UNREADABLE, "the file"
    if status is None:
        return (
            f"problem: the check did not end in {timeout_s:g} s while checking {what} (a "
            f"template that loops, or a file too big to read in that time); {pointer}"
        )
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return (
            f"problem: the check was killed by {name} while checking {what} (out of time "
            f"or memory, or llama.cpp crashed on the file); {pointer}"
        )
    failed = [line[len(FAILED) :] for line in stderr if line.startswith(FAILED)]
    last = failed[-1] if failed else next((s for s in reversed(stderr) if s.strip()), "")
    return f"problem: the check failed (exit status {status}): {last[:300]}; {pointer}"


# ---- the child -------------------------------------------------------------------


def progress(entry: Runbook, what: str) -> None:
    """Rule 3: tell the parent what runs now, and where the owner is sent if it never ends."""
    sys.stderr.write(f"{PROGRESS}{entry.value} {what}\n")
    sys.stderr.flush()
    _current[0] = what


_current = ["the file"]


def cap_memory(headroom_mib: int) -> None:
    """Rule 2: this process's address space may grow by `headroom_mib` from now on."""
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = size + headroom_mib * 2**20
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def child(path: Path | None, config: LoopdConfig, timeout_s: float) -> int:
    """The report, within the bounds (rules 1 and 2); model_check's exit status."""
    from boxmaker.loopd.model_check import VocabularyModel, model_path, placement_facts, report

    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    cpu = int(timeout_s) + CPU_MARGIN_S
    if hard != resource.RLIM_INFINITY:
        cpu = min(cpu, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, hard))
    if path is None:
        as_used, path = config, model_path(config)
    else:
        model = config.model.model_copy(update={"path": str(path)})
        as_used = config.model_copy(update={"model": model})
    shown = escape_arguments(str(path))
    progress(Runbook.LOOPD_MODEL_UNREADABLE, "the file")
    try:
        vocabulary = VocabularyModel(path)
    except (ValueError, RuntimeError) as exc:  # llama.cpp could not read it
        print(
            f"loopd: {shown} cannot be read as a GGUF model: {escape_arguments(str(exc))}; "
            f"{UNREADABLE}",
            flush=True,
        )
        return 2
    placement = placement_facts(as_used)
    cap_memory(CHECK_MEMORY_MIB)
    ok = True
    try:
        for line in report(path, as_used, vocabulary, placement, progress):
            ok = ok and not line.startswith("problem:")
            print(line, flush=True)
    except MemoryError:
        print(
            f"problem: checking {_current[0]} took more than {CHECK_MEMORY_MIB} MiB of memory "
            f"(a template that asks for too much); {Runbook.LOOPD_TEMPLATE_REFUSED.pointer}",
            flush=True,
        )
        return 1
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m boxmaker.loopd.check_process")
    parser.add_argument("--config", type=Path)
    parser.add_argument("--path", type=Path)
    parser.add_argument("--timeout", type=float, default=CHECK_TIMEOUT_S)
    args = parser.parse_args(argv)
    # llama.cpp's warnings and errors (loopd.llama_load), escaped, on stderr
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    try:
        config = load_config(args.config, os.environ)
        return child(args.path, config, args.timeout)
    except ConfigError as exc:
        print(f"{FAILED}{escape_arguments(str(exc))}", file=sys.stderr)
    except Exception as exc:  # one line for the parent, never a traceback
        said = escape_arguments(" ".join(f"{type(exc).__name__}: {exc}".split()))
        print(f"{FAILED}{said[:300]}", file=sys.stderr)
    return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
