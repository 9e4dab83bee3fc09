"""Holding what a call mounts: one walk without links, the refusals, masks and pins.

No sandbox runs here: `hold` is brokerd's side, `check_expected` the toolkit's.
I/O: a temporary tree (files, directories, links, a FIFO).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.core.grants.model import GrantSet
from boxmaker.core.policy import Decision, SessionState, decide
from boxmaker.core.wire.broker import ToolRequest
from boxmaker.sandbox import toolkit
from boxmaker.sandbox.held import HeldSpec, HoldError, hold
from boxmaker.sandbox.runner import RunFailure, RunSpec, build_spec
from boxmaker.testing.sandbox_tree import NOW, grant

AUTO = 'mode = "auto"\nmax_taint = "secret"\nresult_class = "private"\n'


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path.resolve()
    (root / "g" / "sub").mkdir(parents=True)
    (root / "g" / "a.md").write_text("a\n")
    (root / "g" / "sub" / "b.md").write_text("b\n")
    (root / "g" / "link").symlink_to(root / "g" / "a.md")
    (root / "g" / "dirlink").symlink_to("sub")
    os.mkfifo(root / "g" / "fifo")
    (root / "elsewhere").mkdir()
    (root / "alias").symlink_to(root / "g")
    return root


def spec_for(root: Path, tool: str, grant_path: Path, **arguments: str) -> RunSpec:
    grants = GrantSet(
        grants=(grant("g.toml", f'tool = "{tool}"\n{AUTO}constraints.paths = ["{grant_path}"]'),)
    )
    request = ToolRequest(session="s", call="c", tool=tool, arguments=json.dumps(arguments))
    decision = decide(request, grants, SessionState(), NOW)
    assert isinstance(decision, Decision), decision
    return build_spec(decision)


@pytest.fixture
def holding() -> Iterator[list[HeldSpec]]:
    held: list[HeldSpec] = []
    yield held
    for h in held:
        h.close(succeeded=True)


def refusal(spec: RunSpec) -> RunFailure:
    with pytest.raises(HoldError) as refused:
        hold(spec).close(succeeded=True)
    return refused.value.failure


@pytest.mark.parametrize(
    ("tool", "grant_at", "path", "failure"),
    [
        ("read_file", "g", "g/link", RunFailure.PATH_HAS_SYMLINK),
        ("read_file", "g", "g/dirlink/b.md", RunFailure.PATH_HAS_SYMLINK),
        ("read_file", "alias", "alias/a.md", RunFailure.GRANT_PATH_UNSAFE),
        ("read_file", "g", "g/missing.md", RunFailure.NOT_FOUND),
        ("read_file", "g", "g/sub", RunFailure.NOT_A_FILE),
        ("read_file", "g", "g/fifo", RunFailure.NOT_A_FILE),
        ("read_file", "g/link", "g/link", RunFailure.GRANT_PATH_UNSAFE),
        ("read_file", "nowhere", "nowhere/a.md", RunFailure.GRANT_PATH_MISSING),
        ("write_file", "g", "g/link", RunFailure.PATH_HAS_SYMLINK),
        ("write_file", "g", "g/dirlink/new.md", RunFailure.PATH_HAS_SYMLINK),
        ("write_file", "g", "g/sub", RunFailure.NOT_A_FILE),
        ("write_file", "g", "g/none/new.md", RunFailure.WRITE_FAILED),
        ("write_file", "alias", "alias/new.md", RunFailure.GRANT_PATH_UNSAFE),
    ],
    ids=lambda value: str(value) if not isinstance(value, RunFailure) else value.name,
)
def test_each_refusal_names_what_is_wrong(
    root: Path, tool: str, grant_at: str, path: str, failure: RunFailure
) -> None:
    arguments = {"path": str(root / path)}
    if tool == "write_file":
        arguments["content"] = "x"
    assert refusal(spec_for(root, tool, root / grant_at, **arguments)) is failure
    assert not (root / "g" / "none").exists()


def test_a_file_tool_holds_exactly_its_file(root: Path, holding: list[HeldSpec]) -> None:
    spec = spec_for(root, "read_file", root / "g", path=str(root / "g" / "sub" / "b.md"))
    held = hold(spec)
    holding.append(held)
    [mount] = held.mounts
    info = os.stat(root / "g" / "sub" / "b.md")
    assert (mount.path, mount.dev, mount.ino) == (
        str(root / "g/sub/b.md"),
        info.st_dev,
        info.st_ino,
    )
    assert held.expected == [[mount.path, info.st_dev, info.st_ino]]
    assert os.readlink(f"/proc/self/fd/{mount.fd}") == str(root / "g/sub/b.md")


def test_write_file_creates_its_file_and_removes_it_if_the_call_fails(root: Path) -> None:
    target = root / "g" / "new.md"
    spec = spec_for(root, "write_file", root / "g", path=str(target), content="x")
    hold(spec).close(succeeded=False)
    assert not target.exists()
    hold(spec).close(succeeded=True)
    assert target.read_text() == ""  # the sandbox would have written it; here nothing did
    target.write_text("kept\n")
    hold(spec).close(succeeded=False)
    assert target.read_text() == "kept\n"  # only a file made by this call is removed


def test_a_shell_holds_its_grant_paths_pins_the_way_to_each_mask_and_masks_it(
    root: Path, holding: list[HeldSpec]
) -> None:
    (root / "g" / "sub" / "keys").mkdir()
    (root / "g" / "sub" / "keys" / "id").write_text("k")
    grants = GrantSet(
        grants=(
            grant("sh.toml", f'tool = "shell"\n{AUTO}constraints.paths = ["{root}/g"]'),
            grant(
                "deny.toml",
                'tool = "read_file"\nmode = "deny"\nmax_taint = "secret"\nresult_class = "secret"\n'
                f'constraints.paths = ["{root}/g/sub/keys", "{root}/g/a.md", "{root}/g/dirlink/x"]',
            ),
        )
    )
    arguments = json.dumps({"command": "ls", "cwd": f"{root}/g"})
    decision = decide(ToolRequest(session="s", call="c", tool="shell", arguments=arguments), grants,
                      SessionState(), NOW)  # fmt: skip
    assert isinstance(decision, Decision), decision
    held = hold(build_spec(decision))
    holding.append(held)
    assert [m.path for m in held.mounts] == [f"{root}/g"]
    assert [p.path for p in held.pins] == [f"{root}/g/sub"]
    assert [(m.path, m.is_dir) for m in held.masks] == [
        (f"{root}/g/a.md", False),
        (f"{root}/g/sub/keys", True),
    ]  # g/dirlink/x lies through a link: nothing is at that name to mask


def test_the_toolkit_refuses_a_mount_that_is_not_what_brokerd_held(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_text("x")
    info = os.stat(real)
    toolkit.check_expected([[str(real), info.st_dev, info.st_ino]])
    for wrong in ([str(real), info.st_dev, info.st_ino + 1], [str(tmp_path / "gone"), 1, 1]):
        with pytest.raises(toolkit.ToolError) as refused:
            toolkit.check_expected([wrong])
        assert refused.value.code == "PATH_SWAPPED"
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(toolkit.ToolError):
        toolkit.check_expected([[str(tmp_path / "link"), info.st_dev, info.st_ino]])
