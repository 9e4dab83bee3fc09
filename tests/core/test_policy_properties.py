"""Property tests: decide against a deliberately naive oracle, and two monotonicity laws.

The oracle below shares nothing with boxmaker.core.policy but the arguments parser.
It walks every grant, works out every fact about it (alive, taint low enough,
covering, through which path), and only then picks: path containment by lists of
components, host patterns by lists of labels, expiry by datetimes, and the winner
by an explicit pairwise comparison. Grants reach decide through their TOML text
and `parse_grant_file`; the oracle reads the generated description instead.

Calls, paths and hosts come from a small universe, and most grants of an example
are for the tool it calls, so grants and calls overlap often. hypothesis prints
the failing example.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.core.errors import ArgsError
from boxmaker.core.grants.args import parse_arguments
from boxmaker.core.grants.loading import parse_grant_file
from boxmaker.core.grants.model import Grant, GrantSet
from boxmaker.core.grants.tools import ShellArgs, ToolName
from boxmaker.core.labels import DataClass
from boxmaker.core.policy import Ask, Decision, Denial, Outcome, SessionState, decide
from boxmaker.core.wire.broker import ToolRequest

pytestmark = pytest.mark.slow  # 2,000 examples each

NOW = "2026-06-01T00:00:00.000Z"
TOOLS = ("read_file", "write_file", "shell", "http_fetch")
CLASSES = ("public", "private", "secret")
IDS = ("a", "b", "c", "ab", "a-1", "a0", "b-2", "z")
DENY_IDS = ("0", "aa", "b-0", "c0", "zz")  # disjoint from IDS, interleaved in byte order
EXPIRIES = (
    "2026-05-31T23:59:59.999Z",
    NOW,
    "2026-06-01T00:00:00.001Z",
    "2027-01-01T00:00:00.000Z",
)
# None (no expiry) is listed twice so that most grants are alive
GRANT_EXPIRIES = (None, None, *EXPIRIES)
VALID_PATHS = (
    "/a",
    "/a/b",
    "/a/b/c",
    "/a/bc",
    "/d",
    "/d/e",
    "/a/b/c/f",
    "/a/x",
    "/a/bc/y",
    "/d/e/f",
    "/z",
    "/",
)
INVALID_PATHS = ("a/b", "/a/../b", "/a/", "/a//b", "/a/./b")
URL_HOSTS = ("example.com", "www.example.com", "a.b.example.com", "docs.python.org", "example.org")
BAD_URLS = (
    "http://example.com/",
    "https://127.0.0.1/",
    "https://Example.com/",
    "https://u@example.com/",
    "https://example.com:8443/",
)


# --- what the generator makes -------------------------------------------------------


@dataclass(frozen=True)
class GSpec:
    """A grant as the test describes it; rendered to TOML for the code under test."""

    id: str
    tool: str
    mode: str
    max_taint: str
    result_class: str
    untrusted: bool | None  # None: the key is left out
    expires: str | None
    paths: tuple[str, ...]
    hosts: tuple[str, ...]

    def toml(self) -> str:
        lines = [
            f'tool = "{self.tool}"',
            f'mode = "{self.mode}"',
            f'max_taint = "{self.max_taint}"',
            f'result_class = "{self.result_class}"',
        ]
        if self.untrusted is not None:
            lines.append(f"untrusted = {'true' if self.untrusted else 'false'}")
        if self.expires is not None:
            lines.append(f'expires = "{self.expires}"')
        lines.append("[constraints]")
        if self.paths:
            lines.append(f"paths = {json.dumps(list(self.paths))}")
        if self.hosts:
            lines.append(f"hosts = {json.dumps(list(self.hosts))}")
        return "\n".join(lines) + "\n"


@cache
def _parsed_body(spec: GSpec) -> Grant:
    grant, problems = parse_grant_file(f"{spec.id}.toml", spec.toml().encode())
    assert problems == [], (spec, problems)
    assert grant is not None
    assert grant.id == spec.id
    return grant


def load(spec: GSpec) -> Grant:
    """The grant parse_grant_file makes of `spec`'s TOML.

    The id comes only from the file name, so each body is parsed once (under the
    id "x") and the result is given the id it is drawn with.
    """
    return replace(_parsed_body(replace(spec, id="x")), id=spec.id)


# Every grant body (all but the id) is listed up front, so a grant costs hypothesis
# two draws instead of a dozen: that is what keeps 2,000 examples to a few seconds.
PATH_CHOICES = (
    ("/a",),
    ("/a/b",),
    ("/a/b/c",),
    ("/a/bc",),
    ("/d/e",),
    ("/a", "/a/b"),
    ("/a/b", "/a"),
    ("/a/b/c", "/d"),
    ("/a/bc", "/a/b/c", "/d/e"),
    ("/d", "/a/b"),
)
HOST_CHOICES = (
    ("example.com",),
    ("www.example.com",),
    ("*.example.com",),
    ("*.b.example.com",),
    ("example.com", "*.example.com"),
    ("docs.python.org",),
    ("*.python.org", "www.example.com"),
    ("*.b.example.com", "docs.python.org"),
)
CONSTRAINTS: dict[str, list[tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "read_file": [(paths, ()) for paths in PATH_CHOICES],
    "write_file": [(paths, ()) for paths in PATH_CHOICES],
    "shell": [(paths, ()) for paths in ((), (), ("/a",), ("/a/b",), ("/a", "/a/b/c"), ("/d/e",))],
    "http_fetch": [((), hosts) for hosts in HOST_CHOICES],
}
# loading rule 9: a deny grant applies at every taint
MODE_TAINTS = (*((m, t) for m in ("auto", "ask") for t in CLASSES), ("deny", "secret"))
DENY = (("deny", "secret"),)


def _bodies(tool: str, modes: tuple[tuple[str, str], ...]) -> list[GSpec]:
    return [
        GSpec("", tool, mode, max_taint, result_class, untrusted, expires, paths, hosts)
        for paths, hosts in CONSTRAINTS[tool]
        for mode, max_taint in modes
        for result_class in CLASSES
        for untrusted in (None, False, True)
        for expires in GRANT_EXPIRIES
    ]


def _pool(tool: str, modes: tuple[tuple[str, str], ...]) -> list[GSpec]:
    """Grants for `tool`, and one in ten for some other tool (never candidates)."""
    own = _bodies(tool, modes)
    others = [b for t in TOOLS if t != tool for b in _bodies(t, modes)]
    return own + others[:: max(1, 9 * len(others) // len(own))]


def _calls(tool: str) -> list[str]:
    """Arguments (JSON text) for calls to `tool`; about one in eight is invalid."""
    wrong_field = json.dumps({"file": "/a"})
    if tool == "read_file":
        calls = [json.dumps({"path": p}) for p in (*VALID_PATHS, *INVALID_PATHS[:1])]
    elif tool == "write_file":
        paths = (*VALID_PATHS, *INVALID_PATHS[1:2])
        calls = [json.dumps({"path": p, "content": "x"}) for p in paths]
        calls.append(json.dumps({"path": "/a/b"}))  # no content
    elif tool == "shell":
        cwds = (*VALID_PATHS, *INVALID_PATHS[2:4])
        calls = [json.dumps({"command": "ls", "cwd": p}) for p in cwds]
        calls += [json.dumps({"command": "ls"})] * 4 + [json.dumps({"command": "ls", "cwd": None})]
    else:
        urls = [f"https://{h}{port}/p?q=1" for h in URL_HOSTS for port in ("", ":443")]
        calls = [json.dumps({"url": u}) for u in (*urls, *BAD_URLS[:2])]
    return [*calls, wrong_field]


# "exec" is not a tool: its calls are read_file's arguments under another name
CALL_TOOL = st.sampled_from((*TOOLS, *TOOLS, "exec"))
ARGUMENTS = {tool: st.sampled_from(_calls(tool)) for tool in TOOLS}


def _lists(ids: tuple[str, ...], bodies: list[GSpec], max_size: int) -> st.SearchStrategy:
    return st.lists(
        st.tuples(st.sampled_from(ids), st.sampled_from(bodies)),
        max_size=max_size,
        unique_by=lambda pair: pair[0],
    )


GRANTS = {tool: _lists(IDS, _pool(tool, MODE_TAINTS), 6) for tool in TOOLS}
DENIES = {tool: _lists(DENY_IDS, _pool(tool, DENY), 2) for tool in TOOLS}
ONE_DENY = {
    tool: st.tuples(st.sampled_from(DENY_IDS), st.sampled_from(_pool(tool, DENY))) for tool in TOOLS
}


@dataclass(frozen=True)
class Scenario:
    tool: str
    arguments: str
    grants: list[GSpec]
    denies: list[GSpec]  # deny grants the property adds (for the first property: none)


@st.composite
def scenarios(draw: st.DrawFn, denies: str = "none") -> Scenario:
    """A call, the grants present, and (for the laws) deny grants to add."""
    tool = draw(CALL_TOOL)
    like = "read_file" if tool == "exec" else tool
    arguments = draw(ARGUMENTS[like])
    grants = [replace(body, id=gid) for gid, body in draw(GRANTS[like])]
    extra: list[GSpec] = []
    if denies == "one":
        gid, body = draw(ONE_DENY[like])
        extra = [replace(body, id=gid)]
    elif denies == "some":
        extra = [replace(body, id=gid) for gid, body in draw(DENIES[like])]
    return Scenario(tool, arguments, grants, extra)


taints = st.sampled_from(CLASSES)
nows = st.sampled_from(EXPIRIES)


# --- the oracle ---------------------------------------------------------------------

RANK = {"public": 0, "private": 1, "secret": 2}
MODE_RANK = {"auto": 0, "ask": 1, "deny": 2}

# (outcome, reason, grant id, matched path, result_class, untrusted)
Seen = tuple[str, str | None, str | None, str | None, str | None, bool | None]


def components(path: str) -> list[str]:
    return [] if path == "/" else path.split("/")[1:]


def contains(outer: str, inner: str) -> bool:
    outer_parts, inner_parts = components(outer), components(inner)
    if len(outer_parts) > len(inner_parts):
        return False
    return all(outer_parts[i] == inner_parts[i] for i in range(len(outer_parts)))


def pattern_matches(pattern: str, host: str) -> bool:
    host_labels = host.split(".")
    if pattern.startswith("*."):
        suffix = pattern[2:].split(".")
        if len(host_labels) <= len(suffix):
            return False
        return host_labels[len(host_labels) - len(suffix) :] == suffix
    return host_labels == pattern.split(".")


def deepest(paths: list[str]) -> str | None:
    best = None
    for path in paths:
        if best is None or len(components(path)) > len(components(best)):
            best = path
    return best


def oracle_covers(spec: GSpec, tool: str, args: object) -> tuple[bool, str | None]:
    """Whether `spec` covers the call, and the matched path."""
    if tool == "read_file":
        inside = [p for p in spec.paths if contains(p, args.path)]  # type: ignore[attr-defined]
        return bool(inside), deepest(inside)
    if tool == "write_file":
        target = args.path  # type: ignore[attr-defined]
        inside = [p for p in spec.paths if contains(p, target) and p != target]
        return bool(inside), deepest(inside)
    if tool == "shell":
        assert isinstance(args, ShellArgs)
        if args.cwd is None:
            return not spec.paths, None
        inside = [p for p in spec.paths if contains(p, args.cwd)]
        return bool(inside), deepest(inside)
    host = args.url.host  # type: ignore[attr-defined]
    return any(pattern_matches(p, host) for p in spec.hosts), None


def when(text: str) -> datetime:
    return datetime.fromisoformat(text)


def beats(a: tuple[GSpec, str | None], b: tuple[GSpec, str | None]) -> bool:
    """Whether candidate `a` wins over candidate `b`."""
    if MODE_RANK[a[0].mode] != MODE_RANK[b[0].mode]:
        return MODE_RANK[a[0].mode] > MODE_RANK[b[0].mode]
    depth_a = -1 if a[1] is None else len(components(a[1]))
    depth_b = -1 if b[1] is None else len(components(b[1]))
    if depth_a != depth_b:
        return depth_a > depth_b
    return a[0].id.encode() < b[0].id.encode()


def oracle(specs: list[GSpec], tool: str, raw: str, taint: str, now: str) -> Seen:
    if tool not in TOOLS:
        return ("denied", "no_grant", None, None, None, None)
    try:
        args = parse_arguments(ToolName(tool), raw)
    except ArgsError:
        return ("denied", "invalid_arguments", None, None, None, None)
    facts = []
    for spec in specs:
        # a shell call with a cwd also meets the file tools' deny grants
        other_deny = (
            tool == "shell"
            and getattr(args, "cwd", None) is not None
            and spec.tool in ("read_file", "write_file")
            and spec.mode == "deny"
        )
        if spec.tool != tool and not other_deny:
            continue
        alive = spec.expires is None or when(now) < when(spec.expires)
        low_enough = RANK[taint] <= RANK[spec.max_taint]
        covered, matched = oracle_covers(spec, tool, args)
        facts.append((spec, alive, low_enough, covered, matched))
    left = [(f[0], f[4]) for f in facts if f[1] and f[2] and f[3]]
    if not left:
        if any((not alive) and low and cov for _, alive, low, cov, _ in facts):
            return ("denied", "grant_expired", None, None, None, None)
        if any(alive and (not low) and cov for _, alive, low, cov, _ in facts):
            return ("denied", "taint_too_high", None, None, None, None)
        return ("denied", "no_grant", None, None, None, None)
    winner = left[0]
    for candidate in left[1:]:
        if beats(candidate, winner):
            winner = candidate
    if winner[0].mode == "deny":
        return ("denied", "denied_by_grant", winner[0].id, None, None, None)
    label = "public"
    untrusted = False
    for spec, _ in left:
        if RANK[spec.result_class] > RANK[label]:
            label = spec.result_class
        if spec.untrusted:
            untrusted = True
    if tool == "shell":  # a kept mount's label answers to every file grant over it
        alive_denies = [
            p
            for spec in specs
            if spec.tool != "http_fetch" and spec.mode == "deny"
            if spec.expires is None or when(now) < when(spec.expires)
            for p in spec.paths
        ]
        kept = [m for m in winner[0].paths if not any(contains(d, m) for d in alive_denies)]
        for spec in specs:
            if spec.tool == "http_fetch" or spec.mode == "deny":
                continue
            if any(contains(p, m) or contains(m, p) for p in spec.paths for m in kept):
                if RANK[spec.result_class] > RANK[label]:
                    label = spec.result_class
                untrusted = untrusted or bool(spec.untrusted)
    kind = "allowed" if winner[0].mode == "auto" else "ask"
    return (kind, None, winner[0].id, winner[1], label, untrusted)


# --- the code under test ------------------------------------------------------------


def run(specs: list[GSpec], tool: str, raw: str, taint: str, now: str = NOW) -> Outcome:
    grants = GrantSet(grants=tuple(load(s) for s in specs))
    request = ToolRequest(session="prop", call="c1", tool=tool, arguments=raw)
    return decide(request, grants, SessionState(taint=DataClass(taint)), now)


def seen(outcome: Outcome) -> Seen:
    if isinstance(outcome, Denial):
        return ("denied", outcome.reason.value, outcome.grant, None, None, None)
    kind = "allowed" if isinstance(outcome, Decision) else "ask"
    assert isinstance(outcome, Decision | Ask)
    return (
        kind,
        None,
        outcome.grant.id,
        outcome.matched_path,
        outcome.result_class.value,
        outcome.untrusted,
    )


RESTRICTIVENESS = {"allowed": 0, "ask": 1, "denied": 2}


# --- the properties -----------------------------------------------------------------


@settings(max_examples=2000, deadline=None)
@given(case=scenarios(), taint=taints, now=nows)
def test_decide_agrees_with_the_oracle(case: Scenario, taint: str, now: str) -> None:
    got = seen(run(case.grants, case.tool, case.arguments, taint, now))
    assert got == oracle(case.grants, case.tool, case.arguments, taint, now)


@settings(max_examples=2000, deadline=None)
@given(case=scenarios(denies="one"), taint=taints, now=nows)
def test_adding_a_deny_grant_never_makes_an_outcome_less_restrictive(
    case: Scenario, taint: str, now: str
) -> None:
    before = seen(run(case.grants, case.tool, case.arguments, taint, now))
    after = seen(run([*case.grants, *case.denies], case.tool, case.arguments, taint, now))
    assert RESTRICTIVENESS[after[0]] >= RESTRICTIVENESS[before[0]], (before, after)
    if before[1] == "denied_by_grant":
        assert after[1] == "denied_by_grant", (before, after)


@settings(max_examples=2000, deadline=None)
@given(case=scenarios(denies="some"), now=nows)
def test_denied_by_grant_at_one_taint_is_denied_by_grant_at_every_higher_taint(
    case: Scenario, now: str
) -> None:
    grants = [*case.grants, *case.denies]
    outcomes = [seen(run(grants, case.tool, case.arguments, taint, now)) for taint in CLASSES]
    for lower, outcome in enumerate(outcomes):
        if outcome[1] == "denied_by_grant":
            for higher in outcomes[lower + 1 :]:
                assert higher[1] == "denied_by_grant", outcomes
                # deny grants never drop out by taint, so the same one wins
                assert higher[2] == outcome[2], outcomes
