"""`bxctl install --dev`: the layout, its modes, and that a second run changes nothing."""

from __future__ import annotations

import importlib.util
import os
import pwd
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from boxmaker.bxctl.install_plan import PACKAGE_DIR, Layout, plan
from boxmaker.bxctl.install_steps import Bytecode, Directory, File, Group, User
from boxmaker.testing.llama_stand_in import ANSWERING, CRASHING
from boxmaker.testing.llama_stand_in import install as install_stand_in

BXCTL = str(Path(sys.executable).parent / "bxctl")


def _install(
    prefix: Path, *extra: str, llama: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """bxctl install --dev; without `llama` (a stand-in llama_cpp), the model is not probed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOXMAKER_")}
    if "--workspace" not in extra:
        extra = ("--workspace", str(prefix.parent / "workspace"), *extra)
    if llama is None:
        extra = ("--no-probe", *extra)
    else:
        env["PYTHONPATH"] = str(llama)
    return subprocess.run(
        [BXCTL, "install", "--dev", "--prefix", str(prefix), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def _own_model(prefix: Path) -> None:
    """Point the installed loopd.toml at a model file of its own (the stand-in ignores it)."""
    model = prefix / "model.gguf"
    model.write_bytes(b"GGUF not really")
    config = prefix / "etc" / "loopd.toml"
    config.write_text(config.read_text().replace('path = ""', f'path = "{model}"'))


def test_install_stops_with_loopds_line_when_the_model_crashes(tmp_path: Path) -> None:
    prefix = tmp_path / "bx"
    assert _install(prefix).returncode == 0  # lays out the tree, no probe
    _own_model(prefix)
    done = _install(prefix, llama=install_stand_in(tmp_path / "crashing", CRASHING))
    assert done.returncode == 1, done.stdout
    assert done.stderr.startswith(
        "bxctl: the model does not run here: the model crashed with SIGILL"
    )
    assert done.stderr.rstrip().endswith("see runbook.md#loopd-model-crashed")
    assert len(done.stderr.splitlines()) == 1


def test_install_reports_a_model_that_answers(tmp_path: Path) -> None:
    prefix = tmp_path / "bx"
    assert _install(prefix).returncode == 0
    _own_model(prefix)
    done = _install(prefix, llama=install_stand_in(tmp_path / "answering", ANSWERING))
    assert done.returncode == 0, done.stderr
    assert "loopd: the model answered: 4 tokens in " in done.stdout


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_dev_install_lays_out_the_tree(tmp_path: Path) -> None:
    prefix = tmp_path / "bx"
    done = _install(prefix)
    assert done.returncode == 0, done.stderr
    assert "install (dev mode):" in done.stdout
    for directory in ("etc", "etc/grants", "home", "log", "run"):
        assert _mode(prefix / directory) == 0o700, directory
    for name in ("brokerd.toml", "loopd.toml", "memoryd.toml", "gatewayd.toml"):
        assert _mode(prefix / "etc" / name) == 0o600
    brokerd = (prefix / "etc" / "brokerd.toml").read_text()
    assert f'home = "{prefix / "home"}"' in brokerd
    assert "group_access = false" in brokerd
    grants = sorted(p.name for p in (prefix / "etc" / "grants").glob("*.toml"))
    examples = sorted(p.name for p in Path("grants.example").glob("*.toml"))
    assert grants == examples
    program = (prefix / "etc" / "supervisor.conf.d" / "brokerd.conf").read_text()
    assert (
        f"command={Path(sys.executable).parent}/brokerd serve --config {prefix}/etc/brokerd.toml"
        in program
    )
    assert "user=" not in program
    memoryd = (prefix / "etc" / "supervisor.conf.d" / "memoryd.conf").read_text()
    assert (
        f"command={Path(sys.executable).parent}/memoryd serve --config {prefix}/etc/memoryd.toml"
        in memoryd
    )
    assert "priority=15" in memoryd  # after brokerd (10), before loopd (20)
    assert "user=" not in memoryd
    gatewayd = (prefix / "etc" / "supervisor.conf.d" / "gatewayd.conf").read_text()
    assert (
        f"command={Path(sys.executable).parent}/gatewayd serve --config {prefix}/etc/gatewayd.toml"
        in gatewayd
    )
    # after loopd (20); an exit 0 (not configured) leaves it EXITED, not restarted
    for line in ("priority=30", "startsecs=0", "autorestart=unexpected", "exitcodes=0,2"):
        assert f"\n{line}\n" in gatewayd, line
    assert "user=" not in gatewayd
    group = (prefix / "etc" / "supervisor.conf.d" / "group.conf").read_text()
    assert "programs=brokerd,memoryd,loopd,gatewayd\n" in group
    main = (prefix / "etc" / "supervisord.conf").read_text()
    assert f"file={prefix}/run/supervisor.sock" in main
    assert "chmod=0700" in main


def test_config_paths_with_quotes_and_backslashes_round_trip(tmp_path: Path) -> None:
    """The TOML files are written by tomli-w: a `"` or `\\` in a path is data, not syntax."""
    prefix = tmp_path / 'a"b\\c'
    done = _install(prefix)
    assert done.returncode == 0, done.stderr
    etc = prefix / "etc"
    brokerd = tomllib.loads((etc / "brokerd.toml").read_text())
    assert brokerd["paths"] == {"home": str(prefix / "home"), "grants": str(etc / "grants")}
    assert brokerd["sockets"] == {"group_access": False}
    loopd = tomllib.loads((etc / "loopd.toml").read_text())
    assert loopd == {
        "paths": {"home": str(prefix / "home")},
        "model": {"path": ""},
        "sockets": {"group_access": False},
    }
    memoryd = tomllib.loads((etc / "memoryd.toml").read_text())
    assert memoryd == {"paths": {"home": str(prefix / "home")}, "sockets": {"group_access": False}}
    gatewayd = tomllib.loads((etc / "gatewayd.toml").read_text())
    assert gatewayd == {
        "paths": {"home": str(prefix / "home")},
        "sockets": {"group_access": False},
        "mattermost": {"url": ""},
    }


def test_gatewayd_toml_says_what_to_set_and_leaves_gatewayd_unconfigured(tmp_path: Path) -> None:
    prefix = tmp_path / "bx"
    done = _install(prefix)
    assert done.returncode == 0, done.stderr
    config = prefix / "etc" / "gatewayd.toml"
    text = config.read_text()
    header = [line for line in text.splitlines() if line.startswith("#")]
    for words in ("[mattermost] url", "[mattermost] owner", "[secrets.mattermost_token]"):
        assert any(words in line for line in header), words
    assert header[-1] == "# see runbook.md#gateway-not-configured"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOXMAKER_")}
    gatewayd = str(Path(sys.executable).parent / "gatewayd")
    run = subprocess.run(
        [gatewayd, "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "event=not_configured" in run.stderr
    assert run.stderr.rstrip().endswith("see runbook.md#gateway-not-configured")


def test_a_second_install_changes_nothing(tmp_path: Path) -> None:
    prefix = tmp_path / "bx"
    assert _install(prefix).returncode == 0
    again = _install(prefix)
    assert again.returncode == 0
    assert again.stdout.splitlines()[-1] == "install (dev mode): nothing to change"
    assert "did:" not in again.stdout


def test_the_owners_files_are_never_overwritten(tmp_path: Path) -> None:
    prefix = tmp_path / "bx"
    assert _install(prefix).returncode == 0
    config = prefix / "etc" / "brokerd.toml"
    config.write_text("# the owner's own\n")
    (prefix / "etc" / "grants" / "notes-read.toml").unlink()
    (prefix / "etc" / "grants" / "mine.toml").write_text("# mine\n")
    again = _install(prefix)
    assert again.returncode == 0
    assert config.read_text() == "# the owner's own\n"
    assert not (prefix / "etc" / "grants" / "notes-read.toml").exists()  # not re-seeded


def test_a_changed_program_file_is_put_back(tmp_path: Path) -> None:
    prefix = tmp_path / "bx"
    assert _install(prefix).returncode == 0
    program = prefix / "etc" / "supervisor.conf.d" / "loopd.conf"
    program.write_text("[program:loopd]\ncommand=/bin/false\n")
    again = _install(prefix)
    assert f"did:      file {program}" in again.stdout
    assert "loopd serve --config" in program.read_text()


def test_the_bytecode_step_compiles_every_module_and_sees_a_changed_one(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    first, second = package / "__init__.py", package / "sub" / "mod.py"
    first.write_text("A = 1\n")
    second.write_text("B = 2\n")
    step = Bytecode(package)
    assert not step.done()
    step.apply()
    assert step.done()
    for source in (first, second):
        assert Path(importlib.util.cache_from_source(str(source))).is_file()
    second.write_text("B = 22\n")  # another size: what an import would see as changed
    assert not step.done()
    step.apply()
    assert step.done()


def test_a_module_that_does_not_compile_fails_the_bytecode_step(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "broken.py").write_text("def (\n")
    with pytest.raises(OSError, match="cannot write the bytecode"):
        Bytecode(package).apply()


def test_a_dev_install_leaves_boxmakers_bytecode_in_place(tmp_path: Path) -> None:
    assert _install(tmp_path / "bx").returncode == 0
    assert Bytecode(PACKAGE_DIR).done()


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    prefix = tmp_path / "bx"
    done = _install(prefix, "--dry-run")
    assert done.returncode == 0
    assert "would do:" in done.stdout
    assert not prefix.exists()


@pytest.mark.parametrize(
    "args", [["install"], ["install", "--dev"]], ids=["root-no-owner", "dev-no-prefix"]
)
def test_missing_choices_are_one_line_errors(args: list[str]) -> None:
    done = subprocess.run([BXCTL, *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_dev_install_makes_a_workspace_the_example_grants_point_at(tmp_path: Path) -> None:
    prefix = tmp_path / "bx"
    done = _install(prefix)
    assert done.returncode == 0, done.stderr
    workspace = tmp_path / "workspace"
    assert (workspace / "notes" / "welcome.md").read_text().startswith("# Welcome to boxmaker")
    assert (workspace / "notes" / "keys" / "id").is_file()
    assert (workspace / "scratch").is_dir()
    grants = prefix / "etc" / "grants"
    assert f'paths = ["{workspace}/notes"]' in (grants / "notes-read.toml").read_text()
    assert f'paths = ["{workspace}/notes/keys"]' in (grants / "keys-deny.toml").read_text()
    assert "/home/owner" not in "".join(p.read_text() for p in grants.glob("*.toml"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOXMAKER_")}
    env["BOXMAKER_HOME"] = str(prefix / "home")
    check = subprocess.run(
        [BXCTL, "grants", "check", "--dir", str(grants)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert (check.returncode, check.stdout) == (0, "grants: ok\n"), check.stderr


@pytest.mark.parametrize("where", ["prefix", "checkout", "relative-quote"])
def test_a_workspace_where_no_grant_may_reach_is_refused(tmp_path: Path, where: str) -> None:
    prefix = tmp_path / "bx"
    workspace = {
        "prefix": prefix / "home" / "ws",
        "checkout": Path(__file__).resolve().parents[2] / "ws",
        "relative-quote": tmp_path / 'a"b',
    }[where]
    done = _install(prefix, "--workspace", str(workspace))
    assert done.returncode == 1
    assert done.stderr.startswith("bxctl: the workspace "), done.stderr
    assert not workspace.exists()


def test_a_root_plan_gives_each_role_its_user_its_links_and_its_files(tmp_path: Path) -> None:
    """The root install's plan (built, not applied): the users, groups, modes, files."""
    owner = pwd.getpwuid(os.getuid()).pw_name
    etc, home = tmp_path / "etc", tmp_path / "home"
    layout = Layout(
        root=True,
        etc=etc,
        home=home,
        log=tmp_path / "log",
        run=tmp_path / "run",
        bin=Path("/opt/boxmaker/bin"),
        owner=owner,
    )
    steps = plan(layout)
    users = [step.name for step in steps if isinstance(step, User)]
    assert users == ["bx-broker", "bx-memory", "bx-loop", "bx-gateway"]
    groups = {step.name: step.members for step in steps if isinstance(step, Group)}
    assert groups == {
        "bx-loop-broker": ("bx-loop",),
        "bx-owner-broker": (owner,),
        "bx-loop-clients": (owner, "bx-gateway"),  # bxctl chat and gatewayd send turns
        "bx-loop-memory": ("bx-loop",),
        "bx-broker-memory": ("bx-broker",),
        "bx-owner-memory": (owner,),
        "bx-broker-gateway": ("bx-broker",),
    }
    directories = {
        step.path: (step.owner, step.group, step.mode)
        for step in steps
        if isinstance(step, Directory)
    }
    run = home / "run"
    assert directories[run / "loop-memory"] == ("bx-memory", "bx-loop-memory", 0o2750)
    assert directories[run / "broker-memory"] == ("bx-memory", "bx-broker-memory", 0o2750)
    assert directories[run / "owner-memory"] == ("bx-memory", "bx-owner-memory", 0o2750)
    assert directories[home / "memory"] == ("bx-memory", "bx-memory", 0o700)
    assert directories[run / "gateway"] == ("bx-gateway", "bx-broker-gateway", 0o2750)
    assert directories[home / "gateway"] == ("bx-gateway", "bx-gateway", 0o700)  # its watermark
    files = {step.path: step for step in steps if isinstance(step, File)}
    config = files[etc / "memoryd.toml"]
    assert (config.owner, config.group, config.mode, config.keep) == (
        "root",
        "bx-memory",
        0o640,
        True,
    )
    assert tomllib.loads(config.content)["sockets"] == {"group_access": True}
    # loop.sock's owner kinds go to the owner's uid alone, never to bx-loop-clients
    loopd = tomllib.loads(files[etc / "loopd.toml"].content)
    assert loopd["sockets"] == {"group_access": True, "owner_user": owner}
    program = files[etc / "supervisor.conf.d" / "memoryd.conf"].content
    assert "user=bx-memory" in program
    assert "/opt/boxmaker/bin/memoryd serve --config" in program
    gateway = files[etc / "gatewayd.toml"]
    assert (gateway.owner, gateway.group, gateway.mode, gateway.keep) == (
        "root",
        "bx-gateway",
        0o640,
        True,
    )
    assert tomllib.loads(gateway.content) == {
        "paths": {"home": str(home)},
        "sockets": {"group_access": True},
        "mattermost": {"url": ""},
    }
    program = files[etc / "supervisor.conf.d" / "gatewayd.conf"].content
    assert "\nuser=bx-gateway\n" in program
    assert f"/opt/boxmaker/bin/gatewayd serve --config {etc}/gatewayd.toml" in program
