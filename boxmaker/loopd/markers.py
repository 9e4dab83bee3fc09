"""The loaded model's markers: every token that text could produce and that is not
plain text, built from the model's own vocabulary, and the self-test that proves
neutralising disarms them (003 sections 6.2 and 8; docs/markers.md).

I/O: `load_vocabulary` reads a GGUF file's vocabulary alone (for `loopd tags`,
and the self-test's thread; `loopd.llama_load` makes the `Llama`);
otherwise none of its own. `build_markers` reads a `Vocabulary` (`LlamaVocabulary`
wraps a llama-cpp-python `Llama`, loaded whole or with `vocab_only=True`);
`check_markers` tokenizes through any `Tokenizer`, such as `LlamaModel`.

The rule. A token of the vocabulary is a marker when

1. it is control-typed (llama.cpp's `LLAMA_TOKEN_ATTR_CONTROL`) and its text is
   not empty: a control token is what a chat template is made of, and any
   tokenizer call that parses special tokens turns its text into it; or
2. it is user-defined (`LLAMA_TOKEN_ATTR_USER_DEFINED`), its text is not
   whitespace alone, tokenizing its text without special parsing gives exactly
   that one token (llama.cpp matches user-defined tokens in any text, special
   parsing or not), and it is one of these:
   a. named by one of the file's special-token keys
      (`tokenizer.ggml.<name>_token_id` in its metadata);
   b. used by a chat template of the file (`tokenizer.chat_template`, and the
      named ones beside it, `tokenizer.chat_template.<name>`, such as the
      `tool_use` template loopd renders where there is one: the token's text
      occurs in one of them);
   c. shaped as a marker (`boxmaker.core.model.marker_shapes.is_marker_shaped`: the
      angle-bar and bracket forms, the start-of and end-of forms, think and
      tool-call tags, image and other media markers).

Every other token is plain text, user-defined or not (runs of spaces and
newlines, HTML tags such as table and code): it means exactly its text and
neutralise leaves it alone. A marker's `why` says which parts of the rule
listed it ("control", "user-defined", then "named by <key>", "in the chat
template", "marker-shaped").

The self-test (`check_markers`, run before loopd serves) fails when any of:

- a marker's text, tokenized with special parsing, is not one token of the list;
- its neutralised form (`boxmaker.core.sanitize.neutralise` with the whole list)
  is a single token, or holds a listed token when tokenized with special parsing,
  or neutralise cannot disarm it at all (a listed token that the look-alike
  characters alone tokenize to is the tokenizer's stand-in for characters it
  lacks, BERT's unknown token, not a marker re-formed, and does not count);
- a marker of the chat format (`format_markers`: begin of text, open and close
  of a turn, each stop, and role and header markers where it has them) is not
  in the list;
- a plain-text token given (`plain`) is changed by neutralise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from boxmaker.core.model.dialect import Dialect
from boxmaker.core.model.marker_shapes import is_marker_shaped
from boxmaker.core.sanitize import neutralise
from boxmaker.core.sanitize.tags import (
    CLOSE_LOOKALIKE,
    OPEN_LOOKALIKE,
    SQUARE_CLOSE_LOOKALIKE,
    SQUARE_OPEN_LOOKALIKE,
)
from boxmaker.loopd.llama_load import load_llama

# llama.h's enum llama_token_attr
CONTROL = 1 << 3
USER_DEFINED = 1 << 4

TEMPLATE_KEY = "tokenizer.chat_template"
LOOKALIKES = " ".join(
    [OPEN_LOOKALIKE, CLOSE_LOOKALIKE, SQUARE_OPEN_LOOKALIKE, SQUARE_CLOSE_LOOKALIKE]
)
_NAMING_KEY = re.compile(r"tokenizer\.ggml\.[a-z0-9_]+_token_id")


@dataclass(frozen=True)
class Marker:
    id: int
    text: str
    why: str


class Tokenizer(Protocol):
    def tokenize(self, text: str, *, special: bool) -> list[int]: ...


class Vocabulary(Tokenizer, Protocol):
    """What `build_markers` reads of a model: its tokens, their types, its metadata."""

    metadata: Mapping[str, str]

    def n_tokens(self) -> int: ...

    def token_text(self, token: int) -> str: ...

    def token_attr(self, token: int) -> int: ...


class LlamaVocabulary:
    """The vocabulary of a llama-cpp-python `Llama` (a full load or `vocab_only=True`)."""

    def __init__(self, llm: Any) -> None:
        import llama_cpp

        self._llama_cpp = llama_cpp
        self._llm = llm
        self._vocab = llama_cpp.llama_model_get_vocab(llm.model)
        self.metadata: Mapping[str, str] = dict(llm.metadata)

    def n_tokens(self) -> int:
        count: int = self._llama_cpp.llama_vocab_n_tokens(self._vocab)
        return count

    def token_text(self, token: int) -> str:
        data: bytes = self._llama_cpp.llama_vocab_get_text(self._vocab, token)
        return data.decode("utf-8", errors="replace")

    def token_attr(self, token: int) -> int:
        return int(self._llama_cpp.llama_vocab_get_attr(self._vocab, token))

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        ids: list[int] = self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
        return ids


def named_tokens(metadata: Mapping[str, str]) -> dict[int, str]:
    """Each token id the special-token keys name, with the first key naming it."""
    named: dict[int, str] = {}
    for key, value in sorted(metadata.items()):
        if _NAMING_KEY.fullmatch(key):
            try:
                named.setdefault(int(value), key)
            except ValueError:
                continue
    return named


def build_markers(vocab: Vocabulary) -> tuple[Marker, ...]:
    """The vocabulary's markers by the rule above, in id order."""
    named = named_tokens(vocab.metadata)
    template = "\n".join(
        str(text)
        for key, text in vocab.metadata.items()
        if key == TEMPLATE_KEY or key.startswith(f"{TEMPLATE_KEY}.")
    )
    markers: list[Marker] = []
    for token in range(vocab.n_tokens()):
        attr = vocab.token_attr(token)
        if not attr & (CONTROL | USER_DEFINED):
            continue
        text = vocab.token_text(token)
        reasons = _user_defined_reasons(token, text, named, template)
        if attr & CONTROL and text:
            markers.append(Marker(token, text, "; ".join(["control", *reasons])))
        elif (
            attr & USER_DEFINED
            and reasons
            and text.strip()
            and vocab.tokenize(text, special=False) == [token]
        ):
            markers.append(Marker(token, text, "; ".join(["user-defined", *reasons])))
    return tuple(markers)


def _user_defined_reasons(
    token: int, text: str, named: Mapping[int, str], template: str
) -> list[str]:
    reasons = []
    if token in named:
        reasons.append(f"named by {named[token]}")
    if text.strip() and text in template:
        reasons.append("in the chat template")
    if is_marker_shaped(text):
        reasons.append("marker-shaped")
    return reasons


def format_markers(dialect: Dialect) -> list[str]:
    """The dialect's own markers (`Dialect.markers`: begin of text, open and close of a
    turn, role and header markers where the format has them, stops)."""
    return list(dialect.markers)


def check_markers(
    tokenizer: Tokenizer,
    markers: Sequence[Marker],
    required: Iterable[str] = (),
    plain: Iterable[str] = (),
) -> list[str]:
    """The self-test's problems (none when it passes): see the module docstring."""
    return unlisted(markers, required) + marker_problems(tokenizer, markers, plain)


def unlisted(markers: Sequence[Marker], required: Iterable[str]) -> list[str]:
    """The self-test's problems with the chat format's own markers: each must be listed."""
    listed = {m.text for m in markers}
    return [
        f"the chat format's marker {text!r} is not in the marker list"
        for text in dict.fromkeys(required)
        if text not in listed
    ]


def marker_problems(
    tokenizer: Tokenizer, markers: Sequence[Marker], plain: Iterable[str] = ()
) -> list[str]:
    """The self-test's problems with the markers themselves and the plain tokens (the
    part that tokenizes every marker twice: `loopd serve` runs it on a vocabulary of
    its own while the model loads)."""
    texts = tuple(m.text for m in markers)  # one tuple: neutralise knows it by identity
    ids = {m.id for m in markers}
    problems: list[str] = []
    stand_ins = ids.intersection(tokenizer.tokenize(LOOKALIKES, special=True))
    for marker in markers:
        as_tag = tokenizer.tokenize(marker.text, special=True)
        if len(as_tag) != 1 or as_tag[0] not in ids:
            problems.append(
                f"{marker.text!r} (id {marker.id}) tokenizes to {as_tag[:8]}, not one marker"
            )
        try:
            disarmed = neutralise(marker.text, texts).text
        except ValueError:
            problems.append(
                f"{marker.text!r} (id {marker.id}) has no bracket neutralise can disarm"
            )
            continue
        again = tokenizer.tokenize(disarmed, special=True)
        if len(again) < 2:
            problems.append(f"{marker.text!r} neutralised is {len(again)} token, not several")
        forged = sorted(ids.intersection(again) - stand_ins)
        if forged:
            problems.append(f"{marker.text!r} neutralised still holds marker ids {forged[:8]}")
    for text in plain:
        if neutralise(text, texts).text != text:
            problems.append(f"plain-text token {text!r} is changed by neutralise")
    return problems


def plain_user_defined(vocab: Vocabulary, markers: Sequence[Marker]) -> list[str]:
    """The texts of the user-defined tokens that are not markers (plain text)."""
    listed = {m.id for m in markers}
    return [
        vocab.token_text(token)
        for token in range(vocab.n_tokens())
        if vocab.token_attr(token) & USER_DEFINED
        and not vocab.token_attr(token) & CONTROL
        and token not in listed
    ]


def load_vocabulary(path: Path) -> LlamaVocabulary:
    """The vocabulary of the GGUF file at `path`, loaded alone (no weights: fast)."""
    return LlamaVocabulary(load_llama(path, vocab_only=True))


def describe(markers: Sequence[Marker]) -> list[str]:
    """One line per marker for `loopd tags`: id, text as a JSON string (ASCII, every
    control character escaped: the text is data, never written raw), why."""
    return [f"{m.id}\t{json.dumps(m.text, ensure_ascii=True)}\t{m.why}" for m in markers]
