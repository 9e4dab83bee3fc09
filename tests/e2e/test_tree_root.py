"""The supervised tree installed as root: a user per role, and the kernel keeping them apart.

Needs root (CI runs as root); elsewhere it is skipped, and says so. It makes an
owner user, runs `bxctl install --prefix <tmp> --owner <it>`, checks the layout
file by file, starts supervisord from the generated configuration and checks that
each role runs as its own user, that loopd's user is refused by both admin.sock
(brokerd's and memoryd's) with EACCES while the owner can use them, that each of
memoryd's other two sockets takes only its own client role's user, that
gatewayd (no Mattermost server configured) stays EXITED after its one line while
its user can reach loop.sock but neither admin.sock, and that only brokerd's user
can enter gateway.sock's directory, that a chat turn works through the supervised roles,
that the owner's `bxctl sessions` works while gatewayd's user is answered `forbidden`
for it (loop.sock's owner kinds), that a SIGKILL of brokerd ends in a running tree
whose audit log verifies, and that a second install changes nothing. The users and groups it made are
removed afterwards, whatever happens.
"""

from __future__ import annotations

import grp
import os
import pwd
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.skips import skip_or_fail

from boxmaker.core.home.links import LINKS, Role
from boxmaker.core.home.links import ROLE_USERS as USER_OF
from boxmaker.core.wire.broker import ToolRequest
from boxmaker.core.wire.connection import ClientConnection
from boxmaker.testing.waiting import wait_until

REPO = Path(__file__).resolve().parent.parent.parent
OWNER = "bxtestowner"
ROLE_USERS = tuple(USER_OF.values())
USERS = (*ROLE_USERS, OWNER)
GROUPS = tuple(link.group for link in LINKS)  # the link table's: each link's group

pytestmark = [
    pytest.mark.model,
    pytest.mark.slow,
    pytest.mark.e2e,
]
if os.geteuid() != 0:
    skip_or_fail(
        "a root install needs root: the root-install tests did NOT run", allow_module_level=True
    )


def _run(
    *argv: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def _wait(condition: Callable[[], bool], what: str, timeout: float = 240) -> None:
    """Poll `condition` (it runs a command) twice a second at most, until `timeout`."""
    wait_until(condition, timeout, what, interval_s=0.5)


def _remove_accounts() -> None:
    """Remove the test's users and groups; a user's processes are ended first."""
    for user in USERS:
        deadline = time.monotonic() + 30
        while _user_exists(user):
            _run("pkill", "-KILL", "-u", user)
            if _run("userdel", user).returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    for group in (*GROUPS, *ROLE_USERS, OWNER):
        _run("groupdel", group)


def _user_exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """boxmaker in a virtual environment made with /usr/bin/python3, open to the role users.

    The suite's own environment may use an interpreter under /root, which no role
    user can run; a real root install uses an environment like this (README.md).
    """
    for part in REPO.parents:
        assert part.stat().st_mode & 0o001, f"the role users cannot reach the checkout: {part}"
    base = tmp_path_factory.mktemp("venv")
    for part in (base, *base.parents):
        if part != Path("/"):
            part.chmod(part.stat().st_mode | 0o005)
    env = base / "env"
    made = _run("/usr/bin/python3", "-m", "venv", str(env), timeout=300)
    assert made.returncode == 0, (
        f"python3-venv is needed (scripts/install-host-packages): {made.stderr}"
    )
    # the portable wheel, as scripts/test installs it: pip's own wheel cache does
    # not key on the build flags and may hold a native build that crashes here
    wheels = _run(str(REPO / "scripts" / "build-llama-cpp"), "--print-dir").stdout.strip()
    assert any(Path(wheels).glob("llama_cpp_python-*.whl")), (
        f"no portable llama-cpp-python wheel in {wheels!r}: run scripts/build-llama-cpp"
    )
    pip_env = {**os.environ, "PIP_FIND_LINKS": wheels, "PIP_ONLY_BINARY": "llama-cpp-python"}
    pip = _run(
        str(env / "bin" / "pip"), "install", "--quiet", "-e", str(REPO), timeout=1800, env=pip_env
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return env / "bin"


@pytest.fixture
def installed(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    assert os.geteuid() == 0, "CI must run the root install test as root"
    _remove_accounts()
    prefix = tmp_path_factory.mktemp("root")
    for part in (prefix, *prefix.parents):  # every role user must reach the home
        if part != Path("/"):
            part.chmod(part.stat().st_mode | 0o005)
    assert _run("useradd", "--no-create-home", OWNER).returncode == 0
    conf = prefix / "etc" / "boxmaker" / "supervisord.conf"
    try:
        done = _run(
            str(venv / "bxctl"), "install", "--prefix", str(prefix), "--owner", OWNER, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        yield prefix, venv
    finally:
        if conf.exists():
            _run(str(venv / "supervisorctl"), "-c", str(conf), "shutdown")
        _remove_accounts()


def _owner_mode(path: Path) -> tuple[str, str, int]:
    info = path.stat()
    return (
        pwd.getpwuid(info.st_uid).pw_name,
        grp.getgrgid(info.st_gid).gr_name,
        stat.S_IMODE(info.st_mode),
    )


def _connect_as(user: str, path: Path) -> subprocess.CompletedProcess[str]:
    probe = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX)\n"
        "try:\n s.connect(sys.argv[1]); print('connected')\n"
        "except PermissionError: print('EACCES')\n"
    )
    return _run("runuser", "-u", user, "--", "/usr/bin/python3", "-c", probe, str(path))


def _list_as(user: str, path: Path) -> subprocess.CompletedProcess[str]:
    probe = (
        "import os,sys\n"
        "try:\n os.listdir(sys.argv[1]); print('listed')\n"
        "except PermissionError: print('EACCES')\n"
    )
    return _run("runuser", "-u", user, "--", "/usr/bin/python3", "-c", probe, str(path))


def test_a_root_install_keeps_the_roles_apart(installed: tuple[Path, Path]) -> None:
    installed_prefix, bin_dir = installed
    home = installed_prefix / "var" / "lib" / "boxmaker"
    etc = installed_prefix / "etc" / "boxmaker"
    run = home / "run"
    user_of = {**USER_OF, Role.OWNER: OWNER}
    for link in LINKS:  # each link's directory: its server's user, its group, 2750
        expected = (user_of[link.server], link.group, 0o2750)
        assert _owner_mode(run / link.directory) == expected, link
        members = sorted(user_of[role] for role in link.clients)
        assert sorted(grp.getgrnam(link.group).gr_mem) == members, link
    assert _owner_mode(home / "memory") == ("bx-memory", "bx-memory", 0o700)
    assert _owner_mode(home / "audit") == ("bx-broker", "bx-broker", 0o700)
    assert _owner_mode(home / "broker") == ("bx-broker", "bx-broker", 0o700)
    assert _owner_mode(home / "loop") == ("bx-loop", "bx-loop", 0o700)
    assert _owner_mode(etc / "brokerd.toml") == ("root", "bx-broker", 0o640)
    assert _owner_mode(etc / "loopd.toml") == ("root", "bx-loop", 0o640)
    assert _owner_mode(etc / "memoryd.toml") == ("root", "bx-memory", 0o640)
    assert _owner_mode(etc / "gatewayd.toml") == ("root", "bx-gateway", 0o640)
    assert "user=bx-broker" in (etc / "supervisor.conf.d" / "brokerd.conf").read_text()
    assert "user=bx-memory" in (etc / "supervisor.conf.d" / "memoryd.conf").read_text()
    assert "\nuser=bx-gateway\n" in (etc / "supervisor.conf.d" / "gatewayd.conf").read_text()

    loopd = etc / "loopd.toml"
    loopd.write_text(
        loopd.read_text().replace('path = ""', 'path = ""\nmax_tokens = 16\nthreads = 2')
    )
    conf = str(etc / "supervisord.conf")
    assert _run(str(bin_dir / "supervisord"), "-c", conf).returncode == 0
    env = {"BOXMAKER_HOME": str(home), "PATH": f"{bin_dir}:/usr/bin:/bin"}
    _wait(
        lambda: _run(str(bin_dir / "bxctl"), "status", env=env).returncode == 0,
        "every role to answer",
    )

    role_users = (("brokerd", "bx-broker"), ("memoryd", "bx-memory"), ("loopd", "bx-loop"))
    for program, user in role_users:
        pid = _run(
            str(bin_dir / "supervisorctl"), "-c", conf, "pid", f"boxmaker:{program}"
        ).stdout.strip()
        owner = _run("ps", "-o", "user=", "-p", pid).stdout.strip()
        assert owner == user, f"{program} runs as {owner}"
    assert _owner_mode(home / "run" / "owner-broker" / "admin.sock")[2] == 0o660

    # gatewayd, with no [mattermost] url, says so once and stays EXITED (not restarted)
    def gatewayd_state() -> str:
        shown = _run(str(bin_dir / "supervisorctl"), "-c", conf, "status", "boxmaker:gatewayd")
        return (shown.stdout.split() or ["", ""])[1]

    _wait(lambda: gatewayd_state() == "EXITED", "gatewayd to exit, not configured", timeout=60)
    gatewayd_log = (installed_prefix / "var" / "log" / "boxmaker" / "gatewayd.log").read_text()
    assert gatewayd_log.count("event=not_configured") == 1, gatewayd_log
    assert gatewayd_log.rstrip().endswith("see runbook.md#gateway-not-configured")

    admin = home / "run" / "owner-broker" / "admin.sock"
    assert _connect_as("bx-loop", admin).stdout.strip() == "EACCES"
    owner_id = _run("runuser", "-u", OWNER, "--", "id").stdout
    listing = _run("ls", "-l", str(admin)).stdout
    assert _connect_as(OWNER, admin).stdout.strip() == "connected", owner_id + listing
    assert (
        _connect_as("bx-loop", home / "run" / "loop-broker" / "broker.sock").stdout.strip()
        == "connected"
    )

    # gatewayd's user: loop.sock (it sends turns), never either admin.sock; and
    # gateway.sock's directory is brokerd's to enter only (no gatewayd serves there)
    assert _connect_as("bx-gateway", admin).stdout.strip() == "EACCES"
    assert _connect_as("bx-gateway", run / "owner-memory" / "admin.sock").stdout.strip() == (
        "EACCES"
    )
    assert _connect_as("bx-gateway", run / "loop" / "loop.sock").stdout.strip() == "connected"
    gateway_dir = run / "gateway"
    assert _connect_as("bx-loop", gateway_dir / "gateway.sock").stdout.strip() == "EACCES"
    assert _list_as("bx-loop", gateway_dir).stdout.strip() == "EACCES"
    assert _list_as("bx-memory", gateway_dir).stdout.strip() == "EACCES"
    assert _list_as("bx-broker", gateway_dir).stdout.strip() == "listed"

    # memoryd's three sockets: each reachable by its one client role's user only
    loop_memory = run / "loop-memory" / "memory.sock"
    broker_memory = run / "broker-memory" / "memory.sock"
    owner_memory = run / "owner-memory" / "admin.sock"
    for path in (loop_memory, broker_memory, owner_memory):  # the directory's group, set-gid
        assert _owner_mode(path) == ("bx-memory", f"bx-{path.parent.name}", 0o660), path
    assert _connect_as("bx-loop", owner_memory).stdout.strip() == "EACCES"
    assert _connect_as("bx-loop", broker_memory).stdout.strip() == "EACCES"
    assert _connect_as("bx-broker", loop_memory).stdout.strip() == "EACCES"
    assert _connect_as("bx-broker", owner_memory).stdout.strip() == "EACCES"
    assert _connect_as("bx-loop", loop_memory).stdout.strip() == "connected"
    assert _connect_as("bx-broker", broker_memory).stdout.strip() == "connected"
    owner_env = f"BOXMAKER_HOME={home}"
    memory_log = _run(
        "runuser", "-u", OWNER, "--", "env", owner_env, str(bin_dir / "bxctl"), "memory", "log"
    )
    assert memory_log.returncode == 0, memory_log.stdout + memory_log.stderr
    refused = _run(
        "runuser", "-u", "bx-loop", "--", "env", owner_env, str(bin_dir / "bxctl"), "memory", "log"
    )
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"bxctl: not allowed to use {owner_memory}: "), refused.stderr

    chat = _run(str(bin_dir / "bxctl"), "chat", "--say", "hello", env=env, timeout=300)
    assert chat.returncode == 0, chat.stderr

    # loop.sock's owner kinds (core.home.links rule 5): the owner named at install lists
    # the sessions; gatewayd's user, in the same group, is answered forbidden
    bxctl = str(bin_dir / "bxctl")
    listed = _run("runuser", "-u", OWNER, "--", "env", owner_env, bxctl, "sessions", timeout=60)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "chat-" in listed.stdout, listed.stdout
    gateway_sessions = _run(
        "runuser", "-u", "bx-gateway", "--", "env", owner_env, bxctl, "sessions", timeout=60
    )
    assert gateway_sessions.returncode == 1
    assert gateway_sessions.stderr.startswith("bxctl: loopd refused sessions: forbidden: ")
    assert gateway_sessions.stderr.rstrip().endswith("see runbook.md#socket-owner-only")

    # a call in flight: an ask grant, a tool_request sent as loopd would, and brokerd
    # killed while the call waits for the owner
    (etc / "grants" / "tmp-shell.toml").write_text(
        'tool = "shell"\nmode = "ask"\nmax_taint = "private"\nresult_class = "private"\n'
    )
    broker_sock = home / "run" / "loop-broker" / "broker.sock"
    request = ToolRequest(session="e2e", call="c1", tool="shell", arguments='{"command":"true"}')
    connection = ClientConnection("c1")
    in_flight = socket.socket(socket.AF_UNIX)
    in_flight.settimeout(30)
    in_flight.connect(str(broker_sock))
    in_flight.sendall(connection.request(request))
    first = connection.receive(in_flight.recv(65536))
    assert first, "brokerd sent nothing for the ask call"
    assert first[0].message.kind == "tool_response"
    assert not first[0].final  # pending: the call is mid-way
    broker_pid = int(
        _run(str(bin_dir / "supervisorctl"), "-c", conf, "pid", "boxmaker:brokerd").stdout
    )
    os.kill(broker_pid, signal.SIGKILL)
    in_flight.close()
    _wait(
        lambda: (
            _run(
                str(bin_dir / "supervisorctl"), "-c", conf, "pid", "boxmaker:brokerd"
            ).stdout.strip()
            not in ("", "0", str(broker_pid))
        ),
        "supervisord to restart brokerd",
    )
    _wait(
        lambda: _run(str(bin_dir / "bxctl"), "status", env=env).returncode == 0,
        "the tree to answer again",
    )
    verify = _run(str(bin_dir / "bxctl"), "audit", "verify", "--home", str(home))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "approval pending or abandoned" in verify.stdout  # the call cut off by the kill

    again = _run(
        str(bin_dir / "bxctl"),
        "install",
        "--prefix",
        str(installed_prefix),
        "--owner",
        OWNER,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == "install (root install): nothing to change", (
        again.stdout
    )


DEV_USER = "bxtestdev"


def test_dev_mode_as_a_normal_user_gives_a_working_tree(
    venv: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    assert os.geteuid() == 0, "CI must run this test as root (it makes a user)"
    _run("userdel", DEV_USER)
    assert _run("useradd", "--create-home", DEV_USER).returncode == 0
    home_dir = Path(pwd.getpwnam(DEV_USER).pw_dir)
    prefix = home_dir / "bx"
    conf = prefix / "etc" / "supervisord.conf"

    def as_user(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = f"BOXMAKER_HOME={prefix / 'home'}"
        return _run("runuser", "-u", DEV_USER, "--", "env", env, *argv, timeout=timeout)

    try:
        done = as_user(str(venv / "bxctl"), "install", "--prefix", str(prefix), timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "install (dev mode)" in done.stdout
        loopd = prefix / "etc" / "loopd.toml"
        loopd.write_text(loopd.read_text().replace('path = ""', 'path = ""\nmax_tokens = 16'))
        assert stat.S_IMODE((prefix / "home").stat().st_mode) == 0o700
        assert as_user(str(venv / "supervisord"), "-c", str(conf)).returncode == 0
        _wait(
            lambda: as_user(str(venv / "bxctl"), "status").returncode == 0, "the dev tree to answer"
        )
        for program in ("brokerd", "memoryd", "loopd"):
            pid = as_user(
                str(venv / "supervisorctl"), "-c", str(conf), "pid", f"boxmaker:{program}"
            )
            assert _run("ps", "-o", "user=", "-p", pid.stdout.strip()).stdout.strip() == DEV_USER
        socket_mode = stat.S_IMODE(
            (prefix / "home" / "run" / "owner-broker" / "admin.sock").stat().st_mode
        )
        assert socket_mode == 0o600
        memory_log = as_user(str(venv / "bxctl"), "memory", "log")
        assert memory_log.returncode == 0, memory_log.stdout + memory_log.stderr
        chat = as_user(str(venv / "bxctl"), "chat", "--say", "hello", timeout=300)
        assert chat.returncode == 0, chat.stderr
    finally:
        if conf.exists():
            as_user(str(venv / "supervisorctl"), "-c", str(conf), "shutdown")
        deadline = time.monotonic() + 30
        while _user_exists(DEV_USER) and time.monotonic() < deadline:
            _run("pkill", "-KILL", "-u", DEV_USER)
            if _run("userdel", "--remove", DEV_USER).returncode == 0:
                break
            time.sleep(0.2)
