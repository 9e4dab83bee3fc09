"""The audit log's file names: `YYYY-MM-DD.jsonl`, by UTC date. Pure; no I/O."""

from __future__ import annotations

import re

_FILE_NAME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}\.jsonl")


def audit_file_name(time: str) -> str:
    """The file a record with this `time` starts in: `YYYY-MM-DD.jsonl`, its UTC date."""
    return f"{time[:10]}.jsonl"


def is_audit_file_name(name: str) -> bool:
    """Whether `name` is one of the log's files (others in the directory are not read)."""
    return _FILE_NAME.fullmatch(name) is not None
