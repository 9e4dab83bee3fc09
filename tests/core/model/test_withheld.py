"""Ids a streaming llama-server held back inside a character, found again
(core/model/withheld.py). The rule of what is held back is llama-server's
`validate_utf8` (tools/server/server-common.cpp of the llama.cpp that
llama-cpp-python 0.3.36 vendors); the cases below are its branches."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from boxmaker.core.model.served import ServedReplyError
from boxmaker.core.model.withheld import ends_inside_character, withheld_ids

BYTE_BASE = 238  # Gemma 3's <0x00>; its byte tokens are 238 to 493


def byte_tokens(piece: bytes) -> Sequence[int]:
    """A vocabulary of byte tokens only, as SentencePiece's byte fallback."""
    return [BYTE_BASE + piece[0]] if len(piece) == 1 else []


@pytest.mark.parametrize(
    ("data", "inside"),
    [
        (b"", False),
        (b"abc", False),
        (b"\xc3", True),  # a two-byte lead alone
        (b"\xc3\xa9", False),  # é whole
        (b"\xe4", True),
        (b"\xe4\xbd", True),  # three-byte lead and one more
        (b"\xe4\xbd\xa0", False),  # 你 whole
        (b"\xf0\x9d\x94", True),  # four-byte lead and two more
        (b"\xf0\x9d\x94\x98", False),  # U+1D518 whole
        (b"ok \xea\x99", True),
        (b"\x99", False),  # a continuation byte alone is not held (the server's rule)
    ],
)
def test_the_servers_rule_of_a_cut_character(data: bytes, inside: bool) -> None:
    assert ends_inside_character(data) is inside


def test_byte_tokens_held_back_are_found_again() -> None:
    # ꙮ is EA 99 AE; the server held back EA and 99 and sent AE's id with "ꙮ"
    held = "ꙮ".encode()[:2]
    assert withheld_ids(held, 2, before=b"", pieces=byte_tokens) == (
        BYTE_BASE + 0xEA,
        BYTE_BASE + 0x99,
    )


def test_three_held_back_after_text_already_sent() -> None:
    held = "\U0001d518".encode()[:3]
    found = withheld_ids(held, 3, before="ꙮ".encode(), pieces=byte_tokens)
    assert found == tuple(BYTE_BASE + b for b in held)


def test_a_piece_of_several_bytes_held_back() -> None:
    # byte-level BPE: one piece "ab" and a lead byte, held back as one token
    vocabulary = {b"ab\xe4": [900], b"a": [1], b"b\xe4": [2]}
    assert withheld_ids(b"ab\xe4", 1, before=b"", pieces=lambda p: vocabulary.get(p, [])) == (900,)


def test_two_ways_to_spell_it_are_refused_not_guessed() -> None:
    vocabulary = {b"\xe4": [10], b"\xbd": [11], b"\xe4\xbd": [12], b"x\xe4": [13]}
    pieces = lambda p: vocabulary.get(p, [])  # noqa: E731
    assert withheld_ids(b"\xe4\xbd", 1, before=b"", pieces=pieces) == (12,)
    assert withheld_ids(b"\xe4\xbd", 2, before=b"", pieces=pieces) == (10, 11)
    twins = {b"\xe4": [10, 20]}  # two ids of the same bytes
    with pytest.raises(ServedReplyError, match="several token sequences"):
        withheld_ids(b"\xe4", 1, before=b"", pieces=lambda p: twins.get(p, []))


@pytest.mark.parametrize(
    ("held", "count"),
    [
        (b"\xe4\xbd", 3),  # more ids than bytes
        (b"ab", 2),  # whole text is never held back
        (b"\xe4" * 65, 65),  # past the search's bound
        (b"", 1),
        (b"\xe4", 0),
    ],
)
def test_what_no_held_back_ids_can_spell_is_an_error(held: bytes, count: int) -> None:
    with pytest.raises(ServedReplyError, match="cannot be kept as the ids"):
        withheld_ids(held, count, before=b"", pieces=byte_tokens)


def test_a_hostile_vocabulary_cannot_make_the_search_blow_up() -> None:
    # every run of a lead byte is a token: C(59, 29) ways to spell 60 bytes in 30 ids,
    # counted up to two (a plain search would not end)
    held = b"\xf0" * 60
    with pytest.raises(ServedReplyError, match="several token sequences"):
        withheld_ids(held, 30, before=b"", pieces=lambda p: [len(p)] if set(p) == {0xF0} else [])
