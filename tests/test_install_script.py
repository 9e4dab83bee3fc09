"""scripts/install --dry-run: the six steps it would take, and its refusals; nothing changed.

The script is run from a fresh `git clone` of this checkout (the committed state,
as an owner would get it), as root, with --prefix in a temporary directory and
$XDG_CACHE_HOME there too (so no wheel is found unless a test puts one there). A
dry run runs only `scripts/build-llama-cpp --print-dir/--print-args`, `git` and,
where the prefix holds them, the prefix's python and `bxctl install --dry-run`,
which here are small fakes. I/O: clones into tmp_path, runs the script as a
subprocess, writes fakes under tmp_path.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.skips import skip_or_fail

REPO = Path(__file__).resolve().parent.parent
OWNER = "nobody"  # a user every Debian machine has
STEPS = [
    "the host packages and the sandbox host",
    "llama-cpp-python, into ",
    "the environment ",
    "that llama-cpp-python build in ",
    "boxmaker at ",
    f"bxctl install --owner {OWNER}",
]
_STEP = re.compile(r"^install: (\d)\. (in place: |would run: )(.*)$")


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        skip_or_fail("scripts/install runs as root: the install-script tests did NOT run")
    if shutil.which("git") is None:
        skip_or_fail("git is missing: the install-script tests did NOT run")
    where = tmp_path_factory.mktemp("install") / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(where)], check=True, timeout=120)
    return where


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BOXMAKER_", "SKBUILD_")) and k not in ("CMAKE_ARGS", "SUDO_USER")
    }
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return {**env, **extra}


def _install(clone: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(clone / "scripts" / "install"), *args],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
        check=False,
    )


def _steps(stdout: str) -> list[tuple[int, str, str]]:
    """(number, "in place" or "would run", the rest) of each step line."""
    found = []
    for line in stdout.splitlines():
        match = _STEP.match(line)
        if match:
            found.append((int(match[1]), match[2].strip(" :"), match[3]))
    return found


def _wheels(clone: Path, tmp_path: Path) -> Path:
    done = subprocess.run(
        [str(clone / "scripts" / "build-llama-cpp"), "--print-dir"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
        check=True,
    )
    return Path(done.stdout.strip())


def _head(clone: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(clone), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()


def test_a_dry_run_on_a_fresh_clone_lists_six_steps_in_order_and_changes_nothing(
    clone: Path, tmp_path: Path
) -> None:
    prefix = tmp_path / "opt"
    done = _install(clone, tmp_path, "--dry-run", "--owner", OWNER, "--prefix", str(prefix))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    steps = _steps(done.stdout)
    assert [number for number, _, _ in steps] == [1, 2, 3, 4, 5, 6], done.stdout
    assert len(lines) == len(steps) + 1, done.stdout  # a line a step, and the last
    for (_, state, rest), words in zip(steps, STEPS, strict=True):
        assert words in rest, (words, rest)
        assert state == "would run", rest  # a fresh prefix, an empty wheel cache
    assert lines[-1] == "install: dry run, nothing changed"
    wheels = _wheels(clone, tmp_path)
    assert f"into {wheels}: scripts/build-llama-cpp" in steps[1][2]
    assert f"the environment {prefix}: /usr/bin/python3 -m venv {prefix}" in steps[2][2]
    assert f"scripts/build-llama-cpp --install {prefix}/bin/python" in steps[3][2]
    assert f"boxmaker at {_head(clone)} from {clone}, in {prefix}" in steps[4][2]
    assert steps[5][2].endswith(f": {prefix}/bin/bxctl install --owner {OWNER}")
    assert not prefix.exists()
    assert not wheels.exists()


def test_a_built_wheel_and_an_installed_boxmaker_are_in_place_and_bxctl_says_the_rest(
    clone: Path, tmp_path: Path
) -> None:
    """A second run: what is there is `in place`; bxctl's own dry run is shown indented."""
    wheels = _wheels(clone, tmp_path)
    wheels.mkdir(parents=True)
    (wheels / "llama_cpp_python-0.0.0-py3-none-linux_x86_64.whl").write_bytes(b"")
    prefix = tmp_path / "opt"
    (prefix / "bin").mkdir(parents=True)
    fakes = {
        "python": "#!/bin/sh\nexit 1\n",  # asked whether it holds the wheel: no
        "bxctl": '#!/bin/sh\necho "bxctl was asked: $*"\n',
    }
    for name, text in fakes.items():
        (prefix / "bin" / name).write_text(text)
        (prefix / "bin" / name).chmod(0o755)
    (prefix / ".boxmaker-commit").write_text(_head(clone) + "\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    done = _install(clone, tmp_path, "--dry-run", "--owner", OWNER, "--prefix", str(prefix))
    assert done.returncode == 0, done.stderr
    states = [(number, state) for number, state, _ in _steps(done.stdout)]
    assert states == [
        (1, "would run"),
        (2, "in place"),
        (3, "in place"),
        (4, "would run"),
        (5, "in place"),
    ], done.stdout
    lines = done.stdout.splitlines()
    assert lines[-3].startswith(f"install: 6. bxctl install --owner {OWNER}: ")
    assert lines[-3].endswith(", which would do:")
    assert lines[-2] == f"install:      bxctl was asked: install --owner {OWNER} --dry-run"
    assert lines[-1] == "install: dry run, nothing changed"
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_without_owner_or_sudo_user_it_asks_for_one_in_one_line(
    clone: Path, tmp_path: Path
) -> None:
    done = _install(clone, tmp_path, "--dry-run", "--prefix", str(tmp_path / "opt"))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "install: name the owner's user with --owner NAME (not root)"
    ]


def test_root_as_the_owner_is_refused(clone: Path, tmp_path: Path) -> None:
    done = _install(clone, tmp_path, "--dry-run", "--owner", "root")
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert "--owner NAME" in done.stderr


def test_an_owner_who_is_no_user_is_refused(clone: Path, tmp_path: Path) -> None:
    done = _install(clone, tmp_path, "--dry-run", "--owner", "no-such-user-xyz")
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["install: no such user: no-such-user-xyz"]


@pytest.mark.parametrize("prefix", ["opt/boxmaker", "./opt", "~/opt"])
def test_a_relative_prefix_is_refused(clone: Path, tmp_path: Path, prefix: str) -> None:
    done = _install(clone, tmp_path, "--dry-run", "--owner", OWNER, f"--prefix={prefix}")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["install: --prefix must be an absolute path"]
    assert not (clone / "opt").exists()


def test_an_unknown_argument_is_refused(clone: Path, tmp_path: Path) -> None:
    done = _install(clone, tmp_path, "--dry-run", "--owner", OWNER, "--yes")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["install: unknown argument --yes (see --help)"]


def test_help_is_the_scripts_header(clone: Path, tmp_path: Path) -> None:
    done = _install(clone, tmp_path, "--help")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Install boxmaker for real on this machine")
    assert lines[-1] == 'See docs/install.md, "Installing for real".'
    assert not any(line.startswith(("#", "set -")) for line in lines)
