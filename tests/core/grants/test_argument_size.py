"""The arguments limit: where it falls, its detail, and the placeholder the log keeps."""

from __future__ import annotations

import pytest

from boxmaker.core.errors import ArgsError
from boxmaker.core.grants.args import parse_arguments
from boxmaker.core.grants.argument_size import MAX_ARGUMENT_BYTES, recorded_arguments, size_problem
from boxmaker.core.grants.tools import ToolName
from boxmaker.core.hashes import sha256_hex


@pytest.mark.parametrize(
    ("text", "over"),
    [
        pytest.param("a" * MAX_ARGUMENT_BYTES, False, id="ascii-at-the-limit"),
        pytest.param("a" * (MAX_ARGUMENT_BYTES + 1), True, id="ascii-one-over"),
        pytest.param("é" * (MAX_ARGUMENT_BYTES // 2), False, id="two-byte-at-the-limit"),
        pytest.param("é" * (MAX_ARGUMENT_BYTES // 2) + "a", True, id="two-byte-one-over"),
        pytest.param("😀" * (MAX_ARGUMENT_BYTES // 4 + 1), True, id="four-byte-over"),
        pytest.param("\ud800" * 30_000, True, id="lone-surrogates-counted-as-three-bytes"),
    ],
)
def test_the_limit_counts_utf8_bytes(text: str, over: bool) -> None:
    problem = size_problem(text)
    assert (problem is not None) is over
    if over:
        size = len(text.encode("utf-8", "surrogatepass"))
        assert problem == f"the arguments are {size} bytes, over the 65536-byte limit"
        assert recorded_arguments(text) == (
            f"[arguments not recorded: {size} bytes, over the 65536-byte limit;"
            f" sha256 {sha256_hex(text.encode('utf-8', 'surrogatepass'))}]"
        )
    else:
        assert recorded_arguments(text) == text


def test_parsing_refuses_large_arguments_before_reading_them() -> None:
    raw = '{"path":"/a","padding":"' + "x" * MAX_ARGUMENT_BYTES + '"}'
    with pytest.raises(ArgsError) as caught:
        parse_arguments(ToolName.READ_FILE, raw)
    assert str(caught.value).startswith(f"the arguments are {len(raw)} bytes")
