"""Sessions sharing the real embedded model (Gemma 3 270M): what a switch keeps.

`LlamaModel` saves the session its context held when another one takes a turn and
puts it back before that session's next turn (llama.cpp's state of the sequence and
llama-cpp-python's record of its tokens). These tests check, on the real model and
greedy sampling (temperature 0, so a continuation is a function of the tokens and
how they were evaluated), that a session switched away and back evaluates only what
was added and continues exactly as without the switch; that a prompt rewriting early
tokens after a switch is evaluated whole (a saved state holds a sliding-window
layer's cells only from the window before its last token); and that saved states
stay within `saved_bytes`, least recently used leaving first, one bigger than the
whole budget not kept.

Prompts start with different tokens, so that a session's first turn shares no
prefix with whatever the context held and is evaluated whole, from position 0, as
its reference is: the same tokens evaluated in the same batches give the same
logits, and so the same greedy tokens.

Without llama-cpp-python these tests are skipped, loudly; with CI set they fail.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from support.llama import require_llama_cpp

from boxmaker.loopd.model import (
    SAVED_SESSIONS,
    Generation,
    LlamaModel,
    Sampling,
    embedded_model_path,
)

require_llama_cpp("the model switch tests")

pytestmark = [pytest.mark.model, pytest.mark.slow]

GREEDY = Sampling(temperature=0.0, top_p=0.95, top_k=40, repeat_penalty=1.1)
REPLY = 12  # tokens of each reply


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> LlamaModel:
    path = embedded_model_path(tmp_path_factory.mktemp("switch-home"))
    return LlamaModel(
        path, context=2048, threads=max(1, os.cpu_count() or 1), seed=0, sampling=GREEDY
    )


@pytest.fixture
def model(llama: LlamaModel) -> Iterator[LlamaModel]:
    """The shared model with no byte budget, as it is left again after the test."""
    llama.saved_bytes = None
    yield llama
    llama.saved_bytes = None


def tokens(model: LlamaModel, text: str, count: int) -> list[int]:
    """`text` repeated to exactly `count` tokens."""
    ids = model.tokenize(text, special=False)
    out: list[int] = []
    while len(out) < count:
        out += ids
    return out[:count]


def run(model: LlamaModel, session: str, prompt: list[int], reply: int = REPLY) -> Generation:
    return model.generate(session, prompt, max_tokens=reply, stop=set(), on_text=lambda _: None)


def test_a_session_switched_away_and_back_reuses_its_prefix_and_continues_the_same(
    model: LlamaModel,
) -> None:
    a = tokens(model, "The lighthouse keeper climbed the stairs to light the lamp. ", 700)
    b = tokens(model, "Bread needs flour, water, salt and yeast, and time to rise. ", 700)
    clear = tokens(model, "Seven swans swam across the quiet lake at dawn. ", 40)
    tail = model.tokenize(" And then the keeper", special=False)
    # without a switch: the prompt, then the prompt with its reply and a tail
    run(model, "switch-clear", clear)
    first = run(model, "switch-ref", a)
    again = a + list(first.ids) + tail
    reference = run(model, "switch-ref", again)
    assert reference.evaluated <= len(first.ids) + len(tail)  # the prefix was reused
    # with a switch: the same, with another session's turn between
    run(model, "switch-clear", clear)
    assert run(model, "switch-a", a).ids == first.ids
    run(model, "switch-b", b)
    assert "switch-a" in model.saved_sizes()
    resumed = run(model, "switch-a", again)
    assert resumed.evaluated == reference.evaluated
    assert resumed.ids == reference.ids
    assert "switch-a" not in model.saved_sizes()  # held live now, not twice
    assert "switch-b" in model.saved_sizes()


def test_after_a_switch_a_prompt_that_rewrites_early_tokens_is_evaluated_whole(
    model: LlamaModel,
) -> None:
    # 1,200 tokens: the saved state holds the sliding-window layers' cells from about
    # position 690 on, and a prompt that parts from it at 300 needs those before 300
    long = tokens(model, "A river ran through the old town under seven stone bridges. ", 1200)
    other = tokens(model, "Meanwhile the market opened and the bakers sold their loaves. ", 800)
    clear = tokens(model, "Quiet snow fell on the empty station platform. ", 40)
    rewritten = long[:300] + tokens(model, " Instead, the river dried up and the town left. ", 100)
    run(model, "rewrite-clear", clear)
    whole = run(model, "rewrite-fresh", rewritten)  # from position 0
    run(model, "rewrite-clear", clear)
    run(model, "rewrite-a", long)
    run(model, "rewrite-b", other)
    resumed = run(model, "rewrite-a", rewritten)
    assert resumed.evaluated == len(rewritten)
    assert resumed.ids == whole.ids


def test_a_stop_in_a_long_prompts_evaluation_lands_within_a_batch_and_changes_no_reply(
    model: LlamaModel,
) -> None:
    # issue 42: a stop is asked between the prompt's batches too; what was evaluated
    # stays, and the reply to the same prompt is the reply without the stop
    size = model._llm.n_batch
    long = tokens(model, "Rain drummed on the tin roof of the workshop all night. ", 3 * size + 90)
    clear = tokens(model, "Owls called across the frozen field. ", 40)
    run(model, "prefill-clear", clear)
    whole = run(model, "prefill-whole", long)
    assert whole.evaluated == len(long)
    run(model, "prefill-clear", clear)
    asked: list[int] = []

    def second_ask() -> bool:
        asked.append(model._llm.n_tokens)  # the cells evaluated when asked
        return len(asked) == 2

    cut = model.generate(
        "prefill-cut",
        long,
        max_tokens=REPLY,
        stop=set(),
        on_text=lambda _: None,
        interrupted=second_ask,
    )
    assert cut.interrupted
    assert cut.ids == ()
    assert asked == [0, size]  # before the first batch, then after one
    resumed = run(model, "prefill-cut", long)
    assert resumed.evaluated == len(long) - size  # the batch before the stop is reused
    assert resumed.ids == whole.ids


def test_saved_sessions_keep_within_the_budget_the_least_recently_used_leaving_first(
    model: LlamaModel,
) -> None:
    words = ("Apple", "Brick", "Cloud", "Dune", "Ember", "Fjord")
    names = [f"budget-{n}" for n in range(1, 7)]
    prompts = {
        name: tokens(model, f"{word} is the word of this session, said again. ", 200)
        for name, word in zip(names, words, strict=True)
    }
    for name in names[:3]:
        run(model, name, prompts[name], reply=1)
    # no budget: the count rule, the latest SAVED_SESSIONS of those switched away from
    assert list(model.saved_sizes()) == names[2 - SAVED_SESSIONS : 2]
    size = model.saved_sizes()[names[1]]
    assert size > 200 * 1024  # the KV cells of 200 tokens are in it
    model.saved_bytes = size * 7 // 2  # room for three of them (all the same size), not four
    for name in names[3:5]:
        run(model, name, prompts[name], reply=1)
    sizes = model.saved_sizes()
    assert list(sizes) == names[1:4]  # budget-1, the least recently used, went
    assert sum(sizes.values()) <= model.saved_bytes
    # a session put back is used again: the one used least recently since goes next
    resumed = run(model, names[1], prompts[names[1]] + prompts[names[5]][:8], reply=1)
    assert resumed.evaluated == 8  # put back: only what was added
    assert list(model.saved_sizes()) == names[2:5]
    run(model, names[5], prompts[names[5]], reply=1)
    assert list(model.saved_sizes()) == [names[3], names[4], names[1]]
    gone = run(model, names[0], prompts[names[0]] + prompts[names[5]][:8], reply=1)
    assert gone.evaluated == len(prompts[names[0]]) + 8  # let go: evaluated whole


def test_a_state_bigger_than_the_whole_budget_is_not_kept_and_is_logged_once(
    model: LlamaModel, caplog: pytest.LogCaptureFixture
) -> None:
    small = tokens(model, "Ten tall trees stood by the gate. ", 20)
    one = tokens(model, "Gulls circled the harbour while the boats came in. ", 300)
    two = tokens(model, "Nobody knew where the old map in the attic had come from. ", 300)
    run(model, "big-small", small, reply=1)
    model.saved_bytes = 1 << 20  # 20 tokens' cells fit (18 KiB a token), 300 tokens' do not
    with caplog.at_level(logging.WARNING, logger="boxmaker.loopd.model"):
        run(model, "big-1", one, reply=1)
        run(model, "big-2", two, reply=1)
        back = run(model, "big-1", one + two[:8], reply=1)
        run(model, "big-2", two, reply=1)
    assert list(model.saved_sizes()) == ["big-small"]  # a state within the budget stays
    assert back.evaluated == len(one) + 8  # big-1 was not kept: evaluated whole
    told = [r.getMessage() for r in caplog.records if "session_not_saved" in r.getMessage()]
    assert len(told) == 1, told  # three states too big, one line
    assert "session=big-1" in told[0]
