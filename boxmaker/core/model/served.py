"""A model served by another program, driven by token ids (issue 41). Pure.

loopd renders, neutralises and tokenizes every prompt itself; only token ids cross the
link, so nothing the server does to text can turn a tool result that spells a control
token into that token. This module holds what is said over the link and read back:

- llama-server's `/completion` (tools/server/README.md of the llama.cpp that
  llama-cpp-python vendors): `prompt` an array of integers only (a string anywhere in
  it is tokenized by the server, with its special tokens parsed, and a leading string
  gets a BOS added), `return_tokens` and `stream` so each generated id comes back as
  it is made, `cache_prompt` for the server's prefix reuse, and `id_slot` to keep a
  session on one slot;
- its answers, one server-sent event a line: `data: {...}` with `tokens` (the ids made
  since the last event; the end of generation's token among them), `content` (their
  text), `tokens_predicted` (the ids made so far: more than were sent where the server
  held some back inside a character, `core.model.withheld`), `stop` true on the last
  with `stop_type` (`eos` for an end of generation), and (`timings_per_token`)
  `timings`, which say how many prompt tokens were evaluated (`prompt_n`) and how
  many were reused (`cache_n`); or `error`. loopd stops reading at its own stop
  tokens and closes the connection, which ends the completion on the server too, so
  every event carries the counts.

The OpenAI completions API (vLLM, SGLang, llama-server's `/v1/completions`) is
`core.model.served_openai`; both are read into the same `ServedEvent`.

The sampling settings are loopd's own (`core.model.sampling`), named as the server
names them, with llama-cpp-python's defaults for what loopd does not set (min_p
0.05, a repeat window of 64), so a greedy turn picks the same tokens in-process and
served.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from boxmaker.core.errors import UnavailableError
from boxmaker.core.model.sampling import Sampling

# what llama-cpp-python's Llama.generate uses where loopd sets nothing
MIN_P = 0.05
REPEAT_WINDOW = 64


class ServedReplyError(UnavailableError):
    """The server's answer is not what the protocol says (or it reported an error)."""


@dataclass(frozen=True)
class ServedEvent:
    """One event of a streamed completion."""

    tokens: tuple[int, ...]  # the ids made since the last event
    last: bool  # the server's last event of this completion
    evaluated: int | None = None  # prompt tokens evaluated, where the event says
    reused: int | None = None  # prompt tokens reused from the slot's cache, likewise
    text: str = ""  # the server's text of these ids (and of any it held back)
    made: int | None = None  # ids made so far in this completion, where the event says
    eos: bool = False  # the server stopped at an end of generation (not at a limit)
    finished: bool = False  # the server has made its last id (more events may follow)


def token_ids(prompt: Sequence[int]) -> list[int]:
    """`prompt` as a list of plain ints, checked: a bool, a string or anything else in
    it would be sent as something the server may tokenize or misread."""
    ids = list(prompt)
    for token in ids:
        if type(token) is not int or token < 0:
            raise ValueError(f"a prompt sent to a server holds only token ids, not {token!r}")
    return ids


def completion_body(
    prompt: Sequence[int],
    *,
    max_tokens: int,
    sampling: Sampling,
    seed: int,
    slot: int | None,
) -> dict[str, Any]:
    """llama-server's `/completion` request for `prompt`, streamed, ids back."""
    body: dict[str, Any] = {
        "prompt": token_ids(prompt),
        "n_predict": max_tokens,
        "stream": True,
        "return_tokens": True,
        "cache_prompt": True,
        **sampling_fields(sampling, seed),
        "timings_per_token": True,
        # the last event without the prompt's text and the settings echoed back
        "response_fields": [
            "content",
            "tokens",
            "tokens_predicted",
            "stop",
            "stop_type",
            "timings",
            "id_slot",
        ],
    }
    if slot is not None:
        body["id_slot"] = slot
    return body


def sampling_fields(sampling: Sampling, seed: int) -> dict[str, Any]:
    """loopd's sampling settings as llama.cpp's server names them."""
    return {
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "min_p": MIN_P,
        "repeat_penalty": sampling.repeat_penalty,
        "repeat_last_n": REPEAT_WINDOW,
        "seed": seed,
    }


def read_event(line: str) -> ServedEvent | None:
    """One line of llama-server's stream: its event, or None for what is not one (a
    blank line, a comment such as a keep-alive ping)."""
    data = parse_data(line)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ServedReplyError(f"the server sent an event that is not an object: {line[:120]!r}")
    tokens = ids_of(data.get("tokens", []))
    last = data.get("stop") is True
    evaluated, reused = prompt_counts(data.get("timings"))
    text = data.get("content")
    return ServedEvent(
        tokens,
        last,
        evaluated,
        reused,
        text=text if isinstance(text, str) else "",
        made=count_of(data.get("tokens_predicted")),
        eos=last and data.get("stop_type") == "eos",
        finished=last,
    )


def parse_data(line: str) -> dict[str, Any] | str | None:
    """The JSON object of a `data:` line (or its text `[DONE]`, the OpenAI stream's
    end); ServedReplyError for a reported error or what is not a JSON object; None for
    what is not a data line."""
    if not line.startswith("data:"):
        if line.startswith("error:"):
            raise ServedReplyError(f"the server reported an error: {line[6:].strip()[:300]}")
        return None
    text = line[5:].strip()
    if text == "[DONE]":
        return text
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ServedReplyError(
            f"the server sent an event that is not JSON: {text[:120]!r}"
        ) from exc
    if not isinstance(data, dict):
        raise ServedReplyError(f"the server sent an event that is not an object: {text[:120]!r}")
    if "error" in data:
        raise ServedReplyError(f"the server reported an error: {json.dumps(data['error'])[:300]}")
    return data


def ids_of(tokens: object) -> tuple[int, ...]:
    """`tokens` as ids: a list of non-negative ints, else ServedReplyError."""
    if not isinstance(tokens, list) or any(type(t) is not int or t < 0 for t in tokens):
        raise ServedReplyError(f"the server sent tokens that are not ids: {str(tokens)[:120]}")
    return tuple(tokens)


def prompt_counts(timings: object) -> tuple[int | None, int | None]:
    """llama-server's `timings`: the prompt tokens evaluated and reused."""
    if not isinstance(timings, dict):
        return None, None
    return count_of(timings.get("prompt_n")), count_of(timings.get("cache_n"))


def count_of(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value
