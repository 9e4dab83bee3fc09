"""The decision: may this tool call run, ask the owner, or not? Pure; no I/O, no clock.

`decide(request, grants, state, now)` answers one call with a `Decision`
(allowed), an `Ask`, or a `Denial`. `redecide(ask, ...)` runs the same matching
again when the owner approves, and is the only way from an `Ask` to a
`Decision`. Both `Decision` and `Ask` can be built only in this module: their
constructors demand a token no other module holds, so holding one proves that
policy said so.

Matching, for a call to tool T at session taint S:

    1. Candidates are the valid grants for T.
    2. A candidate drops out if it has expired (now >= expires), if S is above
       its max_taint, or if its constraints do not cover the arguments.
       A memory tool's grant takes no constraints, so it covers every call.
       In an untrusted session each grant left counts with its untrusted mode
       (`Grant.untrusted_mode`: the more restrictive of mode and
       when_untrusted), in this step and the next.
    3. Of those left, deny beats ask beats auto. Within the winning mode the
       longest matched path wins (grants with no matched path tie), then the
       lowest grant id in byte order. A winner that is deny only by its
       when_untrusted denies with untrusted_session (not denied_by_grant); one
       that is ask only by it asks with why "untrusted" (`AskRecord.why`).
    4. The result's label is combined over every grant left after step 2: the
       highest result_class, and untrusted if any is.
    5. A shell call also answers to the file grants of the other tools
       (`boxmaker.core.grants.shell_view`): their deny grants are among its candidates in
       step 1, matched by cwd; and when it runs, a deny over one of its mounts
       hides that mount, a deny inside one is masked, and every grant
       overlapping a kept mount raises its label.
    6. With none left: grant_expired if a candidate dropped out by expiry alone,
       else taint_too_high if one dropped out by taint alone, else no_grant.

Before matching: a grant set with problems denies (grants_invalid), a tool that
is not a row of the tool table (`core.grants.tools`) denies (no_grant), and arguments
that do not parse deny (invalid_arguments, with the parser's explanation as the
detail).

What an approval is bound to. An `Ask` (and a `Decision`) has a `digest`: the
sha256 of the compact JSON object

    {"tool", "arguments", "grant", "grant_sha256", "taint"}

in that order: the tool, the canonical arguments (`core.grants.args.canonical_arguments`),
the matched grant's id and its file's hash, and the session's taint when it was
decided. `redecide` gives the call the owner approved only if the re-decision
has the same digest: a denial of the re-decision is that denial; otherwise a
different digest (another grant matches, the grant's file changed, the taint is
not the one the owner saw) denies with approval_stale, and the owner must
approve the call again as it is now. The untrusted flag is not bound: the
arguments were fixed before the approval, and the untrusted rule is applied
again by the re-decision itself.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import orjson

from boxmaker.core.errors import ArgsError
from boxmaker.core.grants.args import canonical_arguments, parse_arguments
from boxmaker.core.grants.decisions import (
    AllowedRecord,
    AskRecord,
    DecisionRecord,
    DeniedRecord,
    DenyReason,
)
from boxmaker.core.grants.hosts import host_matches
from boxmaker.core.grants.model import Grant, GrantSet, Mode
from boxmaker.core.grants.paths import is_inside
from boxmaker.core.grants.shell_view import deny_candidates, shell_view
from boxmaker.core.grants.tools import (
    HttpFetchArgs,
    ReadFileArgs,
    ShellArgs,
    ToolArgs,
    ToolName,
    WriteFileArgs,
    tool_name,
)
from boxmaker.core.hashes import sha256_hex
from boxmaker.core.labels import DataClass, highest
from boxmaker.core.wire.broker import ToolRequest
from boxmaker.core.wire.broker_admin import UntrustedBy

MAX_DETAIL = 300


@dataclass(frozen=True, slots=True)
class SessionState:
    """A session's taint and untrusted flag, as brokerd keeps them.

    `untrusted_by` names the call whose result first made the session untrusted
    (shown to the owner with an approval; never an input to the decision).
    """

    taint: DataClass = DataClass.PRIVATE
    untrusted: bool = False
    untrusted_by: UntrustedBy | None = None


@dataclass(frozen=True, slots=True)
class Denial:
    """A refusal. Anyone may build one: denying needs no proof."""

    reason: DenyReason
    # the deny grant (denied_by_grant, untrusted_session), or the grant matched now
    # (approval_stale)
    grant: str | None = None
    grant_sha256: str | None = None
    detail: str | None = None  # invalid_arguments: the parser's; approval_stale: what changed

    def record(self) -> DecisionRecord:
        return DeniedRecord(reason=self.reason)


_TOKEN = object()
_GENUINE: weakref.WeakSet[_Sealed] = weakref.WeakSet()


class _Sealed:
    """Read-only after construction, not copyable, not picklable, built only here.

    Three walls: the constructor demands a token no other module holds; no class
    outside this module may subclass it; and every instance built here is
    registered, so `is_genuine` tells a real one from one assembled with
    `object.__new__` (which Python cannot forbid).
    """

    __slots__ = (
        "__weakref__",
        "args",
        "grant",
        "masks",
        "matched_host",
        "matched_path",
        "request",
        "result_class",
        "taint",
        "untrusted",
        "why",
    )

    request: ToolRequest
    args: ToolArgs
    grant: Grant
    matched_path: str | None
    matched_host: str | None
    masks: tuple[str, ...]  # paths inside a shell's mounts that its sandbox must not see
    result_class: DataClass
    untrusted: bool
    taint: DataClass  # the session's taint when decided (bound by `digest`)
    why: str | None  # "untrusted": an ask only because the session is untrusted

    def __init__(self, token: object, match: _Matched) -> None:
        if token is not _TOKEN:
            raise TypeError(f"{type(self).__name__} is built only by boxmaker.core.policy")
        set_ = object.__setattr__
        set_(self, "request", match.request)
        set_(self, "args", match.args)
        set_(self, "grant", match.winner.grant)
        set_(self, "matched_path", match.winner.path)
        set_(self, "matched_host", match.winner.host)
        set_(self, "masks", match.masks)
        set_(self, "result_class", match.result_class)
        set_(self, "untrusted", match.untrusted)
        set_(self, "taint", match.taint)
        set_(self, "why", match.why)
        _GENUINE.add(self)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        if cls.__module__ != __name__:
            raise TypeError(f"{cls.__name__} cannot subclass a policy outcome outside policy")
        super().__init_subclass__(**kwargs)

    @property
    def tool(self) -> ToolName:
        return self.grant.tool

    @property
    def digest(self) -> str:
        """What an approval of this call is bound to (the module docstring)."""
        return approval_digest(
            self.tool,
            canonical_arguments(self.args),
            self.grant.id,
            self.grant.sha256,
            self.taint,
        )

    @property
    def matched(self) -> str | None:
        """The matched path, or the host pattern that matched, or None."""
        return self.matched_path if self.matched_path is not None else self.matched_host

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __copy__(self) -> NoReturn:
        raise TypeError(f"{type(self).__name__} cannot be copied")

    def __deepcopy__(self, memo: Any) -> NoReturn:
        raise TypeError(f"{type(self).__name__} cannot be copied")

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise TypeError(f"{type(self).__name__} cannot be pickled")


class Decision(_Sealed):
    """Proof that this call may run now: allowed by a grant, or approved and re-decided."""

    __slots__ = ()

    def record(self) -> DecisionRecord:
        return AllowedRecord()


class Ask(_Sealed):
    """This call may run only if the owner approves it; `redecide` then decides again."""

    __slots__ = ()

    def record(self) -> DecisionRecord:
        return AskRecord(why="untrusted" if self.why == UNTRUSTED else None)


Outcome = Decision | Ask | Denial

UNTRUSTED = "untrusted"  # `why`, on an ask that when_untrusted made
DIGEST_SHORT = 12  # hex characters of a digest shown to the owner


def approval_digest(
    tool: str, arguments: str, grant: str, grant_sha256: str, taint: DataClass
) -> str:
    """sha256 of {"tool", "arguments", "grant", "grant_sha256", "taint"} as compact JSON."""
    bound = {
        "tool": str(tool),
        "arguments": arguments,
        "grant": grant,
        "grant_sha256": grant_sha256,
        "taint": taint.value,
    }
    return sha256_hex(orjson.dumps(bound))


def is_genuine(outcome: Decision | Ask) -> bool:
    """True only for a Decision or Ask that this module built."""
    return outcome in _GENUINE


@dataclass(frozen=True, slots=True)
class _Covered:
    grant: Grant
    path: str | None = None
    host: str | None = None
    mode: Mode | None = None  # the mode it counts with (step 2); None: its own

    @property
    def counted(self) -> Mode:
        return self.grant.mode if self.mode is None else self.mode


@dataclass(frozen=True, slots=True)
class _Matched:
    request: ToolRequest
    args: ToolArgs
    winner: _Covered
    result_class: DataClass
    untrusted: bool
    taint: DataClass
    masks: tuple[str, ...] = ()
    why: str | None = None


def decide(request: ToolRequest, grants: GrantSet, state: SessionState, now: str) -> Outcome:
    """What may happen to `request` under `grants` at `state`, at time `now`."""
    if not grants.valid:
        return Denial(DenyReason.GRANTS_INVALID)
    tool = tool_name(request.tool)
    if tool is None:
        return Denial(DenyReason.NO_GRANT)
    try:
        args = parse_arguments(tool, request.arguments)
    except ArgsError as exc:
        return Denial(DenyReason.INVALID_ARGUMENTS, detail=one_line(str(exc)))
    return _match(request, tool, args, grants, state, now)


def redecide(ask: Ask, grants: GrantSet, state: SessionState, now: str) -> Decision | Denial:
    """Decide an approved call again, with the grants and state as they are now.

    ask and auto both let it run (under the grant matched now), but only if the
    re-decision has the ask's digest; a denial is that denial, whose grant and
    hash the Approval record needs, and a different digest is approval_stale.
    """
    outcome = decide(ask.request, grants, state, now)
    if isinstance(outcome, Denial):
        return outcome
    if outcome.digest != ask.digest:
        return Denial(
            DenyReason.APPROVAL_STALE,
            grant=outcome.grant.id,
            grant_sha256=outcome.grant.sha256,
            detail=_what_changed(ask, outcome),
        )
    if isinstance(outcome, Ask):
        return Decision(_TOKEN, _rematch(outcome))
    return outcome


def _what_changed(ask: Ask, now: Decision | Ask) -> str:
    if now.grant.id != ask.grant.id:
        return f"grant {now.grant.id} matches now, not {ask.grant.id}"
    if now.grant.sha256 != ask.grant.sha256:
        return f"the file of grant {ask.grant.id} changed"
    if now.taint != ask.taint:
        return f"the session's taint is {now.taint} now, not {ask.taint}"
    return "the call is not the one approved"


def _rematch(sealed: _Sealed) -> _Matched:
    return _Matched(
        request=sealed.request,
        args=sealed.args,
        winner=_Covered(sealed.grant, sealed.matched_path, sealed.matched_host),
        result_class=sealed.result_class,
        untrusted=sealed.untrusted,
        taint=sealed.taint,
        masks=sealed.masks,
        why=sealed.why,
    )


def _match(
    request: ToolRequest,
    tool: ToolName,
    args: ToolArgs,
    grants: GrantSet,
    state: SessionState,
    now: str,
) -> Outcome:
    left: list[_Covered] = []
    expired_only = taint_only = False
    candidates = grants.for_tool(tool)
    if isinstance(args, ShellArgs) and args.cwd is not None:
        candidates += deny_candidates(grants)
    for grant in candidates:
        covered = _covers(grant, args)
        expired = grant.expires is not None and now >= grant.expires
        too_tainted = state.taint > grant.max_taint
        if covered is not None and not expired and not too_tainted:
            mode = grant.mode_at(state.untrusted)
            left.append(covered if mode is grant.mode else replace(covered, mode=mode))
        elif covered is not None and expired and not too_tainted:
            expired_only = True
        elif covered is not None and too_tainted and not expired:
            taint_only = True
    if not left:
        if expired_only:
            return Denial(DenyReason.GRANT_EXPIRED)
        if taint_only:
            return Denial(DenyReason.TAINT_TOO_HIGH)
        return Denial(DenyReason.NO_GRANT)
    winner = min(left, key=_rank)
    if winner.counted is Mode.DENY:
        reason = (
            DenyReason.DENIED_BY_GRANT
            if winner.grant.mode is Mode.DENY
            else DenyReason.UNTRUSTED_SESSION
        )
        return Denial(reason, grant=winner.grant.id, grant_sha256=winner.grant.sha256)
    result_class = highest(*(c.grant.result_class for c in left))
    untrusted = any(c.grant.untrusted for c in left)
    masks: tuple[str, ...] = ()
    if tool is ToolName.SHELL:
        view = shell_view(winner.grant.paths, grants, result_class, untrusted, now)
        result_class, untrusted, masks = view.result_class, view.untrusted, view.masks
    match = _Matched(
        request=request,
        args=args,
        winner=winner,
        result_class=result_class,
        untrusted=untrusted,
        taint=state.taint,
        masks=masks,
        why=UNTRUSTED if winner.counted is not winner.grant.mode else None,
    )
    if winner.counted is Mode.ASK:
        return Ask(_TOKEN, match)
    return Decision(_TOKEN, match)


def _rank(covered: _Covered) -> tuple[int, int, str]:
    """Sort key: most restrictive mode, then longest matched path, then lowest id."""
    path_length = len(covered.path.encode()) if covered.path is not None else -1
    return (-covered.counted.restrictiveness, -path_length, covered.grant.id)


def _covers(grant: Grant, args: ToolArgs) -> _Covered | None:
    """Whether `grant`'s constraints cover `args`, and through which path or host."""
    match args:
        case ReadFileArgs(path=path):
            return _longest(grant, [p for p in grant.paths if is_inside(p, path)])
        case WriteFileArgs(path=path):
            # the grant path itself does not count: a write replaces what is mounted
            return _longest(grant, [p for p in grant.paths if p != path and is_inside(p, path)])
        case ShellArgs(cwd=None):
            return _Covered(grant) if not grant.paths else None
        case ShellArgs(cwd=str() as cwd):
            return _longest(grant, [p for p in grant.paths if is_inside(p, cwd)])
        case HttpFetchArgs(url=url):
            hosts = [h for h in grant.hosts if host_matches(h, url.host)]
            return _Covered(grant, host=hosts[0]) if hosts else None
    # any other tool's grant (every memory tool's) takes no constraints (grant rule 6):
    # it covers every call
    return _Covered(grant) if not grant.paths and not grant.hosts else None


def _longest(grant: Grant, paths: list[str]) -> _Covered | None:
    if not paths:
        return None
    return _Covered(grant, path=max(paths, key=lambda p: len(p.encode())))


def one_line(text: str) -> str:
    """`text` on one line, control characters removed, at most 300 characters."""
    spaced = "".join(" " if ch in "\n\r\t" else ch for ch in text)
    return "".join(ch for ch in spaced if ch.isprintable())[:MAX_DETAIL]
