"""Containment, tried as an attacker would, against every runtime: links, masks, swaps.

A compromised loopd can send any tool_request, and two sessions can run calls at
once, so the model controls the contents of every writable grant. Each test
here is one way out that was found open (issue 11) and must stay closed:

    * a link inside a granted directory reaching a path a deny grant covers, or
      one labelled higher (read_file and write_file refuse any link in any
      component: "the path holds a symbolic link");
    * a shell seeing a deny-covered sub-path of its mount, or moving a masked
      path's parent aside to read it under another name in the next call;
    * a shell result labelled lower than a grant over what it could read;
    * a grant path or file swapped for a link between brokerd's check and the
      mount (the kernel binds the descriptor brokerd held, and the toolkit checks
      the device and inode before it starts). The race test has a control arm:
      the same racer against a check-then-bind-by-name, which must be caught,
      so the test is shown able to fail on every run.

I/O: temporary trees, the sandbox runtimes (fixtures in
tests/support/sandbox_fixtures.py), threads that rename paths in a loop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.sandbox_fixtures import require

from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.grants.model import Grant
from boxmaker.core.labels import DataClass
from boxmaker.core.policy import Decision, Denial
from boxmaker.core.wire.broker import FailedResponse, ResultResponse
from boxmaker.sandbox.bwrap import BWRAP
from boxmaker.sandbox.runner import RunFailure
from boxmaker.testing.sandbox_tree import Sandbox, grant

SECRET = "TOP-SECRET-KEY"
AUTO = 'mode = "auto"\nmax_taint = "secret"\n'
DENY = 'mode = "deny"\nmax_taint = "secret"\nresult_class = "secret"\n'
SWAP_ATTEMPTS = 200  # racing calls per runtime (the issue asks for at least 200)
CONTROL_ATTEMPTS = 1000  # binds by name; the control arm stops at its first leak
REFUSALS = {
    RunFailure.PATH_HAS_SYMLINK.value,
    RunFailure.GRANT_PATH_UNSAFE.value,
    RunFailure.GRANT_PATH_MISSING.value,
    RunFailure.PATH_SWAPPED.value,
    RunFailure.NOT_FOUND.value,
    RunFailure.WRITE_FAILED.value,
    # bwrap --bind-fd mounts the name its descriptor has now, then compares inodes
    # (and dies on a mismatch): a file renamed meanwhile fails the start instead
    RunFailure.SANDBOX_FAILED.value,
}


def deny(name: str, tool: str, path: Path) -> Grant:
    return grant(f"{name}.toml", f'tool = "{tool}"\n{DENY}constraints.paths = ["{path}"]')


def failed(response: ResultResponse | FailedResponse, failure: RunFailure) -> bool:
    return response == FailedResponse(message=failure.value)


# ---------------------------------------------------------------------------
# links inside a grant


def test_a_link_inside_a_grant_reaches_no_denied_path(sandbox: Sandbox) -> None:
    """grants.example: notes-read and keys-deny; links in notes point into keys."""
    notes = sandbox.root / "notes"
    (notes / "keys").mkdir()
    (notes / "keys" / "id").write_text(SECRET)
    (notes / "k").symlink_to(notes / "keys" / "id")
    (notes / "kd").symlink_to("keys")  # relative, resolves inside the grant
    box = sandbox.with_grants(deny("keys-deny", "read_file", notes / "keys"))
    assert isinstance(box.decide("read_file", path=str(notes / "keys" / "id")), Denial)
    for path in (notes / "k", notes / "kd" / "id"):
        response = box.call("read_file", path=str(path))
        assert failed(response, RunFailure.PATH_HAS_SYMLINK), (path, response)


def test_a_link_to_a_higher_label_is_refused(sandbox: Sandbox) -> None:
    """A secret file read through a link in notes would come back labelled private."""
    vault = sandbox.root / "notes" / "vault"
    vault.mkdir()
    (vault / "s.txt").write_text(SECRET)
    (sandbox.root / "notes" / "v").symlink_to(vault / "s.txt")
    secret_grant = grant(
        "vault.toml",
        f'tool = "read_file"\n{AUTO}result_class = "secret"\nconstraints.paths = ["{vault}"]',
    )
    box = sandbox.with_grants(secret_grant)
    response = box.call("read_file", path=str(sandbox.root / "notes" / "v"))
    assert failed(response, RunFailure.PATH_HAS_SYMLINK), response
    direct = box.call("read_file", path=str(vault / "s.txt"))
    assert isinstance(direct, ResultResponse), direct
    assert (direct.content, direct.class_) == (SECRET, DataClass.SECRET)


def test_write_file_through_a_link_cannot_reach_a_write_denied_path(sandbox: Sandbox) -> None:
    scratch = sandbox.root / "scratch"
    (scratch / "locked").mkdir()
    (scratch / "door").symlink_to("locked")
    box = sandbox.with_grants(deny("locked", "write_file", scratch / "locked"))
    response = box.call("write_file", path=str(scratch / "door" / "x.txt"), content="in")
    assert failed(response, RunFailure.PATH_HAS_SYMLINK), response
    assert list((scratch / "locked").iterdir()) == []


def test_write_file_replaces_a_file_and_never_leaves_an_empty_one(sandbox: Sandbox) -> None:
    target = sandbox.root / "scratch" / "kept.txt"
    target.write_text("old\n")
    response = sandbox.call("write_file", path=str(target), content="new\n")
    assert isinstance(response, ResultResponse), response
    assert target.read_text() == "new\n"
    refused = sandbox.call(
        "write_file", path=str(sandbox.root / "scratch" / "no" / "x"), content=""
    )
    assert failed(refused, RunFailure.WRITE_FAILED), refused
    assert not (sandbox.root / "scratch" / "no").exists()


# ---------------------------------------------------------------------------
# a shell's masks and label


def keys_under(directory: Path) -> Path:
    (directory / "keys").mkdir(parents=True)
    (directory / "keys" / "id").write_text(SECRET)
    return directory / "keys"


def test_a_shell_never_sees_a_deny_covered_path(sandbox: Sandbox) -> None:
    keys = keys_under(sandbox.root / "scratch")
    (sandbox.root / "scratch" / "pass").write_text(SECRET)
    box = sandbox.with_grants(
        deny("keys-deny", "read_file", keys),
        deny("pass-deny", "write_file", sandbox.root / "scratch" / "pass"),
    )
    response = box.shell(f"cat {keys}/id; ls -A {keys}; cat {keys.parent}/pass; echo end")
    assert isinstance(response, ResultResponse), response
    assert SECRET not in response.content
    assert response.content.endswith("end\n\n[exit status 0]"), response.content
    writes = box.shell(f"echo x > {keys}/new; echo w=$?")
    assert isinstance(writes, ResultResponse), writes
    assert "w=0" not in writes.content
    assert sorted(p.name for p in keys.iterdir()) == ["id"]


def test_a_shell_cannot_move_a_masked_path_aside(sandbox: Sandbox) -> None:
    scratch = sandbox.root / "scratch"
    keys = keys_under(scratch / "a")
    box = sandbox.with_grants(deny("keys-deny", "read_file", keys))
    moves = box.shell(
        f"mv {scratch}/a {scratch}/b; echo a=$?; mv {keys} {scratch}/k2; echo k=$?;"
        f" cp -r {scratch}/a {scratch}/c; echo end"
    )
    assert isinstance(moves, ResultResponse), moves
    assert "a=0" not in moves.content, moves.content
    assert "k=0" not in moves.content, moves.content
    after = box.shell(f"cat {scratch}/b/keys/id {scratch}/k2/id {scratch}/c/keys/id {keys}/id")
    assert isinstance(after, ResultResponse), after
    assert SECRET not in after.content
    assert (keys / "id").read_text() == SECRET  # still where the deny grant says


def test_a_shell_result_carries_the_label_of_every_grant_over_its_mounts(
    sandbox: Sandbox,
) -> None:
    keys = keys_under(sandbox.root / "scratch")
    labelled = grant(
        "keys-read.toml",
        f'tool = "read_file"\n{AUTO}result_class = "secret"\nuntrusted = true\n'
        f'constraints.paths = ["{keys}"]',
    )
    response = sandbox.with_grants(labelled).shell("echo hello")
    assert isinstance(response, ResultResponse), response
    assert (response.class_, response.untrusted) == (DataClass.SECRET, True)


def test_a_deny_over_a_shells_cwd_denies_the_call_at_every_taint(sandbox: Sandbox) -> None:
    box = sandbox.with_grants(deny("all", "read_file", sandbox.root))
    outcome = box.decide("shell", command="ls", cwd=str(sandbox.root / "scratch"))
    assert isinstance(outcome, Denial)
    assert (outcome.reason, outcome.grant) == (DenyReason.DENIED_BY_GRANT, "all")


def test_a_deny_over_another_mount_of_the_shell_hides_it_whole(sandbox: Sandbox) -> None:
    scratch, other = sandbox.root / "scratch", sandbox.root / "other"
    other.mkdir()
    (other / "id").write_text(SECRET)
    both = grant(
        "a-two.toml",  # wins over the tree's own shell grant: lowest id
        f'tool = "shell"\n{AUTO}result_class = "private"\n'
        f'constraints.paths = ["{scratch}", "{other}"]',
    )
    box = sandbox.with_grants(both, deny("other-deny", "write_file", other))
    decided = box.decide("shell", command="ls", cwd=str(scratch))
    assert isinstance(decided, Decision)
    assert (decided.grant.id, decided.masks) == ("a-two", (str(other),))
    response = box.call("shell", command=f"cat {other}/id; ls {other}; echo end", cwd=str(scratch))
    assert isinstance(response, ResultResponse), response
    assert SECRET not in response.content
    assert "end\n" in response.content


# ---------------------------------------------------------------------------
# paths swapped between the check and the mount


RACER = """
import json, os, random, sys, time
swaps, stop = json.loads(sys.argv[1]), sys.argv[2]
pace, rounds = random.Random(11), 0
while not os.path.exists(stop):
    for real, link, aside in swaps:
        try:
            os.rename(real, aside)
            os.rename(link, real)
            time.sleep(pace.uniform(0, 0.002))
            os.rename(real, link)
            os.rename(aside, real)
            time.sleep(pace.uniform(0, 0.006))
        except FileNotFoundError:
            continue
    rounds += 1
print(rounds)
"""


@contextmanager
def racing(swaps: list[tuple[Path, Path, Path]]) -> Iterator[list[int]]:
    """Swap each (real, link, aside) in a loop: real out to aside, the link in, and back.

    The racer is a process of its own, as a concurrent shell call would be. Each
    state lasts a random few milliseconds (the attacker's pacing, not a wait for
    anything): long enough that many calls get past brokerd's check, short enough
    that swaps land between that check and the mount. Yields a one-item list that
    holds the number of completed swap rounds once the racer has stopped.
    """
    stop = swaps[0][0].parent / "racer.stop"
    plan = json.dumps([[str(p) for p in swap] for swap in swaps])
    count = [0]
    with subprocess.Popen(
        [sys.executable, "-c", RACER, plan, str(stop)], stdout=subprocess.PIPE, text=True
    ) as racer:
        try:
            yield count
        finally:
            stop.touch()
            out, _ = racer.communicate(timeout=30)
            count[0] = int(out)


def make_swaps(root: Path) -> list[tuple[Path, Path, Path]]:
    """notes/ and notes/a.md, each with a link beside it into `secret/`, to swap in."""
    secret = root / "secret"
    secret.mkdir()
    (secret / "a.md").write_text(SECRET)
    notes = root / "notes"
    notes.mkdir(exist_ok=True)
    if not (notes / "a.md").exists():
        (notes / "a.md").write_text("hello notes\n")
    (root / "notes.link").symlink_to(secret)
    (notes / "a.link").symlink_to(secret / "a.md")
    return [
        (notes, root / "notes.link", root / "notes.away"),
        (notes / "a.md", notes / "a.link", notes / "a.away"),
    ]


@pytest.fixture
def swap_tree(sandbox: Sandbox) -> tuple[Sandbox, list[tuple[Path, Path, Path]], Path]:
    """The sandbox's tree with `make_swaps`, and a write_file grant on notes too."""
    swaps = make_swaps(sandbox.root)
    notes, secret = sandbox.root / "notes", sandbox.root / "secret"
    writes = grant(
        "notes-write.toml",
        f'tool = "write_file"\n{AUTO}result_class = "private"\nconstraints.paths = ["{notes}"]',
    )
    return sandbox.with_grants(writes), swaps, secret


@pytest.mark.slow
def test_a_path_swapped_during_the_call_is_never_bound(
    swap_tree: tuple[Sandbox, list[tuple[Path, Path, Path]], Path],
) -> None:
    box, swaps, secret = swap_tree
    target = str(box.root / "notes" / "a.md")
    outcomes: dict[str, int] = {}
    with racing(swaps) as count:
        for attempt in range(SWAP_ATTEMPTS):
            if attempt % 2:
                response = box.call("write_file", path=target, content=f"written {attempt}")
            else:
                response = box.call("read_file", path=target)
            if isinstance(response, ResultResponse):
                assert SECRET not in response.content, f"attempt {attempt} read the secret"
                key = "result"
            else:
                assert response.message in REFUSALS, response
                key = response.message
            outcomes[key] = outcomes.get(key, 0) + 1
    print(f"{box.kind}: {SWAP_ATTEMPTS} racing calls, {count[0]} swap rounds: {outcomes}")
    assert count[0] >= 10  # the racer really ran throughout
    assert sorted(p.name for p in secret.iterdir()) == ["a.md"]
    assert (secret / "a.md").read_text() == SECRET
    assert outcomes.get("result", 0) > 0  # and calls still got through between swaps


@pytest.mark.slow
def test_the_swap_racer_breaks_a_check_then_bind_by_name(tmp_path: Path, rootfs: Path) -> None:
    """The control arm: what the runtimes did before (lstat, realpath, then bind the
    name) reads the secret under the same racer, so the test above can fail."""
    require("bwrap", rootfs)
    root = tmp_path.resolve()
    swaps = make_swaps(root)
    notes = str(root / "notes")
    leaked = tries = 0
    with racing(swaps):
        while tries < CONTROL_ATTEMPTS and not leaked:
            try:
                if os.path.islink(notes) or os.path.realpath(notes) != notes:
                    time.sleep(0.0005)  # the check refused: let the racer move on
                    continue
            except OSError:
                continue
            tries += 1  # a check passed: bind the name it checked
            read = subprocess.run(
                [BWRAP, "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
                 "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                 "--ro-bind", notes, notes, "/usr/bin/cat", f"{notes}/a.md"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            leaked += SECRET in read.stdout
    print(f"control arm: the racer got between a check and a bind by name at try {tries}")
    assert leaked, f"the racer never got between a check and a bind by name in {tries} tries"


# ---------------------------------------------------------------------------
# a fetch is labelled by the one host it reaches


def test_http_fetch_follows_no_redirect_to_another_granted_host(sandbox: Sandbox) -> None:
    """allowed.test/away redirects to other.test. The grant that wins for allowed.test
    lists both hosts; another labels other.test secret. Following the redirect
    would bring back other.test's data labelled as allowed.test's: public."""
    both = grant(
        "both.toml",
        'tool = "http_fetch"\nmode = "auto"\nmax_taint = "secret"\nresult_class = "public"\n'
        'constraints.hosts = ["allowed.test", "other.test"]',
    )
    other = grant(
        "other.toml",
        'tool = "http_fetch"\nmode = "auto"\nmax_taint = "secret"\nresult_class = "secret"\n'
        'constraints.hosts = ["other.test"]',
    )
    box = sandbox.with_grants(both, other)
    direct = box.call("http_fetch", url="https://other.test/")
    assert isinstance(direct, ResultResponse), direct  # reachable, and labelled secret
    assert direct.content.endswith("hello from other.test")
    assert direct.class_ is DataClass.SECRET
    redirected = box.call("http_fetch", url="https://allowed.test/away")
    assert failed(redirected, RunFailure.FETCH_REFUSED), redirected
