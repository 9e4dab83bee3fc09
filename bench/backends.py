"""Does a served backend cost loopd anything over the server itself (issue 41)?

One run starts a real llama-server (built by `scripts/build-llama-cpp --servers`
from the llama.cpp llama-cpp-python vendors) on 127.0.0.1 with the embedded model
(Gemma 3 270M Q4_K_M), the shipped adapter (`--lora`), `--swa-full` and one slot,
2 threads; and loads the same model in this process as loopd does in-process
(`LlamaModel`, the adapter, 2 threads). Greedy, one seed. For each served API
(llama-server's `/completion`, the OpenAI `/v1/completions`):

- generation rate: loopd's `ServerModel.generate` (the request, the stream read and
  checked, each id turned into text here) over the server called directly with the
  very body loopd sends (`completion_body` / `openai_body`) and its stream read for
  ids alone: tokens over the time from sending to the last id. The owner's turns are
  bench/loopd.py's write requests, whose replies (a write call with its whole text)
  ran to 50 to 96 tokens with run 7's adapter and run to 37 with run 12's (the
  figure prints the length). At least 0.95.
- time to the first token: from sending to the first id's text (loopd) or the first
  event with an id (direct), the prompt cached on the server but for its last token
  in both. At most 1.1.
- a resumed session's time to first token: a session of a long first turn (a
  document of RESUME_TOKENS tokens and a question), answered; then its next turn (a
  new question each round), served against in-process, each keeping the session's
  prefix (the server's slot cache, the in-process model's own state). At most 1.2.

Rounds alternate which side goes first; the median of each side counts. Each figure
prints with its ratio and limit; a ratio outside its limit exits 1.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from boxmaker.core.model.sampling import ADAPTED
from boxmaker.core.model.served import completion_body
from boxmaker.core.model.served_openai import PATH as OPENAI_PATH
from boxmaker.core.model.served_openai import openai_body
from boxmaker.loopd.adapter import check_adapter, shipped_adapter
from boxmaker.loopd.model import LlamaModel, embedded_model_path
from boxmaker.loopd.server_link import ServerLink
from boxmaker.loopd.server_model import Api, ServerModel

sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from support.llama_server import running_server

CONTEXT = 4_096
THREADS = 2
SEED = 7
ROUNDS = 7
REPLY_TOKENS = 96
RESUME_TOKENS = 1_500
GEN_LIMIT = 0.95
FIRST_LIMIT = 1.1
RESUME_LIMIT = 1.2
WRITES = [
    "Write this to /srv/bench/letter.txt: Dear neighbours, the courtyard will be closed "
    "from Monday to Friday next week while the old paving stones are lifted and the "
    "drains underneath are replaced, so please use the side gate by the bicycle shed.",
    "Save this in /srv/bench/recipe.md: Soak the beans overnight, drain them, and cook "
    "them slowly with two onions, three cloves of garlic, a bay leaf and a spoon of "
    "smoked paprika until they are soft; season with salt at the end, never at the start.",
]
PARAGRAPH = (
    "The harbour office keeps the tide tables for the season, the list of moorings and "
    "the names of the boats that winter on the slipway. "
)


def turn(text: str) -> str:
    return f"<start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n"


class Direct:
    """The server called with loopd's own body, its stream read for ids alone."""

    def __init__(self, link: ServerLink, api: Api) -> None:
        self.link = link
        self.api = api

    def generate(self, prompt: list[int], limit: int) -> tuple[int, float, float]:
        """Ids made, seconds to the first, seconds to the last."""
        if self.api == "llama-server":
            path = "/completion"
            body = completion_body(prompt, max_tokens=limit, sampling=ADAPTED, seed=SEED, slot=None)
        else:
            path = OPENAI_PATH
            body = openai_body(
                prompt,
                max_tokens=limit,
                sampling=ADAPTED,
                seed=SEED,
                stop=[],
                salt=None,
                slot=None,
            )
        made = 0
        first = 0.0
        started = time.perf_counter()
        for line in self.link.stream(path, body):
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            ids = _ids(json.loads(line[5:]))
            if ids and not made:
                first = time.perf_counter() - started
            made += ids
        return made, first, time.perf_counter() - started


def _ids(event: dict[str, Any]) -> int:
    if "tokens" in event:
        return len(event["tokens"])
    choices = event.get("choices") or [{}]
    content = (choices[0].get("logprobs") or {}).get("content") or []
    return len(choices[0].get("token_ids") or content)


def timed(
    model: ServerModel | LlamaModel, session: str, prompt: list[int], limit: int
) -> tuple[int, float, float]:
    """Ids made, seconds to the first text, seconds in all, through loopd's model."""
    first: list[float] = []
    started = time.perf_counter()

    def seen(_text: str) -> None:
        if not first:
            first.append(time.perf_counter() - started)

    generation = model.generate(session, prompt, max_tokens=limit, stop=set(), on_text=seen)
    return len(generation.ids), first[0] if first else 0.0, time.perf_counter() - started


def alternate(
    rounds: int, one: Callable[[int], float], other: Callable[[int], float]
) -> tuple[list[float], list[float]]:
    ones: list[float] = []
    others: list[float] = []
    for n in range(rounds):
        if n % 2 == 0:
            ones.append(one(n))
            others.append(other(n))
        else:
            others.append(other(n))
            ones.append(one(n))
    return ones, others


def measure(api: Api, url: str, model_file: Path, local: LlamaModel) -> list[str]:
    link = ServerLink(url, timeout_s=600)
    served = ServerModel(model_file, link=link, seed=SEED, sampling=ADAPTED, api=api)
    direct = Direct(link, api)
    failed: list[str] = []
    prompts = [served.tokenize("<bos>" + turn(w), special=True) for w in WRITES]
    # generation: each side writes the same reply from the same cached prompt
    counts: list[int] = []

    def loopd_rate(n: int) -> float:
        made, _, seconds = timed(served, "gen", prompts[n % 2], REPLY_TOKENS)
        counts.append(made)
        return made / seconds

    def direct_rate(n: int) -> float:
        made, _, seconds = direct.generate(prompts[n % 2], REPLY_TOKENS)
        return made / seconds

    for prompt in prompts:  # the prompts into the slot's cache, untimed
        direct.generate(prompt, 1)
    loopd_rates, direct_rates = alternate(ROUNDS, loopd_rate, direct_rate)
    rate = statistics.median(loopd_rates) / statistics.median(direct_rates)
    print(
        f"{api}: generation {statistics.median(loopd_rates):.1f} tokens/s through loopd, "
        f"{statistics.median(direct_rates):.1f} direct (median of {ROUNDS}, "
        f"{statistics.median(counts):.0f} tokens a reply): ratio {rate:.3f} (at least {GEN_LIMIT})"
    )
    if rate < GEN_LIMIT:
        failed.append(f"{api} generation ratio {rate:.3f} < {GEN_LIMIT}")
    # the first token: the same prompt, cached but for its last token
    loopd_firsts, direct_firsts = alternate(
        ROUNDS,
        lambda n: timed(served, "gen", prompts[0], 1)[1],
        lambda n: direct.generate(prompts[0], 1)[1],
    )
    first = statistics.median(loopd_firsts) / statistics.median(direct_firsts)
    print(
        f"{api}: first token {statistics.median(loopd_firsts) * 1000:.1f} ms through loopd, "
        f"{statistics.median(direct_firsts) * 1000:.1f} ms direct: ratio {first:.3f} "
        f"(at most {FIRST_LIMIT})"
    )
    if first > FIRST_LIMIT:
        failed.append(f"{api} first-token ratio {first:.3f} > {FIRST_LIMIT}")
    # a resumed session: its first turn answered once on each side, then new questions
    document = PARAGRAPH * (RESUME_TOKENS // len(served.tokenize(PARAGRAPH, special=False)))
    opening = served.tokenize(
        "<bos>" + turn(document + "\nWhat does the office keep?"), special=True
    )
    answered: dict[str, list[int]] = {}
    for name, model in (("served", served), ("local", local)):
        generation = model.generate(
            "resume", opening, max_tokens=12, stop=set(), on_text=lambda _: None
        )
        answered[name] = list(generation.ids)
    assert answered["served"] == answered["local"], "the two sides answered differently"

    def next_turn(n: int) -> list[int]:
        question = f"<end_of_turn>\n{turn(f'And question {n}: who keeps the list?')}"
        return opening + answered["local"] + served.tokenize(question, special=True)

    served_resumed, local_resumed = alternate(
        ROUNDS,
        lambda n: timed(served, "resume", next_turn(n), 1)[1],
        lambda n: timed(local, "resume", next_turn(n), 1)[1],
    )
    resumed = statistics.median(served_resumed) / statistics.median(local_resumed)
    print(
        f"{api}: a resumed session's first token {statistics.median(served_resumed) * 1000:.1f} ms "
        f"served, {statistics.median(local_resumed) * 1000:.1f} ms in-process "
        f"(a prompt of {len(next_turn(0))} tokens, only its last turn new): ratio {resumed:.3f} "
        f"(at most {RESUME_LIMIT})"
    )
    if resumed > RESUME_LIMIT:
        failed.append(f"{api} resumed first-token ratio {resumed:.3f} > {RESUME_LIMIT}")
    return failed


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bx-backends-") as scratch:
        home = Path(scratch)
        model_file = embedded_model_path(home)
        adapter = shipped_adapter()
        print(f"model {model_file.name}, adapter {adapter.path.name}, {THREADS} threads, greedy")
        local = LlamaModel(
            model_file,
            context=CONTEXT,
            threads=THREADS,
            seed=SEED,
            sampling=ADAPTED,
            adapter=check_adapter(adapter, "gemma3"),
        )
        arguments = ("-c", str(CONTEXT), "-t", str(THREADS), "-np", "1", "-fa", "off", "--swa-full")
        failed: list[str] = []
        with running_server(
            model_file, *arguments, "--lora", str(adapter.path), log=home / "server.log"
        ) as url:
            for api in ("llama-server", "openai-completions"):
                failed += measure(api, url, model_file, local)
    for line in failed:
        print(f"  OUTSIDE THE LIMIT: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
