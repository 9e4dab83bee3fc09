"""A temporary tree of grants and files that sandbox tests run calls against.

I/O: the tree's files and, for `processes_with`, /proc. Shared by the sandbox
conformance and containment suites (tests/sandbox), whose fixtures build a
`Sandbox` around each runtime.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from boxmaker.core.grants.loading import parse_grant_file
from boxmaker.core.grants.model import Grant, GrantSet
from boxmaker.core.policy import Decision, Denial, SessionState, decide
from boxmaker.core.wire.broker import FailedResponse, ResultResponse, ToolRequest
from boxmaker.sandbox.calls import Limits
from boxmaker.sandbox.runner import Runtime, run
from boxmaker.testing.waiting import wait_until

NOW = "2026-11-30T12:00:00.000Z"
LIMITS = Limits(timeout_s=4.0, memory_bytes=96 * 1024 * 1024, pids=16, output_bytes=1000)
WAIT_S = 20.0  # deadline for conditions polled after a call


@dataclass
class Sandbox:
    kind: str
    root: Path  # notes/ (read_file), scratch/ (shell, write_file), secret.txt, outside/
    home: Path
    runtime: Runtime
    grants: GrantSet
    child_config: dict[str, Any]
    containers: Callable[[], list[str]]
    cgroup_dirs: Callable[[], list[str]]
    sweep: Callable[[], None]
    extra: dict[str, Any] = field(default_factory=dict)

    def with_grants(self, *extra: Grant) -> Sandbox:
        """The same sandbox, deciding with `extra` grants added."""
        return replace(self, grants=GrantSet(grants=(*self.grants.grants, *extra)))

    def decide(self, tool: str, **arguments: Any) -> Decision | Denial:
        request = ToolRequest(session="s", call="c", tool=tool, arguments=json.dumps(arguments))
        outcome = decide(request, self.grants, SessionState(), NOW)
        assert isinstance(outcome, Decision | Denial), outcome
        return outcome

    def call(self, tool: str, **arguments: Any) -> ResultResponse | FailedResponse:
        decision = self.decide(tool, **arguments)
        assert isinstance(decision, Decision), decision
        return run(decision, self.runtime)

    def shell(self, command: str) -> ResultResponse | FailedResponse:
        return self.call("shell", command=command, cwd=str(self.root / "scratch"))

    def leftovers(self, marker: str | None = None) -> list[str]:
        found = [f"container {name}" for name in self.containers()]
        found += [f"cgroup {path}" for path in self.cgroup_dirs()]
        if marker is not None:
            found += [f"process {pid}" for pid in processes_with(marker)]
        return found

    def assert_nothing_left(self, marker: str | None = None) -> None:
        left: list[str] = []

        def cleared() -> bool:
            left[:] = self.leftovers(marker)
            return not left

        with contextlib.suppress(TimeoutError):  # the assertion below says what is left
            wait_until(cleared, WAIT_S, "nothing left behind by the call")
        assert left == [], f"left behind by the call: {left}"


def processes_with(marker: str) -> list[int]:
    """Pids (not ours) whose command line holds `marker`."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def grant(name: str, text: str) -> Grant:
    parsed, problems = parse_grant_file(name, text.encode())
    assert parsed is not None, problems
    return parsed


def make_grants(root: Path) -> GrantSet:
    auto = 'mode = "auto"\nmax_taint = "secret"\nresult_class = "private"\n'
    return GrantSet(
        grants=(
            grant("notes.toml", f'tool = "read_file"\n{auto}constraints.paths = ["{root}/notes"]'),
            grant(
                "linked.toml", f'tool = "read_file"\n{auto}constraints.paths = ["{root}/linked"]'
            ),
            grant("shell.toml", f'tool = "shell"\n{auto}constraints.paths = ["{root}/scratch"]'),
            grant(
                "write.toml", f'tool = "write_file"\n{auto}constraints.paths = ["{root}/scratch"]'
            ),
            grant(
                "fetch.toml",
                'tool = "http_fetch"\nmode = "auto"\nmax_taint = "secret"\n'
                'result_class = "public"\nuntrusted = true\n'
                'constraints.hosts = ["allowed.test", "unmapped.test"]',
            ),
        )
    )


def make_tree(root: Path) -> None:
    (root / "notes").mkdir()
    (root / "notes" / "a.md").write_text("hello notes\n")
    (root / "secret.txt").write_text("the secret outside every grant\n")
    (root / "notes" / "evil").symlink_to(root / "secret.txt")
    (root / "notes" / "shadow").symlink_to("/etc/shadow")
    (root / "linked").symlink_to(root / "notes")
    (root / "scratch").mkdir()
    (root / "outside").mkdir()
    (root / "outside" / "kept.txt").write_text("unchanged\n")
    (root / "scratch" / "escape").symlink_to(root / "outside")
    (root / "scratch" / "kept-link.txt").symlink_to(root / "outside" / "kept.txt")
