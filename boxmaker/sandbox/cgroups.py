"""Per-call cgroups: the memory and process limits that bubblewrap has none of.

I/O: the cgroup file systems under /sys/fs/cgroup. Works with the unified (v2)
hierarchy, where a call's group is `<base>/boxmaker/<call>`, and with v1, where it
is a `boxmaker/<call>` group under both the `memory` and the `pids` controllers.
The `boxmaker` parent must exist and be writable by brokerd's user: host
preparation (scripts/prepare-sandbox-host) makes it, and root makes it itself.

A command enters its group before it execs (a shell writes its own pid into each
`cgroup.procs`, then execs the command), so nothing it forks can escape the
limits. After the call every process left in the group is killed and the group
removed.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from boxmaker.core.errors import UnavailableError
from boxmaker.core.runbook import Runbook

log = logging.getLogger(__name__)

BASE = Path("/sys/fs/cgroup")
PARENT = "boxmaker"
KILL_POLL_FIRST_S = 0.0002  # kill_all's first pause; it doubles up to the next
KILL_POLL_MAX_S = 0.005
PREPARE_HINT = f"run scripts/prepare-sandbox-host as root; {Runbook.SANDBOX_UNAVAILABLE.pointer}"


class CgroupError(UnavailableError):
    """Per-call cgroups cannot be made here; the text says what is missing."""


@dataclass(frozen=True)
class CallGroup:
    """One call's group: the directories that make it up (one on v2, two on v1)."""

    dirs: tuple[Path, ...]
    version: int

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run so that its first process is in this group before it starts."""
        script = (
            'for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; shift; done;'
            ' shift; exec "$@"'
        )
        procs = [str(d / "cgroup.procs") for d in self.dirs]
        return ["/bin/sh", "-c", script, "sh", *procs, "--", *argv]

    def oom_killed(self) -> bool:
        """True if the kernel killed something in this group for lack of memory."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        memory_dir = self.dirs[0]
        try:
            text = (memory_dir / name).read_text()
        except OSError:
            return False
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip() not in ("", "0"):
                return True
        return False

    def kill_all(self, deadline_s: float = 5.0) -> None:
        """SIGKILL every process still in the group, until none is left (or the deadline).

        After a call, what is left is most often bubblewrap's last process still
        tearing down the namespaces, gone within a millisecond or two: so the first
        looks come quickly, and only later ones wait up to `KILL_POLL_MAX_S`.
        """
        end = time.monotonic() + deadline_s
        pause = KILL_POLL_FIRST_S
        while time.monotonic() < end:
            pids: set[int] = set()
            for directory in self.dirs:
                try:
                    pids.update(int(p) for p in (directory / "cgroup.procs").read_text().split())
                except OSError:
                    continue
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
            time.sleep(pause)  # killed processes leave the group once they are reaped
            pause = min(pause * 2, KILL_POLL_MAX_S)
        log.error("event=cgroup_not_empty dirs=%s", self.dirs)

    def remove(self) -> None:
        """Kill what is left in the group, then remove its directories."""
        self.kill_all()
        for directory in self.dirs:
            try:
                directory.rmdir()
            except FileNotFoundError:
                continue
            except OSError:
                log.error("event=cgroup_not_removed dir=%s", directory)


@dataclass(frozen=True)
class Cgroups:
    """Where per-call groups are made on this host."""

    parents: tuple[Path, ...]  # v2: (boxmaker,); v1: (memory/boxmaker, pids/boxmaker)
    version: int

    @classmethod
    def detect(cls, base: Path = BASE) -> Cgroups:
        """The host's layout, making the boxmaker parent if allowed; CgroupError if none works."""
        if (base / "cgroup.controllers").exists():
            controllers = (base / "cgroup.controllers").read_text().split()
            if not {"memory", "pids"} <= set(controllers):
                raise CgroupError(f"the cgroup v2 hierarchy lacks memory or pids; {PREPARE_HINT}")
            parents: tuple[Path, ...] = (base / PARENT,)
            version = 2
        elif (base / "memory").is_dir() and (base / "pids").is_dir():
            parents = (base / "memory" / PARENT, base / "pids" / PARENT)
            version = 1
        else:
            raise CgroupError(f"no memory and pids cgroup controllers at {base}; {PREPARE_HINT}")
        for parent in parents:
            try:
                parent.mkdir(exist_ok=True)
            except OSError as exc:
                raise CgroupError(f"cannot make {parent}: {exc.strerror}; {PREPARE_HINT}") from exc
            if not os.access(parent, os.W_OK):
                raise CgroupError(f"{parent} is not writable by this user; {PREPARE_HINT}")
        if version == 2:
            _enable_v2_controllers(parents[0])
        return cls(parents=parents, version=version)

    def create(self, name: str, memory_bytes: int, pids: int) -> CallGroup:
        """A new group with these limits; CgroupError if it cannot be made."""
        dirs = tuple(parent / name for parent in self.parents)
        group = CallGroup(dirs=dirs, version=self.version)
        try:
            for directory in dirs:
                directory.mkdir()
            if self.version == 2:
                (dirs[0] / "memory.max").write_text(str(memory_bytes))
                swap = dirs[0] / "memory.swap.max"
                if swap.exists():
                    swap.write_text("0")
                (dirs[0] / "pids.max").write_text(str(pids))
            else:
                (dirs[0] / "memory.limit_in_bytes").write_text(str(memory_bytes))
                swap = dirs[0] / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    swap.write_text(str(memory_bytes))
                (dirs[1] / "pids.max").write_text(str(pids))
        except OSError as exc:
            group.remove()
            raise CgroupError(f"cannot set up the call's cgroup: {exc.strerror}") from exc
        return group

    def sweep(self, prefix: str) -> int:
        """Kill and remove the call groups named `prefix...` (a killed brokerd's leftovers).

        Only one home's: other brokerds on the same host share the parent, and
        their calls in flight are theirs.
        """
        names: set[str] = set()
        for parent in self.parents:
            try:
                names.update(
                    p.name for p in parent.iterdir() if p.is_dir() and p.name.startswith(prefix)
                )
            except OSError:
                continue
        for name in names:
            CallGroup(tuple(parent / name for parent in self.parents), self.version).remove()
        return len(names)


def _enable_v2_controllers(parent: Path) -> None:
    control = parent / "cgroup.subtree_control"
    try:
        enabled = control.read_text().split()
        if "memory" not in enabled or "pids" not in enabled:
            control.write_text("+memory +pids")
    except OSError as exc:
        raise CgroupError(f"cannot enable memory and pids in {parent}; {PREPARE_HINT}") from exc
