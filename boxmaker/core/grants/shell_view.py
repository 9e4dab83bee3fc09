"""What a shell sandbox may see inside its mounts, and the label of what it returns. No I/O.

A shell call mounts every path of its grant, writable. Other grants may speak
about paths inside those mounts, and a shell is not bound by the tool they
name: with `notes-read` on /s and `keys-deny` (read_file) on /s/keys, a shell
on /s could simply `cat /s/keys/id`. So, over every grant of every file tool
(a tool whose grants take paths, by the tool table: read_file, write_file, shell):

    1. A shell call whose cwd lies inside a deny grant's path (not expired) is
       denied by that grant, whatever tool it names: policy counts such grants
       among a shell call's candidates (`deny_candidates`), so the denial holds
       at every taint, like any deny grant's.
    2. A mount that is, or lies inside, such a deny path is hidden whole: it is
       not mounted at all.
    3. A deny path lying strictly inside a mount that is kept is masked: the
       sandbox sees an empty, read-only thing at that path.
    4. The result's label is raised to the highest `result_class`, and made
       untrusted if any is, over every other grant (any mode but deny, expired
       or not, at any taint) whose path overlaps a kept mount: inside it or
       containing it. A label describes the data at a path, not the grant's
       current reach, so neither expiry nor taint lowers it.

`masks` holds what rules 2 and 3 hide: a mask equal to a mount hides that
mount, any other lies inside a kept one.

read_file and write_file need none of this: their sandbox sees exactly the
one file that policy decided on.
"""

from __future__ import annotations

from dataclasses import dataclass

from boxmaker.core.grants.model import Grant, GrantSet, Mode
from boxmaker.core.grants.paths import is_inside
from boxmaker.core.grants.tools import Constraint, ToolName
from boxmaker.core.labels import DataClass, highest


def is_file_tool(tool: ToolName) -> bool:
    """A tool whose grants take paths (its row's `paths`): the rules above read them."""
    return tool.row.paths is not Constraint.EMPTY


@dataclass(frozen=True, slots=True)
class ShellView:
    """What a shell call's sandbox sees: its mounts less `masks`, labelled as given."""

    masks: tuple[str, ...]
    result_class: DataClass
    untrusted: bool


def deny_candidates(grants: GrantSet) -> tuple[Grant, ...]:
    """Deny grants of the other file tools, which rule 1 adds to a shell call's candidates."""
    return tuple(
        g
        for g in grants.grants
        if g.mode is Mode.DENY and g.tool is not ToolName.SHELL and is_file_tool(g.tool)
    )


def shell_view(
    mounts: tuple[str, ...],
    grants: GrantSet,
    result_class: DataClass,
    untrusted: bool,
    now: str,
) -> ShellView:
    """Rules 2 to 4 for a shell call mounting `mounts`, labelled so far as given."""
    denied = [
        path
        for grant in grants.grants
        if is_file_tool(grant.tool)
        and grant.mode is Mode.DENY
        and (grant.expires is None or now < grant.expires)
        for path in grant.paths
    ]
    hidden = [m for m in mounts if any(is_inside(d, m) for d in denied)]
    kept = [m for m in mounts if m not in hidden]
    masks = [d for d in denied for m in kept if d != m and is_inside(m, d)]
    classes = [result_class]
    for grant in grants.grants:
        if not is_file_tool(grant.tool) or grant.mode is Mode.DENY:
            continue
        if any(_overlap(path, mount) for path in grant.paths for mount in kept):
            classes.append(grant.result_class)
            untrusted = untrusted or grant.untrusted
    return ShellView(_outermost(hidden + masks), highest(*classes), untrusted)


def _overlap(a: str, b: str) -> bool:
    return is_inside(a, b) or is_inside(b, a)


def _outermost(paths: list[str]) -> tuple[str, ...]:
    """Sorted, without duplicates or any path inside another (masking the outer hides it)."""
    kept: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):
        if not any(is_inside(outer, path) for outer in kept):
            kept.append(path)
    return tuple(sorted(kept))
