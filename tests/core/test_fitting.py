"""`core.fitting`: the one binary search and the one paging rule, against brute force."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from boxmaker.core.fitting import largest, pages, take


@given(st.integers(-3, 200), st.integers(0, 250))
def test_largest_is_the_last_n_that_fits(most: int, limit: int) -> None:
    asked: list[int] = []

    def fits(n: int) -> bool:
        asked.append(n)
        return n <= limit

    found = largest(most, fits)
    assert found == max([n for n in range(most + 1) if n <= limit], default=0)
    assert 0 not in asked
    assert all(1 <= n <= most for n in asked)


sizes = st.lists(st.integers(0, 40), max_size=30)


@given(sizes, st.integers(0, 60), st.integers(0, 2))
def test_pages_keep_order_fit_and_are_full(items: list[int], room: int, between: int) -> None:
    made = pages(items, lambda n: n, room, between)
    assert made
    assert [n for page in made for n in page] == items
    for at, page in enumerate(made):
        used = sum(page) + between * (len(page) - 1)
        assert used <= room or len(page) == 1  # only an item too big alone is over
        if at + 1 < len(made):  # full: the next page's first item did not fit
            assert used + between + made[at + 1][0] > room
    assert list(made[0]) == take(items, lambda n: n, room, between)


def test_take_looks_no_further_than_the_run() -> None:
    looked: list[int] = []

    def size(n: int) -> int:
        looked.append(n)
        return n

    assert take(iter([3, 3, 3, 3, 3]), size, 7) == [3, 3]
    assert looked == [3, 3, 3]  # the third did not fit; the rest were never sized
