"""What a shell sandbox may see inside its mounts, and the label of what it returns. No I/O.

A shell call mounts every path of its grant, writable. Other grants may speak
about paths inside those mounts, and a shell is not bound by the tool they
name: with `notes-read` on /s and `keys-deny` (read_file) on /s/keys, a shell
on /s could simply `cat /s/keys/id`. So, for a shell call that policy would
let run, over every grant of every file tool (read_file, write_file, shell):

    1. A deny grant (not expired) whose path is one of the mounts or contains
       one denies the call outright (`denied_by_grant`, naming that grant): the
       sandbox would see nothing but what that grant forbids.
    2. A deny grant (not expired) whose path lies strictly inside a mount is
       masked: the sandbox sees an empty, read-only thing at that path.
    3. The result's label is raised to the highest `result_class`, and made
       untrusted if any is, over every other grant (any mode but deny, expired
       or not, at any taint) whose path overlaps a mount: inside it or
       containing it. A label describes the data at a path, not the grant's
       current reach, so neither expiry nor taint lowers it.

read_file and write_file need none of this: their sandbox sees exactly the
one file that policy decided on.
"""

from __future__ import annotations

from dataclasses import dataclass

from boxmaker.core.args import ToolName
from boxmaker.core.grants import Grant, GrantSet, Mode
from boxmaker.core.labels import DataClass, highest
from boxmaker.core.paths import is_inside

FILE_TOOLS = (ToolName.READ_FILE, ToolName.WRITE_FILE, ToolName.SHELL)


@dataclass(frozen=True, slots=True)
class ShellView:
    """What a shell call's sandbox sees: its mounts less `masks`, labelled as given."""

    masks: tuple[str, ...]
    result_class: DataClass
    untrusted: bool
    denied_by: Grant | None = None  # rule 1: the deny grant that covers a mount


def shell_view(
    mounts: tuple[str, ...],
    grants: GrantSet,
    result_class: DataClass,
    untrusted: bool,
    now: str,
) -> ShellView:
    """Rules 1 to 3 for a shell call mounting `mounts`, labelled so far as given."""
    masks: list[str] = []
    classes = [result_class]
    for grant in grants.grants:
        if grant.tool not in FILE_TOOLS:
            continue
        if grant.mode is Mode.DENY:
            if grant.expires is not None and now >= grant.expires:
                continue
            for path in grant.paths:
                if any(is_inside(path, mount) for mount in mounts):
                    return ShellView((), result_class, untrusted, denied_by=grant)
                if any(is_inside(mount, path) for mount in mounts):
                    masks.append(path)
            continue
        if any(_overlap(path, mount) for path in grant.paths for mount in mounts):
            classes.append(grant.result_class)
            untrusted = untrusted or grant.untrusted
    return ShellView(_outermost(masks), highest(*classes), untrusted)


def _overlap(a: str, b: str) -> bool:
    return is_inside(a, b) or is_inside(b, a)


def _outermost(paths: list[str]) -> tuple[str, ...]:
    """Sorted, without duplicates or any path inside another (masking the outer hides it)."""
    kept: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):
        if not any(is_inside(outer, path) for outer in kept):
            kept.append(path)
    return tuple(sorted(kept))
