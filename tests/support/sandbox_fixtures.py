"""Fixtures of the sandbox suites: each runtime this host has, around a temporary tree.

A pytest plugin, loaded by tests/conftest.py (`pytest_plugins`): `sandbox` is
parametrised over both runtimes, `https` serves allowed.test and friends.

A runtime this host cannot run is skipped with its preflight lines as the
reason, except when `CI` is set: there it is a failure.

I/O: temporary directories, cgroups (a private sub-parent per test, so that
sweeping never touches another run's calls), Podman containers named after the
test's own home, a local HTTPS server with a CA made by `openssl` at test time.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from boxmaker.sandbox import podman
from boxmaker.sandbox.bwrap import BwrapRuntime
from boxmaker.sandbox.calls import call_prefix
from boxmaker.sandbox.cgroups import CgroupError, Cgroups
from boxmaker.sandbox.podman import PodmanRuntime, ensure_rootfs
from boxmaker.testing.resolvers import MappedResolver
from boxmaker.testing.sandbox_tree import LIMITS, Sandbox, make_grants, make_tree
from boxmaker.testing.tls import LocalHttps, OpensslMissingError, make_test_certs
from support.skips import skip_or_fail

KINDS = ("bwrap", "podman")


@pytest.fixture(scope="session")
def rootfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_rootfs(tmp_path_factory.mktemp("podman") / "rootfs")


def preflight(kind: str, rootfs: Path) -> list[str]:
    if kind == "bwrap":
        return BwrapRuntime.preflight()
    return PodmanRuntime.preflight(rootfs)


def require(kind: str, rootfs: Path) -> None:
    """Skip (loudly) or, in CI, fail when this host cannot run `kind`."""
    problems = preflight(kind, rootfs)
    if not problems:
        return
    skip_or_fail(f"the {kind} runtime cannot run on this host: " + " | ".join(problems))


@contextlib.contextmanager
def private_cgroups() -> Iterator[Cgroups]:
    """A sub-parent of the host's boxmaker cgroups, for this test's calls alone."""
    try:
        host = Cgroups.detect()
    except CgroupError as exc:
        pytest.fail(f"bwrap preflight passed but cgroups failed: {exc}")
    sub = f"test-{uuid.uuid4().hex[:12]}"
    parents = tuple(parent / sub for parent in host.parents)
    for parent in parents:
        parent.mkdir()
    if host.version == 2:
        (parents[0] / "cgroup.subtree_control").write_text("+memory +pids")
    cgroups = Cgroups(parents=parents, version=host.version)
    try:
        yield cgroups
    finally:
        cgroups.sweep("")  # every group under this test's own sub-parent
        for parent in parents:
            with contextlib.suppress(OSError):
                parent.rmdir()


@pytest.fixture
def short_home() -> Iterator[Path]:
    """brokerd's home, short: the egress socket's path must fit in 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="bx-") as folder:
        yield Path(folder)


@pytest.fixture(params=KINDS)
def sandbox(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    short_home: Path,
    rootfs: Path,
    https: LocalHttps,
) -> Iterator[Sandbox]:
    kind: str = request.param
    require(kind, rootfs)
    root = tmp_path.resolve()
    make_tree(root)
    grants = make_grants(root)
    # other.test resolves too, so only the grant and the egress rule keep a call out
    local = {"allowed.test": "127.0.0.1", "other.test": "127.0.0.1"}
    resolver = MappedResolver(local, port=https.port)
    base_config: dict[str, Any] = {
        "kind": kind,
        "home": str(short_home),
        "shell_grant": f'tool = "shell"\nmode = "auto"\nmax_taint = "secret"\n'
        f'result_class = "private"\nconstraints.paths = ["{root}/scratch"]',
        "cwd": str(root / "scratch"),
    }
    if kind == "bwrap":
        with private_cgroups() as cgroups:
            bwrap = BwrapRuntime(short_home, LIMITS, cgroups, resolver=resolver, ca_file=https.ca)
            yield Sandbox(
                kind=kind,
                root=root,
                home=short_home,
                runtime=bwrap,
                grants=grants,
                child_config={
                    **base_config,
                    "parents": [str(p) for p in cgroups.parents],
                    "version": cgroups.version,
                },
                containers=list,
                cgroup_dirs=lambda: [
                    str(d) for parent in cgroups.parents for d in parent.iterdir() if d.is_dir()
                ],
                sweep=lambda: print(f"swept {bwrap.sweep()} cgroups"),
            )
        return
    runtime = PodmanRuntime(short_home, LIMITS, resolver=resolver, ca_file=https.ca, rootfs=rootfs)
    prefix = call_prefix(short_home)

    def containers() -> list[str]:
        listed = subprocess.run(
            [podman.PODMAN, "ps", "--all", f"--filter=label={podman.LABEL}", "--format={{.Names}}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return [name for name in listed.stdout.split() if name.startswith(prefix)]

    yield Sandbox(
        kind=kind,
        root=root,
        home=short_home,
        runtime=runtime,
        grants=grants,
        child_config={**base_config, "rootfs": str(rootfs)},
        containers=containers,
        cgroup_dirs=list,
        sweep=lambda: print(f"swept {runtime.sweep()} containers"),
    )
    runtime.sweep()


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA (ca.pem) and a server certificate for allowed.test, other.test, unmapped.test."""
    try:
        names = ("allowed.test", "other.test", "unmapped.test")
        return make_test_certs(tmp_path_factory.mktemp("certs"), names)
    except OpensslMissingError as exc:
        skip_or_fail(f"{exc}: the https tests did NOT run")


@pytest.fixture(scope="session")
def https(certs: Path) -> Iterator[LocalHttps]:
    """Answers `hello from <Host>`; /away redirects to other.test."""
    with LocalHttps(certs, redirects={"/away": "https://other.test/"}) as server:
        yield server
