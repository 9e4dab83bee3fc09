"""The held-out eval set: committed, big enough, well formed, and apart from the generator."""

from __future__ import annotations

import json
import re
from pathlib import Path

from boxmaker.core.grants.args import parse_arguments
from boxmaker.core.grants.tools import ToolName
from training.heldout import vocab as held
from training.heldout.make_requests import OUT, requests
from training.scenarios import vocab as gen

FIELDS = ("FILES", "DIRS", "COMMANDS", "URLS", "CONTENTS", "NOTES", "INJECTIONS")
PHRASINGS = (
    "READ",
    "WRITE",
    "SHELL",
    "FETCH",
    "REMEMBER",
    "NOTE",
    "RECALL",
    "REPLACE",
    "CONSOLIDATE",
    "COPY",
)


def _rows() -> list[dict[str, object]]:
    return [json.loads(line) for line in Path(OUT).read_text(encoding="utf-8").splitlines()]


def test_the_committed_set_is_what_make_requests_writes() -> None:
    assert _rows() == json.loads(json.dumps(requests()))
    assert len(_rows()) >= 150


def test_expected_calls_pass_the_argument_parser() -> None:
    for row in _rows():
        for call in row["expect"]:  # type: ignore[attr-defined]
            arguments = json.dumps(call["arguments"]).replace("{workspace}", "/home/owner/w")
            parse_arguments(ToolName(call["tool"]), arguments)


def _words(module: object, names: tuple[str, ...]) -> set[str]:
    found: set[str] = set()
    for name in names:
        for item in getattr(module, name, ()):
            found.add(item[0] if isinstance(item, tuple) else item)
    return found


def _skeleton(phrase: str) -> str:
    """A phrasing without its slots, lower case, spaces squeezed."""
    return re.sub(r"\s+", " ", re.sub(r"\{[a-z]+\}", "", phrase.lower())).strip(" .?!:")


def test_no_file_name_command_url_or_fact_is_shared() -> None:
    assert not _words(held, FIELDS) & _words(gen, FIELDS)
    held_names = {f.rsplit("/", 1)[-1] for f in held.FILES}
    assert not held_names & set(gen.FILES)
    assert not {d.rsplit("/", 1)[-1] for d in held.DIRS} & {d.rsplit("/", 1)[-1] for d in gen.DIRS}
    assert not {f for _, f in held.FACTS} & {f for _, f in gen.FACTS}
    assert not {t for _, t in held.MEMORIES} & {t for _, t in gen.MEMORIES}
    chat = {
        said for said, _ in gen.GREETINGS + gen.CASUAL + gen.THANKS + gen.QUESTIONS + gen.CHOICES
    }
    assert not {said for said, _ in held.CHAT} & chat


def test_no_phrasing_is_shared() -> None:
    held_phrases = {_skeleton(p) for name in PHRASINGS for p in getattr(held, name)}
    gen_phrases = {_skeleton(p) for name in PHRASINGS for p in getattr(gen, name)}
    gen_phrases |= {_skeleton(p) for p in gen.SHELL_CWD + gen.ARITHMETIC}
    assert not held_phrases & gen_phrases


def test_no_request_holds_a_generator_file_name_or_phrasing() -> None:
    gen_phrases = [_skeleton(p) for name in PHRASINGS for p in getattr(gen, name)]
    for row in _rows():
        text = str(row["request"]).lower()
        assert not any(f in text for f in gen.FILES), row["id"]
        assert _skeleton(text) not in gen_phrases, row["id"]
