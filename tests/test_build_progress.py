"""scripts/build-progress: while a build runs, one line every INTERVAL seconds with
its progress read from its log (issue 42: never 30 s without a sign of life).

The build is a shell loop that writes CMake's progress lines (Makefiles' `[ 45%]`,
Ninja's `[12/98]`) to a log as a compiler would; the watcher runs with a 1-second
interval, as the real build's with its default 20."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "build-progress"


def watch(tmp_path: Path, lines: list[str]) -> list[str]:
    """The watcher's lines over a build that writes `lines` to its log, one a second,
    after 1.5 s of configuring."""
    log = tmp_path / "build.log"
    log.write_text("-- Configuring\n")
    body = "sleep 1.5; " + "; ".join(f"echo '{line}' >> {log}; sleep 1" for line in lines)
    build = subprocess.Popen(["bash", "-c", body])
    watcher = subprocess.run(
        [str(SCRIPT), str(build.pid), str(log), "the test build", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    build.wait()
    assert watcher.returncode == 0, watcher.stderr
    return watcher.stderr.splitlines()


def test_makefile_percentages_are_said_with_the_time_so_far(tmp_path: Path) -> None:
    said = watch(
        tmp_path, ["[  3%] Building C object a.o", "[ 47%] Building CXX b.o", "[100%] Linking"]
    )
    assert said[0].startswith("build-progress: the test build: configuring (0 min 1 s so far")
    percents = [int(m.group(1)) for line in said if (m := re.search(r": (\d+)% \(", line))]
    assert percents == sorted(percents)
    assert {3, 47} <= set(percents)
    assert len(said) >= 4  # one a second while it ran
    assert all(
        re.search(r"\(\d+ min \d+ s so far\)$|steps, \d+ min \d+ s so far\)$", x) for x in said
    )


def test_ninja_steps_are_said_as_a_percentage(tmp_path: Path) -> None:
    said = watch(tmp_path, ["[12/98] Building CXX object x.o", "[49/98] Building CXX object y.o"])
    assert any(": 12% (12 of 98 steps, " in line for line in said)
    assert any(": 50% (49 of 98 steps, " in line for line in said)


@pytest.mark.parametrize("args", [[], ["1"], ["1", "log"]])
def test_missing_arguments_are_one_line_and_exit_2(args: list[str]) -> None:
    done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: build-progress")
