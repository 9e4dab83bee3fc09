"""The Podman runtime: one tool call in a fresh rootful container, removed when it ends.

I/O: runs the `podman` client (and the toolkit inside the container) as a child
process (in `<home>/run/podman/`), `podman rm` after a call that did not end
cleanly, `podman ps` for the startup sweep, builds the rootfs directory
(`ensure_rootfs`), reads the host's cgroup and rlimit state for `preflight`, and
for `http_fetch` runs the call's egress proxy on a Unix socket under
`<home>/run/egress/`.

Inside, the container has what the bubblewrap sandbox has: `/usr` read-only (and
the `/bin`, `/lib` links into it, from a locally built rootfs: no registry is
reachable), a private `/proc`, `/dev` and a tmpfs `/tmp` (the working directory),
what the call mounts at its own path (read-only for read_file), for http_fetch
the proxy's socket and the CA certificates, and nothing else: `--network=none`
(loopback only, so the proxy socket is the only way out), no `/etc` but the
`hostname` and `mtab` Podman writes itself (`--no-hosts`, `--passwd=false`), no
capabilities, `no-new-privileges`, a read-only root (an overlay over the rootfs
directory, `:O`, so mount points made for grants never land in it). The toolkit
runs as uid 65534 in a user namespace that maps it to brokerd's own user (the
one uid mapped; uid 0 inside is unmapped), as bubblewrap does: files it writes
belong to brokerd's user, and it can reach nothing that user could not.

Limits: `--memory` (and `--memory-swap`, the same: no swap), `--pids-limit`,
explicit `--ulimit`s (root cannot raise RLIMIT_NOFILE here, and Podman's default
would try), and time twice over: a client-side deadline in `exchange` of the
tool's time plus `START_ALLOWANCE_S` (Podman's own start-up is not charged to the
tool), after which the client is killed and the container removed with `podman
rm -f -t 0 NAME` (killing the client alone does not stop a container), and
`--timeout` a few seconds later as the backstop for a brokerd that died mid-call.

Out of memory: Podman 4.3's `OOMKilled` stays false on this cgroup v1 host
(conmon misses the event) and the container's cgroup is gone once it exits, so
the container itself reports it: its program (`PODMAN_PROGRAM`) runs the toolkit
with its answer held back, then reads the `oom_kill` count of its own memory
cgroup (v1 `memory.oom_control` or v2 `memory.events`, both mounted read-only in
the container) and answers OUT_OF_MEMORY instead when a process was killed. When
the toolkit itself was the victim, the container exits with status 137 (SIGKILL;
nothing else sends it one before the deadline), which is reported the same way.
(This host's conmon does see the kill, but writes its `oom` marker file into
its working directory, the client's, instead of where Podman looks: so the
client runs in `<home>/run/podman/`, never in whatever directory brokerd has.)

What a call mounts is bound from the descriptor brokerd holds
(`boxmaker.sandbox.held`), as the source `/proc/<brokerd's pid>/fd/<n>`: the
runtime resolves that magic link to the very file brokerd opened, not to a
name. Podman's client may still turn it into a path on the way, so the toolkit
checks inside the container that every mount is the held device and inode
before it starts. A shell's masks are read-only tmpfs directories, or
`/dev/null` over a file.

Every container is named `bx-<home tag>-<random>` and labelled `boxmaker=call`;
`sweep` removes this home's containers that a killed brokerd left behind (other
brokerds' calls on the same host are not touched).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import resource
import shutil
import subprocess
import uuid
from pathlib import Path

from boxmaker.core.home.layout import Home
from boxmaker.core.runbook import Runbook
from boxmaker.sandbox.calls import (
    CA_INSIDE,
    DEFAULT_CA_FILE,
    PROXY_INSIDE,
    SANDBOX_PYTHON,
    TOOLKIT_SOURCE,
    Limits,
    answer_limit,
    call_prefix,
    parse_answer,
    toolkit_request,
)
from boxmaker.sandbox.egress import EgressProxy
from boxmaker.sandbox.held import HeldSpec, run_holding
from boxmaker.sandbox.process import exchange
from boxmaker.sandbox.resolvers import Resolver
from boxmaker.sandbox.runner import RunError, RunFailure, RunOutput, RunSpec

log = logging.getLogger(__name__)

PODMAN = "/usr/bin/podman"
DEFAULT_ROOTFS = Path("/var/lib/boxmaker-sandbox/rootfs")
LABEL = "boxmaker=call"
NOBODY = 65534
NOFILE = 1024  # --ulimit values: at or below the host's hard limits (preflight checks)
NPROC = 1024
START_ALLOWANCE_S = 3.0  # Podman's start-up, not charged to the tool's time
BACKSTOP_S = 5  # --timeout fires this long after the client-side deadline
KILLED_STATUS = 137  # 128 + SIGKILL: the container's main process was killed
PODMAN_CALL_TIMEOUT_S = 60.0  # for `podman rm` and `podman ps`
UNIFIED = Path("/sys/fs/cgroup/unified")

ROOTFS_DIRS = ("usr", "tmp", "proc", "dev", "run")
ROOTFS_LINKS = (
    ("bin", "usr/bin"),
    ("lib", "usr/lib"),
    ("lib64", "usr/lib64"),
    ("sbin", "usr/sbin"),
)

_OOM_FILES = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")
_WRAPPER = """
import io, os, sys
toolkit = {"__name__": "boxmaker_toolkit", "__builtins__": __builtins__}
exec(compile(SOURCE, "<toolkit>", "exec"), toolkit)
real, sys.stdout = sys.stdout, io.StringIO()
try:
    toolkit["main"]()
finally:
    answer, sys.stdout = sys.stdout.getvalue(), real
def oom_killed():
    for name in OOM_FILES:
        try:
            with open(name) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip() not in ("", "0"):
                        return True
        except OSError:
            continue
    return False
if oom_killed():
    answer = toolkit["answer_text"]({"ok": False, "failure": "OUT_OF_MEMORY"})
sys.stdout.write(answer)
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""
# The container's program: the toolkit, then its own cgroup's OOM count (see above).
PODMAN_PROGRAM = f"SOURCE = {TOOLKIT_SOURCE!r}\nOOM_FILES = {_OOM_FILES!r}\n{_WRAPPER}"

_UNMOUNTABLE = (",", '"', "\n", "\r")  # --mount is CSV: these would change its meaning


def podman_argv(
    held: HeldSpec,
    name: str,
    egress_socket: Path | None,
    ca_file: Path,
    limits: Limits,
    rootfs: Path,
    holder: int | None = None,
) -> list[str]:
    """podman's whole command line for a call whose mounts are `held` (golden-tested).

    `holder` is the pid whose descriptors `held` names (default: this process).

    Every option comes before `--rootfs`: that flag takes no value, the rootfs
    path is the image argument, and podman reads anything after it as the
    container's command, so an option placed later would be silently ignored.
    ValueError for a mount path that `--mount` cannot carry (see `mount_problem`).
    """
    argv = [
        PODMAN,
        "--events-backend=none",
        "run",
        "--rm",
        "--interactive",
        f"--name={name}",
        f"--label={LABEL}",
        f"--timeout={math.ceil(limits.timeout_s + START_ALLOWANCE_S) + BACKSTOP_S}",
        "--pull=never",
        "--log-driver=none",
        "--network=none",
        "--no-hosts",
        "--passwd=false",
        "--http-proxy=false",
        "--hostname=sandbox",
        "--read-only",
        "--cap-drop=all",
        "--security-opt=no-new-privileges",
        f"--uidmap={NOBODY}:0:1",
        f"--gidmap={NOBODY}:0:1",
        f"--user={NOBODY}:{NOBODY}",
        "--sysctl=net.ipv4.ping_group_range=65534 65534",  # the default, 0 0, is unmapped
        f"--memory={limits.memory_bytes}",
        f"--memory-swap={limits.memory_bytes}",
        f"--pids-limit={limits.pids}",
        f"--ulimit=nofile={NOFILE}:{NOFILE}",
        f"--ulimit=nproc={NPROC}:{NPROC}",
        "--mount=type=bind,source=/usr,destination=/usr,ro=true",
        "--tmpfs=/tmp",
    ]
    if egress_socket is not None:
        argv += [
            _bind(str(ca_file), CA_INSIDE, writable=False),
            _bind(str(egress_socket), PROXY_INSIDE, writable=True),
        ]
    pid = os.getpid() if holder is None else holder
    for bound in (*held.mounts, *held.pins):
        argv.append(_bind(f"/proc/{pid}/fd/{bound.fd}", bound.path, writable=bound.writable))
    for mask in held.masks:
        if mask.is_dir:
            problem = mount_problem(mask.path)
            if problem is not None:
                raise ValueError(problem)
            argv.append(f"--mount=type=tmpfs,destination={mask.path},ro=true,notmpcopyup")
        else:
            argv.append(_bind("/dev/null", mask.path, writable=False))
    argv += [
        "--unsetenv-all",
        "--env=PATH=/usr/bin:/bin",
        "--env=HOME=/tmp",
        "--env=LANG=C.UTF-8",
        "--workdir=/tmp",
        "--rootfs",
        f"{rootfs}:O",
        SANDBOX_PYTHON,
        "-I",
        "-S",
        "-c",
        PODMAN_PROGRAM,
    ]
    return argv


def mount_problem(path: str) -> str | None:
    """Why `path` cannot be given to `--mount`, or None."""
    if any(c in path for c in _UNMOUNTABLE):
        return "a comma, double quote or line break in a path cannot be passed to podman --mount"
    return None


def _bind(source: str, destination: str, *, writable: bool) -> str:
    for path in (source, destination):
        problem = mount_problem(path)
        if problem is not None:
            raise ValueError(problem)
    return f"--mount=type=bind,source={source},destination={destination}" + (
        "" if writable else ",ro=true"
    )


def rootfs_problem(path: Path) -> str | None:
    """What `path` lacks as the container's rootfs, or None when it is complete."""
    for directory in ROOTFS_DIRS:
        if not (path / directory).is_dir() or (path / directory).is_symlink():
            return f"{path / directory} is missing"
    for link, target in ROOTFS_LINKS:
        if not (path / link).is_symlink() or os.readlink(path / link) != target:
            return f"{path / link} is not a link to {target}"
    return None


def ensure_rootfs(path: Path) -> Path:
    """Build the rootfs directory at `path` if it is missing or incomplete; return `path`.

    It holds only empty mount points and the links into `/usr` (bound from the host
    read-only at each call). Built beside `path` and renamed into place.
    """
    if rootfs_problem(path) is None:
        return path
    if path.exists() or path.is_symlink():
        raise FileExistsError(f"{path} exists but is not a complete sandbox rootfs")
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    building = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    building.mkdir(mode=0o755)
    try:
        for directory in ROOTFS_DIRS:
            (building / directory).mkdir(mode=0o755)
        for link, target in ROOTFS_LINKS:
            (building / link).symlink_to(target)
        building.rename(path)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        if rootfs_problem(path) is None:  # another process built it first
            return path
        raise
    return path


def _hybrid_controllers(unified: Path = UNIFIED) -> list[str]:
    """Controllers enabled in a hybrid host's cgroup v2 mount (crun refuses to run then)."""
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return []  # unified (v2 only): not hybrid
    try:
        return (unified / "cgroup.controllers").read_text().split()
    except OSError:
        return []


class PodmanRuntime:
    """`Runtime` over rootful Podman. Build it once at startup; `run` is thread-safe."""

    def __init__(
        self,
        home: Path,
        limits: Limits,
        *,
        resolver: Resolver | None = None,
        ca_file: Path = DEFAULT_CA_FILE,
        rootfs: Path | None = None,
    ) -> None:
        self._egress_dir = Home(home).egress
        self._client_dir = Home(home).run / "podman"  # the client's cwd: see the docstring
        self._prefix = call_prefix(home)
        self._limits = limits
        self._resolver = resolver
        self._ca_file = ca_file
        self._rootfs = rootfs if rootfs is not None else DEFAULT_ROOTFS

    @staticmethod
    def preflight(rootfs: Path | None = None) -> list[str]:
        """What this host lacks for the runtime, one line each (empty: ready)."""
        rootfs = rootfs if rootfs is not None else DEFAULT_ROOTFS
        fix = f"; {Runbook.SANDBOX_UNAVAILABLE.pointer}"
        problems = []
        if shutil.which(PODMAN) is None:
            problems.append(f"podman is not installed at {PODMAN} (apt-get install podman){fix}")
        if not Path(SANDBOX_PYTHON).is_file():
            problems.append(f"{SANDBOX_PYTHON} is missing (apt-get install python3){fix}")
        problem = rootfs_problem(rootfs)
        if problem is not None:
            problems.append(
                f"the sandbox rootfs is not ready: {problem}"
                f" (run scripts/prepare-sandbox-host --rootfs {rootfs} as root){fix}"
            )
        for controller in _hybrid_controllers():
            problems.append(
                f"cgroup controller {controller} is in the hybrid host's v2 mount, which crun"
                f" refuses (mkdir -p /sys/fs/cgroup/{controller} && mount -t cgroup -o"
                f" {controller} cgroup /sys/fs/cgroup/{controller}, once per boot; or run"
                f" scripts/prepare-sandbox-host as root){fix}"
            )
        if os.geteuid() != 0 and not Path("/sys/fs/cgroup/cgroup.controllers").exists():
            problems.append(
                "rootless podman cannot enforce memory and process limits on cgroup v1"
                f' (run brokerd as root, or use backend = "bwrap"){fix}'
            )
        for rlimit, wanted, label in (
            (resource.RLIMIT_NOFILE, NOFILE, "open files"),
            (resource.RLIMIT_NPROC, NPROC, "processes"),
        ):
            hard = resource.getrlimit(rlimit)[1]
            if hard != resource.RLIM_INFINITY and hard < wanted:
                problems.append(
                    f"the hard limit of {label} is {hard}, below the {wanted} the container"
                    f" is given (raise it in /etc/security/limits.conf){fix}"
                )
        return problems

    def sweep(self) -> int:
        """Remove this home's containers that a killed brokerd left behind; how many."""
        try:
            listed = subprocess.run(
                [
                    PODMAN,
                    "--events-backend=none",
                    "ps",
                    "--all",
                    f"--filter=label={LABEL}",
                    "--format={{.Names}}",
                ],
                capture_output=True,
                text=True,
                timeout=PODMAN_CALL_TIMEOUT_S,
                check=True,
            )
        except (OSError, subprocess.SubprocessError):
            log.exception("event=podman_sweep_failed")
            return 0
        names = [n for n in listed.stdout.split() if n.startswith(self._prefix)]
        for name in names:
            remove_container(name)
        return len(names)

    def run(self, spec: RunSpec) -> RunOutput | RunError:
        if any(mount_problem(p) for p in (*(m.path for m in spec.mounts), *spec.masks)):
            log.warning("event=sandbox_unmountable_path")
            return RunError(RunFailure.SANDBOX_FAILED)
        return run_holding(spec, lambda held: self._run_held(spec, held))

    def _run_held(self, spec: RunSpec, held: HeldSpec) -> RunOutput | RunError:
        name = f"{self._prefix}{uuid.uuid4().hex[:16]}"  # short: the socket path has a limit
        if spec.egress is None:
            return self._run_in(name, spec, held, None)
        self._egress_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        socket_path = self._egress_dir / f"{name}.sock"
        with EgressProxy(socket_path, spec.egress, self._resolver) as _proxy:
            return self._run_in(name, spec, held, socket_path)

    def _run_in(
        self, name: str, spec: RunSpec, held: HeldSpec, egress: Path | None
    ) -> RunOutput | RunError:
        try:
            argv = podman_argv(held, name, egress, self._ca_file, self._limits, self._rootfs)
        except ValueError:
            log.warning("event=sandbox_unmountable_path")
            return RunError(RunFailure.SANDBOX_FAILED)
        try:
            self._client_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                cwd=self._client_dir,
                env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"},
            )
        except OSError:
            log.exception("event=sandbox_start_failed")
            return RunError(RunFailure.SANDBOX_FAILED)
        done = exchange(
            proc,
            toolkit_request(spec, self._limits, held, _OOM_FILES),
            self._limits.timeout_s + START_ALLOWANCE_S,
            answer_limit(self._limits),
        )
        if done.status != 0:
            remove_container(name)  # --rm did not run, or the client was killed
        if done.timed_out:
            return RunError(RunFailure.TIMED_OUT)
        if done.status == KILLED_STATUS:
            return RunError(RunFailure.OUT_OF_MEMORY)
        if done.status != 0:
            log.warning("event=sandbox_failed status=%s stderr=%r", done.status, done.stderr[-500:])
            return RunError(RunFailure.SANDBOX_FAILED)
        return parse_answer(done.stdout)


def remove_container(name: str) -> None:
    """`podman rm -f -t 0 NAME`: kill and remove it, if it is there at all."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        removed = subprocess.run(
            [PODMAN, "--events-backend=none", "rm", "--force", "--time=0", "--ignore", name],
            capture_output=True,
            timeout=PODMAN_CALL_TIMEOUT_S,
            check=False,
        )
        if removed.returncode == 0:
            return
        log.error("event=podman_rm_failed name=%s stderr=%r", name, removed.stderr[-500:])
        return
    log.error("event=podman_rm_timed_out name=%s", name)
