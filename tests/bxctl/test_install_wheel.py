"""`bxctl install --dev` from a non-editable install: the templates are package data.

The package is installed with `pip install --no-deps` from a copy of the checkout
into a fresh virtual environment, and the copy is deleted before bxctl runs, so
nothing can come from a checkout. The dependencies (and pip and setuptools, for
the build) come from this test environment's site-packages directories, named as
plain path entries in a `.pth` file. (`--system-site-packages` would not do: a
venv made from this one gets the base interpreter's site-packages, not these.)
Plain entries are only added to `sys.path`: the `.pth` files inside them are not
run, so the editable finder that maps `boxmaker` to the checkout here is not
installed there, and the new environment's own site-packages comes first. The
test checks that the `boxmaker` imported, and the data read, are the new
environment's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
NOT_COPIED = shutil.ignore_patterns(
    ".git",
    ".tox",
    ".venv",
    ".boxmaker",
    ".*_cache",
    ".hypothesis",
    "__pycache__",
    "*.egg-info",
    "build",
    "dist",
)
PROBE = (
    "import boxmaker\n"
    "from boxmaker.bxctl.install_plan import data_dir\n"
    "print(boxmaker.__file__)\n"
    "print(data_dir())\n"
)


def _env() -> dict[str, str]:
    """This environment without what would point the child elsewhere."""
    prefixes = ("BOXMAKER_", "PIP_", "PYTHON", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def _run(cwd: Path, *argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(),
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_an_installed_package_installs_without_the_checkout(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(CHECKOUT, source, symlinks=True, ignore=NOT_COPIED)
    venv = tmp_path / "venv"
    made = _run(tmp_path, sys.executable, "-m", "venv", "--without-pip", venv)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    purelib = _run(tmp_path, python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))")
    assert purelib.returncode == 0, purelib.stderr
    deps = "".join(f"{p}\n" for p in sys.path if Path(p).name in ("site-packages", "dist-packages"))
    (Path(purelib.stdout.strip()) / "boxmaker-test-deps.pth").write_text(deps)
    pip = ("-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index")
    installed = _run(
        tmp_path, python, *pip, "--no-cache-dir", "--disable-pip-version-check", source
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    shutil.rmtree(source)

    probe = _run(tmp_path, python, "-c", PROBE)
    assert probe.returncode == 0, probe.stderr
    module, data = probe.stdout.splitlines()
    assert Path(module).is_relative_to(venv), module
    assert Path(data).is_relative_to(venv), data

    prefix, workspace = tmp_path / "bx", tmp_path / "workspace"
    bxctl = venv / "bin" / "bxctl"
    install = ("install", "--dev", "--no-probe")
    done = _run(tmp_path, bxctl, *install, "--prefix", prefix, "--workspace", workspace)
    assert done.returncode == 0, done.stderr
    etc = prefix / "etc"
    grants = sorted(p.name for p in (etc / "grants").glob("*.toml"))
    assert grants == sorted(p.name for p in (CHECKOUT / "grants.example").glob("*.toml"))
    assert str(workspace) in (etc / "grants" / "notes-read.toml").read_text()
    programs = sorted(p.name for p in (etc / "supervisor.conf.d").iterdir())
    assert programs == [
        "brokerd.conf",
        "gatewayd.conf",
        "group.conf",
        "loopd.conf",
        "memoryd.conf",
    ]
    program = (etc / "supervisor.conf.d" / "brokerd.conf").read_text()
    assert f"command={venv}/bin/brokerd serve --config {etc}/brokerd.toml" in program
    assert f"file={prefix}/run/supervisor.sock" in (etc / "supervisord.conf").read_text()
