"""A brokerd's start-up sweep removes its own home's leftovers, never another's.

Two brokerds on one host share the `boxmaker` cgroup parent (and Podman's
container list): a sweep that took everything would kill the other's calls in
flight. I/O: a private cgroup sub-parent, and Podman's container list.
"""

from __future__ import annotations

from pathlib import Path

from support.sandbox_fixtures import private_cgroups, require

from boxmaker.sandbox.bwrap import BwrapRuntime
from boxmaker.sandbox.calls import call_prefix
from boxmaker.testing.sandbox_tree import LIMITS


def test_bwrap_sweeps_only_its_own_homes_call_groups(rootfs: Path) -> None:
    require("bwrap", rootfs)
    mine, theirs = Path("/srv/bx-a"), Path("/srv/bx-b")
    with private_cgroups() as cgroups:
        runtime = BwrapRuntime(mine, LIMITS, cgroups)
        left = cgroups.create(call_prefix(mine) + "left", LIMITS.memory_bytes, LIMITS.pids)
        live = cgroups.create(call_prefix(theirs) + "live", LIMITS.memory_bytes, LIMITS.pids)
        assert runtime.sweep() == 1
        assert not any(d.exists() for d in left.dirs)
        assert all(d.exists() for d in live.dirs)  # the other brokerd's call is untouched
        live.remove()


def test_each_home_has_its_own_prefix() -> None:
    homes = [Path("/srv/bx-a"), Path("/srv/bx-b"), Path("/srv/bx-a/")]
    assert call_prefix(homes[0]) != call_prefix(homes[1])
    assert call_prefix(homes[0]) == call_prefix(homes[2])
