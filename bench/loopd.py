"""How fast does loopd generate, and does prefix reuse keep a long session quick?

Figures, measured in one run on the embedded model (Gemma 3 270M Q4_K_M, loaded
by loopd's own `load_model` with loopd.toml's defaults and a fixed seed, so with the
shipped LoRA adapter, issue 39; every llama-cpp-python side runs on the very `Llama`
loopd drives, the adapter applied, and the first line names it):

- generation tokens per second through loopd: turns over loop.sock (the client's
  time from sending the turn to turn_done, so the socket, the session log with
  its fsyncs, prompt assembly and detokenizing are all in it), over
  llama-cpp-python's own speed for the same prompt, the same sampling settings,
  the same number of tokens and the same starting cache (`Llama.generate` on the
  same `Llama`, its state restored to what loopd started from, run on the model's
  own thread, where loopd's generations run, so both sides use one OpenMP team).
  That is the limit; the ratio must be at least 0.97 (issue 25). Both sides run
  each round from the same restored state, each side first in turn, each until a
  stop token or REPLY_TOKENS (a rate: the tokens made over the time). The median
  round of each side counts. The owner's turns (GEN_PROMPTS) ask for a long text to
  be written to a file: the adapted model answers a story request in a dozen tokens,
  and over a dozen tokens a turn's fixed cost (the socket, the log's fsyncs, some
  3 to 4 ms) is what the ratio would measure (0.91 to 0.93 in December 2026, on
  12-token replies); a write call carries its whole text, so the replies run to
  REPLY_TOKENS. The turn limits allow no call, so the call is written, logged and
  not run. Under half of REPLY_TOKENS a round on the median is an error, not a
  figure. `--only generation` runs this part alone, on a freshly loaded model. Also printed: the fastest of each, and loopd's own
  part of a turn (the client's time less the model's generate call, as
  RecordingModel times it: the socket, the log's appends and fsyncs, the prompt).
- time to the first content or reasoning event: from sending a turn over
  loop.sock to the client's receiving its first `content` or `reasoning` event (a
  thinking model's first words are reasoning; the reply streams as the model
  writes it, and only what could still be a tool call is held back), over the
  time from calling llama-cpp-python's `Llama.generate` to its first token, on the
  same prompt tokens (rendered from the session's log before the turn, and
  checked against what loopd generated from), sampling settings and restored
  state, on the model's thread as above. Every round is the same turn from the
  same start (the session's log file and the model's state as they were after the
  session's first turn, both restored before each side, untimed), so the rounds
  differ only by how disturbed they were; each side first in turn; the median of
  each side counts; at most 1.1 (issue 25). The figure names the token whose text
  was first streamed (1 when the reply opens with text that cannot be a tool
  call). Also printed, not judged: the fastest of each side, and loopd's own part
  of its time (sending the turn to the generate call: the socket, the session
  log's append and fsync, the prompt; the first text to the client: the frame out
  and back), timed by RecordingModel.

  Why medians: this machine's noise is heavy-tailed. Judged by the fastest of
  each side (as until December 2026), the first-event ratio of runs with the same
  code went from 0.945 to 1.158 while loopd's own part stayed at 2 to 3.5 ms (2
  to 3 percent); the fastest raw round and the fastest loopd round are different
  rounds, each a rare undisturbed one. The medians of 48 identical rounds moved
  from 0.99 to 1.03 across runs.
- the time to the first token of turn 8 of a session over that of turn 1 (from
  sending the turn to the model's first text), with prefix reuse: at most 1.5.
  Turn 1 starts from an empty cache, as the first turn after loopd starts does.
  Each of TTFT_REPEATS sessions runs on a freshly loaded model; the fastest of each
  turn counts.

- neutralising a 64 KiB tool result (`boxmaker.core.sanitize.neutralise`, as the
  turn loop does to every tool result when it first appends it) over evaluating
  it: at most 0.05 (issue 15). The text is the sanitizer's code-work corpus
  (tests/fixtures/sanitize/code_work.jsonl) repeated to 64 KiB of UTF-8, once
  without a tag and once with a listed tag every few lines. The list is the
  loaded model's own list (`boxmaker.loopd.markers.build_markers`: on Gemma 3
  over 6,000 tags, most of them `<unusedN>`) and `MEMORY_TAGS`. Neutralising: the
  fastest of NEUTRALISE_ROUNDS calls. Evaluating: 64 KiB is about 21,000 tokens,
  more than the 4096-token context and a minute's work here, so the cost is
  scaled per token: `Llama.eval` of the text's first EVAL_TOKENS tokens from a
  reset state (on the model's thread), the fastest of EVAL_ROUNDS, over
  EVAL_TOKENS, times the tokens of the neutralised text. A token near the start
  of a context is the cheapest to evaluate (attention grows with position), so
  this understates evaluating and the ratio is an upper bound.
- a switch of sessions through loopd's `LlamaModel` (`_switch_to`, timed around it
  under the model's lock: saving the session the context holds, as llama.cpp's
  state of its sequence, and putting the other's back) over llama-cpp-python's own
  switch of the same sessions, `Llama.save_state()` of the one held and
  `Llama.load_state()` of the other's (taken as loopd's context held it). Two
  sessions of SWITCH_TOKENS tokens each (the code-work corpus, as above), each
  round from the same state, each side first in turn; the median of SWITCH_ROUNDS
  rounds of each counts; at most 1.2 (issue 27). The session switched back to then
  takes a turn, which must evaluate only what was added. Also printed, not judged:
  the bytes each saved session holds, loopd's (`LlamaModel.saved_sizes`) and a
  `LlamaState`'s (its llama.cpp state, its copy of `scores`, its `input_ids`).
  `--only switch` runs this part alone, on a freshly loaded model.
- the first turn after a compaction: its time to the first content or reasoning
  event (as above) over llama-cpp-python's first token on a fresh prompt of the
  same tokens, at most 1.1 (issue 27). On its own model at context
  COMPACTION_CONTEXT, with loopd's real turn limits for it (`turn_limits`: the
  threshold, the summary's budget, the turns kept) but the first-event part's short
  replies and no tool calls. The session's log is written directly, not generated
  (the owner's turns from PROMPTS, each reply COMPACTION_REPLY tokens of the
  code-work corpus as the model tokenizes it, its text their detokenizing), until
  one more turn would pass the threshold; loopd then compacts it (`compact` on
  loop.sock, untimed: the memory chance and the summary are the model's own), and
  the log file and the model's state are saved. Each round restores both (untimed)
  and sends the next turn; the raw side is `Llama.generate` on the very prompt loopd
  generated from (rendered from the log, checked), its state reset so that it
  evaluates all of it. loopd reuses what its context still holds from the
  compaction's own prompts (the system text they begin with), as it does after any
  compaction: the figure says how many tokens it evaluated. COMPACTION_ROUNDS rounds,
  each side first in turn, the median of each. `--only compaction` runs this part
  alone.

- rendering a turn's prompt through the template worker (issue 38: a model file's
  template runs in a child process under an address-space cap and a wall-clock kill,
  `boxmaker.ipc.template_worker`): the time loopd takes to render a turn's prompt
  from its stretches (`core.model.template_prompt` with its stretch cache, as a turn does:
  the new stretch rendered, the others reused) on Qwen3.5's own template (the owner's
  family, tests/fixtures/chat_templates) at the end of a session of TEMPLATE_TURNS
  turns, through the worker less in this process (`ChatTemplate`, the same bounds),
  over the time the model takes to write one reply of REPLY_TOKENS tokens (at
  llama-cpp-python's own fastest rate of the generation part's rounds, the least
  disturbed: the shortest reply, so the ratio is an upper bound): at most 0.01
  (issue 38).
  Each side renders TEMPLATE_ROUNDS times from the same stretches, each first in
  turn; the median of each counts. Printed too, not judged: both sides' times.
  `--only template` runs this part alone (the rate measured on a freshly loaded
  model, the fastest of RATE_ROUNDS generations).

loopd runs in this process (the turn loop and the LoopServer on a real Unix
socket, `boxmaker.testing.daemons`); the client, `boxmaker.ipc.client`, is this
process's main thread. Work files go in a temporary directory (`--dir` chooses where).
Exit status 1 if a ratio is outside its limit.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from raw_llama import (
    first_token,
    fresh_first_token,
    next_prompt,
    raw_rate_of,
    raw_state_bytes,
    raw_switch,
    turn,
)

from boxmaker.core.home.links import LOOP
from boxmaker.core.model.chat_format import Role
from boxmaker.core.model.chat_format import Turn as LogTurn
from boxmaker.core.model.reply_stream import streamable
from boxmaker.core.model.template_prompt import Stretches, TemplatePrompt
from boxmaker.core.model.template_sandbox import ChatTemplate, TemplateRenderer
from boxmaker.core.sanitize import MEMORY_TAGS, neutralise
from boxmaker.core.wire.loop import Compact, ContentEvent, ReasoningEvent, Turn, TurnDone, TurnEvent
from boxmaker.ipc import client
from boxmaker.ipc.connection import Connection, SocketRules
from boxmaker.ipc.template_worker import TemplateWorker, WorkerTemplate
from boxmaker.loopd.adapter import describe
from boxmaker.loopd.config import LoopdConfig, load_config
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.main import turn_limits
from boxmaker.loopd.markers import LlamaVocabulary, build_markers
from boxmaker.loopd.model import LlamaModel
from boxmaker.loopd.session_log import ModelEntry, SessionLogs, UserEntry
from boxmaker.loopd.startup import load_model
from boxmaker.loopd.tools import SCHEMAS, TOOL_SCHEMAS
from boxmaker.testing.daemons import InProcessLoopd, start_loopd
from boxmaker.testing.recording_model import RecordingModel

SEED = 20261130
REPLY_TOKENS = 96
ROUNDS = 16
TURNS = 8
TTFT_REPEATS = 2
GEN_LIMIT = 0.97
TTFT_LIMIT = 1.5
CONTENT_LIMIT = 1.1
FIRST_ROUNDS = 48
FIRST_LIMITS = TurnLimits(max_tool_calls=0, max_tokens=64, reply_tokens=8)
TOOL_RESULT_BYTES = 64 * 1024
CODE_WORK = Path(__file__).parent.parent / "tests" / "fixtures" / "sanitize" / "code_work.jsonl"
TAG_EVERY = 8  # lines, in the text with tags
NEUTRALISE_ROUNDS = 20
EVAL_TOKENS = 1024
EVAL_ROUNDS = 2
NEUTRALISE_LIMIT = 0.05
SWITCH_TOKENS = 1500  # each session's
SWITCH_ROUNDS = 8
SWITCH_ADDED = 8  # tokens the resumed session's turn adds
SWITCH_LIMIT = 1.2
MIB = 1024 * 1024
COMPACTION_CONTEXT = 2048
COMPACTION_REPLY = 200  # tokens of each reply written to the log
COMPACTION_ROUNDS = 8
COMPACTION_LIMIT = 1.1
# the generation part's turns: a write whose text fills a reply (see the docstring)
GEN_PROMPTS = [
    "Write this to /srv/bench/letter.txt: Dear neighbours, the courtyard will be closed "
    "from Monday to Friday next week while the old paving stones are lifted and the "
    "drains underneath are replaced, so please use the side gate by the bicycle shed "
    "and keep the path clear for the builders' wheelbarrows.",
    "Save this in /srv/bench/recipe.md: Soak the beans overnight, drain them, and cook "
    "them slowly with two onions, three cloves of garlic, a bay leaf and a spoon of "
    "smoked paprika until they are soft; season with salt at the end, never at the "
    "start, or the skins will stay hard however long they simmer.",
    "Put this into /srv/bench/trip.txt: We leave the harbour at seven, sail north along "
    "the coast past the lighthouse and the two small islands, stop for lunch in the "
    "sheltered bay where the water is calm, and come back before the evening wind "
    "picks up and the tide turns against us near the river mouth.",
    "Write this to /srv/bench/minutes.txt: The committee agreed to repaint the hall in "
    "the spring, to ask three firms for prices before the end of the month, to move the "
    "book sale to the first Saturday of June, and to thank the volunteers who cleared "
    "the garden after the storm knocked down the old fence.",
]
TEMPLATE = (
    Path(__file__).parent.parent / "tests" / "fixtures" / "chat_templates" / "Qwen3.5-4B.jinja"
)
TEMPLATE_TURNS = 40  # owner's turns before the one rendered, each with the model's reply
TEMPLATE_ROUNDS = 30
TEMPLATE_LIMIT = 0.01
RATE_ROUNDS = 3
TEMPLATE_NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
PROMPTS = [
    "Tell me a short story about a lighthouse keeper.",
    "Describe the sea on a stormy night.",
    "Write a few lines about a walk in the forest.",
    "Explain how bread is made, step by step.",
    "Describe a busy market in the morning.",
    "Tell me about a journey on a night train.",
    "Write about a cat that watches the rain.",
    "Describe the view from a mountain top.",
]


def streamed_turn(path: Path, session: str, text: str, resume: bool) -> tuple[float, float] | None:
    """Send one turn, reading its answers as they come: when it was sent and when its
    first content or reasoning event came (time.perf_counter; None: it had none)."""
    first: float | None = None
    start = time.perf_counter()
    request = Turn(session=session, text=text, resume=resume)
    for answer in client.answers(path, request, "bench", 600):
        message = answer.message
        if first is None and isinstance(message, TurnEvent):
            if isinstance(message.event, ContentEvent | ReasoningEvent):
                first = time.perf_counter()
        elif answer.final and not isinstance(message, TurnDone):
            raise SystemExit(f"loopd refused the turn: {message}")
    return None if first is None else (start, first)


def first_content_token(detokenize: object, ids: tuple[int, ...]) -> int:
    """Which token (1-based) of a reply first released content to stream."""
    assert callable(detokenize)
    for n in range(1, len(ids) + 1):
        if streamable(detokenize(ids[:n])):
            return n
    return len(ids)


def tool_result(tags: tuple[str, ...]) -> str:
    """The code-work corpus repeated to TOOL_RESULT_BYTES of UTF-8, cut at a line end;
    with `tags`, one of them (in turn) at the end of every TAG_EVERY-th line."""
    lines = [
        line
        for raw in CODE_WORK.read_bytes().splitlines()
        for line in str(orjson.loads(raw)["text"]).splitlines()
    ]
    out: list[str] = []
    size = 0
    n = 0
    while True:
        line = lines[n % len(lines)]
        if tags and n % TAG_EVERY == TAG_EVERY - 1:
            line += tags[(n // TAG_EVERY) % len(tags)]
        if size + len(line.encode()) + 1 > TOOL_RESULT_BYTES:
            return "\n".join(out) + "\n"
        out.append(line)
        size += len(line.encode()) + 1
        n += 1


def neutralise_time(text: str, tags: tuple[str, ...]) -> float:
    """The fastest of NEUTRALISE_ROUNDS calls of `neutralise(text, tags)`, in seconds."""
    best = float("inf")
    for _ in range(NEUTRALISE_ROUNDS):
        start = time.perf_counter()
        neutralise(text, tags)
        best = min(best, time.perf_counter() - start)
    return best


def eval_time(llm: Any, tokens: list[int]) -> float:
    """Seconds for llama-cpp-python's `Llama.eval` of `tokens` from a reset state."""
    llm.reset()
    start = time.perf_counter()
    llm.eval(tokens)
    took = time.perf_counter() - start
    llm.reset()
    return took


def loopd_switch(llama: LlamaModel, session: str) -> float:
    """Seconds for loopd's own switch of the context to `session` (`_switch_to`, under
    the model's lock, as a turn makes it)."""
    with llama._lock:
        start = time.perf_counter()
        llama._switch_to(session)
        return time.perf_counter() - start


def switch_part(llama: LlamaModel) -> list[str]:
    """Time switches of sessions through loopd and through llama-cpp-python's own
    save_state and load_state, print the figures and the bytes each saved session
    holds; what was outside its limit (one line each)."""
    llm = llama._llm
    ids = llama.tokenize(tool_result(()), special=False)
    if len(ids) < 2 * SWITCH_TOKENS + SWITCH_ADDED:
        raise SystemExit("the code-work corpus is too short for two sessions")
    prompts = {
        "switch-a": ids[:SWITCH_TOKENS],
        "switch-b": ids[SWITCH_TOKENS : 2 * SWITCH_TOKENS],
    }
    added = ids[2 * SWITCH_TOKENS : 2 * SWITCH_TOKENS + SWITCH_ADDED]
    for session, prompt in prompts.items():  # the context holds switch-b, switch-a saved
        llama.generate(session, prompt, max_tokens=1, stop=set(), on_text=lambda _: None)
    llama.on_model_thread(partial(loopd_switch, llama, "switch-a"))
    raw_a = llama.on_model_thread(llm.save_state)  # switch-a as loopd's context holds it
    llama.on_model_thread(partial(loopd_switch, llama, "switch-b"))
    if "switch-a" not in llama.saved_sizes():
        raise SystemExit(
            f"loopd kept no saved session of {SWITCH_TOKENS} tokens "
            f"(saved_bytes {llama.saved_bytes}): nothing to switch back to"
        )
    loopd_times: list[float] = []
    raw_times: list[float] = []
    for n in range(SWITCH_ROUNDS):
        # each side switches from switch-b to switch-a, timed, and back, untimed
        for side in ("loopd", "raw") if n % 2 == 0 else ("raw", "loopd"):
            if side == "loopd":
                loopd_times.append(llama.on_model_thread(partial(loopd_switch, llama, "switch-a")))
                llama.on_model_thread(partial(loopd_switch, llama, "switch-b"))
                continue
            took, raw_b = llama.on_model_thread(partial(raw_switch, llm, raw_a))
            raw_times.append(took)
            llama.on_model_thread(partial(llm.load_state, raw_b))
            del raw_b
    sizes = llama.saved_sizes()
    resumed = llama.generate(
        "switch-a", prompts["switch-a"] + added, max_tokens=1, stop=set(), on_text=lambda _: None
    )
    if resumed.evaluated > SWITCH_ADDED + 1:
        raise SystemExit(
            f"the session switched back to evaluated {resumed.evaluated} tokens, "
            f"not the {SWITCH_ADDED} added: its prefix was not kept"
        )
    loopd_switched = statistics.median(loopd_times)
    raw_switched = statistics.median(raw_times)
    ratio = loopd_switched / raw_switched
    cells, scores, input_ids = raw_state_bytes(raw_a)
    raw_bytes = cells + scores + input_ids
    print(
        f"switching sessions: two of {SWITCH_TOKENS} tokens, from one to the other (saving "
        f"the one held, putting the other back), {SWITCH_ROUNDS} rounds each side first in "
        "turn; the median of each"
    )
    print(
        f"  llama-cpp-python save_state() + load_state(): {raw_switched * 1000:8.1f} ms (the limit)"
    )
    print(
        f"  through loopd (LlamaModel._switch_to):        {loopd_switched * 1000:8.1f} ms"
        f"  ratio {ratio:.3f} (at most {SWITCH_LIMIT})"
    )
    print(
        f"  the fastest of each: {min(raw_times) * 1000:.1f} and {min(loopd_times) * 1000:.1f} "
        f"ms; the session switched back to evaluated {resumed.evaluated} of "
        f"{resumed.prompt_tokens} prompt tokens (printed, not judged)"
    )
    for session, size in sizes.items():
        print(
            f"  memory of a saved session ({session}): loopd {size:,} bytes "
            f"({size / MIB:.1f} MiB); llama-cpp-python's LlamaState {raw_bytes:,} bytes "
            f"({raw_bytes / MIB:.1f} MiB: llama.cpp state {cells:,}, scores {scores:,}, "
            f"input_ids {input_ids:,}) (printed, not judged)"
        )
    if ratio > SWITCH_LIMIT:
        return [f"session-switch ratio {ratio:.3f} > {SWITCH_LIMIT}"]
    return []


def shared_prefix(a: list[int], b: list[int]) -> int:
    """How many tokens `a` and `b` begin with alike."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def write_session(loopd: InProcessLoopd, session: str, threshold: int) -> int:
    """Write `session`'s log directly: the owner's turns (PROMPTS in turn), each answered
    by COMPACTION_REPLY tokens of the code-work corpus as the model tokenizes it (its
    text their detokenizing, as a generated reply's is), until one more turn would
    take the next prompt past `threshold`. The turns written."""
    logs = SessionLogs(loopd.home)
    corpus = loopd.model.tokenize(tool_result(()), special=False)
    session_log = logs.open(session)
    written = 0
    while True:
        text = PROMPTS[written % len(PROMPTS)]
        prompt = next_prompt(loopd, logs, session, text)
        reply = tuple(corpus[written * COMPACTION_REPLY : (written + 1) * COMPACTION_REPLY])
        if len(prompt) + COMPACTION_REPLY > threshold or len(reply) < COMPACTION_REPLY:
            return written
        session_log.append(UserEntry(text=text))
        session_log.append(
            ModelEntry(text=loopd.model.detokenize(reply), ids=reply, prompt=len(prompt))
        )
        written += 1


def compact(loopd: InProcessLoopd, session: str) -> float:
    """Compact `session` as its owner would (`compact` on loop.sock); its seconds."""
    start = time.perf_counter()
    for answer in client.answers(loopd.socket, Compact(session=session), "bench", 3600):
        if answer.final and not isinstance(answer.message, TurnDone):
            raise SystemExit(f"loopd refused the compaction: {answer.message}")
    return time.perf_counter() - start


def compaction_part(work: Path, config: LoopdConfig) -> list[str]:
    """Time the first turn after a compaction through loopd against llama-cpp-python's
    first token on the same prompt from nothing, on a freshly loaded model at
    `config`'s context; print the figures; what was outside its limit (one line each)."""
    llama = load_model(config)
    llm = llama._llm
    if llm.n_ctx() != config.model.context:
        raise SystemExit(
            f"the model was loaded at context {llm.n_ctx()}, not {config.model.context}"
        )
    limits = replace(
        turn_limits(config),
        max_tool_calls=FIRST_LIMITS.max_tool_calls,
        max_tokens=FIRST_LIMITS.max_tokens,
        reply_tokens=FIRST_LIMITS.reply_tokens,
    )
    assert limits.context is not None
    threshold = int(limits.context * limits.compact_at)
    model = RecordingModel(llama)
    session = "compaction"
    text = PROMPTS[0]
    loopd = start_loopd(work, model, home=config.home, limits=limits)
    loopd_firsts: list[tuple[float, int]] = []  # (seconds, the token that released it)
    raw_firsts: list[float] = []
    evaluated: set[int] = set()
    try:
        logs = SessionLogs(loopd.home)
        turns = write_session(loopd, session, threshold)
        compacting = compact(loopd, session)
        compaction = logs.open(session).compaction
        if compaction is None:
            raise SystemExit("loopd's compaction appended no compaction entry")
        path = logs.path(session)
        logged = path.read_bytes()
        state = llm.save_state()  # the context as the compaction left it
        held = list(llm.input_ids[: llm.n_tokens])
        prompt = next_prompt(loopd, logs, session, text)
        if len(prompt) > threshold:
            raise SystemExit(f"the prompt after compaction ({len(prompt)}) passes {threshold}")
        reused = shared_prefix(held, prompt)
        for n in range(COMPACTION_ROUNDS):
            for side in ("loopd", "raw") if n % 2 == 0 else ("raw", "loopd"):
                llm.load_state(state)
                path.write_bytes(logged)
                if side == "raw":
                    raw_firsts.append(
                        llama.on_model_thread(
                            partial(fresh_first_token, llm, prompt, llama.sampling)
                        )
                    )
                    continue
                count = len(model.calls)
                times = streamed_turn(loopd.socket, session, text, True)
                call = model.calls[count]
                if call.prompt != prompt:
                    raise SystemExit("loopd's prompt is not the one rendered for the limit")
                evaluated.add(call.generation.evaluated)
                if times is not None:  # None: a reply that held all its first tokens back
                    sent, came = times
                    released = first_content_token(llama.detokenize, call.generation.ids)
                    loopd_firsts.append((came - sent, released))
    finally:
        loopd.stop()
    if not loopd_firsts:
        raise SystemExit("no turn after the compaction streamed content within its first tokens")
    if evaluated != {len(prompt) - reused}:
        raise SystemExit(
            f"loopd evaluated {sorted(evaluated)} tokens, not the {len(prompt) - reused} its "
            "context did not hold: the restored state is not the one the compaction left"
        )
    loopd_first = statistics.median(first for first, _ in loopd_firsts)
    raw_first = statistics.median(raw_firsts)
    ratio = loopd_first / raw_first
    fastest = min(first for first, _ in loopd_firsts)
    print(
        f"the first turn after a compaction: context {limits.context}, a log of {turns} turns "
        f"written to near the threshold ({threshold}), compacted by loopd in {compacting:.1f} s "
        f"(untimed: {compaction.before} tokens became {compaction.after}); "
        f"{COMPACTION_ROUNDS} rounds from the same start, each side first in turn, the median "
        "of each"
    )
    print(
        f"  llama-cpp-python Llama.generate, first token: {raw_first * 1000:8.1f} ms for "
        f"{len(prompt)} prompt tokens, all evaluated (the limit)"
    )
    print(
        f"  through loopd (first content on loop.sock):   {loopd_first * 1000:8.1f} ms"
        f"  ratio {ratio:.3f} (at most {COMPACTION_LIMIT}); it evaluated "
        f"{len(prompt) - reused} of the {len(prompt)}, reusing the {reused} its context still "
        "held from the compaction's prompts (the system text: what loopd does); its content "
        f"came with token {max(released for _, released in loopd_firsts)}"
    )
    print(
        f"  the fastest of each: {min(raw_firsts) * 1000:.1f} and {fastest * 1000:.1f} ms, "
        f"ratio {fastest / min(raw_firsts):.3f} (printed, not judged)"
    )
    if ratio > COMPACTION_LIMIT:
        return [f"after-compaction ratio {ratio:.3f} > {COMPACTION_LIMIT}"]
    return []


def template_render(prompt: TemplatePrompt, turns: list[LogTurn], cache: Stretches) -> float:
    """Seconds for loopd's render of the prompt for `turns` from a copy of `cache` (so every
    round renders the same new stretch and reuses the same others)."""
    stretches = Stretches(list(cache.ends), [list(s) for s in cache.segments])
    start = time.perf_counter()
    prompt.render("You work for the owner.", turns, stretches)
    return time.perf_counter() - start


def template_part(reply_seconds: float) -> list[str]:
    """Time a turn's prompt rendered in this process and through the template worker,
    print the figures; what was outside its limit (one line)."""
    source = TEMPLATE.read_text(encoding="utf-8")
    turns: list[LogTurn] = []
    for n in range(TEMPLATE_TURNS):
        turns.append(LogTurn(Role.USER, f"{PROMPTS[n % len(PROMPTS)]} ({n})"))
        turns.append(LogTurn(Role.MODEL, f"An answer of a few lines, number {n}.\n" * 4))
    turns.append(LogTurn(Role.USER, "And one more thing."))
    times: dict[str, list[float]] = {"here": [], "worker": []}
    with TemplateWorker() as worker:
        templates: dict[str, TemplateRenderer] = {
            "here": ChatTemplate(source, clock=time.monotonic),
            "worker": WorkerTemplate(source, worker=worker),
        }
        prompts: dict[str, TemplatePrompt] = {}
        caches: dict[str, Stretches] = {}
        for side, template in templates.items():
            prompts[side] = TemplatePrompt(
                template,
                bos="",
                eos="<|im_end|>",
                add_bos=False,
                tools=TOOL_SCHEMAS,
                now=lambda: TEMPLATE_NOW,
                schemas=SCHEMAS,
            )
            caches[side] = Stretches()
            prompts[side].render("You work for the owner.", turns[:-1], caches[side])
        if prompts["here"].text("You work for the owner.", turns) != prompts["worker"].text(
            "You work for the owner.", turns
        ):
            raise SystemExit("the worker's prompt is not the one rendered in this process")
        for n in range(TEMPLATE_ROUNDS):
            for side in ("here", "worker") if n % 2 == 0 else ("worker", "here"):
                times[side].append(template_render(prompts[side], turns, caches[side]))
    here = statistics.median(times["here"])
    there = statistics.median(times["worker"])
    added = max(there - here, 0.0)
    ratio = added / reply_seconds
    print(
        f"a turn's prompt rendered from its stretches (Qwen3.5's template, {len(turns)} "
        f"messages; medians of {TEMPLATE_ROUNDS}): in this process {here * 1000:.2f} ms, "
        f"through the template worker {there * 1000:.2f} ms"
    )
    print(
        f"  added by the worker: {added * 1000:8.3f} ms over one reply of {REPLY_TOKENS} "
        f"tokens, {reply_seconds * 1000:.1f} ms at llama-cpp-python's rate  ratio "
        f"{ratio:.5f} (at most {TEMPLATE_LIMIT})"
    )
    if ratio > TEMPLATE_LIMIT:
        return [f"template-worker ratio {ratio:.5f} > {TEMPLATE_LIMIT}"]
    return []


def reply_time(llama: LlamaModel) -> float:
    """Seconds for llama-cpp-python to write REPLY_TOKENS tokens on `llama`'s model, at
    its own fastest rate (of RATE_ROUNDS generations from the first prompt)."""
    llm = llama._llm
    stop = {llm.token_eos(), *llama.tokenize("<end_of_turn>", special=True)}
    prompt = llama.tokenize(PROMPTS[0], special=False)
    rates = []
    for _ in range(RATE_ROUNDS):
        llm.reset()
        rate = partial(raw_rate_of, llm, prompt, llama._sampling, stop, REPLY_TOKENS)
        rates.append(llama.on_model_thread(rate))
    return REPLY_TOKENS / max(rates)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=None, help="where work files go")
    parser.add_argument(
        "--only",
        choices=["generation", "switch", "compaction", "template"],
        default=None,
        help="run one part alone (generation: loopd's generation rate; switch: the switch "
        "of sessions; compaction: the first "
        "turn after a compaction; template: a prompt rendered through the template worker)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bx-bench-", dir=args.dir) as work:
        if args.only == "generation":
            return run_generation(Path(work))
        if args.only == "switch":
            return run_switch(Path(work))
        if args.only == "compaction":
            return run_compaction(Path(work))
        if args.only == "template":
            return run_template(Path(work))
        return run(Path(work))


def bench_config(work: Path) -> LoopdConfig:
    """loopd.toml's defaults on a home under `work`, with the bench's seed and context."""
    home = work / "home"
    home.mkdir()
    config = load_config(None, {"BOXMAKER_HOME": str(home)})
    return config.model_copy(
        update={"model": config.model.model_copy(update={"seed": SEED, "context": 4096})}
    )


def at_context(config: LoopdConfig, context: int) -> LoopdConfig:
    """`config` with `[model] context` set to `context`."""
    return config.model_copy(update={"model": config.model.model_copy(update={"context": context})})


def run_generation(work: Path) -> int:
    """The generation rate alone (`--only generation`), on a freshly loaded model."""
    config = bench_config(work)
    limits = TurnLimits(max_tool_calls=0, max_tokens=REPLY_TOKENS, reply_tokens=REPLY_TOKENS)
    llama = load_model(config)
    generation = generation_part(work, llama, RecordingModel(llama), work / "home", limits)
    failed = print_generation(generation)
    for line in failed:
        print(f"  OUTSIDE THE LIMIT: {line}")
    return 1 if failed else 0


def run_switch(work: Path) -> int:
    """The switch of sessions alone (`--only switch`), on a freshly loaded model."""
    failed = switch_part(load_model(bench_config(work)))
    for line in failed:
        print(f"  OUTSIDE THE LIMIT: {line}")
    return 1 if failed else 0


def run_compaction(work: Path) -> int:
    """The first turn after a compaction alone (`--only compaction`)."""
    failed = compaction_part(work, at_context(bench_config(work), COMPACTION_CONTEXT))
    for line in failed:
        print(f"  OUTSIDE THE LIMIT: {line}")
    return 1 if failed else 0


def run_template(work: Path) -> int:
    """The template worker's cost alone (`--only template`), the rate on a fresh model."""
    failed = template_part(reply_time(load_model(bench_config(work))))
    for line in failed:
        print(f"  OUTSIDE THE LIMIT: {line}")
    return 1 if failed else 0


@dataclass
class Generation:
    """The generation part's rounds: each side's rate, loopd's own part of each turn."""

    loopd_rates: list[float]
    raw_rates: list[float]
    turn_own: list[float]  # a turn's time less its generate call
    tokens: int

    @property
    def ratio(self) -> float:
        return statistics.median(self.loopd_rates) / statistics.median(self.raw_rates)


def generation_part(
    work: Path, llama: LlamaModel, model: RecordingModel, home: Path, limits: TurnLimits
) -> Generation:
    """ROUNDS turns of GEN_PROMPTS through loopd (`model` records `llama`), each against
    llama-cpp-python's `Llama.generate` from the same restored state (the docstring's
    first figure)."""
    llm = llama._llm  # the Llama object loopd drives: the limit is measured on it
    sampling = llama._sampling
    stop = {llm.token_eos(), *llama.tokenize("<end_of_turn>", special=True)}
    loopd = start_loopd(work, model, home=home, limits=limits)
    result = Generation([], [], [], 0)
    try:
        turn(loopd.turn, "gen", "Hello.", False)  # the switch of sessions, not timed
        logs = SessionLogs(loopd.home)
        for n in range(ROUNDS):
            text = GEN_PROMPTS[n % len(GEN_PROMPTS)]
            prompt = next_prompt(loopd, logs, "gen", text)
            state = llm.save_state()
            for side in ("loopd", "raw") if n % 2 == 0 else ("raw", "loopd"):
                llm.load_state(state)  # both sides start from the state saved above
                if side == "raw":
                    rate = partial(raw_rate_of, llm, prompt, sampling, stop, REPLY_TOKENS)
                    result.raw_rates.append(llama.on_model_thread(rate))
                    continue
                took = turn(loopd.turn, "gen", text, True)
                call = model.calls[-1]
                if call.prompt != prompt:
                    raise SystemExit("loopd's prompt is not the one rendered for the limit")
                count = len(call.generation.ids)
                result.tokens += count
                result.loopd_rates.append(count / took)
                result.turn_own.append(took - (call.ended - call.started))
    finally:
        loopd.stop()
    per_round = result.tokens / ROUNDS
    if per_round < REPLY_TOKENS / 2:
        raise SystemExit(
            f"the generation part's replies came to {per_round:.0f} tokens a round, under half "
            f"of {REPLY_TOKENS}: the ratio would measure a turn's fixed cost, not generation; "
            "GEN_PROMPTS must draw longer replies from this model"
        )
    return result


def print_generation(generation: Generation) -> list[str]:
    """The generation part's lines; what was outside its limit."""
    loopd_rates, raw_rates = generation.loopd_rates, generation.raw_rates
    print(
        f"generation: {ROUNDS} turns over loop.sock, {generation.tokens} tokens generated "
        "(each a write call carrying its text); the median round of each side"
    )
    print(
        f"  llama-cpp-python Llama.generate, same prompt:  "
        f"{statistics.median(raw_rates):8.1f} tokens/s (the limit)"
    )
    print(
        f"  through loopd (turn over loop.sock):          "
        f"{statistics.median(loopd_rates):8.1f} tokens/s"
        f"  ratio {generation.ratio:.3f} (at least {GEN_LIMIT})"
    )
    print(
        f"  the fastest round of each: {max(raw_rates):.1f} and {max(loopd_rates):.1f} tokens/s, "
        f"ratio {max(loopd_rates) / max(raw_rates):.3f}; loopd's own part of a turn (its time "
        f"less the model's generate call), median "
        f"{statistics.median(generation.turn_own) * 1000:.1f} ms (printed, not judged)"
    )
    asked = client_check_s()
    token_s = 1 / statistics.median(raw_rates)
    print(
        f"  asking whether the turn's client is still there (issue 42, before each token): "
        f"{asked * 1e6:.1f} us a token, {asked / token_s * 100:.3f} % of a token's time "
        "(in the ratio above; printed, not judged)"
    )
    if generation.ratio < GEN_LIMIT:
        return [f"generation ratio {generation.ratio:.3f} < {GEN_LIMIT}"]
    return []


def client_check_s(calls: int = 20_000) -> float:
    """The time of one `Connection.client_left` on a connected socket whose client is
    there (the check loopd makes before each token of a turn): the fastest of 5 runs."""
    server, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with server, client:
        conn = Connection(server, SocketRules(LOOP, cap=1))
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(calls):
                conn.client_left()
            best = min(best, (time.perf_counter() - started) / calls)
        if conn.client_left():
            raise SystemExit("the client check says a present client left")
        return best


def run(work: Path) -> int:
    config = bench_config(work)
    home = work / "home"  # made by bench_config
    limits = TurnLimits(max_tool_calls=0, max_tokens=REPLY_TOKENS, reply_tokens=REPLY_TOKENS)

    # --- time to first token: turn 1 (empty cache) and turn 8 of one session ------------
    # Each repetition is a freshly loaded model, as after loopd starts; the least
    # disturbed repetition of each turn counts (the machine may be busy).
    first_turn: list[float] = []
    last_turn: list[float] = []
    for rep in range(TTFT_REPEATS):
        started = time.perf_counter()
        llama = load_model(config)
        loaded = time.perf_counter() - started
        model = RecordingModel(llama)
        loopd = start_loopd(work, model, home=home, limits=limits)
        try:
            for n in range(TURNS):
                sent = time.perf_counter()
                turn(loopd.turn, f"ttft-{rep}", PROMPTS[n], n > 0)
                call = model.calls[-1]
                first = call.first_text if call.first_text is not None else call.ended
                if n == 0:
                    first_turn.append(first - sent)
                elif n == TURNS - 1:
                    last_turn.append(first - sent)
        finally:
            loopd.stop()
        evaluated = (model.calls[0].generation.evaluated, model.calls[-1].generation.evaluated)
        prompt_tokens = model.calls[-1].generation.prompt_tokens
        if rep < TTFT_REPEATS - 1:
            del llama, model, loopd

    # --- generation speed: loopd against llama-cpp-python on the same prompt ------------
    generation = generation_part(work, llama, model, home, limits)
    llm = llama._llm  # the Llama object loopd drives: the limits are measured on it
    sampling = llama._sampling

    # --- time to the first content event: loopd against llama-cpp-python -----------------
    # Short replies, many rounds, each side first in turn; both from the same restored
    # state and on the same prompt tokens (rendered from the session's log first).
    loopd = start_loopd(work, model, home=home, limits=FIRST_LIMITS)
    loopd_firsts: list[tuple[float, int]] = []  # (seconds, the token that released it)
    raw_firsts: list[float] = []
    # loopd's own part: from sending to its generate call, from its first text to the client
    own: list[tuple[float, float]] = []
    try:
        turn(loopd.turn, "first", "Hello.", False)  # the switch of sessions, not timed
        logs = SessionLogs(loopd.home)
        # Every round is the same turn from the same start: the session's log and the
        # model's state as they were after the first turn, restored before each side.
        logged = logs.path("first").read_bytes()
        state = llm.save_state()
        text = PROMPTS[0]
        prompt = next_prompt(loopd, logs, "first", text)
        for n in range(FIRST_ROUNDS):
            for side in ("loopd", "raw") if n % 2 == 0 else ("raw", "loopd"):
                llm.load_state(state)
                logs.path("first").write_bytes(logged)
                if side == "raw":
                    raw_firsts.append(
                        llama.on_model_thread(partial(first_token, llm, prompt, sampling))
                    )
                    continue
                times = streamed_turn(loopd.socket, "first", text, True)
                call = model.calls[-1]
                if call.prompt != prompt:
                    raise SystemExit("loopd's prompt is not the one rendered for the limit")
                if times is not None:  # None: a reply that held all its first tokens back
                    sent, came = times
                    released = first_content_token(llama.detokenize, call.generation.ids)
                    loopd_firsts.append((came - sent, released))
                    if released == 1 and call.first_text is not None:
                        own.append((call.started - sent, came - call.first_text))
    finally:
        loopd.stop()
    if not loopd_firsts:
        raise SystemExit("no turn streamed content within its first tokens")

    # --- neutralising a 64 KiB tool result, against evaluating it ------------------------
    model_list = [marker.text for marker in build_markers(LlamaVocabulary(llm))]
    tags = tuple(dict.fromkeys([*MEMORY_TAGS, *model_list]))
    plain = tool_result(())
    if neutralise(plain, tags).count:
        raise SystemExit("the code-work corpus holds a listed tag: the plain text is not plain")
    tagged = tool_result(MEMORY_TAGS)
    plain_tokens = llama.tokenize(plain, special=False)
    chunk = plain_tokens[:EVAL_TOKENS]
    per_token = min(
        llama.on_model_thread(partial(eval_time, llm, chunk)) for _ in range(EVAL_ROUNDS)
    ) / len(chunk)
    neutralised: list[tuple[str, int, int, float, float]] = []  # name, disarmed, tokens, s, s
    for name, text in (("without tags", plain), ("with tags", tagged)):
        result = neutralise(text, tags)
        count = len(llama.tokenize(result.text, special=False))
        neutralised.append(
            (name, result.count, count, neutralise_time(text, tags), per_token * count)
        )

    loopd_first = statistics.median(first for first, _ in loopd_firsts)
    released_with = max(released for _, released in loopd_firsts)
    raw_first = statistics.median(raw_firsts)
    content_ratio = loopd_first / raw_first
    ttft = (min(first_turn), min(last_turn))
    ttft_ratio = ttft[1] / ttft[0]
    print(
        f"loopd: embedded model, adapter {describe(llama.adapter)}, loaded in {loaded:.2f} s,"
        f" {config.model.threads} threads, "
        f"context {config.model.context}, replies up to {REPLY_TOKENS} tokens"
    )
    failed = print_generation(generation)
    print(
        f"time to the first content event: {FIRST_ROUNDS} turns over loop.sock, each side first "
        "in turn, the same prompt tokens and state; the median of each side"
    )
    print(f"  llama-cpp-python Llama.generate, first token: {raw_first * 1000:8.1f} ms (the limit)")
    print(
        f"  through loopd (first content on loop.sock):   {loopd_first * 1000:8.1f} ms"
        f"  ratio {content_ratio:.3f} (at most {CONTENT_LIMIT}); "
        f"its content came with token {released_with}"
    )
    fastest = min(first for first, _ in loopd_firsts)
    print(
        f"  the fastest of each: {min(raw_firsts) * 1000:.1f} and {fastest * 1000:.1f} ms, "
        f"ratio {fastest / min(raw_firsts):.3f} (printed, not judged)"
    )
    if own:
        print(
            f"  loopd's own part ({len(own)} rounds, medians): "
            f"{statistics.median(o[0] for o in own) * 1000:.1f} ms from sending the turn to its "
            f"generate call, {statistics.median(o[1] for o in own) * 1000:.1f} ms from the "
            "first text to the client's receiving it (printed, not judged)"
        )
    print(
        f"time to first token, a session of {TURNS} turns ({prompt_tokens} prompt tokens at "
        f"turn {TURNS}); the fastest of {TTFT_REPEATS} sessions, each on a fresh model"
    )
    print(f"  turn 1 (empty cache, {evaluated[0]} tokens evaluated):  {ttft[0] * 1000:8.1f} ms")
    print(
        f"  turn {TURNS} ({evaluated[1]} tokens evaluated):             {ttft[1] * 1000:8.1f} ms"
        f"  ratio {ttft_ratio:.3f} (at most {TTFT_LIMIT})"
    )
    print(
        f"neutralising a {TOOL_RESULT_BYTES // 1024} KiB tool result ({len(tags)} tags listed), "
        f"the fastest of {NEUTRALISE_ROUNDS}, over evaluating it ({per_token * 1000:.2f} ms a "
        f"token: Llama.eval of {len(chunk)} tokens from a reset state, scaled)"
    )
    for name, disarmed, count, took, evaluating in neutralised:
        ratio = took / evaluating
        print(
            f"  {name + f' ({disarmed} disarmed):':26} {took * 1000:8.2f} ms over "
            f"{evaluating * 1000:9.1f} ms for {count} tokens  ratio {ratio:.5f} "
            f"(at most {NEUTRALISE_LIMIT})"
        )
        if ratio > NEUTRALISE_LIMIT:
            failed.append(f"neutralising ratio {name} {ratio:.5f} > {NEUTRALISE_LIMIT}")
    failed += switch_part(llama)
    failed += compaction_part(work, at_context(config, COMPACTION_CONTEXT))
    failed += template_part(REPLY_TOKENS / max(generation.raw_rates))
    if content_ratio > CONTENT_LIMIT:
        failed.append(f"first-content ratio {content_ratio:.3f} > {CONTENT_LIMIT}")
    if ttft_ratio > TTFT_LIMIT:
        failed.append(f"time-to-first-token ratio {ttft_ratio:.3f} > {TTFT_LIMIT}")
    for line in failed:
        print(f"  OUTSIDE THE LIMIT: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
