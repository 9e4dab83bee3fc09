"""Landlock, the toolkit's second wall: outside the paths its request names, nothing.

The toolkit runs here as it runs in the sandbox (`/usr/bin/python3 -I -S -c`), but
on the host's whole file system, so Landlock is the only wall: a file that exists
and is readable, but not named, cannot be read, written, or reached by a shell.
Kernels without Landlock are skipped, loudly: the toolkit then runs without it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.skips import skip_or_fail

from boxmaker.sandbox.calls import SANDBOX_PYTHON, TOOLKIT_SOURCE


def _toolkit(request: dict[str, Any]) -> dict[str, Any]:
    """The toolkit's answer, its standard input held open as brokerd holds it."""
    with subprocess.Popen(
        [SANDBOX_PYTHON, "-I", "-S", "-c", TOOLKIT_SOURCE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        out = proc.stdout.read()
        assert proc.wait(timeout=30) == 0
        proc.stdin.close()
    answer: dict[str, Any] = json.loads(out)
    return answer


def _abi() -> int:
    probe = TOOLKIT_SOURCE.replace('if __name__ == "__main__":', "if False:")
    probe += "\nprint(restrict(['/usr'], []))"
    done = subprocess.run(
        [SANDBOX_PYTHON, "-I", "-S", "-c", probe], capture_output=True, timeout=30, check=True
    )
    return int(done.stdout)


ABI = _abi()
if ABI == 0:
    skip_or_fail(
        "this kernel has no Landlock (ABI 0): the Landlock tests did NOT run",
        allow_module_level=True,
    )


def _request(
    tool: str, arguments: dict[str, Any], read: list[str], write: list[str]
) -> dict[str, Any]:
    return {
        "tool": tool,
        "arguments": arguments,
        "output_bytes": 1000,
        "proxy": None,
        "cafile": None,
        "landlock": {"read": ["/usr", *read], "write": write},
    }


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    granted, scratch, outside = tmp_path / "granted", tmp_path / "scratch", tmp_path / "outside"
    for directory in (granted, scratch, outside):
        directory.mkdir()
    (granted / "a.txt").write_text("granted text")
    (outside / "secret.txt").write_text("not yours")
    return granted, scratch, outside


def test_a_named_path_reads(dirs: tuple[Path, Path, Path]) -> None:
    granted, _, _ = dirs
    answer = _toolkit(_request("read_file", {"path": str(granted / "a.txt")}, [str(granted)], []))
    assert answer == {"ok": True, "content": "granted text", "truncated": False}


def test_a_path_not_named_reads_nothing(dirs: tuple[Path, Path, Path]) -> None:
    granted, _, outside = dirs
    request = _request("read_file", {"path": str(outside / "secret.txt")}, [str(granted)], [])
    assert _toolkit(request) == {"ok": False, "failure": "NOT_FOUND"}


def test_a_read_only_path_cannot_be_written(dirs: tuple[Path, Path, Path]) -> None:
    granted, _, _ = dirs
    arguments = {"path": str(granted / "a.txt"), "content": "changed"}
    answer = _toolkit(_request("write_file", arguments, [str(granted)], []))
    assert answer == {"ok": False, "failure": "WRITE_FAILED"}
    assert (granted / "a.txt").read_text() == "granted text"


def test_a_shell_is_confined_too(dirs: tuple[Path, Path, Path]) -> None:
    _, scratch, outside = dirs
    command = f"echo made > {scratch}/new.txt; cat {outside}/secret.txt; echo done"
    answer = _toolkit(
        _request(
            "shell", {"command": command, "cwd": str(scratch)}, ["/proc"], [str(scratch), "/dev"]
        )
    )
    assert answer["ok"] is True
    assert "not yours" not in answer["content"]
    assert "Permission denied" in answer["content"]
    assert (scratch / "new.txt").read_text() == "made\n"
