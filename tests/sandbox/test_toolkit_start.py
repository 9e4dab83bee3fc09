"""What the toolkit's start costs is kept small, and the shortcuts change nothing.

Each call starts the toolkit afresh (docs/performance.md, "Sandbox start"): it
reads its request and writes its answer with json's C half instead of `json`,
imports a tool's modules only when that tool runs, and is handed its code object
compiled by brokerd (`TOOLKIT_PROGRAM`, with `TOOLKIT_CODE` first on standard
input), compiling its own source only under another Python. No timing here
(bench/sandbox.py measures): these check that the answers are what `json` would
read and write, and that a read_file loads none of the costly modules.

I/O: runs /usr/bin/python3 on a temporary file, as the toolkit, without a sandbox.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from boxmaker.sandbox import toolkit
from boxmaker.sandbox.calls import (
    SANDBOX_PYTHON,
    TOOLKIT_CODE,
    TOOLKIT_PROGRAM,
    TOOLKIT_SOURCE,
    toolkit_program,
)

ANSWERS = {
    "result": {"ok": True, "content": "hello\n", "truncated": False},
    "truncated": {"ok": True, "content": "", "truncated": True},
    "escapes": {"ok": True, "content": 'q"b\\\n\t\x00\x1f\x7f', "truncated": False},
    "non-ascii": {"ok": True, "content": "é\u2028\U0001f600\ud800", "truncated": False},
    "failure": {"ok": False, "failure": "NOT_FOUND"},
}


@pytest.mark.parametrize("answer", ANSWERS.values(), ids=list(ANSWERS))
def test_the_answer_is_what_json_dumps_writes(answer: dict[str, Any]) -> None:
    assert toolkit.answer_text(answer) == json.dumps(answer)


REQUESTS = {
    "object": '{"tool": "read_file", "arguments": {"path": "/a"}, "output_bytes": 10}\n',
    "values": '[1, -2.5e3, true, false, null, "x\\u00e9\\ud83d\\ude00", {}, []]',
    "constants": " [NaN, Infinity, -Infinity] \r\n",
    "non-ascii": '{"path": "/home/é"}',
}


@pytest.mark.parametrize("line", REQUESTS.values(), ids=list(REQUESTS))
def test_the_request_is_read_as_json_loads_reads_it(line: str) -> None:
    assert repr(toolkit.parse_request(line.encode())) == repr(json.loads(line))


@pytest.mark.parametrize(
    "line", ["", "{", '{"a": 1} x', '{"a": 1}{"b": 2}', "[1,]", "\xff"], ids=repr
)
def test_a_request_json_loads_refuses_is_refused(line: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 (json's own errors are ValueErrors too)
        json.loads(line)
    with pytest.raises(ValueError):  # noqa: PT011
        toolkit.parse_request(line.encode("utf-8", "surrogateescape"))


def _read_file_request(path: Path) -> bytes:
    request = {
        "tool": "read_file",
        "arguments": {"path": str(path)},
        "output_bytes": 100,
        "proxy": None,
        "cafile": None,
        "expect": [],
        "landlock": None,
    }
    return json.dumps(request).encode() + b"\n"


def _run(program: str, stdin: bytes) -> tuple[dict[str, Any], str]:
    """The toolkit's answer and its standard error, its standard input held open as
    brokerd holds it (at its end, the toolkit would exit at once)."""
    with subprocess.Popen(
        [SANDBOX_PYTHON, "-I", "-S", "-c", program],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(stdin)
        proc.stdin.flush()
        out = proc.stdout.read()
        assert proc.wait(timeout=30) == 0
        proc.stdin.close()
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
    answer: dict[str, Any] = json.loads(out)
    return answer, err


@pytest.mark.parametrize("python", ["brokerd's", "another"])
def test_the_program_runs_the_code_it_is_given_or_compiles_its_source(
    tmp_path: Path, python: str
) -> None:
    target = tmp_path / "a.txt"
    target.write_text("hello\n")
    if python == "brokerd's":
        program = TOOLKIT_PROGRAM
        code = TOOLKIT_CODE
    else:  # a tag no Python has: the code sent must be skipped, and the source run
        program = toolkit_program(TOOLKIT_SOURCE, 7, "no-such-python")
        code = b"garbage"
    answer, _ = _run(program, code + _read_file_request(target))
    assert answer == {"ok": True, "content": "hello\n", "truncated": False}


COSTLY = {"json", "re", "enum", "typing", "subprocess", "threading", "socket", "ssl"}


def test_a_read_file_loads_none_of_the_costly_modules(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    target.write_text("hello\n")
    probe = TOOLKIT_SOURCE.replace('if __name__ == "__main__":', "if False:")
    probe += "\nmain()\nsys.stderr.write(' '.join(sorted(sys.modules)))\n"
    answer, err = _run(probe, _read_file_request(target))
    assert answer["content"] == "hello\n"
    loaded = set(err.split())
    assert "_json" in loaded  # the probe did read its request
    assert loaded & COSTLY == set()
    assert not any(name.startswith(("http", "urllib", "email")) for name in loaded)
