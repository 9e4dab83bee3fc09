"""The model probe: a model or build that crashes, or says nothing, stops loopd in one line.

The crashing model is real in the way that matters: the probe child is a real
process, and it is really killed by the signal. What makes it crash is a
stand-in `llama_cpp` package put first on the child's PYTHONPATH
(`boxmaker.testing.llama_stand_in`; a build compiled for another CPU dies the
same way, with SIGILL, inside `Llama(...)`). The last test loads the real embedded model.
I/O: temporary homes and configuration files, child processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from boxmaker.loopd.probe import POINTER, judge
from boxmaker.testing.llama_stand_in import CRASHING, SILENT, install

LOOPD = Path(sys.executable).with_name("loopd")


@pytest.mark.parametrize(
    ("status", "stdout", "expected"),
    [
        (-signal.SIGILL, "", "the model crashed with SIGILL while generating"),
        (-signal.SIGSEGV, "", "the model crashed with SIGSEGV"),
        (-signal.SIGKILL, "", "perhaps out of memory"),
        (-99, "", "the model crashed with signal 99"),
        (1, "", "could not be loaded or run (exit status 1): ValueError: boom"),
        (0, "0\n", "the model produced no tokens"),
        (0, "", "printed no token count"),
        (0, "4\n", None),
    ],
    ids=["sigill", "sigsegv", "sigkill", "unknown-signal", "exit-1", "no-tokens", "no-count", "ok"],
)
def test_each_outcome_of_the_probe_is_one_line(
    status: int, stdout: str, expected: str | None
) -> None:
    result = judge(status, stdout, "Traceback...\nValueError: boom\n", 0.5)
    if expected is None:
        assert (result.problem, result.tokens) == (None, 4)
        return
    assert result.problem is not None
    assert expected in result.problem
    assert result.problem.endswith(POINTER)
    assert "\n" not in result.problem


def start_loopd(
    tmp_path: Path, stand_in: str, command: str = "serve"
) -> subprocess.CompletedProcess[str]:
    stand_in_path = install(tmp_path / "stand-in", stand_in)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF not really")
    home = tmp_path / "home"
    home.mkdir()
    config = tmp_path / "loopd.toml"
    config.write_text(f'[paths]\nhome = "{home}"\n[model]\npath = "{model}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOXMAKER_")}
    env["PYTHONPATH"] = str(stand_in_path)
    return subprocess.run(
        [str(LOOPD), command, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_loopd_refuses_to_serve_when_its_model_crashes_at_the_probe(tmp_path: Path) -> None:
    done = start_loopd(tmp_path, CRASHING)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if "SIGILL" in line]
    assert len(lines) == 1, done.stderr
    assert lines[0].endswith("see runbook.md#loopd-model-crashed")
    assert "rebuild it with scripts/build-llama-cpp" in lines[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "home" / "run" / "loop" / "loop.sock").exists()


@pytest.mark.parametrize("command", ["serve", "probe"])
def test_a_model_that_says_nothing_is_refused_too(tmp_path: Path, command: str) -> None:
    done = start_loopd(tmp_path, SILENT, command)
    assert done.returncode == 1, done.stderr
    assert "the model produced no tokens; see runbook.md#loopd-model-crashed" in done.stderr
    assert done.stdout == ""


@pytest.mark.model
def test_the_embedded_model_answers_the_probe(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOXMAKER_")}
    env["BOXMAKER_HOME"] = str(tmp_path)
    done = subprocess.run(
        [str(LOOPD), "probe"], capture_output=True, text=True, timeout=600, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("loopd: the model answered: 4 tokens in "), done.stdout
    assert "loopd: the marker self-test passed: 6253 markers" in done.stdout
    # both checks are remembered for `loopd serve` (boxmaker.loopd.probe_cache)
    assert (tmp_path / "loop" / "probe-passed.json").is_file()
    assert (tmp_path / "loop" / "tags-passed.json").is_file()
