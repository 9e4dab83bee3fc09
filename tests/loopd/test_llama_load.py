"""How loopd makes a `Llama` (`boxmaker.loopd.llama_load`), held to the pinned llama-cpp-python.

Real loads of tiny GGUFs (`support.tiny_gguf`: Qwen2's vocabulary, random
weights) whose every template would explode if jinja2 compiled it: each is a syntax
error, so llama-cpp-python's own `Llama(...)` raises on the file (the first test shows
it does), and a load that compiled any of them could not return. Then the rest of the
module's rules: no file descriptor swapped while llama.cpp loads (what fds 1 and 2 are,
read from /proc at every line llama.cpp logs during the load, and after two loads at
once), llama.cpp's log as one escaped record per line, each thread's load log its own,
and nothing printed by llama-cpp-python. A llama-cpp-python that compiles the templates
all the same is played by a stand-in package in a child process (`loopd check`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jinja2
import pytest
from support.llama import fetch_vocabularies, require_llama_cpp
from support.tiny_gguf import VocabularyField, read_vocabulary, write_tiny_model

from boxmaker.core.display.hidden_chars import is_hidden
from boxmaker.loopd.llama_load import LoadLog, load_llama
from boxmaker.testing.llama_stand_in import COMPILING, install

require_llama_cpp("the llama_load tests")

pytestmark = [pytest.mark.model, pytest.mark.slow]

LOOPD = Path(sys.executable).with_name("loopd")
# each a syntax error: compiled by jinja2, it raises (and stops llama-cpp-python's load)
DEFAULT = "{% if %}never compiled"
NAMED = {
    "rag": "{% for %}",
    "tool_use": "{{ 'x' | center(2 * 10 ** 8) }}{% endfor %}",  # constant folding, then
}
ESC_NAME = "tokenizer.chat_template.x\x1b]52;c;aGk=\x07\nloopd INFO event=serving"
HOSTILE_NAME = "tiny\x1b[2J\x07\nloopd INFO event=serving forged"


@pytest.fixture(scope="module")
def qwen2() -> list[VocabularyField]:
    return read_vocabulary(fetch_vocabularies() / "ggml-vocab-qwen2.gguf")


@pytest.fixture(scope="module")
def exploding(tmp_path_factory: pytest.TempPathFactory, qwen2: list[VocabularyField]) -> Path:
    return write_tiny_model(
        tmp_path_factory.mktemp("llama-load") / "exploding.gguf",
        arch="qwen3",
        vocabulary=qwen2,
        chat_template=DEFAULT,
        named_templates=NAMED,
        metadata={ESC_NAME: "{% while %}", "general.name": HOSTILE_NAME},
    )


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory, qwen2: list[VocabularyField]) -> Path:
    return write_tiny_model(
        tmp_path_factory.mktemp("llama-load") / "other.gguf",
        arch="qwen3",
        vocabulary=qwen2,
        chat_template="{{ messages }}",
    )


def test_llama_cpp_pythons_own_llama_compiles_every_template(exploding: Path) -> None:
    import llama_cpp

    with pytest.raises(jinja2.TemplateSyntaxError):  # the trap this module is about
        llama_cpp.Llama(str(exploding), vocab_only=True, verbose=False)


@pytest.mark.parametrize(
    "params",
    [{"vocab_only": True}, {"n_ctx": 256}],
    ids=["vocabulary-alone", "whole-model"],
)
def test_no_template_of_the_file_is_compiled(exploding: Path, params: dict[str, Any]) -> None:
    llm = load_llama(exploding, **params)
    assert llm._chat_handlers == {}
    templates = {k: v for k, v in llm.metadata.items() if k.startswith("tokenizer.chat_template")}
    # after the load, the whole metadata: every template, as the file holds it
    assert templates == {
        "tokenizer.chat_template": DEFAULT,
        "tokenizer.chat_template.rag": NAMED["rag"],
        "tokenizer.chat_template.tool_use": NAMED["tool_use"],
        ESC_NAME: "{% while %}",
    }
    assert llm.verbose is False  # none of llama-cpp-python's prints from here on


def test_no_file_descriptor_is_swapped_while_llama_cpp_loads(exploding: Path, other: Path) -> None:
    seen: list[tuple[str, str]] = []

    class Where(logging.Handler):  # where fds 1 and 2 point at each line llama.cpp logs
        def emit(self, record: logging.LogRecord) -> None:
            seen.append((os.readlink("/proc/self/fd/1"), os.readlink("/proc/self/fd/2")))

    before = [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2)]
    logger = logging.getLogger("llama.cpp")
    handler, level = Where(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        loads = [
            threading.Thread(target=load_llama, args=(path,), kwargs={"n_ctx": 256})
            for path in (exploding, other, exploding, other)
        ]
        for load in loads:  # two models and two vocabularies at once, as loopd serve does
            load.start()
        for load in loads:
            load.join(60)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert len(seen) > 100  # llama.cpp logs every key and tensor as it loads
    assert not [fds for fds in seen if os.devnull in fds]
    assert [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2)] == before


def test_llama_cpps_log_is_one_escaped_record_a_line(
    exploding: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="llama.cpp")
    load_llama(exploding, vocab_only=True)
    messages = [r.getMessage() for r in caplog.records if r.name == "llama.cpp"]
    assert messages
    assert all(m.startswith("event=llama_cpp ") for m in messages)
    assert not [m for m in messages if any(is_hidden(ch) or ch == "\n" for ch in m)]
    # the file's name, as llama.cpp logs the metadata: its ESC and BEL spelled out
    assert [m for m in messages if "general.name" in m and "\\u001b[2J\\u0007" in m]


def test_each_thread_keeps_its_own_load_log(exploding: Path, other: Path) -> None:
    texts: dict[Path, str] = {}

    def load(path: Path) -> None:
        with LoadLog() as log:
            load_llama(path, n_ctx=256)
        texts[path] = log.text

    threads = [threading.Thread(target=load, args=(path,)) for path in (exploding, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert str(exploding) in texts[exploding]
    assert str(other) not in texts[exploding]
    assert str(other) in texts[other]
    assert str(exploding) not in texts[other]


def test_llama_cpp_python_prints_nothing(
    exploding: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    load_llama(exploding, n_ctx=256)
    assert capfd.readouterr() == ("", "")  # its log is the logger's (caplog's here)


def test_a_file_llama_cpp_cannot_read_is_a_value_error_with_its_words(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    with pytest.raises(ValueError, match=r"Failed to load model from file: .*broken\.gguf: "):
        load_llama(broken, vocab_only=True)


def test_a_llama_cpp_python_that_compiles_templates_anyway_is_refused(
    tmp_path: Path, exploding: Path
) -> None:
    stand_in = install(tmp_path / "stand-in", COMPILING)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOXMAKER_")}
    env["PYTHONPATH"] = str(stand_in)
    done = subprocess.run(
        [str(LOOPD), "check", str(exploding), "--timeout", "60"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stdout.splitlines()
    assert "llama-cpp-python 9.9.9 loads a model in a way loopd cannot keep from" in line
    assert "install llama-cpp-python==0.3.36" in line
    assert line.endswith("see runbook.md#loopd-model-unreadable")
    assert "Traceback" not in done.stderr
