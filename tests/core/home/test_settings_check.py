"""Unknown `BOXMAKER_*` variables are found; the build's own variable is not one."""

from __future__ import annotations

import pytest

from boxmaker.core.home.settings_check import unknown_variables


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"BOXMAKER_HOME": "/h", "PATH": "/bin"}, []),
        ({"BOXMAKER_HOEM": "/h", "BOXMAKER_A": ""}, ["BOXMAKER_A", "BOXMAKER_HOEM"]),
        ({"BOXMAKER_LLAMA_CMAKE_ARGS": "-DGGML_CUDA=on"}, []),
    ],
    ids=["known", "unknown-sorted", "build-variable"],
)
def test_unknown_variables(environ: dict[str, str], expected: list[str]) -> None:
    assert unknown_variables(environ, ("BOXMAKER_HOME",)) == expected
