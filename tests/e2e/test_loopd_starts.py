"""One log, always: twenty fresh `loopd serve` starts each log through `event=serving`.

Issue 38, item 6. loopd loads its model while a thread reads the vocabulary alone for
the marker self-test: two `Llama(...)` at once. llama-cpp-python's stdout and stderr
suppressor (`verbose=False`) dup2s /dev/null over fds 1 and 2 and puts back what it
saw, so two at once could leave fd 2 on /dev/null, and the rest of loopd's log went
there: 1 to 3 starts in 3 lost it after `event=context`. `loopd.llama_load` swaps no
fd and routes llama.cpp's log into loopd's own.

Each start is a real `loopd serve` (the console script) on a fresh home, its fds 1 and
2 one log file as supervisord gives them, on a tiny GGUF (`support.tiny_gguf`:
Qwen2's vocabulary, Hermes 3's two real templates). The first start runs the probe
child; its record (`loopd.probe_cache`) is copied into each later home, as a restart on
the same host finds it, so a start takes seconds. The marker self-test's record is not
copied: every start runs the self-test's thread beside the model's load, the two loads
at once. Each log must hold, in order, the context, the placement (llama.cpp's load
log read: `event=model_placed`), the marker self-test's thread's result, and
`event=serving`; and llama.cpp's own warnings, escaped, among loopd's lines.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.llama import fetch_vocabularies, require_llama_cpp
from support.tiny_gguf import read_vocabulary, write_tiny_model

from boxmaker.loopd.config import load_config
from boxmaker.loopd.probe_cache import record_path
from boxmaker.testing.loopd_runs import LoopdRun, write_loopd_config

require_llama_cpp("the loopd start tests")

pytestmark = [pytest.mark.model, pytest.mark.slow]

STARTS = 20
TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
IN_ORDER = ("event=context ", "event=model_placed ", "event=markers_checked ", "event=serving ")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    hermes = "NousResearch-Hermes-3-Llama-3.1-8B"
    return write_tiny_model(
        tmp_path_factory.mktemp("starts") / "hermes.gguf",
        arch="qwen3",
        vocabulary=read_vocabulary(fetch_vocabularies() / "ggml-vocab-qwen2.gguf"),
        chat_template=(TEMPLATES / f"{hermes}-default.jinja").read_text(),
        named_templates={"tool_use": (TEMPLATES / f"{hermes}-tool_use.jinja").read_text()},
    )


def start(where: Path, model: Path) -> list[str]:
    """One fresh `loopd serve` on `where`/home until loop.sock accepts and its log says
    so (or a few seconds pass: a lost log), then SIGTERM: its log."""
    config = write_loopd_config(where, model)
    socket = load_config(config, {}).loop_socket
    with LoopdRun(config, where / "loopd.log") as run:
        serving = run.wait_serving_or_exit(120, socket)
        run.logged_serving()
        status = run.stop()
        lines = run.lines()
    assert serving, "\n".join(lines)
    assert status == 0, "\n".join(lines)
    return lines


def test_twenty_fresh_starts_each_log_through_serving(tmp_path: Path, model: Path) -> None:
    start(tmp_path / "first", model)  # runs the probe child, and records its pass
    probed = record_path(tmp_path / "first" / "home")
    lost = []
    for n in range(STARTS):
        where = tmp_path / f"start-{n}"
        home_record = record_path(where / "home")
        home_record.parent.mkdir(parents=True)
        shutil.copy(probed, home_record)  # the probe passed on this host; the tags did not
        lines = start(where, model)
        assert "event=model_probe_remembered" in "\n".join(lines)
        seen = [next((i for i, line in enumerate(lines) if e in line), -1) for e in IN_ORDER]
        if -1 in seen or seen != sorted(seen):
            lost.append((n, lines))
            continue
        # llama.cpp's own log is loopd's: one escaped line each, with loopd's prefix
        assert [line for line in lines if line.startswith("loopd INFO event=llama_cpp ")]
        assert all(line.startswith("loopd ") for line in lines), lines
    assert not lost, f"{len(lost)} of {STARTS} starts lost their log, the first: {lost[0]}"
