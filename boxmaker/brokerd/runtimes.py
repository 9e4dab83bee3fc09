"""Choosing and starting the runtime that `[runner] backend` names.

I/O: each sandbox runtime's preflight (what the host lacks), and its sweep of
whatever a brokerd killed mid-call left behind (cgroups, containers). A runtime
that cannot run is a startup error naming what to fix: brokerd does not fall
back to a weaker sandbox on its own.
"""

from __future__ import annotations

import logging
from pathlib import Path

from boxmaker.brokerd.config import BrokerdConfig
from boxmaker.core.errors import StartupError
from boxmaker.core.runbook import Runbook
from boxmaker.sandbox.bwrap import BwrapRuntime
from boxmaker.sandbox.calls import Limits
from boxmaker.sandbox.cgroups import CgroupError, Cgroups
from boxmaker.sandbox.runner import RefusingRuntime, Runtime

log = logging.getLogger(__name__)


def limits_of(config: BrokerdConfig) -> Limits:
    runner = config.runner
    return Limits(
        timeout_s=runner.timeout_ms / 1000,
        memory_bytes=runner.memory_mb * 1024 * 1024,
        pids=runner.pids,
        output_bytes=runner.output_bytes,
    )


def make_runtime(config: BrokerdConfig) -> Runtime:
    """The configured runtime, ready: preflight passed and leftovers swept."""
    backend = config.runner.backend
    if backend == "refusing":
        return RefusingRuntime()
    if backend == "bwrap":
        _refuse_if(backend, BwrapRuntime.preflight())
        try:
            cgroups = Cgroups.detect()
        except CgroupError as exc:
            raise StartupError(f"runner bwrap: {exc}") from exc
        bwrap = BwrapRuntime(
            config.home, limits_of(config), cgroups, ca_file=Path(config.runner.ca_file)
        )
        swept = bwrap.sweep()
        if swept:
            log.warning("event=sandbox_swept backend=bwrap cgroups=%d", swept)
        return bwrap
    from boxmaker.sandbox.podman import PodmanRuntime

    rootfs = Path(config.runner.rootfs)
    _refuse_if(backend, PodmanRuntime.preflight(rootfs))
    runtime = PodmanRuntime(
        config.home, limits_of(config), ca_file=Path(config.runner.ca_file), rootfs=rootfs
    )
    swept = runtime.sweep()
    if swept:
        log.warning("event=sandbox_swept backend=podman containers=%d", swept)
    return runtime


def _refuse_if(backend: str, problems: list[str]) -> None:
    if problems:
        pointer = Runbook.SANDBOX_UNAVAILABLE.pointer
        lines = [p.removesuffix(pointer).rstrip("; ") for p in problems]
        raise StartupError(f"runner {backend} cannot run here: {'; '.join(lines)}; {pointer}")
