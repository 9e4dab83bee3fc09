"""Data classes (`public < private < secret`) and how labels combine. No I/O.

`DataClass` is a `StrEnum`, so plain string comparison would order it
alphabetically ("private" < "public"). The comparison operators are overridden to
use the security order instead, and refuse to compare with anything else.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class DataClass(StrEnum):
    """How sensitive a piece of data is. Ordered: public < private < secret."""

    PUBLIC = "public"
    PRIVATE = "private"
    SECRET = "secret"  # noqa: S105 (a data class, not a password)

    @property
    def rank(self) -> int:
        return _RANK[self]

    def _other_rank(self, other: Any) -> int:
        if not isinstance(other, DataClass):
            raise TypeError(f"cannot order a DataClass against {type(other).__name__}")
        return _RANK[other]

    def __lt__(self, other: str) -> bool:
        return self.rank < self._other_rank(other)

    def __le__(self, other: str) -> bool:
        return self.rank <= self._other_rank(other)

    def __gt__(self, other: str) -> bool:
        return self.rank > self._other_rank(other)

    def __ge__(self, other: str) -> bool:
        return self.rank >= self._other_rank(other)


_RANK = {DataClass.PUBLIC: 0, DataClass.PRIVATE: 1, DataClass.SECRET: 2}


def highest(first: DataClass, *rest: DataClass) -> DataClass:
    """The most sensitive of the classes given."""
    return max((first, *rest), key=lambda c: c.rank)
