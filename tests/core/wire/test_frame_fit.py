"""fit_result and page_items: answers that always fit in frames, cut or paged, never broken."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker import ResultResponse
from boxmaker.core.wire.broker_admin import ApprovalList, PendingApproval
from boxmaker.core.wire.frame_fit import FRAME_BUDGET, envelope_size, fit_result, page_items
from boxmaker.core.wire.frames import MAX_FRAME

ID = "call-1"


def result(content: str, *, truncated: bool = False) -> ResultResponse:
    return ResultResponse(
        content=content, class_=DataClass.PRIVATE, untrusted=False, truncated=truncated
    )


def item(approval: int, arguments: str) -> PendingApproval:
    return PendingApproval(
        approval=approval,
        session="chat-1",
        call=f"c{approval}",
        tool="shell",
        arguments=arguments,
        grant="scratch-shell",
        taint=DataClass.PRIVATE,
        created="2026-11-30T12:00:00.000Z",
        expires="2026-11-30T12:15:00.000Z",
        digest="3f" * 32,
    )


def test_a_result_that_fits_is_returned_unchanged() -> None:
    response = result("a" * 1000)
    assert fit_result(response, ID) is response


@pytest.mark.parametrize("unit", ["\x1f", "😀", '"', "a"])
def test_the_shortcut_only_takes_results_that_fit(unit: str) -> None:
    # the longest content fit_result returns without encoding it, of the characters
    # that escape to the most bytes: its envelope must still be within the budget
    longest_id = "i" * 128  # the longest identifier
    budget = 4096
    chars = (budget - 512) // 6 - len(longest_id)
    response = result(unit * chars)
    assert fit_result(response, longest_id, budget) is response
    assert envelope_size(response, longest_id) <= budget


@pytest.mark.parametrize(
    "unit",
    [
        pytest.param("a", id="ascii"),
        pytest.param("\x01", id="control-six-bytes-escaped"),
        pytest.param('"', id="quote-two-bytes-escaped"),
        pytest.param("é", id="two-byte-utf8"),
        pytest.param("😀", id="four-byte-utf8"),
        pytest.param("a😀\x01é", id="mixed"),
    ],
)
def test_a_result_over_the_budget_is_cut_to_fit_and_marked_truncated(unit: str) -> None:
    content = unit * (2 * MAX_FRAME // len(unit.encode()))
    fitted = fit_result(result(content), ID)
    assert fitted.truncated
    assert content.startswith(fitted.content)
    size = envelope_size(fitted, ID)
    assert size <= FRAME_BUDGET
    # the longest that fits: one more character would not
    longer = fitted.model_copy(update={"content": content[: len(fitted.content) + 1]})
    assert envelope_size(longer, ID) > FRAME_BUDGET
    fitted.content.encode("utf-8")  # whole characters only


@given(st.text(min_size=1, max_size=400), st.integers(min_value=200, max_value=3000))
def test_any_cut_is_the_longest_prefix_within_any_budget(content: str, budget: int) -> None:
    fitted = fit_result(result(content), ID, budget)
    assert content.startswith(fitted.content)
    if fitted.content == content:
        assert not fitted.truncated
        assert envelope_size(fitted, ID) <= budget
        return
    assert fitted.truncated
    assert len(fitted.content) < len(content)
    if fitted.content:
        assert envelope_size(fitted, ID) <= budget
    if len(fitted.content) + 1 < len(content):  # a longer cut would not fit
        longer = fitted.model_copy(update={"content": content[: len(fitted.content) + 1]})
        assert envelope_size(longer, ID) > budget


def test_nothing_waiting_is_one_empty_page() -> None:
    assert page_items((), ID) == [()]


def test_a_list_that_fits_is_one_page() -> None:
    items = tuple(item(n, '{"command":"ls"}') for n in range(20))
    assert page_items(items, ID) == [items]


def test_large_items_are_paged_in_order_and_every_page_fits() -> None:
    arguments = '{"command":"' + '\\"' * 32_000 + '"}'  # 64 KB raw, 128 KB on the wire
    items = tuple(item(n, arguments) for n in range(20))
    pages = page_items(items, ID)
    assert len(pages) > 2
    assert tuple(i for page in pages for i in page) == items
    for page in pages:
        assert page
        assert envelope_size(ApprovalList(items=page), ID, final=False) <= FRAME_BUDGET


@given(st.lists(st.integers(min_value=1, max_value=400), max_size=30))
def test_pages_fit_a_small_budget_and_keep_every_item(lengths: list[int]) -> None:
    items = tuple(item(n, "x" * length) for n, length in enumerate(lengths))
    budget = 1200
    pages = page_items(items, ID, budget)
    assert tuple(i for page in pages for i in page) == items
    for page in pages:
        assert envelope_size(ApprovalList(items=page), ID, final=False) <= budget
    # greedy: no page could have taken the next page's first item
    for page, following in itertools.pairwise(pages):
        joined = ApprovalList(items=(*page, following[0]))
        assert envelope_size(joined, ID, final=False) > budget
