"""Sandbox conformance: one suite, run against every runtime (bubblewrap and Podman).

Every call is built the way brokerd builds it: grants parsed with
`parse_grant_file`, a request decided by `boxmaker.core.policy.decide`, and
`boxmaker.sandbox.runner.run` (which builds the `RunSpec`). The checks are those
of the sandbox issue: golden argument lists per tool; no route out; only the
mounts visible; read-only grants; write_file and symlinks cannot leave the
mount; a symlinked grant path is refused before anything runs; memory, process
and time limits; nothing left behind after a normal exit, an OOM kill, a
timeout and a SIGKILL of the brokerd-like parent; http_fetch only to allowed
hosts, through a local HTTPS server with a CA made by `openssl` at test time.

A runtime this host cannot run is skipped with its preflight lines as the
reason, except when `CI` is set: there it is a failure.

I/O: temporary directories, cgroups (a private sub-parent per test, so that
sweeping never touches another run's calls), Podman containers named after the
test's own home, sockets on loopback only (the public address in the no-route
test is the one the sandbox must fail to reach), and child processes.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.skips import skip_or_fail

from boxmaker.core.grants.model import GrantSet
from boxmaker.core.policy import Decision, Denial, SessionState, decide
from boxmaker.core.wire.broker import FailedResponse, ResultResponse, ToolRequest
from boxmaker.sandbox import podman
from boxmaker.sandbox.bwrap import bwrap_argv
from boxmaker.sandbox.calls import PROXY_INSIDE, Limits
from boxmaker.sandbox.held import Held, HeldSpec, Mask
from boxmaker.sandbox.podman import podman_argv
from boxmaker.sandbox.runner import RunFailure, RunSpec, build_spec
from boxmaker.testing.sandbox_tree import (
    LIMITS,
    NOW,
    Sandbox,
    grant,
    processes_with,
)
from boxmaker.testing.waiting import wait_until

# ---------------------------------------------------------------------------
# golden argument lists (pure: no runtime needs to be available)


def decision_for(tool: str, **arguments: Any) -> Decision:
    root = Path("/home/owner")
    grants = GrantSet(
        grants=(
            grant(
                "r.toml",
                'tool = "read_file"\nmode = "auto"\nmax_taint = "secret"\n'
                f'result_class = "private"\nconstraints.paths = ["{root}/notes"]',
            ),
            grant(
                "w.toml",
                'tool = "write_file"\nmode = "auto"\nmax_taint = "secret"\n'
                f'result_class = "private"\nconstraints.paths = ["{root}/scratch"]',
            ),
            grant(
                "s.toml",
                'tool = "shell"\nmode = "auto"\nmax_taint = "secret"\nresult_class = "private"\n'
                f'constraints.paths = ["{root}/scratch", "{root}/data"]',
            ),
            grant(
                "f.toml",
                'tool = "http_fetch"\nmode = "auto"\nmax_taint = "secret"\n'
                'result_class = "public"\nconstraints.hosts = ["example.org"]',
            ),
        )
    )
    request = ToolRequest(session="s", call="c", tool=tool, arguments=json.dumps(arguments))
    outcome = decide(request, grants, SessionState(), NOW)
    assert isinstance(outcome, Decision), outcome
    return outcome


GOLDEN_CALLS = {
    "read_file": {"path": "/home/owner/notes/a.md"},
    "write_file": {"path": "/home/owner/scratch/out.txt", "content": "x"},
    "shell": {"command": "ls", "cwd": "/home/owner/scratch"},
    "http_fetch": {"url": "https://example.org/"},
}
SOCKET = Path("/home/owner/.boxmaker/run/egress/bx-1.sock")
CA = Path("/etc/ssl/certs/ca-certificates.crt")

# what each spec mounts: a file tool exactly its file, a shell every grant path
SPEC_MOUNTS = {
    "read_file": [("/home/owner/notes/a.md", False, "/home/owner/notes")],
    "write_file": [("/home/owner/scratch/out.txt", True, "/home/owner/scratch")],
    "shell": [
        ("/home/owner/scratch", True, "/home/owner/scratch"),
        ("/home/owner/data", True, "/home/owner/data"),
    ],
    "http_fetch": [],
}
# for the shell: one pinned directory and two masks, as held.py would find them
PIN = Held("/home/owner/data/a", 9, 1, 3, is_dir=True, writable=True)
MASKS = [Mask("/home/owner/data/a/keys", is_dir=True), Mask("/home/owner/scratch/id", is_dir=False)]


def held_for(spec: RunSpec) -> HeldSpec:
    """What `hold` would give for `spec` on a host that has its paths (fds from 7)."""
    held = HeldSpec()
    for number, mount in enumerate(spec.mounts, start=7):
        held.mounts.append(
            Held(mount.path, number, 1, number, is_dir=False, writable=mount.writable)
        )
    if spec.tool.value == "shell":
        held.pins.append(PIN)
        held.masks.extend(MASKS)
    return held


BWRAP_MOUNTS = {
    "read_file": ["--ro-bind-fd", "7", "/home/owner/notes/a.md"],
    "write_file": ["--bind-fd", "7", "/home/owner/scratch/out.txt"],
    "shell": [
        "--bind-fd", "7", "/home/owner/scratch",
        "--bind-fd", "8", "/home/owner/data",
        "--bind-fd", "9", "/home/owner/data/a",
        "--tmpfs", "/home/owner/data/a/keys", "--remount-ro", "/home/owner/data/a/keys",
        "--ro-bind", "/dev/null", "/home/owner/scratch/id",
    ],
    "http_fetch": [
        "--ro-bind", str(CA), "/run/boxmaker/ca.crt",
        "--bind", str(SOCKET), "/run/boxmaker/egress.sock",
    ],
}  # fmt: skip

PODMAN_MOUNTS = {
    "read_file": [
        "--mount=type=bind,source=/proc/42/fd/7,destination=/home/owner/notes/a.md,ro=true"
    ],
    "write_file": [
        "--mount=type=bind,source=/proc/42/fd/7,destination=/home/owner/scratch/out.txt"
    ],
    "shell": [
        "--mount=type=bind,source=/proc/42/fd/7,destination=/home/owner/scratch",
        "--mount=type=bind,source=/proc/42/fd/8,destination=/home/owner/data",
        "--mount=type=bind,source=/proc/42/fd/9,destination=/home/owner/data/a",
        "--mount=type=tmpfs,destination=/home/owner/data/a/keys,ro=true,notmpcopyup",
        "--mount=type=bind,source=/dev/null,destination=/home/owner/scratch/id,ro=true",
    ],
    "http_fetch": [
        f"--mount=type=bind,source={CA},destination=/run/boxmaker/ca.crt,ro=true",
        f"--mount=type=bind,source={SOCKET},destination=/run/boxmaker/egress.sock",
    ],
}


@pytest.mark.parametrize("tool", list(GOLDEN_CALLS))
def test_spec_mounts_exactly_what_was_decided(tool: str) -> None:
    spec = build_spec(decision_for(tool, **GOLDEN_CALLS[tool]))
    assert [(m.path, m.writable, m.granted) for m in spec.mounts] == SPEC_MOUNTS[tool]
    assert spec.egress == (("example.org",) if tool == "http_fetch" else None)


@pytest.mark.parametrize("tool", list(GOLDEN_CALLS))
def test_bwrap_argv_is_golden(tool: str) -> None:
    spec = build_spec(decision_for(tool, **GOLDEN_CALLS[tool]))
    egress = SOCKET if tool == "http_fetch" else None
    lib64 = ["--symlink", "usr/lib64", "/lib64"] if Path("/usr/lib64").is_dir() else []
    expected = [
        "/usr/bin/bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
        "--cap-drop", "ALL", "--uid", "65534", "--gid", "65534",
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
        "--symlink", "usr/lib", "/lib", *lib64,
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
        *BWRAP_MOUNTS[tool],
        "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
        "--setenv", "LANG", "C.UTF-8", "--chdir", "/tmp",
        "/usr/bin/python3", "-I", "-S", "-c",
    ]  # fmt: skip
    argv = bwrap_argv(held_for(spec), egress, CA)
    assert argv[:-1] == expected
    assert "def main()" in argv[-1]


@pytest.mark.parametrize("tool", list(GOLDEN_CALLS))
def test_podman_argv_is_golden(tool: str) -> None:
    spec = build_spec(decision_for(tool, **GOLDEN_CALLS[tool]))
    egress = SOCKET if tool == "http_fetch" else None
    limits = Limits(timeout_s=60.0, memory_bytes=512 * 1024 * 1024, pids=64, output_bytes=1000)
    expected = [
        "/usr/bin/podman", "--events-backend=none", "run", "--rm", "--interactive",
        "--name=bx-1", "--label=boxmaker=call", "--timeout=68",
        "--pull=never", "--log-driver=none", "--network=none", "--no-hosts",
        "--passwd=false", "--http-proxy=false", "--hostname=sandbox", "--read-only",
        "--cap-drop=all", "--security-opt=no-new-privileges",
        "--uidmap=65534:0:1", "--gidmap=65534:0:1", "--user=65534:65534",
        "--sysctl=net.ipv4.ping_group_range=65534 65534",
        "--memory=536870912", "--memory-swap=536870912", "--pids-limit=64",
        "--ulimit=nofile=1024:1024", "--ulimit=nproc=1024:1024",
        "--mount=type=bind,source=/usr,destination=/usr,ro=true", "--tmpfs=/tmp",
        *PODMAN_MOUNTS[tool],
        "--unsetenv-all", "--env=PATH=/usr/bin:/bin", "--env=HOME=/tmp",
        "--env=LANG=C.UTF-8", "--workdir=/tmp",
        "--rootfs", "/var/lib/boxmaker-sandbox/rootfs:O",
        "/usr/bin/python3", "-I", "-S", "-c",
    ]  # fmt: skip
    rootfs = Path("/var/lib/boxmaker-sandbox/rootfs")
    argv = podman_argv(held_for(spec), "bx-1", egress, CA, limits, rootfs, holder=42)
    assert argv[:-1] == expected
    assert "def main()" in argv[-1]
    assert "OUT_OF_MEMORY" in argv[-1]


def test_podman_refuses_a_path_mount_cannot_carry() -> None:
    assert podman.mount_problem("/home/owner/a,b") is not None
    assert podman.mount_problem("/home/owner/a:b") is None


# ---------------------------------------------------------------------------
# a local HTTPS server with a throwaway CA


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on every host address (the sandbox must reach none of them)."""
    with socket.create_server(("0.0.0.0", 0)) as server:  # noqa: S104 - the test target
        yield server.getsockname()[1]


def host_address() -> str | None:
    """A local, non-loopback address of this host (no packet is sent to find it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: a route lookup, nothing sent
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address  # noqa: S104


# ---------------------------------------------------------------------------
# the checks


CONNECT = (
    "python3 -c 'import socket,sys; s=socket.socket(); s.settimeout(3);"
    ' print("CONNECT", s.connect_ex((sys.argv[1], int(sys.argv[2])))); s.close()\' {} {}'
)


@pytest.mark.parametrize("target", ["host-loopback", "host-address", "public"])
def test_no_route_out(sandbox: Sandbox, listener: int, target: str) -> None:
    if target == "host-loopback":
        address, port = "127.0.0.1", listener
    elif target == "host-address":
        found = host_address()
        if found is None:  # a machine with only loopback: nothing else to try
            skip_or_fail("this host has no non-loopback address: host-address did NOT run")
        address, port = found, listener
    else:
        address, port = "1.1.1.1", 443
    if target != "public":  # the control: the listener is reachable from the host
        with socket.create_connection((address, port), timeout=3):
            pass
    response = sandbox.shell(CONNECT.format(address, port))
    assert isinstance(response, ResultResponse), response
    assert "CONNECT " in response.content, response.content
    status = response.content.split("CONNECT ", 1)[1].split()[0]
    assert status != "0", f"the sandbox reached {address}:{port}"


def test_only_the_mounts_are_visible(sandbox: Sandbox) -> None:
    home = Path.home()
    paths = ["/etc/shadow", "/etc/passwd", "/root", str(home), str(sandbox.root / "secret.txt")]
    if str(home).startswith(str(sandbox.root)):
        paths.remove(str(home))
    script = "; ".join(f'test -e "{p}" && echo "PRESENT {p}" || echo "ABSENT {p}"' for p in paths)
    response = sandbox.shell(f"{script}; ls {sandbox.root}")
    assert isinstance(response, ResultResponse), response
    for path in paths:
        assert f"ABSENT {path}\n" in response.content, response.content
    listed = response.content.split("\n")[len(paths) :]
    assert sorted(line for line in listed if line and not line.startswith("[")) == ["scratch"]


def test_read_file_reads_its_grant(sandbox: Sandbox) -> None:
    response = sandbox.call("read_file", path=str(sandbox.root / "notes" / "a.md"))
    assert isinstance(response, ResultResponse), response
    assert response.content == "hello notes\n"
    assert response.truncated is False
    sandbox.assert_nothing_left()


def test_read_only_grants_cannot_be_written(sandbox: Sandbox) -> None:
    """A shell cannot write through a read_file grant (it is not even mounted there)."""
    target = sandbox.root / "notes" / "a.md"
    response = sandbox.shell(f'echo changed > "{target}"; echo written=$?')
    assert isinstance(response, ResultResponse), response
    assert "written=0" not in response.content
    assert target.read_text() == "hello notes\n"
    # read_file's mount is read-only: the golden list shows --ro-bind / ro=true


def test_write_file_writes_inside_its_mount(sandbox: Sandbox) -> None:
    target = sandbox.root / "scratch" / "out.txt"
    response = sandbox.call("write_file", path=str(target), content="written\n")
    assert isinstance(response, ResultResponse), response
    assert target.read_text() == "written\n"


@pytest.mark.parametrize("through", ["directory-link", "file-link"])
def test_write_file_cannot_write_outside_its_mount(sandbox: Sandbox, through: str) -> None:
    if through == "directory-link":
        path = sandbox.root / "scratch" / "escape" / "new.txt"
    else:
        path = sandbox.root / "scratch" / "kept-link.txt"
    response = sandbox.call("write_file", path=str(path), content="escaped\n")
    assert response == FailedResponse(message=RunFailure.PATH_HAS_SYMLINK.value)
    assert sorted(p.name for p in (sandbox.root / "outside").iterdir()) == ["kept.txt"]
    assert (sandbox.root / "outside" / "kept.txt").read_text() == "unchanged\n"


@pytest.mark.parametrize("link", ["evil", "shadow"])
def test_a_symlink_to_outside_reads_nothing(sandbox: Sandbox, link: str) -> None:
    response = sandbox.call("read_file", path=str(sandbox.root / "notes" / link))
    assert response == FailedResponse(message=RunFailure.PATH_HAS_SYMLINK.value)


def test_a_symlinked_grant_path_is_refused_before_anything_runs(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[object] = []

    def no_process(*args: object, **kwargs: object) -> None:
        started.append(args)
        raise AssertionError("a process was started for a refused grant path")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    response = sandbox.call("read_file", path=str(sandbox.root / "linked" / "a.md"))
    assert response == FailedResponse(message=RunFailure.GRANT_PATH_UNSAFE.value)
    assert started == []
    monkeypatch.undo()
    assert sandbox.leftovers() == []


def test_shell_exit_status_is_a_result(sandbox: Sandbox) -> None:
    response = sandbox.shell("echo before; exit 3")
    assert isinstance(response, ResultResponse), response
    assert response.content == "before\n\n[exit status 3]"
    assert response.class_.value == "private"
    sandbox.assert_nothing_left()


def test_output_is_capped(sandbox: Sandbox) -> None:
    response = sandbox.shell("yes | head -c 5000")
    assert isinstance(response, ResultResponse), response
    assert response.truncated is True
    body = response.content.rsplit("\n[exit status", 1)[0]
    assert len(body.encode()) <= LIMITS.output_bytes + 1


def test_memory_limit_holds(
    sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = f"oom{uuid.uuid4().hex[:8]}"
    cwd = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(cwd)  # conmon once wrote an `oom` file into the client's cwd
    response = sandbox.shell(f"M={marker}; python3 -c 'x = bytearray(512 << 20)'; echo $M")
    assert response == FailedResponse(message=RunFailure.OUT_OF_MEMORY.value)
    sandbox.assert_nothing_left(marker)
    assert list(cwd.iterdir()) == []


def test_process_limit_holds(sandbox: Sandbox) -> None:
    response = sandbox.shell("for i in $(seq 40); do sleep 1 & done; wait; echo end")
    assert isinstance(response, ResultResponse), response
    assert "fork" in response.content.lower(), response.content
    sandbox.assert_nothing_left()


def test_time_limit_holds(sandbox: Sandbox) -> None:
    marker = f"slow{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    response = sandbox.shell(f"M={marker}; sleep 30; echo $M")
    elapsed = time.monotonic() - started
    assert response == FailedResponse(message=RunFailure.TIMED_OUT.value)
    assert elapsed < 25, elapsed
    sandbox.assert_nothing_left(marker)


CHILD = """
import json, sys
from pathlib import Path
from boxmaker.sandbox.runner import run
from boxmaker.core.grants.loading import parse_grant_file
from boxmaker.core.grants.model import GrantSet
from boxmaker.core.wire.broker import ToolRequest
from boxmaker.core.policy import SessionState, decide
from boxmaker.sandbox.calls import Limits

config = json.loads(sys.stdin.readline())
limits = Limits(timeout_s=120.0, memory_bytes=96 << 20, pids=16, output_bytes=1000)
if config["kind"] == "bwrap":
    from boxmaker.sandbox.bwrap import BwrapRuntime
    from boxmaker.sandbox.cgroups import Cgroups

    parents = tuple(Path(p) for p in config["parents"])
    runtime = BwrapRuntime(Path(config["home"]), limits, Cgroups(parents, config["version"]))
else:
    from boxmaker.sandbox.podman import PodmanRuntime

    runtime = PodmanRuntime(Path(config["home"]), limits, rootfs=Path(config["rootfs"]))
grant, problems = parse_grant_file("shell.toml", config["shell_grant"].encode())
arguments = json.dumps({"command": config["command"], "cwd": config["cwd"]})
request = ToolRequest(session="s", call="c", tool="shell", arguments=arguments)
decision = decide(request, GrantSet(grants=(grant,)), SessionState(), config["now"])
print(run(decision, runtime), flush=True)
"""


def kill_the_parent_mid_call(sandbox: Sandbox, seconds: int) -> str:
    """Run a shell call of `seconds` in a brokerd-like child, SIGKILL it once the call's
    shell runs, and return the marker on the call's command line."""
    marker = f"orphan{uuid.uuid4().hex[:8]}"
    command = f"M={marker}; sleep {seconds}; echo $M"
    config = {**sandbox.child_config, "now": NOW, "command": command}
    with subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as child:
        assert child.stdin is not None
        child.stdin.write((json.dumps(config) + "\n").encode())
        child.stdin.close()
        try:
            wait_until(lambda: processes_with(marker), 60, "the call's shell to start")
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
    return marker


def test_nothing_survives_a_sigkill_of_the_parent(sandbox: Sandbox) -> None:
    marker = kill_the_parent_mid_call(sandbox, 30)
    sandbox.sweep()
    sandbox.assert_nothing_left(marker)


def test_a_call_ends_by_itself_when_its_parent_is_killed(sandbox: Sandbox) -> None:
    """No sweep this time: the call's processes (and Podman's container) go within
    seconds of brokerd, not at its time limit (two minutes here) or at the next
    start. An empty cgroup of bwrap's stays for the next start to remove."""
    marker = kill_the_parent_mid_call(sandbox, 100)
    wait_until(
        lambda: not processes_with(marker) and not sandbox.containers(),
        10,
        "the call to end by itself",
    )


def test_http_fetch_reaches_an_allowed_host(sandbox: Sandbox) -> None:
    response = sandbox.call("http_fetch", url="https://allowed.test/")
    assert isinstance(response, ResultResponse), response
    assert response.content.startswith("HTTP 200 OK\n"), response.content
    assert response.content.endswith("\n\nhello from allowed.test")
    assert response.untrusted is True
    assert not list((sandbox.home / "run" / "egress").iterdir())  # the proxy is gone
    sandbox.assert_nothing_left()


def test_http_fetch_is_refused_a_redirect_to_another_host(sandbox: Sandbox) -> None:
    response = sandbox.call("http_fetch", url="https://allowed.test/away")
    assert response == FailedResponse(message=RunFailure.FETCH_REFUSED.value)


def test_http_fetch_is_refused_a_host_that_resolves_to_nothing_allowed(sandbox: Sandbox) -> None:
    """unmapped.test is in the grant, but the proxy's resolver does not allow it."""
    response = sandbox.call("http_fetch", url="https://unmapped.test/")
    assert response == FailedResponse(message=RunFailure.FETCH_REFUSED.value)


@pytest.mark.parametrize("url", ["https://other.test/", "https://127.0.0.1/"])
def test_http_fetch_to_another_host_or_an_ip_is_denied_by_policy(
    sandbox: Sandbox, url: str
) -> None:
    """Refused before the sandbox: no spec is built. The proxy's own refusal of IP
    literals and unlisted names is covered by tests/sandbox/test_egress.py."""
    assert isinstance(sandbox.decide("http_fetch", url=url), Denial)


def test_shell_has_no_proxy_socket(sandbox: Sandbox) -> None:
    response = sandbox.shell(f'test -e "{PROXY_INSIDE}" && echo PRESENT || echo ABSENT')
    assert isinstance(response, ResultResponse), response
    assert response.content.startswith("ABSENT\n"), response.content
