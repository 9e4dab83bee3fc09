"""Narrower `auto` grants suggested from asks the owner keeps approving. Pure; no I/O.

`bxctl grants suggest` feeds this the asks of the audit log (`ask_history`), the
grant set as it is now and the reserved places, and writes the first suggestion
it gets back. The rules, in order:

    1  only asks of a grant that is still in the set, still `ask`, and for the
       same tool count; asks whose arguments do not parse (`core.grants.args`), memory
       tools, and shell calls without a cwd are left out
    2  approved asks are grouped by grant and by a narrowing of their arguments:
         read_file, write_file  the grant path that covered the call (the
                                longest, as policy matches it); the suggestion
                                is the deepest directory holding every approved
                                path of the group (their common parent)
         shell                  the exact cwd; the suggestion is that cwd
         http_fetch             the grant; the suggestion is the exact hosts
                                of the approved calls
    3  the suggestion must be strictly narrower than the grant: a file or shell
       path strictly inside the grant path, a host list that is not the grant's
       own; it may cover no call the owner refused under that grant (a refused
       host is dropped from the list, a refused path or cwd inside the
       suggestion drops the group)
    4  a group qualifies with at least `min_approvals` approvals (after rule 3)
    5  the suggested file has `mode = "auto"` and the grant's `max_taint`,
       `result_class`, `untrusted` and `expires`; under a comment header that
       says where it came from and that it is not applied; it must load as a
       valid grant (`grant_loading.parse_grant_file`, with the reserved places),
       else it is left out
    6  suggestions come most approvals first, then by grant id and constraint

Because brokerd lets the most restrictive grant win (deny, then ask, then
auto), an `auto` grant does not stop an `ask` grant over the same calls from
asking: the header says so, and that the asking grant must be narrowed too.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field

import tomli_w

from boxmaker.core.audit.ask_history import PastAsk
from boxmaker.core.errors import ArgsError
from boxmaker.core.grants.args import parse_arguments
from boxmaker.core.grants.loading import parse_grant_file
from boxmaker.core.grants.model import Grant, GrantSet, Mode
from boxmaker.core.grants.paths import is_inside
from boxmaker.core.grants.reserved import Place
from boxmaker.core.grants.tools import (
    HttpFetchArgs,
    ReadFileArgs,
    ShellArgs,
    ToolArgs,
    ToolName,
    WriteFileArgs,
    tool_name,
)


@dataclass(frozen=True, slots=True)
class Suggestion:
    """One narrower grant: its file's text, and the approvals it came from."""

    grant: str  # the ask grant it narrows
    tool: ToolName
    paths: tuple[str, ...]
    hosts: tuple[str, ...]
    approvals: int
    first: str  # time of the first and the last approved ask counted
    last: str
    text: str  # the grant file, header included


@dataclass
class _Group:
    grant: Grant
    key: str  # the grant path (file tools), the cwd (shell), "" (http_fetch)
    approved: list[tuple[str, PastAsk]] = field(default_factory=list)  # (path|cwd|host, ask)
    refused: list[str] = field(default_factory=list)


def suggest_grants(
    asks: Iterable[PastAsk],
    grants: GrantSet,
    min_approvals: int,
    file_name: str,
    reserved: Iterable[Place] = (),
) -> list[Suggestion]:
    """Every qualifying suggestion, best first (module docstring), as file `file_name`."""
    places = tuple(reserved)
    by_id = {grant.id: grant for grant in grants.grants}
    groups: dict[tuple[str, str], _Group] = {}
    for ask in asks:
        if ask.answer not in ("approved", "refused") or ask.grant is None:
            continue
        grant = by_id.get(ask.grant)
        tool = tool_name(ask.tool)
        if grant is None or grant.mode is not Mode.ASK or tool is None or grant.tool is not tool:
            continue
        try:
            args = parse_arguments(tool, ask.arguments)
        except ArgsError:
            continue
        narrowing = _narrowing(grant, args)
        if narrowing is None:
            continue
        key, value = narrowing
        group = groups.setdefault((grant.id, key), _Group(grant, key))
        if ask.answer == "approved":
            group.approved.append((value, ask))
        else:
            group.refused.append(value)
    found: list[Suggestion] = []
    for group in groups.values():
        suggestion = _suggest(group, min_approvals, file_name, places)
        if suggestion is not None:
            found.append(suggestion)
    found.sort(key=lambda s: (-s.approvals, s.grant, s.paths, s.hosts))
    return found


def _narrowing(grant: Grant, args: ToolArgs) -> tuple[str, str] | None:
    """(group key, the value narrowed on) for one call under `grant`, or None."""
    if isinstance(args, ReadFileArgs | WriteFileArgs):
        path = args.path
        writes = isinstance(args, WriteFileArgs)
        covering = [p for p in grant.paths if is_inside(p, path) and not (writes and p == path)]
        return (max(covering, key=len), path) if covering else None
    if isinstance(args, ShellArgs):
        return None if args.cwd is None else (args.cwd, args.cwd)
    if isinstance(args, HttpFetchArgs):
        return ("", args.url.host)
    return None


def _suggest(
    group: _Group, min_approvals: int, file_name: str, places: tuple[Place, ...]
) -> Suggestion | None:
    grant = group.grant
    approved = group.approved
    paths: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    if grant.tool is ToolName.HTTP_FETCH:
        refused = set(group.refused)
        approved = [(host, ask) for host, ask in approved if host not in refused]
        hosts = tuple(sorted({host for host, _ in approved}))
        if not hosts or set(hosts) == set(grant.hosts):
            return None
    else:
        if not approved:
            return None
        if grant.tool is ToolName.SHELL:
            narrowed = group.key
        else:
            parents = [posixpath.dirname(path) for path, _ in approved]
            narrowed = posixpath.commonpath(parents)
        inside = any(is_inside(p, narrowed) and p != narrowed for p in grant.paths)
        if not inside or any(is_inside(narrowed, path) for path in group.refused):
            return None
        paths = (narrowed,)
    if len(approved) < min_approvals:
        return None
    times = sorted(ask.asked for _, ask in approved)
    text = grant_text(grant, paths, hosts, len(approved), times[0], times[-1])
    checked, problems = parse_grant_file(file_name, text.encode(), places)
    if checked is None or problems:
        return None
    return Suggestion(
        grant=grant.id,
        tool=grant.tool,
        paths=paths,
        hosts=hosts,
        approvals=len(approved),
        first=times[0],
        last=times[-1],
        text=text,
    )


def grant_text(
    grant: Grant,
    paths: tuple[str, ...],
    hosts: tuple[str, ...],
    approvals: int,
    first: str,
    last: str,
) -> str:
    """The suggested file: the header, then the grant as TOML (written by tomli-w)."""
    body: dict[str, object] = {
        "tool": grant.tool.value,
        "mode": Mode.AUTO.value,
        "max_taint": grant.max_taint.value,
        "result_class": grant.result_class.value,
        "untrusted": grant.untrusted,
    }
    if grant.expires is not None:
        body["expires"] = grant.expires
    constraints: dict[str, list[str]] = {}
    if paths:
        constraints["paths"] = list(paths)
    if hosts:
        constraints["hosts"] = list(hosts)
    body["constraints"] = constraints
    header = [
        f"# Suggested by `bxctl grants suggest` from {approvals} approvals of asks by",
        f"# grant {grant.id} ({grant.tool}), asked between {first} and {last}.",
        "#",
        "# NOT APPLIED. brokerd reads only the grants directory, and nothing was",
        "# written there. Review this file; to use it, move it into the grants",
        "# directory by hand. brokerd lets the most restrictive grant win (deny,",
        f"# then ask, then auto): while grant {grant.id} still covers these calls they",
        f"# keep asking, so narrow {grant.id} as well.",
        "",
    ]
    return "\n".join(header) + tomli_w.dumps(body)
