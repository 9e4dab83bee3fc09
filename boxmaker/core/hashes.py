"""SHA-256 digests as 64 lowercase hex characters. No I/O."""

from __future__ import annotations

import hashlib
import re

_HEX64 = re.compile(r"[0-9a-f]{64}")

ZERO_HASH = "0" * 64


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_hash(text: str) -> str:
    if _HEX64.fullmatch(text) is None:
        raise ValueError("a hash is 64 lowercase hex characters")
    return text
