"""boxmaker.bxctl.boot_unit: the boot service of a root install, and the install's use of it.

The unit's text is checked line by line and by `systemd-analyze verify` (which
reads a unit file and the programs it names, and starts nothing); the steps are
built, not applied. Last, `bxctl install --dry-run` is run as root into a
temporary prefix, from a virtual environment made for it in a temporary
directory open to others (the suite's own is not, and a root install refuses an
environment the role users cannot run); a dry run only reads the machine.
I/O: writes units, scripts and that environment under temporary directories,
runs systemd-analyze and bxctl as subprocesses.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.skips import skip_or_fail

from boxmaker.brokerd.descriptors import MAX_DESCRIPTORS
from boxmaker.bxctl.boot_unit import (
    DESCRIPTORS,
    PREPARE,
    UNIT_NAME,
    boot_steps,
    not_booted_hint,
    start_steps,
    unit_path,
    unit_text,
)
from boxmaker.bxctl.install_plan import Layout, plan, prepare_script
from boxmaker.bxctl.install_steps import Command, Directory, File

REPO = Path(__file__).resolve().parent.parent.parent
PREPARE_SCRIPT = prepare_script()
SUPERVISORD = Path(sys.executable).parent / "supervisord"
ETC = Path("/etc/boxmaker")
BROKER = "bx-broker"


def _unit(bin_dir: Path = Path("/opt/boxmaker/bin"), etc: Path = ETC) -> str:
    return unit_text(bin_dir=bin_dir, etc=etc, broker_user=BROKER)


def _settings(text: str) -> list[tuple[str, str]]:
    """The unit's `Key=value` lines, in order, without its comments."""
    found = []
    for line in text.splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.append((key, value))
    return found


def _bin_dir(where: Path) -> Path:
    """A bin directory holding the prepare script's copy and a link to supervisord."""
    where.mkdir()
    shutil.copyfile(PREPARE_SCRIPT, where / PREPARE)
    (where / PREPARE).chmod(0o755)
    (where / "supervisord").symlink_to(SUPERVISORD)
    return where


def _verify(unit: Path) -> subprocess.CompletedProcess[str]:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        skip_or_fail("systemd-analyze is missing: the boot unit was NOT verified; install systemd")
    return subprocess.run(
        [analyze, "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _about(done: subprocess.CompletedProcess[str], name: str) -> list[str]:
    """systemd-analyze's lines about the unit `name` (not about the machine's own units)."""
    return [line for line in (done.stdout + done.stderr).splitlines() if name in line]


def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    assert SUPERVISORD.is_file(), SUPERVISORD
    bin_dir = _bin_dir(tmp_path / "bin")
    unit = tmp_path / UNIT_NAME
    unit.write_text(_unit(bin_dir, tmp_path / "etc" / "boxmaker"))
    done = _verify(unit)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _about(done, UNIT_NAME) == []


def test_systemd_analyze_verify_reports_a_unit_whose_programs_are_missing(tmp_path: Path) -> None:
    """The check above can fail: the same unit naming a bin directory that is not there."""
    unit = tmp_path / UNIT_NAME
    unit.write_text(_unit(tmp_path / "no-such-bin", tmp_path / "etc" / "boxmaker"))
    done = _verify(unit)
    about = _about(done, UNIT_NAME)
    assert done.returncode != 0 or about, done.stdout + done.stderr
    assert any(str(tmp_path / "no-such-bin") in line for line in about), about


def test_the_unit_runs_supervisord_in_the_foreground_with_boxmakers_configuration() -> None:
    settings = dict(_settings(_unit()))
    assert settings["ExecStart"] == (
        "/opt/boxmaker/bin/supervisord --nodaemon --configuration /etc/boxmaker/supervisord.conf"
    )
    assert settings["Type"] == "simple"
    assert settings["Restart"] == "on-failure"


def test_the_unit_prepares_the_sandboxs_cgroups_before_supervisord() -> None:
    settings = _settings(_unit())
    keys = [key for key, _ in settings]
    assert keys.count("ExecStartPre") == 1
    assert keys.index("ExecStartPre") < keys.index("ExecStart")
    assert dict(settings)["ExecStartPre"] == f"/opt/boxmaker/bin/{PREPARE} --boot --user {BROKER}"


def test_the_unit_names_the_broker_user_it_is_given() -> None:
    text = unit_text(bin_dir=Path("/opt/bx/bin"), etc=ETC, broker_user="someone-else")
    assert dict(_settings(text))["ExecStartPre"].endswith("--boot --user someone-else")


def test_the_units_descriptor_limit_is_brokerds() -> None:
    assert DESCRIPTORS == MAX_DESCRIPTORS == 65_536
    assert dict(_settings(_unit()))["LimitNOFILE"] == str(MAX_DESCRIPTORS)


def test_the_unit_stops_supervisord_first_and_starts_at_boot() -> None:
    text = _unit()
    settings = dict(_settings(text))
    assert settings["KillMode"] == "mixed"
    assert settings["WantedBy"] == "multi-user.target"
    sections = [line for line in text.splitlines() if line.startswith("[")]
    assert sections == ["[Unit]", "[Service]", "[Install]"]


def test_the_unit_documents_encrypted_credentials_in_its_comments() -> None:
    comments = [line for line in _unit().splitlines() if line.startswith("#")]
    assert any("LoadCredentialEncrypted=" in line for line in comments)
    assert "LoadCredentialEncrypted" not in dict(_settings(_unit()))  # only documented


@pytest.mark.parametrize(
    ("etc", "expected"),
    [
        (Path("/etc/boxmaker"), Path("/etc/systemd/system/boxmaker.service")),
        (Path("/srv/bx/etc/boxmaker"), Path("/srv/bx/etc/systemd/system/boxmaker.service")),
    ],
    ids=["root", "prefix"],
)
def test_unit_path_is_systemds_directory_under_the_prefix(etc: Path, expected: Path) -> None:
    assert unit_path(etc) == expected


def test_start_steps_reload_then_enable_and_start_in_the_machines_own_etc() -> None:
    steps = start_steps(ETC, running=True)
    assert [step.argv for step in steps] == [
        ("systemctl", "daemon-reload"),
        ("systemctl", "enable", "--now", UNIT_NAME),
    ]
    assert all(isinstance(step, Command) for step in steps)


@pytest.mark.parametrize(
    ("etc", "running"),
    [(ETC, False), (Path("/srv/bx/etc/boxmaker"), True), (Path("/srv/bx/etc/boxmaker"), False)],
    ids=["not-running", "prefix-running", "prefix-not-running"],
)
def test_start_steps_are_none_without_systemd_or_under_a_prefix(etc: Path, running: bool) -> None:
    assert start_steps(etc, running) == []


def test_boot_steps_install_the_script_beside_bxctl_and_the_unit(tmp_path: Path) -> None:
    bin_dir, etc = tmp_path / "bin", tmp_path / "etc" / "boxmaker"
    steps = boot_steps(bin_dir=bin_dir, etc=etc, broker_user=BROKER, prepare_script="#!/bin/sh\n")
    directory, script, unit = steps
    assert isinstance(directory, Directory)
    assert (directory.path, directory.mode) == (tmp_path / "etc" / "systemd" / "system", 0o755)
    assert isinstance(script, File)
    assert (script.path, script.mode, script.content) == (bin_dir / PREPARE, 0o755, "#!/bin/sh\n")
    assert (script.owner, script.group, script.keep) == ("root", "root", False)
    assert isinstance(unit, File)
    assert (unit.path, unit.mode, unit.keep) == (unit_path(etc), 0o644, False)
    assert unit.content == unit_text(bin_dir=bin_dir, etc=etc, broker_user=BROKER)


def test_a_root_plan_ends_with_the_sandbox_host_and_the_boot_files(tmp_path: Path) -> None:
    """The root install's plan (built, not applied): the packaged script, run and copied."""
    etc, bin_dir = tmp_path / "etc" / "boxmaker", tmp_path / "bin"
    layout = Layout(
        root=True,
        etc=etc,
        home=tmp_path / "var" / "lib" / "boxmaker",
        log=tmp_path / "var" / "log" / "boxmaker",
        run=tmp_path / "run" / "boxmaker",
        bin=bin_dir,
        owner=pwd.getpwuid(os.getuid()).pw_name,
    )
    steps = plan(layout)
    prepare, directory, script, unit = steps[-4:]
    assert isinstance(prepare, Command)
    assert prepare.argv == ("bash", str(PREPARE_SCRIPT), "--user", BROKER)
    assert isinstance(directory, Directory)
    assert directory.path == unit_path(etc).parent
    assert isinstance(script, File)
    assert script.path == bin_dir / PREPARE
    assert script.content == PREPARE_SCRIPT.read_text()
    assert isinstance(unit, File)
    assert unit.path == unit_path(etc)
    assert unit.content == unit_text(bin_dir=bin_dir, etc=etc, broker_user=BROKER)


def test_a_dev_plan_has_no_boot_files(tmp_path: Path) -> None:
    layout = Layout(
        root=False,
        etc=tmp_path / "etc",
        home=tmp_path / "home",
        log=tmp_path / "log",
        run=tmp_path / "run",
        bin=tmp_path / "bin",
        owner=pwd.getpwuid(os.getuid()).pw_name,
    )
    paths = [step.path for step in plan(layout) if isinstance(step, File)]
    assert not any(path.name in (UNIT_NAME, PREPARE) for path in paths), paths


@pytest.fixture
def open_environment() -> Iterator[Path]:
    """A virtual environment of this interpreter that the role users could run.

    `bxctl install` as root refuses an environment whose python the role users
    cannot reach (the suite's own may sit under a 0700 directory). This one has
    copies of the interpreter in a 0755 temporary directory, and finds boxmaker
    and its dependencies through PYTHONPATH (the checkout, the suite's packages).
    """
    where = Path(tempfile.mkdtemp(prefix="boxmaker-boot-unit-"))
    try:
        where.chmod(0o755)
        for part in where.parents:
            if not part.stat().st_mode & stat.S_IXOTH:
                skip_or_fail(f"{part} is not open to others: the root dry run did NOT run")
        subprocess.run(
            [sys.executable, "-m", "venv", "--copies", "--without-pip", str(where / "env")],
            check=True,
            capture_output=True,
            timeout=120,
        )
        yield where / "env" / "bin"
    finally:
        shutil.rmtree(where)


def test_a_root_dry_run_lists_the_boot_files_and_says_how_to_start_the_tree(
    open_environment: Path, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        skip_or_fail("a root install needs root: the root dry run of bxctl install did NOT run")
    prefix = tmp_path / "root"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOXMAKER_")}
    env.pop("SUDO_USER", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]])
    done = subprocess.run(
        [
            str(open_environment / "python"),
            "-m",
            "boxmaker.bxctl.main",
            "install",
            "--dry-run",
            "--owner",
            "nobody",
            "--prefix",
            str(prefix),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    etc = prefix / "etc" / "boxmaker"
    unit = unit_path(etc)
    assert f"would do: file {open_environment / PREPARE} 0755 root:root" in lines
    assert f"would do: file {unit} 0644 :" in lines
    assert not any("systemctl" in line for line in lines)  # a prefix: never started
    assert lines[-1] == "install (root install): dry run, nothing changed"
    assert lines[-2] == not_booted_hint(open_environment, etc, BROKER, dry_run=True)
    assert lines[-2].startswith(f"the boot service {unit} would be written but not started")
    assert f"{open_environment / PREPARE} --boot --user {BROKER}" in lines[-2]
    assert not prefix.exists()
