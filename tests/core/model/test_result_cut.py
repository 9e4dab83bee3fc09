"""A tool result cut to the model's budget (boxmaker.core.model.result_cut): each rule.

The token count is a stand-in with the property that matters: it grows with the
text. One counts UTF-8 bytes in fours (as a byte-level BPE roughly does), one
counts words. Hypothesis checks the guarantees on any text: within the budget,
head and tail are the text's own start and end, and the marker's counts are right.
"""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from boxmaker.core.model.result_cut import Cut, cut_result, marker_line


def by_bytes(text: str) -> int:
    return (len(text.encode("utf-8")) + 3) // 4


def by_words(text: str) -> int:
    return len(text.split())


LINES = "".join(f"line {n}: something the tool printed\n" for n in range(1, 2001))
MARKER = re.compile(r"\n\[\.\.\. (\d+) lines, (\d+) bytes of this result left out here")


def parts(cut: Cut, text: str) -> tuple[str, str, str]:
    """(head, marker, tail) of a cut result, checked against the text it came from."""
    found = MARKER.search(cut.text)
    assert found is not None, cut.text
    marker = marker_line(cut.lines_left_out, cut.bytes_left_out)
    head, tail = cut.text.split(marker)
    assert text.startswith(head)
    assert text.endswith(tail)
    return head, marker, tail


def test_a_result_within_its_budget_is_left_as_it_is() -> None:
    assert cut_result("short\n", 100, by_bytes) == Cut("short\n")
    assert not cut_result("short\n", 100, by_bytes).cut


def test_a_long_result_keeps_head_and_tail_of_whole_lines_within_the_budget() -> None:
    cut = cut_result(LINES, 2_000, by_bytes)
    assert cut.cut
    assert by_bytes(cut.text) <= 2_000
    head, _, tail = parts(cut, LINES)
    assert head.startswith("line 1: ")
    assert head.endswith("\n")
    assert tail.endswith("line 2000: something the tool printed\n")
    assert tail.startswith("line ")  # whole lines
    assert abs(by_bytes(head) - by_bytes(tail)) < 20  # half each


def test_the_marker_counts_what_was_left_out() -> None:
    cut = cut_result(LINES, 1_000, by_bytes)
    head, _, tail = parts(cut, LINES)
    middle = LINES[len(head) : len(LINES) - len(tail)]
    assert cut.bytes_left_out == len(middle.encode("utf-8"))
    assert cut.lines_left_out == middle.count("\n")
    assert f"{cut.lines_left_out} lines, {cut.bytes_left_out} bytes" in cut.text
    assert "the whole result is in the session log" in cut.text


def test_a_cut_never_splits_a_character() -> None:
    text = "é" * 5_000 + "\n" + "日本語のテキスト" * 2_000  # two lines, both too long
    cut = cut_result(text, 300, by_bytes)
    assert by_bytes(cut.text) <= 300
    head, _, tail = parts(cut, text)
    assert head  # a line cut, since no whole line fits
    assert set(head) == {"é"}
    assert tail
    assert set(tail) <= set("日本語のテキスト")
    cut.text.encode("utf-8")  # whole characters: it encodes


def test_a_cut_never_splits_a_listed_marker() -> None:
    tag = "<start_of_turn>"
    text = (tag * 2_000) + "\n" + ("x" * 10 + tag) * 500
    cut = cut_result(text, 400, by_bytes, keep_whole=(tag,))
    head, _, tail = parts(cut, text)
    assert head
    assert tail
    assert len(head) % len(tag) == 0  # only whole tags
    assert tail.endswith(tag)
    assert tail.startswith((tag, "x"))
    assert not any(tag.startswith(tail[:n]) and tail[:n] != tag for n in range(1, 3))


def test_the_same_result_is_cut_the_same_way() -> None:
    assert cut_result(LINES, 777, by_words) == cut_result(LINES, 777, by_words)


def test_a_budget_too_small_for_anything_but_the_marker_keeps_the_marker() -> None:
    cut = cut_result(LINES, 10, by_words)
    assert cut.cut
    assert "left out here" in cut.text


@given(
    st.text(st.characters(codec="utf-8"), max_size=600),
    st.integers(min_value=30, max_value=400),
)
def test_any_text_within_any_budget(text: str, budget: int) -> None:
    cut = cut_result(text, budget, by_bytes, keep_whole=("<tool_call>",))
    if not cut.cut:
        assert cut.text == text
        assert by_bytes(text) <= budget
        return
    assert by_bytes(cut.text) <= budget
    head, _, tail = parts(cut, text)
    assert cut.bytes_left_out == len(text.encode("utf-8")) - len((head + tail).encode("utf-8"))
