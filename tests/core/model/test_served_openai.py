"""The OpenAI completions API driven by token ids (core/model/served_openai.py).

The answers read here are the shapes two servers write: vLLM's completions with
`return_token_ids` (`choices[0].token_ids`, the first chunk's `prompt_token_ids`, as
vLLM's own tests/entrypoints/openai/test_return_token_ids.py reads them) and with
`return_tokens_as_token_ids` (`token_id:<id>` names in `logprobs.tokens`, same test
file); llama-server's `/v1/completions` (`logprobs.content[].id`, `timings`, the
`[DONE]` end: tools/server/server-task.cpp of the vendored llama.cpp)."""

from __future__ import annotations

import json

import pytest

from boxmaker.core.model.sampling import ADAPTED
from boxmaker.core.model.served import ServedEvent, ServedReplyError
from boxmaker.core.model.served_openai import (
    openai_body,
    prompt_ids,
    prompt_tokens,
    read_openai_answer,
    read_openai_event,
)


def _body(**changes: object) -> dict[str, object]:
    settings: dict[str, object] = {
        "max_tokens": 8,
        "sampling": ADAPTED,
        "seed": 3,
        "stop": [106, 1],
        "salt": None,
        "slot": None,
    }
    settings.update(changes)
    return openai_body([2, 105, 4368], **settings)  # type: ignore[arg-type]


def test_the_prompt_is_ids_with_nothing_added_and_ids_asked_back() -> None:
    body = _body()
    assert body["prompt"] == [2, 105, 4368]
    assert body["add_special_tokens"] is False
    assert (body["return_token_ids"], body["return_tokens_as_token_ids"]) == (True, True)
    assert body["logprobs"] == 1  # llama-server's only way to say the ids
    assert body["stop_token_ids"] == [1, 106]
    assert body["stream_options"] == {"include_usage": True}
    assert "cache_salt" not in body
    assert "id_slot" not in body
    json.dumps(body)


def test_a_session_salt_and_slot_are_sent_where_given() -> None:
    body = _body(salt="s" * 43, slot=1)
    assert (body["cache_salt"], body["id_slot"]) == ("s" * 43, 1)


@pytest.mark.parametrize("bad", ["<end_of_turn>", True, -4])
def test_a_prompt_of_anything_but_ids_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="only token ids"):
        openai_body(
            [2, bad],  # type: ignore[list-item]
            max_tokens=1,
            sampling=ADAPTED,
            seed=0,
            stop=[],
            salt=None,
            slot=None,
        )


def test_vllm_chunks_give_their_ids_and_the_end() -> None:
    first = {
        "id": "cmpl-1",
        "object": "text_completion",
        "choices": [
            {
                "index": 0,
                "text": "Hi",
                "logprobs": None,
                "finish_reason": None,
                "prompt_token_ids": [2, 105],
                "token_ids": [9259],
            }
        ],
    }
    assert read_openai_event("data: " + json.dumps(first)) == ServedEvent((9259,), False, text="Hi")
    end = {"choices": [{"index": 0, "text": "", "token_ids": [106], "finish_reason": "stop"}]}
    event = read_openai_event("data: " + json.dumps(end))
    assert event is not None
    assert (event.tokens, event.eos, event.finished, event.last) == ((106,), True, True, False)
    usage = {
        "choices": [],
        "usage": {
            "prompt_tokens": 40,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 32},
        },
    }
    assert read_openai_event("data: " + json.dumps(usage)) == ServedEvent((), False, 8, 32)
    assert read_openai_event("data: [DONE]") == ServedEvent((), True)


def test_vllm_token_names_are_read_as_ids() -> None:
    chunk = {
        "choices": [
            {
                "text": " a b",
                "logprobs": {"tokens": ["token_id:496", "token_id:518"], "token_logprobs": [0, 0]},
                "finish_reason": "length",
            }
        ]
    }
    event = read_openai_answer(chunk)
    assert (event.tokens, event.eos, event.finished) == ((496, 518), False, True)
    with pytest.raises(ServedReplyError, match="not ids"):
        read_openai_answer({"choices": [{"text": "a", "logprobs": {"tokens": ["a"]}}]})


def test_llama_server_chunks_give_their_id_in_logprobs_and_counts_in_timings() -> None:
    chunk = {
        "choices": [
            {
                "text": "ꙮ",
                "index": 0,
                "logprobs": {"content": [{"id": 412, "token": "ꙮ", "logprob": -0.1}]},
                "finish_reason": None,
            }
        ],
        "timings": {"prompt_n": 5, "cache_n": 20, "predicted_n": 3},
    }
    event = read_openai_answer(chunk)
    assert (event.tokens, event.made, event.evaluated, event.reused) == ((412,), 3, 5, 20)


def test_text_without_its_ids_is_refused() -> None:
    with pytest.raises(ServedReplyError, match="without the ids it made"):
        read_openai_event('data: {"choices":[{"text":"Hi","finish_reason":null}]}')


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('data: {"error":{"message":"bad"}}', "reported an error"),
        ("data: {oops", "not JSON"),
        ('data: {"choices":["x"]}', "not an object"),
        ('data: {"choices":[{"text":"","token_ids":["7"]}]}', "not ids"),
    ],
)
def test_a_broken_chunk_is_an_error(line: str, said: str) -> None:
    with pytest.raises(ServedReplyError, match=said):
        read_openai_event(line)


def test_a_whole_answer_says_how_it_read_the_prompt() -> None:
    vllm = {"choices": [{"text": "", "prompt_token_ids": [2, 105]}], "usage": {"prompt_tokens": 2}}
    assert (prompt_ids(vllm), prompt_tokens(vllm)) == ((2, 105), 2)
    llama = {"choices": [{"text": ""}], "usage": {"prompt_tokens": 3}}
    assert (prompt_ids(llama), prompt_tokens(llama)) == (None, 3)
    assert prompt_tokens({"usage": {"prompt_tokens": True}}) is None
