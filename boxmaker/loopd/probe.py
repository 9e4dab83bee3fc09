"""The model probe: load the model and generate a few tokens in a child process.

I/O: runs `python -m boxmaker.loopd.probe MODEL THREADS CONTEXT OFFLOAD` as a child
process (and, as that child, loads the model with llama-cpp-python, with the
context and the offload loopd will use, and generates). A
llama-cpp-python build compiled for another CPU dies with SIGILL (or SIGSEGV)
at the model's first matrix multiply, and a broken model file can do the same.
In loopd's own process that is a crash that hides: supervisord restarts loopd
and restarts it again, and the log holds nothing but the restarts. In a child,
the parent sees the signal and says so in one line, with the runbook pointer;
loopd runs the probe before it serves, and `loopd probe` runs it alone (which
`bxctl install` and scripts/run do before the tree starts).

Outcomes, each one line:

    the child printed a positive token count     the model works here
    the child was killed by a signal             crashed, naming the signal
    the child printed 0 tokens                   produced nothing
    the child exited non-zero, its log saying    does not fit: what to lower
      an allocation failed (device or host)        (runbook.md#loopd-model-too-big)
    the child exited non-zero, or timed out      could not run (its last line)

The child also prints where the model went (`placed: ` and the backend, the
offload settings and llama.cpp's count of layers offloaded), which `loopd probe`
shows.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from boxmaker.core.offload import Offload, does_not_fit, too_big
from boxmaker.core.runbook import Runbook
from boxmaker.loopd.placement import PLACED, from_argument, placement_line, to_argument

PROBE_TOKENS = 4
PROBE_CONTEXT = 256
PROBE_TIMEOUT_S = 300.0
POINTER = Runbook.LOOPD_MODEL_CRASHED.pointer
_WHY = {
    signal.SIGILL: "an illegal instruction: this llama-cpp-python build uses CPU"
    " instructions this host lacks; rebuild it with scripts/build-llama-cpp",
    signal.SIGSEGV: "a memory fault: the build or the model file is broken",
    signal.SIGBUS: "a bus error: the model file is damaged or was truncated",
    signal.SIGABRT: "an abort inside llama.cpp: the model file may be unsupported",
    signal.SIGKILL: "killed: perhaps out of memory",
}


@dataclass(frozen=True)
class ProbeResult:
    tokens: int
    seconds: float
    problem: str | None  # one line, ending with the runbook pointer; None when it works
    placed: str = ""  # where the model went, as the child said ("" when it did not)


def probe_command(model: Path, threads: int, context: int, offload: Offload) -> list[str]:
    return [
        sys.executable,
        "-m",
        "boxmaker.loopd.probe",
        str(model),
        str(threads),
        str(context),
        to_argument(offload),
    ]


def run_probe(command: Sequence[str], timeout_s: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """Run the probe child `command` and judge what it did."""
    start = time.monotonic()
    try:
        done = subprocess.run(
            list(command), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        seconds = time.monotonic() - start
        return ProbeResult(0, seconds, f"the model gave no token in {timeout_s:.0f} s; {POINTER}")
    seconds = time.monotonic() - start
    return judge(done.returncode, done.stdout, done.stderr, seconds)


def judge(status: int, stdout: str, stderr: str, seconds: float) -> ProbeResult:
    """What a probe child's exit status and output mean (pure)."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
            why = _WHY.get(signal.Signals(-status), "a crash inside llama.cpp")
        except ValueError:
            name, why = f"signal {-status}", "a crash inside llama.cpp"
        problem = f"the model crashed with {name} while generating its first tokens ({why})"
        return ProbeResult(0, seconds, f"{problem}; {POINTER}")
    if status != 0:
        if does_not_fit(stderr):
            failed = [line for line in stderr.splitlines() if does_not_fit(line)]
            return ProbeResult(0, seconds, too_big(_one_line(failed[-1]).strip()))
        last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
        detail = f": {_one_line(last)}" if last else ""
        problem = f"the model could not be loaded or run (exit status {status}){detail}"
        return ProbeResult(0, seconds, f"{problem}; {POINTER}")
    lines = stdout.strip().splitlines()
    placed = placement_line(lines)
    try:
        tokens = int(lines[-1])
    except (ValueError, IndexError):
        return ProbeResult(0, seconds, f"the model probe printed no token count; {POINTER}")
    if tokens <= 0:
        return ProbeResult(0, seconds, f"the model produced no tokens; {POINTER}", placed)
    return ProbeResult(tokens, seconds, None, placed)


def _one_line(text: str) -> str:
    return "".join(ch for ch in text if ch.isprintable())[:300]


def child(model: Path, threads: int, context: int, offload: Offload) -> int:
    """The probe itself, in the child: load `model` as loopd will (its context and
    offload: a model that does not fit fails here), generate, print where it went and
    how many tokens."""
    from boxmaker.loopd.backend import read_backend
    from boxmaker.loopd.model import LlamaModel, Sampling
    from boxmaker.loopd.placement import placement

    backend = read_backend()
    llm = LlamaModel(
        model,
        context=max(context, PROBE_CONTEXT),
        threads=threads,
        seed=1,
        sampling=Sampling(temperature=0.0),
        offload=offload,
    )
    print(PLACED + placement(backend, offload, llm.offloaded), flush=True)
    prompt = llm.tokenize("The capital of France is", special=False)
    generation = llm.generate(
        "probe", prompt, max_tokens=PROBE_TOKENS, stop=set(), on_text=lambda _text: None
    )
    print(len(generation.ids), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(
        child(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), from_argument(sys.argv[4]))
    )
