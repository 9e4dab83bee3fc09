"""What a shell sandbox may see: masks, the deny over a mount, and the label (pure)."""

from __future__ import annotations

import pytest

from boxmaker.core.grants.loading import parse_grant_file
from boxmaker.core.grants.model import Grant, GrantSet
from boxmaker.core.grants.shell_view import deny_candidates, shell_view
from boxmaker.core.labels import DataClass

NOW = "2026-11-30T12:00:00.000Z"
PAST = "2026-01-01T00:00:00.000Z"


def g(name: str, tool: str, mode: str, path: str, label: str = "private", **extra: str) -> Grant:
    lines = [f'tool = "{tool}"', f'mode = "{mode}"', 'max_taint = "secret"']
    lines += [f'result_class = "{label}"', *(f"{k} = {v}" for k, v in extra.items())]
    lines.append(f'constraints.paths = ["{path}"]')
    grant, problems = parse_grant_file(f"{name}.toml", "\n".join(lines).encode())
    assert grant is not None, problems
    return grant


@pytest.mark.parametrize(
    ("grants", "masks"),
    [
        ((g("d", "read_file", "deny", "/s/keys"),), ("/s/keys",)),
        ((g("d", "write_file", "deny", "/s/ro"),), ("/s/ro",)),
        ((g("d", "shell", "deny", "/s/x"),), ("/s/x",)),
        ((g("d", "read_file", "deny", "/other/keys"),), ()),
        ((g("d", "read_file", "deny", "/s2/keys"),), ()),
        ((g("d", "read_file", "deny", "/s/keys", expires=f'"{PAST}"'),), ()),
        ((g("a", "read_file", "deny", "/s/k"), g("b", "read_file", "deny", "/s/k/id")), ("/s/k",)),
    ],
    ids=["read-deny", "write-deny", "shell-deny", "outside", "sibling-prefix", "expired",
         "nested-kept-outer"],
)  # fmt: skip
def test_deny_grants_inside_a_mount_are_masked(
    grants: tuple[Grant, ...], masks: tuple[str, ...]
) -> None:
    result = shell_view(("/s",), GrantSet(grants=grants), DataClass.PRIVATE, False, NOW)
    assert result.masks == masks


@pytest.mark.parametrize(
    ("deny_at", "mounts", "masks"),
    [
        ("/s", ("/s",), ("/s",)),
        ("/home", ("/home/o/s", "/t"), ("/home/o/s",)),
        ("/t", ("/s", "/t/u"), ("/t/u",)),
    ],
    ids=["same", "above", "one-of-two"],
)
def test_a_mount_a_deny_grant_covers_is_hidden_whole(
    deny_at: str, mounts: tuple[str, ...], masks: tuple[str, ...]
) -> None:
    grants = GrantSet(grants=(g("d", "read_file", "deny", deny_at),))
    result = shell_view(mounts, grants, DataClass.PRIVATE, False, NOW)
    assert result.masks == masks


def test_a_hidden_mount_raises_no_label() -> None:
    grants = GrantSet(
        grants=(g("d", "read_file", "deny", "/t"), g("k", "read_file", "auto", "/t/k", "secret"))
    )
    result = shell_view(("/s", "/t"), grants, DataClass.PRIVATE, False, NOW)
    assert (result.masks, result.result_class) == (("/t",), DataClass.PRIVATE)


def test_file_tool_deny_grants_are_a_shell_calls_candidates() -> None:
    grants = GrantSet(
        grants=(
            g("d", "read_file", "deny", "/s/keys"),
            g("w", "write_file", "deny", "/s/ro"),
            g("a", "read_file", "auto", "/s"),
            g("e", "shell", "deny", "/x"),
        )
    )
    assert [grant.id for grant in deny_candidates(grants)] == ["d", "w"]


@pytest.mark.parametrize(
    ("grant", "label", "untrusted"),
    [
        (g("k", "read_file", "auto", "/s/keys", "secret"), DataClass.SECRET, False),
        (g("k", "read_file", "ask", "/x", "secret"), DataClass.PRIVATE, False),
        (g("h", "read_file", "auto", "/h", "secret"), DataClass.PRIVATE, False),
        (g("p", "shell", "auto", "/s/u", "public", untrusted="true"), DataClass.PRIVATE, True),
        (g("e", "read_file", "auto", "/s/old", "secret", expires=f'"{PAST}"'), DataClass.SECRET, False),
        (g("c", "read_file", "auto", "/s", "secret"), DataClass.SECRET, False),
    ],
    ids=["inside", "elsewhere", "unrelated", "untrusted-lower", "expired-still-labels", "containing"],
)  # fmt: skip
def test_the_label_is_the_highest_over_every_grant_overlapping_a_mount(
    grant: Grant, label: DataClass, untrusted: bool
) -> None:
    result = shell_view(("/s",), GrantSet(grants=(grant,)), DataClass.PRIVATE, False, NOW)
    assert (result.result_class, result.untrusted) == (label, untrusted)
