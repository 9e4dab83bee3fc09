"""Does loopd keep llama.cpp's speed with the model wholly on the GPU? (issue 26)

Figures, measured in one run with every layer on the GPU: the embedded model
(Gemma 3 270M Q4_K_M), or the GGUF file given with `--model`, loaded by loopd's
own `load_model` with loopd.toml's defaults, `[model] gpu_layers = "all"`, a
fixed seed and a context of `--context` tokens (8192). The offload is the one
loopd plans (`boxmaker.loopd.placement.plan` against `read_backend()`: flash
attention on, an f16 KV cache, batch and ubatch 512); both sides of every ratio
use the one `Llama` loopd drives, so they share its settings by construction,
the LoRA adapter too (`[model] adapter`; the embedded model's default is the shipped
adapter, issue 39), named on the first line.
The placement line is printed, and a run where llama.cpp did not put every layer
on the GPU (its "offloaded N/M layers" count, N below M) stops there, status 1.

- generation tokens per second through loopd: turns over loop.sock (the client's
  time from sending the turn to turn_done: the socket, the session log with its
  fsyncs, prompt assembly and detokenizing are all in it), over llama-cpp-python's
  own `Llama.generate` on the same `Llama`, the same prompt, sampling settings and
  stop tokens, from the same restored state, run on the model's thread
  (`LlamaModel.on_model_thread`), each until a stop token or REPLY_TOKENS (a rate:
  the tokens made over the time). Each side first in turn; the median round of
  each side counts; at least 0.95.
- prompt evaluation, tokens per second: the first turn of a new session whose user
  text is PROMPT_TOKENS tokens of the sanitizer's code-work corpus, from an empty
  cache (the session's log removed and the `Llama` reset before each round, so
  every token of the prompt is evaluated: `Generation.evaluated`, checked), timed
  from the model's generate call to its first text (RecordingModel's `started`
  and `first_text`), over llama-cpp-python's `Llama.generate` from a reset state
  to its first token, on the same prompt tokens and sampling settings, on the
  model's thread: that is `Llama.eval` of the prompt and the sampling of one token,
  as loopd's figure is (its first text comes after its first token is sampled,
  on the CPU, over Gemma's 262,144-token vocabulary: on a GPU, where a prompt is
  evaluated quickly, not a part to leave out). The evaluated tokens over the
  time; each of the three sides (loopd, `Llama.generate`, `Llama.eval`) first in
  turn; the median of each side counts; at least 0.95. Also printed, not judged: `Llama.eval` alone (the
  same tokens from a reset state, ended by `llama_synchronize`: llama.cpp's decode
  returns before a GPU has finished), and loopd's whole time from sending the turn
  to the first text. A round whose first token gave no text of its own (a special
  token, or part of a character) is left out and counted.
- time to the first token of a short turn (printed, not judged): the generation
  turns above, from sending the turn to the model's first text; the median.
- the cost of switching sessions (printed, not judged): `LlamaModel` saves the
  state of the session it holds and loads that of the next one. The time from the
  model's generate call to its first text of a turn of session B right after a
  turn of session A, minus that of a turn of B right after a turn of B (the same
  text each time, replies of at most SWITCH_TOKENS), the median of each. Also
  printed: llama-cpp-python's `save_state` and `load_state` alone, of B's state.

Without a GPU (a build with no GPU backend, or no GPU device) nothing is
measured: one line says which, and the script exits 0. loopd runs in this process
(the turn loop and the LoopServer on a real Unix socket,
`boxmaker.testing.daemons`); the client, `boxmaker.ipc.client`, is this process's
main thread. Work files go in a temporary directory (`--dir` chooses where).
Exit status 1 if a ratio is outside its limit or the model is not wholly on the GPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from raw_llama import next_prompt, raw_rate_of, raw_tokens, turn

from boxmaker.core.errors import StartupError
from boxmaker.core.model.offload import Backend
from boxmaker.loopd.adapter import describe
from boxmaker.loopd.backend import read_backend
from boxmaker.loopd.config import load_config
from boxmaker.loopd.dialects import choose_dialect
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.model import LlamaModel, Sampling
from boxmaker.loopd.placement import placement, plan
from boxmaker.loopd.replying import stop_ids
from boxmaker.loopd.session_log import SessionLogs
from boxmaker.loopd.startup import load_model
from boxmaker.testing.daemons import InProcessLoopd, start_loopd
from boxmaker.testing.recording_model import Recorded, RecordingModel

SEED = 20261130
CONTEXT = 8192
ROUNDS = 12
REPLY_TOKENS = 96
PROMPT_TOKENS = 2000
PROMPT_REPLY_TOKENS = 8
SWITCH_TOKENS = 16
GEN_LIMIT = 0.95
PROMPT_LIMIT = 0.95
CODE_WORK = Path(__file__).parent.parent / "tests" / "fixtures" / "sanitize" / "code_work.jsonl"
CUDA_BUILD = "scripts/build-llama-cpp --gpu cuda --install <python>"
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


def no_gpu(backend: Backend) -> str | None:
    """Why nothing can be measured on this build and machine (None: a GPU is there)."""
    if not backend.gpu_offload:
        return (
            "this llama-cpp-python build has no GPU backend (the CPU build); "
            f"get the CUDA build with {CUDA_BUILD}"
        )
    if not backend.gpus:
        return (
            "this llama-cpp-python build has a GPU backend, but no GPU device is present "
            "(is the NVIDIA driver loaded? nvidia-smi)"
        )
    return None


def first_text(call: Recorded) -> float:
    """When the model's first text came (its end, where it wrote none)."""
    return call.first_text if call.first_text is not None else call.ended


def first_token_from_reset(llm: Any, prompt: list[int], sampling: Sampling) -> float:
    """Seconds from calling `Llama.generate` on a reset `Llama` to its first token."""
    llm.reset()
    start = time.perf_counter()
    for _ in raw_tokens(llm, prompt, sampling):
        break
    return time.perf_counter() - start


def eval_time(llm: Any, tokens: list[int], synchronize: Callable[[], None]) -> float:
    """Seconds for `Llama.eval` of `tokens` from a reset state, until the device is done."""
    llm.reset()
    start = time.perf_counter()
    llm.eval(tokens)
    synchronize()
    return time.perf_counter() - start


def state_times(llm: Any) -> tuple[float, float, int]:
    """Seconds for `Llama.save_state` and `load_state` of the state it holds, and its bytes."""
    start = time.perf_counter()
    state = llm.save_state()
    saved = time.perf_counter()
    llm.load_state(state)
    loaded = time.perf_counter()
    return saved - start, loaded - saved, int(state.llama_state_size) + int(state.scores.nbytes)


def long_text(llama: LlamaModel) -> str:
    """PROMPT_TOKENS tokens of the code-work corpus (repeated as needed), as text."""
    corpus = "\n".join(
        str(orjson.loads(raw)["text"]) for raw in CODE_WORK.read_bytes().splitlines()
    )
    text = corpus
    while len(tokens := llama.tokenize(text, special=False)) < PROMPT_TOKENS:
        text += "\n" + corpus
    return llama.detokenize(tokens[:PROMPT_TOKENS])


def fresh_turn(
    loopd: InProcessLoopd, model: RecordingModel, llama: LlamaModel, session: str, text: str
) -> tuple[float, Recorded]:
    """`session`'s first turn from no log and an empty cache: when it was sent, and the
    model's record of it. The session stays the model's own, so no switch is in it."""
    loopd.session_log(session).unlink(missing_ok=True)
    llama.on_model_thread(llama._llm.reset)
    sent = time.perf_counter()
    turn(loopd.turn, session, text, False)
    return sent, model.calls[-1]


def released_at_once(llama: LlamaModel, call: Recorded) -> bool:
    """Whether the reply's first token gave text of its own (so the first text came
    right after it was sampled)."""
    if not call.generation.ids or call.first_text is None:
        return False
    text = llama.detokenize(call.generation.ids[:1])
    return bool(text) and "\ufffd" not in text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", type=Path, default=None, help="a GGUF file (else embedded)")
    parser.add_argument("--dir", type=Path, default=None, help="where work files go")
    parser.add_argument("--context", type=int, default=CONTEXT, help="the context, in tokens")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of each figure")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    backend = read_backend()
    why = no_gpu(backend)
    if why is not None:
        print(f"gpu: nothing measured: {why}")
        return 0
    with tempfile.TemporaryDirectory(prefix="bx-bench-", dir=args.dir) as work:
        return run(Path(work), backend, args.model, args.context, args.rounds)


def run(work: Path, backend: Backend, model_file: Path | None, context: int, rounds: int) -> int:
    home = work / "home"
    home.mkdir()
    config = load_config(None, {"BOXMAKER_HOME": str(home)})
    update: dict[str, object] = {"seed": SEED, "context": context, "gpu_layers": "all"}
    if model_file is not None:
        update["path"] = str(model_file.resolve())
    config = config.model_copy(update={"model": config.model.model_copy(update=update)})
    try:
        offload = plan(config, backend)
        started = time.perf_counter()
        llama = load_model(config, offload)
        loaded = time.perf_counter() - started
        chat_format, _why = choose_dialect(config, llama)  # as `loopd serve` chooses
        llama.show(chat_format.shown)
    except StartupError as exc:
        raise SystemExit(f"gpu: {exc}") from exc
    print(
        f"gpu: model {config.model.path or 'embedded'}, adapter {describe(llama.adapter)},"
        f" loaded in {loaded:.2f} s, format "
        f"{chat_format.name}, {config.model.threads} threads, context {config.model.context}"
    )
    print(f"  placement: {placement(backend, offload, llama.offloaded)}")
    if llama.offloaded is None or llama.offloaded[0] != llama.offloaded[1]:
        print(
            "  OUTSIDE THE LIMIT: not every layer is on the GPU "
            f"(llama.cpp's count: {llama.offloaded}); nothing else measured"
        )
        return 1
    llm = llama._llm  # the Llama object loopd drives: the limits are measured on it
    sampling = llama.sampling
    model = RecordingModel(llama)

    # --- generation speed: loopd against llama-cpp-python on the same prompt ------------
    limits = TurnLimits(max_tool_calls=0, max_tokens=REPLY_TOKENS, reply_tokens=REPLY_TOKENS)
    loopd = start_loopd(work, model, home=home, limits=limits, dialect=chat_format)
    stop = {llm.token_eos(), *stop_ids(model, chat_format)}  # what loopd's replies stop at
    loopd_rates: list[float] = []
    raw_rates: list[float] = []
    short_firsts: list[float] = []  # from sending a turn to the model's first text
    tokens = 0
    try:
        turn(loopd.turn, "gen", "Hello.", False)  # the device's first work, not timed
        logs = SessionLogs(loopd.home)
        for n in range(rounds):
            text = PROMPTS[n % len(PROMPTS)]
            prompt = next_prompt(loopd, logs, "gen", text)
            state = llama.on_model_thread(llm.save_state)
            for side in ("loopd", "raw") if n % 2 == 0 else ("raw", "loopd"):
                # both sides start from the state saved above
                llama.on_model_thread(partial(llm.load_state, state))
                if side == "raw":
                    rate = partial(raw_rate_of, llm, prompt, sampling, stop, REPLY_TOKENS)
                    raw_rates.append(llama.on_model_thread(rate))
                    continue
                sent = time.perf_counter()
                took = turn(loopd.turn, "gen", text, True)
                call = model.calls[-1]
                if call.prompt != prompt:
                    raise SystemExit("loopd's prompt is not the one rendered for the limit")
                count = len(call.generation.ids)
                tokens += count
                loopd_rates.append(count / took)
                short_firsts.append(first_text(call) - sent)
            del state
    finally:
        loopd.stop()

    # --- prompt evaluation: a long first turn, against llama-cpp-python -------------------
    import llama_cpp

    synchronize = partial(llama_cpp.llama_synchronize, llm.ctx)
    limits = TurnLimits(
        max_tool_calls=0, max_tokens=PROMPT_REPLY_TOKENS, reply_tokens=PROMPT_REPLY_TOKENS
    )
    loopd = start_loopd(work, model, home=home, limits=limits, dialect=chat_format)
    text = long_text(llama)
    loopd_evals: list[tuple[float, float]] = []  # generate call, and sending, to first text
    raw_firsts: list[float] = []
    raw_evals: list[float] = []
    left_out = 0
    try:
        # not timed: the switch to the session, and the device's first long prompt
        _, call = fresh_turn(loopd, model, llama, "prompt", text)
        prompt = call.prompt
        llama.on_model_thread(partial(first_token_from_reset, llm, prompt, sampling))
        llama.on_model_thread(partial(eval_time, llm, prompt, synchronize))
        sides = ("loopd", "generate", "eval")
        for n in range(rounds):
            for side in sides[n % 3 :] + sides[: n % 3]:
                if side == "generate":
                    job = partial(first_token_from_reset, llm, prompt, sampling)
                    raw_firsts.append(llama.on_model_thread(job))
                elif side == "eval":
                    raw_evals.append(
                        llama.on_model_thread(partial(eval_time, llm, prompt, synchronize))
                    )
                else:
                    sent, call = fresh_turn(loopd, model, llama, "prompt", text)
                    if call.prompt != prompt:
                        raise SystemExit("loopd's prompt is not the one of the first round")
                    if call.generation.evaluated != len(prompt):
                        raise SystemExit(
                            f"loopd evaluated {call.generation.evaluated} of the prompt's "
                            f"{len(prompt)} tokens: it did not start from an empty cache"
                        )
                    if not released_at_once(llama, call):
                        left_out += 1
                        continue
                    came = first_text(call)
                    loopd_evals.append((came - call.started, came - sent))
    finally:
        loopd.stop()
    if not loopd_evals:
        raise SystemExit("no long turn's first token gave text of its own: nothing to time")

    # --- switching sessions: a turn of B after A, against a turn of B after B ------------
    limits = TurnLimits(max_tool_calls=0, max_tokens=SWITCH_TOKENS, reply_tokens=SWITCH_TOKENS)
    loopd = start_loopd(work, model, home=home, limits=limits, dialect=chat_format)
    after_other: list[tuple[float, int]] = []  # generate call to first text, tokens evaluated
    after_same: list[tuple[float, int]] = []
    try:
        turn(loopd.turn, "switch-a", PROMPTS[0], False)
        turn(loopd.turn, "switch-b", PROMPTS[1], False)
        for n in range(rounds):
            text = PROMPTS[n % len(PROMPTS)]
            turn(loopd.turn, "switch-a", text, True)
            for into in (after_other, after_same):
                turn(loopd.turn, "switch-b", text, True)
                call = model.calls[-1]
                into.append((first_text(call) - call.started, call.generation.evaluated))
        saving, loading, state_bytes = llama.on_model_thread(partial(state_times, llm))
    finally:
        loopd.stop()

    gen_ratio = statistics.median(loopd_rates) / statistics.median(raw_rates)
    loopd_eval = statistics.median(part for part, _ in loopd_evals)
    loopd_whole = statistics.median(whole for _, whole in loopd_evals)
    raw_first = statistics.median(raw_firsts)
    raw_eval = statistics.median(raw_evals)
    prompt_ratio = raw_first / loopd_eval  # rates over the same count of tokens
    other = statistics.median(took for took, _ in after_other)
    same = statistics.median(took for took, _ in after_same)
    print(
        f"generation: {rounds} turns over loop.sock, {tokens} tokens generated, replies up to "
        f"{REPLY_TOKENS} tokens; the median round of each side"
    )
    print(
        f"  llama-cpp-python Llama.generate, same prompt:  "
        f"{statistics.median(raw_rates):8.1f} tokens/s (the limit)"
    )
    print(
        f"  through loopd (turn over loop.sock):          "
        f"{statistics.median(loopd_rates):8.1f} tokens/s  ratio {gen_ratio:.3f} "
        f"(at least {GEN_LIMIT})"
    )
    print(
        f"prompt evaluation: {len(prompt)} tokens from an empty cache (a user text of "
        f"{PROMPT_TOKENS} tokens), {len(loopd_evals)} loopd rounds of {rounds}"
        f"{f' ({left_out} left out: no text of the first token)' if left_out else ''}; "
        "the median of each side"
    )
    print(
        f"  llama-cpp-python Llama.eval alone:             {len(prompt) / raw_eval:8.0f} "
        f"tokens/s  {raw_eval * 1000:7.1f} ms (printed, not judged)"
    )
    print(
        f"  llama-cpp-python Llama.generate, first token:  {len(prompt) / raw_first:8.0f} "
        f"tokens/s  {raw_first * 1000:7.1f} ms (the limit)"
    )
    print(
        f"  loopd, generate call to first text:            {len(prompt) / loopd_eval:8.0f} "
        f"tokens/s  {loopd_eval * 1000:7.1f} ms  ratio {prompt_ratio:.3f} "
        f"(at least {PROMPT_LIMIT})"
    )
    print(
        f"  loopd, sending the turn to first text:         {loopd_whole * 1000:7.1f} ms "
        "(printed, not judged)"
    )
    print(
        f"time to first token of a short turn (sending to the model's first text, the "
        f"generation turns): median {statistics.median(short_firsts) * 1000:.1f} ms, fastest "
        f"{min(short_firsts) * 1000:.1f} ms (printed, not judged)"
    )
    print(
        f"switching sessions: a turn of B right after A, against right after B "
        f"(generate call to first text, {rounds} each, medians)"
    )
    print(
        f"  after A: {other * 1000:7.1f} ms ({statistics.median(n for _, n in after_other):.0f} "
        f"tokens evaluated); after B: {same * 1000:7.1f} ms "
        f"({statistics.median(n for _, n in after_same):.0f} tokens evaluated)"
    )
    print(
        f"  the switch: {(other - same) * 1000:.1f} ms; llama-cpp-python's save_state "
        f"{saving * 1000:.1f} ms and load_state {loading * 1000:.1f} ms of B's state "
        f"({state_bytes / 2**20:.0f} MiB) alone (printed, not judged)"
    )
    failed = []
    if gen_ratio < GEN_LIMIT:
        failed.append(f"generation ratio {gen_ratio:.3f} < {GEN_LIMIT}")
    if prompt_ratio < PROMPT_LIMIT:
        failed.append(f"prompt-evaluation ratio {prompt_ratio:.3f} < {PROMPT_LIMIT}")
    for line in failed:
        print(f"  OUTSIDE THE LIMIT: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
