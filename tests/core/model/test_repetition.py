"""The repetition detector's rules (`boxmaker.core.model.repetition`), in its docstring's order,
and the legitimate outputs it must leave alone: lists, tables, code with repeated lines."""

from __future__ import annotations

import pytest

from boxmaker.core.model.repetition import (
    MAX_PERIOD,
    MIN_COPIES,
    MIN_TOKENS,
    Repetition,
    find_repetition,
)


def words(count: int, start: int = 0) -> list[int]:
    """`count` ids, each different: text that wanders and never repeats."""
    return list(range(start, start + count))


PROMPT = words(400, 10_000)  # a system prompt, as a base model writes it out again
ROW = [1, 2, 3, 4, 3, 5, 3, 6]  # "| 0 | 0 | 0 |\n" as tokens
LINE = [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]  # "    total += step\n"


def item(n: int) -> list[int]:
    """A list item: the marker and its own words ("- item 12: ...\n")."""
    return [20, 21, 1000 + n, 22, 2000 + n, 3000 + n, 23]


def code(repeats: int) -> list[int]:
    """A function with the same line `repeats` times in it, between other lines."""
    return [*words(40, 500), *LINE * repeats, *words(40, 600)]


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([5] * MIN_TOKENS, Repetition(1, MIN_TOKENS)),
        ([*words(300), *[5] * 600], Repetition(1, 600)),
        ([*words(50), *PROMPT * MIN_COPIES], Repetition(400, 1600)),
        ([*words(50), *PROMPT * 6, *PROMPT[:150]], Repetition(400, 2550)),
        ([*words(10), *ROW * 80], Repetition(8, 640)),
        ([*words(10), *[5, 6] * 400, *words(3, 900)], None),
        ([5] * (MIN_TOKENS - 1), None),
        ([*words(50), *PROMPT * (MIN_COPIES - 1)], None),
        ([*words(50), *words(MAX_PERIOD + 1) * MIN_COPIES], None),
        (words(20_000), None),
        ([], None),
    ],
    ids=[
        "one-id-again-and-again",
        "a-run-after-text",
        "the-system-prompt-four-times",
        "a-partial-copy-at-the-end-counts",
        "eighty-identical-rows",
        "only-the-tail-counts",
        "one-short-of-min-tokens",
        "three-copies-of-a-long-block",
        "a-block-past-max-period",
        "long-wandering-text",
        "empty",
    ],
)
def test_the_rules(ids: list[int], expected: Repetition | None) -> None:
    assert find_repetition(ids) == expected


@pytest.mark.parametrize(
    "ids",
    [
        [tok for n in range(300) for tok in item(n)],
        [*words(30), *ROW * 60, *words(30, 700)],
        [*words(30), *ROW * 60],
        code(20),
        code(40)[:-40],
        [*words(30), *[9] * 200, *words(30, 700)],
        [*words(30), *[9] * 200],
        [tok for n in range(100) for tok in (*LINE, 4000 + n)],
    ],
    ids=[
        "a-long-list",
        "a-table-of-sixty-equal-rows",
        "a-reply-ending-in-sixty-equal-rows",
        "code-with-a-line-twenty-times",
        "code-ending-in-a-line-forty-times",
        "a-row-of-dashes",
        "a-reply-ending-in-dashes",
        "the-same-line-numbered-a-hundred-times",
    ],
)
def test_legitimate_outputs_are_left_alone(ids: list[int]) -> None:
    assert find_repetition(ids) is None


def test_copies_counts_whole_blocks() -> None:
    assert Repetition(period=400, tokens=2550).copies == 6


def test_the_shortest_block_is_found() -> None:
    found = find_repetition([*words(7), *[1, 2, 1, 2] * 300])
    assert found is not None
    assert found.period == 2
