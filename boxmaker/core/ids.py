"""Identifiers that cross the wire and become file names (session, call). No I/O.

1 to 128 characters of `[A-Za-z0-9._:-]`, not starting with `.`: so an id can
never be `.`, `..`, a hidden file, or contain a `/`.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

_ID = re.compile(r"[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,127}")


def is_identifier(text: str) -> bool:
    return _ID.fullmatch(text) is not None


def check_identifier(text: str) -> str:
    if not is_identifier(text):
        raise ValueError(
            "an identifier is 1 to 128 characters of A-Z a-z 0-9 . _ : - and does not start with ."
        )
    return text


Identifier = Annotated[str, AfterValidator(check_identifier)]
SessionId = Identifier
CallId = Identifier
