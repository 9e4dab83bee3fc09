"""A poisoned model file stays harmless through `bxctl model check`, `loopd check`,
`loopd probe` and `loopd serve` (issue 38: the shapes it found, each a test).

Every model is a tiny GGUF with a real vocabulary (`support.tiny_gguf`,
Qwen2's) and one hostile template: as the file's default, and as a named template
(`tokenizer.chat_template.<name>`, with a name holding ESC, BEL and a newline) beside
Hermes 3's real default. Each runs as the owner runs it, the installed console scripts
as processes, and is measured from outside: its wall time, and its peak RSS (wait4:
the command and every child it waited for) against the same command on the benign
file. The rules held to:

- `bxctl model check` (which runs `loopd check`, which runs its report in a bounded
  child) exits 1 within 1.5 times its `--timeout`, with a `problem:` line naming the
  template and ending with its runbook pointer; nothing it prints holds a control
  character; no traceback; peak RSS under 256 MiB above the benign check's.
- `loopd probe` compiles no template of the file (llama-cpp-python's own `Llama`
  would compile each, unbounded: `loopd.llama_load` withholds them): it answers, on a
  file holding every shape, its memory that of the benign probe.
- `loopd serve` never compiles a named template (it serves a file holding every shape
  beside a benign default), and refuses each shape as its default in one escaped log
  line, its log every line loopd's own (a newline in the template's text cannot forge
  `loopd INFO event=serving`).
- The check's own bounds hold whatever the renderer does: a `--timeout` shorter than
  reading the file stops it in one line, and the child's address-space cap stops an
  allocation past it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.llama import fetch_vocabularies, require_llama_cpp
from support.tiny_gguf import VocabularyField, read_vocabulary, write_tiny_model

from boxmaker.core.display.hidden_chars import is_hidden
from boxmaker.testing.loopd_runs import LoopdRun, write_loopd_config

require_llama_cpp("the hostile model tests")

pytestmark = [pytest.mark.model, pytest.mark.slow]

BXCTL = str(Path(sys.executable).parent / "bxctl")
TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
HERMES = (TEMPLATES / "NousResearch-Hermes-3-Llama-3.1-8B-default.jinja").read_text()
TIMEOUT_S = 10.0  # the check's --timeout here
HEADROOM_MIB = 256  # peak RSS above the benign file's
NAME = "rag\x1b]52;c;aGk=\x07\nloopd INFO event=serving"  # a named template's name
POINTER = "see runbook.md#loopd-template-refused"

# The shapes of issue 38, each one template
SHAPES = {
    "str-times-huge-int": "{{ 'x' * 10**9 }}",
    "list-times-huge-int": "{{ ([0] * 10**9) | length }}",
    "string-method": "{{ 'x'.ljust(10**9) }}",
    "percent-format": "{{ '%0900000000d' % 1 }}",
    "tilde-doubling": (
        "{% set ns = namespace(s='x') %}{% for i in range(40) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}"
    ),
    "join-huge-separator": "{{ ('y' * 1000000).join(range(10000) | map('string')) }}",
    "constant-folding": "{{ 'x' | center(2 * 10**8) }}",
    "lipsum": "{{ lipsum(n=300000) }}",
    "loop-over-made-string": (
        "{% set s = 'ab' * 500000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}"
    ),
    "huge-source": "{% set x = 1 %}" + "{{ x + 1 }}" * 50000,
    "does-not-compile": "{% if %}",
    "refuses-with-controls": (
        "{{ raise_exception('no\\n\\x1b]52;c;aGk=\\x07\\nloopd INFO event=serving forged') }}"
    ),
}


@dataclass(frozen=True)
class Ran:
    status: int
    stdout: str
    stderr: str
    seconds: float
    peak_mib: float


def run(*command: str | Path) -> Ran:
    """`command` to its end: status, output, wall time and peak RSS (wait4, the tree)."""
    start = time.monotonic()
    with (
        open(os.devnull, "rb") as stdin,
        subprocess.Popen(
            [str(part) for part in command],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as process,
    ):
        stdout, stderr = process.stdout, process.stderr
        assert stdout is not None
        assert stderr is not None
        out = stdout.read()  # the report is small: stderr's pipe cannot fill meanwhile
        err = stderr.read()
        _pid, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    return Ran(
        os.waitstatus_to_exitcode(status),
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        time.monotonic() - start,
        usage.ru_maxrss / 1024,
    )


def shown_whole(text: str) -> bool:
    """Nothing but printable text and newlines: no control reaches the terminal."""
    return not any(is_hidden(ch) for ch in text if ch != "\n")


@pytest.fixture(scope="module")
def qwen2() -> list[VocabularyField]:
    return read_vocabulary(fetch_vocabularies() / "ggml-vocab-qwen2.gguf")


@pytest.fixture(scope="module")
def where(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


def model(where: Path, qwen2: list[VocabularyField], name: str, **keys: object) -> Path:
    path = where / f"{name}.gguf"
    if not path.exists():
        write_tiny_model(path, arch="qwen3", vocabulary=qwen2, **keys)  # type: ignore[arg-type]
    return path


@pytest.fixture(scope="module")
def benign(where: Path, qwen2: list[VocabularyField]) -> Path:
    return model(where, qwen2, "benign", chat_template=HERMES)


@pytest.fixture(scope="module")
def everything(where: Path, qwen2: list[VocabularyField]) -> Path:
    """Every shape as a named template, beside Hermes 3's benign default."""
    named = {f"tokenizer.chat_template.{n}\x1b[2J": source for n, source in SHAPES.items()}
    return model(where, qwen2, "everything", chat_template=HERMES, metadata=named)


@pytest.fixture(scope="module")
def benign_check(benign: Path) -> Ran:
    done = run(BXCTL, "model", "check", benign, "--timeout", f"{TIMEOUT_S:g}")
    assert done.status == 0, done.stdout + done.stderr
    return done


@pytest.mark.parametrize("position", ["default", "named"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_shape_ends_bxctl_model_check_in_one_line(
    where: Path,
    qwen2: list[VocabularyField],
    benign_check: Ran,
    shape: str,
    position: str,
) -> None:
    source = SHAPES[shape]
    if position == "default":
        path = model(where, qwen2, f"{shape}-default", chat_template=source)
    else:
        key = f"tokenizer.chat_template.{NAME}"
        path = model(where, qwen2, f"{shape}-named", chat_template=HERMES, metadata={key: source})
    done = run(BXCTL, "model", "check", path, "--timeout", f"{TIMEOUT_S:g}")
    assert done.status == 1, done.stdout + done.stderr
    assert done.seconds <= 1.5 * TIMEOUT_S, done.seconds
    assert done.peak_mib - benign_check.peak_mib < HEADROOM_MIB, (done.peak_mib, benign_check)
    assert done.stderr == ""
    assert shown_whole(done.stdout), done.stdout
    problems = [line for line in done.stdout.splitlines() if line.startswith("problem: ")]
    assert problems, done.stdout
    assert all(line.endswith(POINTER) for line in problems), problems
    if position == "named":  # named, its name escaped, never run as loopd's template
        assert "rag\\u001b]52;c;aGk=\\u0007\\u000aloopd INFO event=serving" in problems[0]
        assert "chat template: the model's own chat template: default" in done.stdout
    # no line of the report is a forged one: each is `name: value` or loopd's
    assert all(line.split(":", 1)[0].islower() for line in done.stdout.splitlines())


def test_loopd_probe_compiles_no_template_of_the_file(
    tmp_path: Path, benign: Path, everything: Path
) -> None:
    peaks = []
    for name, path in (("benign", benign), ("everything", everything)):
        config = write_loopd_config(tmp_path / name, path)
        with LoopdRun(config, tmp_path / f"{name}.log", command="probe") as probe:
            status = probe.wait_exit(120)
            assert status == 0, probe.text()
            assert "loopd: the model answered: 4 tokens" in probe.text()
            assert probe.peak_rss_mib is not None
            peaks.append(probe.peak_rss_mib)
    assert peaks[1] - peaks[0] < HEADROOM_MIB, peaks


def test_loopd_serve_never_compiles_a_named_template(
    tmp_path: Path, benign: Path, everything: Path
) -> None:
    peaks = []
    for name, path in (("benign", benign), ("everything", everything)):
        config = write_loopd_config(tmp_path / name, path)
        with LoopdRun(config, tmp_path / f"{name}.log") as serve:
            assert serve.wait_serving_or_exit(120), serve.text()
            assert serve.stop() == 0, serve.text()
            assert serve.peak_rss_mib is not None
            peaks.append(serve.peak_rss_mib)
            lines = serve.lines()
        assert all(line.startswith("loopd ") for line in lines), lines
        assert shown_whole(serve.text())
    assert peaks[1] - peaks[0] < HEADROOM_MIB, peaks


@pytest.fixture(scope="module")
def benign_serve(where: Path, benign: Path) -> float:
    """The peak RSS of `loopd serve` on the benign file, started and stopped."""
    config = write_loopd_config(where / "benign-serve", benign)
    with LoopdRun(config, where / "benign-serve.log") as baseline:
        assert baseline.wait_serving_or_exit(120), baseline.text()
        assert baseline.stop() == 0, baseline.text()
        assert baseline.peak_rss_mib is not None
        return baseline.peak_rss_mib


@pytest.mark.parametrize("shape", list(SHAPES))
def test_loopd_serve_refuses_each_shape_as_its_default_in_one_escaped_line(
    tmp_path: Path, where: Path, qwen2: list[VocabularyField], benign_serve: float, shape: str
) -> None:
    path = model(where, qwen2, f"{shape}-default", chat_template=SHAPES[shape])
    config = write_loopd_config(tmp_path / "hostile", path)
    started = time.monotonic()
    with LoopdRun(config, tmp_path / "loopd.log") as serve:
        status = serve.wait_exit(120)
        seconds = time.monotonic() - started
        lines = serve.lines()
        peak = serve.peak_rss_mib
    assert status == 1, lines
    assert seconds <= 1.5 * TIMEOUT_S, seconds
    assert all(line.startswith("loopd ") for line in lines), lines  # no forged line
    assert not [line for line in lines if line.split(" ", 2)[2].startswith("event=serving")]
    assert shown_whole("\n".join(lines))
    (refusal,) = [line for line in lines if line.startswith("loopd ERROR ")]
    assert "the model's chat template default (tokenizer.chat_template) cannot be used" in refusal
    assert refusal.endswith(POINTER)
    assert peak is not None
    assert peak - benign_serve < HEADROOM_MIB, (peak, benign_serve)


def test_a_timeout_shorter_than_reading_the_file_stops_the_check_in_one_line(
    benign: Path,
) -> None:
    done = run(BXCTL, "model", "check", benign, "--timeout", "0.05")
    assert done.status == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("problem: the check did not end in 0.05 s")
    assert done.stdout.rstrip().endswith("see runbook.md#loopd-model-unreadable")


def test_the_check_childs_memory_cap_stops_an_allocation_past_it() -> None:
    allocate = (
        "from boxmaker.loopd.check_process import cap_memory\n"
        "cap_memory(64)\n"
        "try:\n"
        "    bytearray(256 * 2**20)\n"
        "except MemoryError:\n"
        "    print('refused')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", allocate], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout == "refused\n", done.stdout + done.stderr
