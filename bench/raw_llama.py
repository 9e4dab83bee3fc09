"""llama-cpp-python's own side of the benches (what loopd is measured against), and
a timed turn of loopd's.

I/O: drives a llama-cpp-python `Llama` (given, already loaded) and reads the clock;
`next_prompt` reads a session log. bench/loopd.py and bench/gpu.py run these on the
model's own thread (`LlamaModel.on_model_thread`), where loopd's generations run.
"""

from __future__ import annotations

import time
from typing import Any

from boxmaker.core.wire.loop import TurnDone
from boxmaker.loopd.model import Sampling
from boxmaker.loopd.session_log import SessionLog, SessionLogs, UserEntry
from boxmaker.testing.daemons import InProcessLoopd


def raw_tokens(llm: Any, prompt: list[int], sampling: Sampling) -> Any:
    """llama-cpp-python's own generator over `prompt`, with loopd's sampling settings."""
    return llm.generate(
        prompt,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        temp=sampling.temperature,
        repeat_penalty=sampling.repeat_penalty,
        reset=True,
    )


def raw_rate_of(
    llm: Any, prompt: list[int], sampling: Sampling, stop: set[int], count: int
) -> float:
    """llama-cpp-python's tokens per second generating from `prompt` until a stop token or
    `count` tokens, as loopd does (the tokens it made over its time)."""
    start = time.perf_counter()
    made = 0
    for token in raw_tokens(llm, prompt, sampling):
        if token in stop:
            break
        made += 1
        if made >= count:
            break
    return made / (time.perf_counter() - start)


def first_token(llm: Any, prompt: list[int], sampling: Sampling) -> float:
    """Seconds from calling llama-cpp-python's `Llama.generate` to its first token."""
    start = time.perf_counter()
    for _ in raw_tokens(llm, prompt, sampling):
        break
    return time.perf_counter() - start


def fresh_first_token(llm: Any, prompt: list[int], sampling: Sampling) -> float:
    """`first_token` with nothing reused: `llm`'s state reset first (untimed), so that
    llama-cpp-python evaluates the whole of `prompt`, as a prompt it never saw."""
    llm.reset()
    return first_token(llm, prompt, sampling)


def next_prompt(loopd: InProcessLoopd, logs: SessionLogs, session: str, text: str) -> list[int]:
    """The prompt loopd renders for `session`'s next turn of `text`, from its log now."""
    session_log = logs.open(session)
    return loopd.daemon.turns.prompt(
        SessionLog(session_log.path, [*session_log.entries, UserEntry(text=text)])
    )


def turn(loopd_turn: object, session: str, text: str, resume: bool) -> float:
    """Send one turn; the client's seconds from sending to turn_done."""
    assert callable(loopd_turn)
    start = time.perf_counter()
    answers = loopd_turn(session, text, resume=resume, timeout_s=600)
    took = time.perf_counter() - start
    done = answers[-1].message
    if not isinstance(done, TurnDone):
        raise SystemExit(f"loopd refused the turn: {done}")
    return took


def raw_switch(llm: Any, state: Any) -> tuple[float, Any]:
    """llama-cpp-python's own switch of sessions: `Llama.save_state()` of what `llm`
    holds, then `Llama.load_state(state)`. Its seconds, and the state it saved."""
    start = time.perf_counter()
    saved = llm.save_state()
    llm.load_state(state)
    return time.perf_counter() - start, saved


def raw_state_bytes(state: Any) -> tuple[int, int, int]:
    """What a llama-cpp-python `LlamaState` holds, in bytes: its llama.cpp state (the
    whole context's, `llama_state_get_data`), its copy of `scores` and of `input_ids`."""
    return len(state.llama_state), int(state.scores.nbytes), int(state.input_ids.nbytes)
