"""The model probe: load the model and generate a few tokens in a child process.

I/O: runs `python -m boxmaker.loopd.probe MODEL THREADS CONTEXT MEMORY_MIB OFFLOAD
[ADAPTER SHA256]` as a child process (and, as that child, reads the model's metadata
with llama-cpp-python, its vocabulary loaded alone; resolves the context from it and
`[model] context` and `memory_mib` as loopd does, `boxmaker.core.model.context_fit`; checks
the LoRA adapter, if any, against the model's architecture, `boxmaker.loopd.adapter`,
SHA256 "" for the owner's own; loads the model at that context with the offload and
the adapter loopd will use, and generates). A llama-cpp-python build
compiled for another CPU dies with SIGILL (or SIGSEGV) at the model's first matrix
multiply, and a broken model file can do the same.
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
    the child exited REFUSED (3)                 the context cannot be honoured, or the
                                                   adapter is refused: the child's
                                                   `refused: ` line, naming the key or the
                                                   file (before any weight is loaded)
    the child exited non-zero, or timed out      could not run (its last line)

The child prints the metadata it read first (`metadata: ` and a JSON object of its
keys, less the vocabulary's `tokenizer.*`): loopd resolves the context from it (and
remembers it with a passed probe), so nothing of llama.cpp runs in loopd's own
process before a probe passed. It also prints where the model went (`placed: ` and
the backend, the offload settings and llama.cpp's count of layers offloaded), which
`loopd probe` shows.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from boxmaker.core.errors import StartupError
from boxmaker.core.model.context_fit import ContextFitError, fit_context
from boxmaker.core.model.offload import Offload, does_not_fit, too_big
from boxmaker.core.runbook import Runbook
from boxmaker.loopd.adapter import AdapterFile, check_adapter
from boxmaker.loopd.placement import PLACED, from_argument, placement_line, to_argument
from boxmaker.loopd.rpc import register

PROBE_TOKENS = 4
PROBE_CONTEXT = 256
PROBE_TIMEOUT_S = 300.0
POINTER = Runbook.LOOPD_MODEL_CRASHED.pointer
METADATA = "metadata: "  # the child's first line: the model's metadata as JSON
REFUSED = 3  # the child's exit status for a context it cannot honour, or an adapter
REFUSAL = "refused: "  # the child's stderr line that says why
REFUSAL_CHARS = 1000  # at most, of that line (an adapter's refusal names its path)
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
    # the model's metadata as the child read it (None: it printed none)
    metadata: Mapping[str, str] | None = None


def probe_command(
    model: Path,
    threads: int,
    context: int,
    memory_mib: int,
    offload: Offload,
    adapter: AdapterFile | None = None,
) -> list[str]:
    """The child's command line: `context` and `memory_mib` as loopd.toml sets them, and
    the adapter file with the digest it must have ("" for the owner's own) where given."""
    command = [
        sys.executable,
        "-m",
        "boxmaker.loopd.probe",
        str(model),
        str(threads),
        str(context),
        str(memory_mib),
        to_argument(offload),
    ]
    if adapter is not None:
        command += [str(adapter.path), adapter.sha256 or ""]
    return command


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
    lines = stdout.strip().splitlines()
    metadata = metadata_line(lines)
    if status == REFUSED:
        said = [line[len(REFUSAL) :] for line in stderr.splitlines() if line.startswith(REFUSAL)]
        # the child's own one line, ending with its pointer: whole, up to a long path
        refusal = (
            _one_line(said[-1], REFUSAL_CHARS)
            if said
            else f"the model probe refused its context; {POINTER}"
        )
        return ProbeResult(0, seconds, refusal, metadata=metadata)
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
    placed = placement_line(lines)
    try:
        tokens = int(lines[-1])
    except (ValueError, IndexError):
        return ProbeResult(0, seconds, f"the model probe printed no token count; {POINTER}")
    if tokens <= 0:
        return ProbeResult(0, seconds, f"the model produced no tokens; {POINTER}", placed)
    return ProbeResult(tokens, seconds, None, placed, metadata)


def metadata_line(stdout_lines: Sequence[str]) -> dict[str, str] | None:
    """The metadata the child printed (its METADATA line); None when it printed none
    that parses as a JSON object of text values."""
    for line in stdout_lines:
        if line.startswith(METADATA):
            try:
                data = json.loads(line[len(METADATA) :])
            except ValueError:
                return None
            if isinstance(data, dict) and all(isinstance(v, str) for v in data.values()):
                return {str(k): v for k, v in data.items()}
            return None
    return None


def _one_line(text: str, limit: int = 300) -> str:
    return "".join(ch for ch in text if ch.isprintable())[:limit]


def child(
    model: Path,
    threads: int,
    context: int,
    memory_mib: int,
    offload: Offload,
    adapter: AdapterFile | None = None,
) -> int:
    """The probe itself, in the child: read `model`'s metadata and print it, resolve the
    context as loopd will and check the adapter against the model's architecture
    (REFUSED, its one line on stderr, when either is refused), load `model` at it with
    the offload and the adapter (a model that does not fit fails here), generate, print
    where it went and how many tokens."""
    from boxmaker.loopd.backend import read_backend
    from boxmaker.loopd.llama_load import load_llama
    from boxmaker.loopd.model import LlamaModel, Sampling
    from boxmaker.loopd.placement import placement

    vocabulary = load_llama(model, vocab_only=True)  # no chat template compiled: llama_load
    metadata = {
        str(k): str(v) for k, v in vocabulary.metadata.items() if not k.startswith("tokenizer.")
    }
    del vocabulary
    print(METADATA + json.dumps(metadata, sort_keys=True), flush=True)
    try:
        fit = fit_context(metadata, context=context, memory_mib=memory_mib, offload=offload)
    except ContextFitError as exc:
        print(f"{REFUSAL}{exc}", file=sys.stderr, flush=True)
        return REFUSED
    try:
        architecture = metadata.get("general.architecture", "")
        checked = None if adapter is None else check_adapter(adapter, architecture)
    except StartupError as exc:
        print(f"{REFUSAL}{exc}", file=sys.stderr, flush=True)
        return REFUSED
    try:
        register(offload.rpc)  # the rpc-servers loopd checked, before ggml is asked
    except StartupError as exc:
        print(f"{REFUSAL}{exc}", file=sys.stderr, flush=True)
        return REFUSED
    backend = read_backend()
    llm = LlamaModel(
        model,
        context=max(fit.context, PROBE_CONTEXT),
        threads=threads,
        seed=1,
        sampling=Sampling(temperature=0.0),
        offload=offload,
        adapter=checked,
    )
    print(PLACED + placement(backend, offload, llm.offloaded), flush=True)
    prompt = llm.tokenize("The capital of France is", special=False)
    generation = llm.generate(
        "probe", prompt, max_tokens=PROBE_TOKENS, stop=set(), on_text=lambda _text: None
    )
    print(len(generation.ids), flush=True)
    return 0


if __name__ == "__main__":
    # llama.cpp's warnings and errors (loopd.llama_load) on stderr, which `judge` reads
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    sys.exit(
        child(
            Path(sys.argv[1]),
            int(sys.argv[2]),
            int(sys.argv[3]),
            int(sys.argv[4]),
            from_argument(sys.argv[5]),
            AdapterFile(Path(sys.argv[6]), sys.argv[7] or None) if len(sys.argv) > 7 else None,
        )
    )
