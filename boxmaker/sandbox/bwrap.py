"""The bubblewrap runtime: one tool call in a fresh set of namespaces, in its own cgroup.

I/O: runs `bwrap` (and the toolkit inside it) as a child process, makes and
removes the call's cgroup, and for `http_fetch` runs the call's egress proxy on a
Unix socket under `<home>/run/egress/`. Inside, the sandbox has `/usr` read-only
(and the `/bin`, `/lib` links into it), a private `/proc`, `/dev` and `/tmp`,
what the call mounts at its own path (`boxmaker.sandbox.held`: bound from the
descriptor brokerd holds, `--bind-fd`, never by name; read-only for read_file),
a shell's masked paths as read-only empty directories or unreadable files, for
http_fetch the proxy's socket and the CA certificates, and nothing else: no `/etc`, no
network but its own loopback, no capabilities, not uid 0, a new session, and it
dies with brokerd (`--die-with-parent`; its pid namespace takes everything with it).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import uuid
from pathlib import Path

from boxmaker.core.home.layout import Home
from boxmaker.sandbox.calls import (
    CA_INSIDE,
    DEFAULT_CA_FILE,
    PROXY_INSIDE,
    SANDBOX_PYTHON,
    TOOLKIT_CODE,
    TOOLKIT_PROGRAM,
    Limits,
    answer_limit,
    call_prefix,
    parse_answer,
    toolkit_request,
)
from boxmaker.sandbox.cgroups import CallGroup, CgroupError, Cgroups
from boxmaker.sandbox.egress import EgressProxy
from boxmaker.sandbox.held import HeldSpec, run_holding
from boxmaker.sandbox.process import exchange
from boxmaker.sandbox.resolvers import Resolver
from boxmaker.sandbox.runner import RunError, RunFailure, RunOutput, RunSpec

log = logging.getLogger(__name__)

BWRAP = "/usr/bin/bwrap"
NOBODY = 65534


def bwrap_argv(held: HeldSpec, egress_socket: Path | None, ca_file: Path) -> list[str]:
    """bwrap's whole command line for a call whose mounts are `held` (golden-tested).

    Mounts and pins are bound from their descriptors (passed to bwrap with
    `pass_fds`), in order: each mount, then the directories pinned onto
    themselves, then the masks over what the sandbox must not see.
    """
    argv = [
        BWRAP,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--cap-drop",
        "ALL",
        "--uid",
        str(NOBODY),
        "--gid",
        str(NOBODY),
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/sbin",
        "/sbin",
        "--symlink",
        "usr/lib",
        "/lib",
    ]
    if Path("/usr/lib64").is_dir():
        argv += ["--symlink", "usr/lib64", "/lib64"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]  # noqa: S108
    if egress_socket is not None:
        argv += ["--ro-bind", str(ca_file), CA_INSIDE, "--bind", str(egress_socket), PROXY_INSIDE]
    for bound in (*held.mounts, *held.pins):
        argv += ["--bind-fd" if bound.writable else "--ro-bind-fd", str(bound.fd), bound.path]
    for mask in held.masks:
        if mask.is_dir:
            argv += ["--tmpfs", mask.path, "--remount-ro", mask.path]
        else:
            argv += ["--ro-bind", "/dev/null", mask.path]  # nodev: it cannot even be opened
    argv += [
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "HOME",
        "/tmp",  # noqa: S108 (the sandbox's own tmpfs)
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--chdir",
        "/tmp",  # noqa: S108
        SANDBOX_PYTHON,
        "-I",
        "-S",
        "-c",
        TOOLKIT_PROGRAM,  # the toolkit; its code object comes first on standard input
    ]
    return argv


class BwrapRuntime:
    """`Runtime` over bubblewrap. Build it once at startup; `run` is thread-safe."""

    def __init__(
        self,
        home: Path,
        limits: Limits,
        cgroups: Cgroups,
        *,
        resolver: Resolver | None = None,
        ca_file: Path = DEFAULT_CA_FILE,
    ) -> None:
        self._egress_dir = Home(home).egress
        self._prefix = call_prefix(home)
        self._limits = limits
        self._cgroups = cgroups
        self._resolver = resolver
        self._ca_file = ca_file

    @staticmethod
    def preflight() -> list[str]:
        """What this host lacks for the runtime, one line each (empty: ready)."""
        problems = []
        if shutil.which(BWRAP) is None:
            problems.append(f"bubblewrap is not installed at {BWRAP} (apt-get install bubblewrap)")
        if not Path(SANDBOX_PYTHON).is_file():
            problems.append(f"{SANDBOX_PYTHON} is missing (apt-get install python3)")
        try:
            Cgroups.detect()
        except CgroupError as exc:
            problems.append(str(exc))
        return problems

    def sweep(self) -> int:
        """Remove this home's call groups that a killed brokerd left behind; how many."""
        return self._cgroups.sweep(self._prefix)

    def run(self, spec: RunSpec) -> RunOutput | RunError:
        return run_holding(spec, lambda held: self._run_held(spec, held))

    def _run_held(self, spec: RunSpec, held: HeldSpec) -> RunOutput | RunError:
        name = f"{self._prefix}{uuid.uuid4().hex}"
        try:
            group = self._cgroups.create(name, self._limits.memory_bytes, self._limits.pids)
        except CgroupError:
            log.exception("event=sandbox_cgroup_failed")
            return RunError(RunFailure.SANDBOX_FAILED)
        try:
            if spec.egress is None:
                return self._run_in(group, spec, held, None)
            self._egress_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            socket_path = self._egress_dir / f"{name}.sock"
            with EgressProxy(socket_path, spec.egress, self._resolver) as _proxy:
                return self._run_in(group, spec, held, socket_path)
        finally:
            group.remove()

    def _run_in(
        self, group: CallGroup, spec: RunSpec, held: HeldSpec, egress: Path | None
    ) -> RunOutput | RunError:
        argv = group.wrap(bwrap_argv(held, egress, self._ca_file))
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env={"PATH": "/usr/bin:/bin"},
                pass_fds=held.fds,
            )
        except OSError:
            log.exception("event=sandbox_start_failed")
            return RunError(RunFailure.SANDBOX_FAILED)
        done = exchange(
            proc,
            TOOLKIT_CODE + toolkit_request(spec, self._limits, held),
            self._limits.timeout_s,
            answer_limit(self._limits),
        )
        group.kill_all()
        if done.timed_out:
            return RunError(RunFailure.TIMED_OUT)
        if group.oom_killed():
            return RunError(RunFailure.OUT_OF_MEMORY)
        if done.status != 0:
            log.warning("event=sandbox_failed status=%s stderr=%r", done.status, done.stderr[-500:])
            return RunError(RunFailure.SANDBOX_FAILED)
        return parse_answer(done.stdout)
