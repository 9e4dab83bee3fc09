"""The token-id protocol of a served model (core/model/served.py): what is sent, what is read."""

from __future__ import annotations

import json

import pytest

from boxmaker.core.model.sampling import ADAPTED, Sampling
from boxmaker.core.model.served import (
    ServedEvent,
    ServedReplyError,
    completion_body,
    read_event,
    token_ids,
)


def test_the_prompt_goes_as_plain_integers_only() -> None:
    body = completion_body([2, 105, 4368], max_tokens=8, sampling=ADAPTED, seed=7, slot=None)
    assert body["prompt"] == [2, 105, 4368]
    assert all(type(t) is int for t in body["prompt"])
    assert (body["stream"], body["return_tokens"], body["timings_per_token"]) == (True,) * 3
    assert "id_slot" not in body
    json.dumps(body)  # it serialises as it is


@pytest.mark.parametrize("bad", ["<end_of_turn>", True, -1, 3.0, None])
def test_anything_but_a_token_id_in_a_prompt_is_refused(bad: object) -> None:
    # a string would be tokenized by the server, its markers parsed; a bool is an int
    # subclass that JSON writes as true
    with pytest.raises(ValueError, match="only token ids"):
        token_ids([2, bad, 5])  # type: ignore[list-item]


def test_the_sampling_settings_are_loopds_and_the_slot_is_kept() -> None:
    sampling = Sampling(temperature=0.6, top_p=0.9, top_k=20, repeat_penalty=1.0)
    body = completion_body([1], max_tokens=3, sampling=sampling, seed=11, slot=2)
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.6, 0.9, 20)
    assert (body["repeat_penalty"], body["seed"], body["n_predict"]) == (1.0, 11, 3)
    assert body["id_slot"] == 2


def test_a_streamed_event_gives_its_ids_and_counts() -> None:
    line = (
        'data: {"content":"Hi","tokens":[9259],"stop":false,"tokens_predicted":4,'
        '"timings":{"prompt_n":12,"cache_n":30}}'
    )
    assert read_event(line) == ServedEvent((9259,), False, 12, 30, text="Hi", made=4)
    last = read_event('data: {"content":"","tokens":[],"stop":true,"stop_type":"eos"}')
    assert last == ServedEvent((), True, None, None, eos=True, finished=True)
    cut = read_event('data: {"tokens":[],"stop":true,"stop_type":"limit"}')
    assert cut == ServedEvent((), True, eos=False, finished=True)


@pytest.mark.parametrize("line", ["", ": ping", "event: message", "id: 4"])
def test_what_is_not_a_data_line_is_no_event(line: str) -> None:
    assert read_event(line) is None


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('data: {"error":{"code":500,"message":"context full"}}', "reported an error"),
        ('error: {"message": "boom"}', "reported an error"),
        ("data: not json", "not JSON"),
        ("data: [1, 2]", "not an object"),
        ('data: {"tokens":["<end_of_turn>"],"stop":false}', "not ids"),
        ('data: {"tokens":[true],"stop":false}', "not ids"),
    ],
)
def test_a_broken_or_failed_event_is_an_error(line: str, said: str) -> None:
    with pytest.raises(ServedReplyError, match=said):
        read_event(line)


def test_counts_that_are_not_counts_are_not_read() -> None:
    line = 'data: {"tokens":[],"stop":true,"timings":{"prompt_n":-3,"cache_n":true}}'
    assert read_event(line) == ServedEvent((), True, None, None, finished=True)
