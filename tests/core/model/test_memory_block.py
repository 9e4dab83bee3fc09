"""The memory block's layout, spans and fitting (`boxmaker.core.model.memory_block`), against a
naive oracle: keep entries one by one while the block still fits."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmaker.core.model.memory_block import (
    BLOCK_BYTES,
    BlockEntry,
    Span,
    alone_bytes,
    fit_block,
    render_block,
    split_block,
)

# texts that may hold what a reader of the text alone would take for structure
_TEXT = st.lists(
    st.sampled_from(["a", "é", " ", "\n", "\n\n", "## Memory", "## About the owner"]),
    max_size=12,
).map("".join)
_ENTRY = st.builds(
    BlockEntry,
    id=st.from_regex(r"[mu]-[0-9a-f]{4}", fullmatch=True),
    kind=st.sampled_from(["memory", "user"]),
    text=_TEXT,
)
_ENTRIES = st.lists(_ENTRY, max_size=8).map(
    lambda es: [e for e in es if e.kind == "memory"] + [e for e in es if e.kind == "user"]
)


def test_the_layout_is_soul_then_memory_then_user() -> None:
    block = render_block(
        "I am careful.",
        [BlockEntry("m-1", "memory", "Builds use make."), BlockEntry("u-1", "user", "Kyle.")],
    )
    assert (
        block.text
        == "I am careful.\n\n## Memory\n\nBuilds use make.\n\n## About the owner\n\nKyle."
    )
    assert block.soul == len("I am careful.")
    assert [block.text[s.start : s.end] for s in block.spans] == ["Builds use make.", "Kyle."]


@given(st.text(max_size=20), _ENTRIES)
def test_any_block_splits_back_into_its_soul_and_entries(
    soul: str, entries: list[BlockEntry]
) -> None:
    block = render_block(soul, entries)
    assert split_block(block.text, block.soul, block.spans) == (soul, entries)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda s: [Span(s[0].id, s[0].kind, s[0].start, s[0].end - 1)], id="short"),
        pytest.param(lambda s: [Span(s[0].id, s[0].kind, s[0].start - 3, s[0].end)], id="early"),
        pytest.param(lambda s: [Span(s[0].id, "user", s[0].start, s[0].end)], id="wrong-kind"),
        pytest.param(lambda s: [Span(s[0].id, s[0].kind, 0, 999)], id="past-the-end"),
        pytest.param(lambda s: [], id="dropped"),
    ],
)
def test_spans_that_do_not_match_the_text_are_refused(
    change: Callable[[Sequence[Span]], list[Span]],
) -> None:
    block = render_block("Soul.", [BlockEntry("m-1", "memory", "one\n\n## Memory\n\ntwo")])
    with pytest.raises(ValueError, match=r"span|match"):
        split_block(block.text, block.soul, change(block.spans))


def test_a_text_without_spans_is_one_piece() -> None:
    assert split_block("## Memory\n\nTabs.", 0, []) == ("## Memory\n\nTabs.", [])


def _naive(soul: str, entries: list[BlockEntry], budget: int) -> tuple[str, int]:
    def fits(text: str) -> bool:
        return len(text.encode()) <= budget

    if not fits(soul):
        cut = soul
        while not fits(cut):
            cut = cut[:-1]
        return cut, 0
    kept = 0
    while kept < len(entries) and fits(render_block(soul, entries[: kept + 1]).text):
        kept += 1
    return render_block(soul, entries[:kept]).text, kept


@given(st.text(max_size=30), _ENTRIES, st.integers(min_value=0, max_value=120))
def test_fitting_agrees_with_the_naive_oracle(
    soul: str, entries: list[BlockEntry], budget: int
) -> None:
    fitted = fit_block(soul, entries, lambda text: len(text.encode()) <= budget)
    text, kept = _naive(soul, entries, budget)
    assert fitted.block.text == text, (soul, entries, budget)
    assert fitted.left_out == tuple(entries[kept:])
    assert len(fitted.block.text.encode()) <= budget


def test_fitting_a_large_block_asks_few_times() -> None:
    entries = [BlockEntry(f"m-{n}", "memory", "x" * 40) for n in range(100_000)]
    asked: list[int] = []

    def fits(text: str) -> bool:
        asked.append(len(text))
        return len(text.encode()) <= BLOCK_BYTES

    fitted = fit_block("", entries, fits)
    assert 0 < len(entries) - len(fitted.left_out) < 400
    # the whole block once, then only texts not much larger than what fits
    assert len(asked) < 40
    assert max(asked[1:]) <= 3 * BLOCK_BYTES


@pytest.mark.parametrize(("kind", "heading"), [("memory", 11), ("user", 20)])
def test_an_entry_alone_costs_its_heading_and_blank_line(kind: str, heading: int) -> None:
    assert alone_bytes(kind, "é") == heading + 2
