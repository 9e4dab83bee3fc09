"""The agent eval's tree (`bench/agent_eval.py`): brokerd, memoryd and loopd as the real
console scripts on a temporary home, the grants, the workspace, and their resets.

I/O: one fixed directory, `EVAL_BASE` (home, grants, configuration files, the
workspace: the requests name its paths, so every run gives the model the same
tokens; locked, and another eval at once gets a temporary one), child
processes (`boxmaker.testing.processes.DaemonProcess`, which runs `<role> serve
--config` as supervisord would), their sockets, and brokerd's audit log.

    grants      written once for every request (`write_grants`), the owner's example
                grants (boxmaker/bxctl/data/grants.example) pointed at the workspace:
                read_file and write_file in the workspace without asking; shell asked
                for, both in the workspace (`cwd` inside it) and without a `cwd` (the
                sandbox's own /tmp, nothing of the workspace mounted: a grant without
                paths covers exactly the calls without one, `core.policy`);
                http_fetch without asking, public and untrusted, to the hosts of the
                held-out set's URLs (none resolves, so a fetch fails after its
                decision); memory_add, memory_replace and memory_consolidate asked for,
                memory_note and memory_recall not. Every grant allows every taint, so
                no call is denied for the session's taint.
    workspace   one folder at one path (the grants name it), emptied before each
                request and filled with the request's files; the folders its expected
                calls name are made too, so a write into `band/` finds the folder.
    memory      a request whose turn changed memoryd's files (a memory write ran) is
                followed by a fresh memoryd over an empty memory folder, so no request
                sees what another one stored: each starts from memoryd's own start.
                Sessions are independent otherwise (a fresh session id each, brokerd's
                session state and loopd's log are per session), so the tree stays up.
    loopd       `[model] path` (empty: the embedded model), `adapter` (only when
                given), the reply budget `max_tokens` (always written: the eval must
                know it to tell a reply cut off at it) and a fixed `seed`; restarted
                after a turn the eval stopped waiting for, since loopd would go on
                generating it and hold up the next request.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import tomli_w
from agent_eval_judge import Request

from boxmaker.core.home.layout import Home
from boxmaker.testing.homes import make_home, write_config, write_grant
from boxmaker.testing.processes import DaemonProcess

LOOPD_START_S = 600.0  # the first start assembles the embedded model
# one fixed place: the requests name the workspace's paths, so a path of its own each run
# would give the model other tokens each run (two evals of one adapter differed by two
# requests in 151 that way); another eval running at once takes a path of its own
EVAL_BASE = Path(tempfile.gettempdir()) / "bxeval-tree"


def _eval_base() -> tuple[Path, int | None]:
    """EVAL_BASE, emptied, and the descriptor of its lock; a fresh temporary folder
    (and None) when another eval holds it."""
    lock = os.open(f"{EVAL_BASE}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock)
        print(
            f"agent eval: another eval holds {EVAL_BASE}; this one runs in a folder of its "
            "own, so its requests name other paths and its figures may differ a little",
            file=sys.stderr,
        )
        return Path(tempfile.mkdtemp(prefix="bxeval-")), None
    shutil.rmtree(EVAL_BASE, ignore_errors=True)
    EVAL_BASE.mkdir(mode=0o700)
    return EVAL_BASE, lock


ROLE_START_S = 60.0
SEED = 1


@dataclass(frozen=True)
class LoopdSettings:
    model: str  # "" = the embedded default model
    adapter: str | None  # None: the key is not written
    reply_tokens: int
    keys: tuple[tuple[str, str | int | float], ...] = ()  # more [model] keys (`--model-key`)

    def toml(self, home: Path) -> str:
        model: dict[str, str | int | float] = {
            "path": self.model,
            "max_tokens": self.reply_tokens,
            "seed": SEED,
            **dict(self.keys),
        }
        if self.adapter is not None:
            model["adapter"] = self.adapter
        return tomli_w.dumps({"paths": {"home": str(home)}, "model": model})


def fetch_hosts(requests: Iterable[Request]) -> list[str]:
    """The hosts of every URL an expected http_fetch call names, sorted."""
    hosts = set()
    for request in requests:
        for call in request.expect:
            url = call.arguments.get("url") if call.tool == "http_fetch" else None
            if isinstance(url, str) and urlsplit(url).hostname:
                hosts.add(str(urlsplit(url).hostname))
    return sorted(hosts)


def write_grants(directory: Path, workspace: Path, hosts: list[str]) -> None:
    """The grants the module docstring lists."""
    place = [str(workspace)]
    write_grant(directory, "workspace-read", tool="read_file", paths=place)
    write_grant(directory, "workspace-write", tool="write_file", paths=place)
    write_grant(directory, "workspace-shell", tool="shell", mode="ask", paths=place)
    write_grant(directory, "sandbox-shell", tool="shell", mode="ask")
    if hosts:
        write_grant(
            directory,
            "fetch",
            tool="http_fetch",
            result_class="public",
            untrusted=True,
            hosts=hosts,
        )
    for tool in ("memory_add", "memory_replace", "memory_consolidate"):
        write_grant(directory, tool.replace("_", "-"), tool=tool, mode="ask")
    for tool in ("memory_note", "memory_recall"):
        write_grant(directory, tool.replace("_", "-"), tool=tool)


def _fingerprint(directory: Path) -> list[tuple[str, int, int]]:
    """Each file under `directory`: its path, size and modification time."""
    if not directory.exists():
        return []
    return sorted(
        (str(p.relative_to(directory)), p.stat().st_size, p.stat().st_mtime_ns)
        for p in directory.rglob("*")
        if p.is_file()
    )


class EvalTree:
    """The three roles on one temporary home; `stop` ends them and removes it all."""

    def __init__(
        self,
        loopd: LoopdSettings,
        hosts: list[str],
        ttl_ms: int,
        grants: Callable[[Path, Path, list[str]], None] | None = None,
    ) -> None:
        """`grants` writes the grant files (directory, workspace, hosts); default
        `write_grants`."""
        self.base, self._lock = _eval_base()
        self.home = make_home(self.base)
        self.place = Home(self.home)
        self.workspace = self.base / "ws"
        self.workspace.mkdir(mode=0o700)
        self.settings = loopd
        folder = self.base / "grants"
        (grants or write_grants)(folder, self.workspace, hosts)
        self._brokerd_toml = write_config(
            self.base / "brokerd.toml", self.home, folder, ttl_ms=ttl_ms, backend="bwrap"
        )
        self._memoryd_toml = self.base / "memoryd.toml"
        self._memoryd_toml.write_text(tomli_w.dumps({"paths": {"home": str(self.home)}}))
        self._loopd_toml = self.base / "loopd.toml"
        self._loopd_toml.write_text(loopd.toml(self.home))
        self.brokerd: DaemonProcess | None = None
        self.memoryd: DaemonProcess | None = None
        self.loopd: DaemonProcess | None = None
        self._memory_start: list[tuple[str, int, int]] = []

    def start(self) -> None:
        self._start_memoryd()
        self.brokerd = DaemonProcess(self._brokerd_toml)
        self.brokerd.wait_serving([self.place.broker_socket, self.place.admin_socket], ROLE_START_S)
        self.start_loopd()

    def _start_memoryd(self) -> None:
        self.memoryd = DaemonProcess(self._memoryd_toml, role="memoryd")
        sockets = [
            self.place.loop_memory_socket,
            self.place.broker_memory_socket,
            self.place.owner_memory_socket,
        ]
        self.memoryd.wait_serving(sockets, ROLE_START_S)
        self._memory_start = _fingerprint(self.place.memory)

    def start_loopd(self) -> None:
        self.loopd = DaemonProcess(self._loopd_toml, role="loopd")
        self.loopd.wait_serving([self.place.loop_socket], LOOPD_START_S)

    def restart_loopd(self) -> None:
        if self.loopd is not None:
            self.loopd.stop(timeout_s=30)
        self.start_loopd()

    def reset_memory(self) -> bool:
        """A fresh memoryd over an empty folder if the last turn changed it; whether it did."""
        if _fingerprint(self.place.memory) == self._memory_start:
            return False
        if self.memoryd is not None:
            self.memoryd.stop(timeout_s=30)
        shutil.rmtree(self.place.memory, ignore_errors=True)
        self._start_memoryd()
        return True

    def fill_workspace(self, request: Request) -> None:
        """The workspace emptied, then the request's files and the folders it names."""
        for entry in self.workspace.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        named = [c.arguments.get("path") for c in request.expect]
        for path in named:
            if isinstance(path, str) and Path(path).is_relative_to(self.workspace):
                Path(path).parent.mkdir(parents=True, exist_ok=True)
        for path, text in request.files.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")

    def logs(self) -> str:
        """What each role wrote, for a start that failed."""
        roles = (("memoryd", self.memoryd), ("brokerd", self.brokerd), ("loopd", self.loopd))
        return "\n".join(f"== {name}\n{d.stderr}" for name, d in roles if d is not None)

    def stop(self) -> None:
        for daemon in (self.loopd, self.brokerd, self.memoryd):
            if daemon is not None:
                daemon.stop(timeout_s=30)
        shutil.rmtree(self.base, ignore_errors=True)
        if self.home.parent != self.base:  # make_home's short directory
            shutil.rmtree(self.home.parent, ignore_errors=True)
        if self._lock is not None:
            os.close(self._lock)  # the next eval may take the place
            self._lock = None
