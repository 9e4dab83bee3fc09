"""The OpenAI completions API driven by token ids (issue 41, `backend =
"openai-completions"`). Pure.

For vLLM, SGLang, or llama-server's `/v1/completions`: the legacy completions API,
not chat completions, since a chat API renders and tokenizes the conversation on the
server, where a tool result that spells a control token becomes that token. Here the
prompt is loopd's own ids (`prompt: list[int]`, vLLM's `CompletionRequest`), with no
special tokens added (`add_special_tokens: false`), and the ids come back:

- vLLM: `return_token_ids` (0.10.2 and later), each chunk's `choices[0].token_ids`
  the ids made since the last, and the first's `prompt_token_ids` the prompt as it
  was read; before that, `return_tokens_as_token_ids` with `logprobs`, each token
  named `token_id:<id>` in `choices[0].logprobs.tokens`;
- llama-server: the sampled token's `id` in `choices[0].logprobs.content` (it returns
  no ids otherwise), so `logprobs` is asked for as 1 (vLLM gives it too and it costs
  little there), with `timings_per_token` for its counts (held-back ids,
  `core.model.withheld`, and the prompt reuse).

A per-session `cache_salt` (vLLM) keeps one session's cached prefix from another's;
`id_slot` keeps a session on one of llama-server's slots. Each server ignores the
other's fields. `stream_options.include_usage` asks for the prompt's counts at the
end (`usage.prompt_tokens`, `prompt_tokens_details.cached_tokens`); the stream ends
with `data: [DONE]`.

Sampling: temperature, top_p, top_k and min_p as `core.model.served`; the repeat
penalty under both names (`repetition_penalty` for vLLM, `repeat_penalty` for
llama.cpp), over the last 64 ids on llama.cpp and over the whole text on vLLM, the
same where it is 1.0 (none), as for the embedded model and the Qwen families.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from boxmaker.core.model.sampling import Sampling
from boxmaker.core.model.served import (
    ServedEvent,
    ServedReplyError,
    count_of,
    ids_of,
    parse_data,
    prompt_counts,
    sampling_fields,
    token_ids,
)

PATH = "/v1/completions"


def openai_body(
    prompt: Sequence[int],
    *,
    max_tokens: int,
    sampling: Sampling,
    seed: int,
    stop: Sequence[int],
    salt: str | None,
    slot: int | None,
    stream: bool = True,
) -> dict[str, Any]:
    """The `/v1/completions` request for `prompt`, streamed, ids back."""
    body: dict[str, Any] = {
        "prompt": token_ids(prompt),
        "max_tokens": max_tokens,
        "stream": stream,
        "add_special_tokens": False,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "logprobs": 1,
        **sampling_fields(sampling, seed),
        "repetition_penalty": sampling.repeat_penalty,  # vLLM's name
        "stop_token_ids": sorted(stop),
        "timings_per_token": True,
        "cache_prompt": True,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if salt is not None:
        body["cache_salt"] = salt
    if slot is not None:
        body["id_slot"] = slot
    return body


def read_openai_event(line: str) -> ServedEvent | None:
    """One line of the stream: its event (`last` at `[DONE]`), or None for what is
    not one."""
    data = parse_data(line)
    if data is None:
        return None
    if data == "[DONE]":
        return ServedEvent((), True)
    if not isinstance(data, dict):
        raise ServedReplyError(f"the server sent an event that is not an object: {line[:120]!r}")
    return read_openai_answer(data)


def read_openai_answer(data: dict[str, Any]) -> ServedEvent:
    """A chunk of the stream, or a whole answer: its ids, text and counts."""
    evaluated, reused = prompt_counts(data.get("timings"))
    usage = data.get("usage")
    if isinstance(usage, dict):
        prompt = count_of(usage.get("prompt_tokens"))
        details = usage.get("prompt_tokens_details")
        cached = count_of(details.get("cached_tokens")) if isinstance(details, dict) else None
        if prompt is not None:
            reused = cached if cached is not None else reused
            evaluated = prompt - (reused or 0)
    timings = data.get("timings")
    made = count_of(timings.get("predicted_n")) if isinstance(timings, dict) else None
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return ServedEvent((), False, evaluated, reused, made=made)
    choice = choices[0]
    if not isinstance(choice, dict):
        raise ServedReplyError(f"the server sent a choice that is not an object: {choice!r:.120}")
    text = choice.get("text")
    text = text if isinstance(text, str) else ""
    tokens = _choice_ids(choice)
    if tokens is None:
        if text:
            raise ServedReplyError(
                "the server sent text without the ids it made (loopd keeps replies as "
                "ids: vLLM 0.10.2 or later returns them with return_token_ids, "
                "llama-server with logprobs)"
            )
        tokens = ()
    finish = choice.get("finish_reason")
    return ServedEvent(
        tokens,
        False,
        evaluated,
        reused,
        text=text,
        made=made,
        eos=finish == "stop",
        finished=isinstance(finish, str),
    )


def _choice_ids(choice: dict[str, Any]) -> tuple[int, ...] | None:
    if choice.get("token_ids") is not None:
        return ids_of(choice["token_ids"])  # vLLM's return_token_ids
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return None
    content = logprobs.get("content")  # llama-server: each sampled token's id
    if isinstance(content, list) and content:
        return ids_of([entry.get("id") if isinstance(entry, dict) else None for entry in content])
    named = logprobs.get("tokens")  # vLLM's return_tokens_as_token_ids
    if isinstance(named, list) and named:
        return ids_of([_named_id(name) for name in named])
    return None


def _named_id(name: object) -> int | None:
    if isinstance(name, str) and name.startswith("token_id:"):
        digits = name.removeprefix("token_id:")
        if digits.isascii() and digits.isdigit():
            return int(digits)
    return None


def prompt_ids(data: Any) -> tuple[int, ...] | None:
    """The prompt's ids as a server read them, where it says (vLLM's
    `prompt_token_ids`, of a whole answer's choice)."""
    choices = data.get("choices") if isinstance(data, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    said = choice.get("prompt_token_ids") if isinstance(choice, dict) else None
    return None if said is None else ids_of(said)


def prompt_tokens(data: Any) -> int | None:
    """A whole answer's count of the prompt's tokens, as the server counted them."""
    usage = data.get("usage") if isinstance(data, dict) else None
    return count_of(usage.get("prompt_tokens")) if isinstance(usage, dict) else None
