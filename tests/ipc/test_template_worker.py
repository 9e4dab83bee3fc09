"""The template worker (boxmaker.ipc.template_worker): the floor under the sandbox.

Every shape of issue 38 (`boxmaker.testing.template_attempts.SHAPES`), the floor's
included, runs through a worker in a process of its own under an address-space cap:
refused in one line (or rendered, where it must), at compile or at render, within 1.5
times the time bound, the worker's peak resident memory (and the parent's) under 256
MiB over the baseline. The worker renders every real template exactly as the sandbox
does in this process, starts again after it is killed, and is a fresh interpreter under
its own caps, never a fork.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.template_families import (
    BOS,
    EOS,
    FAMILIES,
    NOW,
    SYSTEM,
    history,
    own,
    prompt_for,
    source,
)

from boxmaker.core.model.chat_format import Role, Turn
from boxmaker.core.model.template_prompt import TemplatePrompt
from boxmaker.core.model.template_sandbox import ChatTemplate, TemplateError
from boxmaker.ipc.template_worker import TemplateWorker, WorkerTemplate
from boxmaker.loopd.tools import SCHEMAS, TOOL_SCHEMAS
from boxmaker.testing.template_attempts import (
    SHAPES,
    Shape,
    attempt,
    conversation,
    judge,
)

MAX_SECONDS = 2.0
RSS_MIB = 256
# one comparison that runs 2**40 times over, in C: only the kill ends it
COMPARISON = next(shape for shape in SHAPES if shape.name == "one-comparison-of-shared-nestings")


@pytest.fixture
def worker() -> Iterator[TemplateWorker]:
    with TemplateWorker() as made:
        yield made


def _render(template: WorkerTemplate, count: int = 3) -> str:
    return template.render(
        conversation(count),
        tools=None,
        add_generation_prompt=True,
        bos_token="",
        eos_token="",
        now=NOW,
    )


def _gone(pid: int, seconds: float = 10.0) -> bool:
    """Whether `pid` is no longer a live process (reaped, or a zombie), by a deadline."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        os.sched_yield()
    return False


@pytest.mark.parametrize("shape", SHAPES, ids=[shape.name for shape in SHAPES])
def test_each_shape_is_refused_or_bounded_through_the_worker(shape: Shape) -> None:
    result = attempt(
        "worker",
        shape.source,
        stage=shape.stage,
        messages=shape.messages,
        max_seconds=MAX_SECONDS,
        timeout=60,
    )
    judge(shape, result, MAX_SECONDS, RSS_MIB)


@pytest.mark.parametrize("name", [family[0] for family in FAMILIES])
def test_each_real_template_renders_through_the_worker_as_in_this_process(
    name: str, worker: TemplateWorker
) -> None:
    here = prompt_for(name)
    there = TemplatePrompt(
        WorkerTemplate(source(name), worker=worker),
        bos=BOS,
        eos=EOS,
        add_bos=False,
        tools=TOOL_SCHEMAS,
        now=lambda: NOW,
        schemas=SCHEMAS,
    )
    assert there.facts == here.facts
    assert own(there, history(there), generation=True) == own(here, history(here), True)
    turns = [Turn(Role.USER, "first")]
    for n in range(3):
        turns += [Turn(Role.MODEL, f"answer {n}"), Turn(Role.USER, f"next {n}")]
        assert there.text(SYSTEM, turns) == here.text(SYSTEM, turns)


def test_a_long_session_renders_through_the_worker_as_in_this_process(
    worker: TemplateWorker,
) -> None:
    name = "Qwen3.5-4B"
    here, there = prompt_for(name), prompt_for(name)
    there.template = WorkerTemplate(source(name), worker=worker)
    turns = [Turn(Role.USER, "first")]
    for n in range(40):
        turns += [Turn(Role.MODEL, f"answer {n} " * 20), Turn(Role.USER, f"next {n} " * 20)]
    assert len(turns) == 81
    assert there.text(SYSTEM, turns) == here.text(SYSTEM, turns)


def test_the_child_is_a_fresh_interpreter_under_its_own_address_space_cap(
    worker: TemplateWorker,
) -> None:
    _render(WorkerTemplate("{{ messages|length }}", worker=worker))
    pid = worker.pid
    assert pid is not None
    assert Path(f"/proc/{pid}/exe").resolve() == Path(sys.executable).resolve()
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert argv[1:3] == [b"-I", b"-c"]  # isolated: no PYTHON* variables, no working directory
    limits = Path(f"/proc/{pid}/limits").read_text()
    address_space = next(line for line in limits.splitlines() if "address space" in line)
    assert address_space.split()[3] != "unlimited"
    assert int(address_space.split()[3]) < 1 << 30


def test_a_killed_child_is_started_again_and_the_template_compiled_again(
    worker: TemplateWorker,
) -> None:
    template = WorkerTemplate("{{ messages|length }}", worker=worker)
    assert _render(template) == "3"
    first = worker.pid
    assert first is not None
    looping = WorkerTemplate(COMPARISON.source, worker=worker, max_seconds=1.0)
    start = time.monotonic()
    with pytest.raises(TemplateError) as refused:
        _render(looping)
    assert "ran for more than 1 s" in str(refused.value)
    assert time.monotonic() - start < 1.5
    assert _render(template, 5) == "5"
    assert worker.pid not in (None, first)


def test_a_child_killed_from_outside_is_one_refusal_then_started_again(
    worker: TemplateWorker,
) -> None:
    template = WorkerTemplate("{{ messages|length }}", worker=worker)
    _render(template)
    pid = worker.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert _gone(pid)
    assert _render(template, 4) == "4"  # a child that died between requests: a new one


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("{{ raise_exception('no\\n\\x1b[2Jloopd INFO event=serving') }}", id="raises"),
        pytest.param("{{ 'x' * 10**9 }}", id="too-large"),
        pytest.param("{{ messages[0].content.upper(1, 2) }}", id="a-type-error"),
    ],
)
def test_a_refusal_through_the_worker_is_the_sandboxs_own(
    text: str, worker: TemplateWorker
) -> None:
    """Rule 6: the same text as in this process, for the callers that escape it."""
    with pytest.raises(TemplateError) as here:
        ChatTemplate(text, clock=time.monotonic).render(
            conversation(3),
            tools=None,
            add_generation_prompt=True,
            bos_token="",
            eos_token="",
            now=NOW,
        )
    with pytest.raises(TemplateError) as there:
        _render(WorkerTemplate(text, worker=worker))
    assert str(there.value) == str(here.value)


def test_a_template_that_does_not_compile_is_refused_at_construction(
    worker: TemplateWorker,
) -> None:
    with pytest.raises(TemplateError, match="does not compile"):
        WorkerTemplate("{% if %}", worker=worker)


def test_threads_take_turns_and_each_gets_its_own_answer(worker: TemplateWorker) -> None:
    template = WorkerTemplate("{{ messages|length }}", worker=worker)
    answers: dict[int, str] = {}

    def render(count: int) -> None:
        answers[count] = _render(template, count)

    threads = [threading.Thread(target=render, args=(count,)) for count in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert answers == {count: str(count) for count in range(1, 9)}


def test_closing_the_worker_ends_its_child() -> None:
    worker = TemplateWorker()
    _render(WorkerTemplate("x", worker=worker))
    pid = worker.pid
    assert pid is not None
    worker.close()
    assert worker.pid is None
    assert _gone(pid)


def test_a_child_that_cannot_start_in_time_is_one_line_naming_what_to_check() -> None:
    with TemplateWorker(start_seconds=0.001) as worker, pytest.raises(TemplateError) as refused:
        WorkerTemplate("x", worker=worker)
    assert "did not start within" in str(refused.value)
    assert sys.executable in str(refused.value)
    assert "\n" not in str(refused.value)
