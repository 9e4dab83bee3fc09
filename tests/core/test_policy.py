"""Table tests for decide and redecide: every table of the grants section, and the edges."""

from __future__ import annotations

import copy
import hashlib
import json
import pickle
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from boxmaker.core import policy
from boxmaker.core.grants.decisions import AllowedRecord, AskRecord, DeniedRecord, DenyReason
from boxmaker.core.grants.loading import parse_grant_file
from boxmaker.core.grants.model import Grant, GrantProblem, GrantSet, Mode
from boxmaker.core.grants.tools import ReadFileArgs, ToolName
from boxmaker.core.labels import DataClass
from boxmaker.core.policy import (
    Ask,
    Decision,
    Denial,
    Outcome,
    SessionState,
    decide,
    redecide,
)
from boxmaker.core.wire.broker import ToolRequest

NOW = "2026-11-30T12:00:00.000Z"
PUBLIC, PRIVATE, SECRET = DataClass.PUBLIC, DataClass.PRIVATE, DataClass.SECRET
R, W, S, H = ToolName.READ_FILE, ToolName.WRITE_FILE, ToolName.SHELL, ToolName.HTTP_FETCH


def grant(
    gid: str,
    tool: ToolName = R,
    mode: Mode = Mode.AUTO,
    *,
    paths: tuple[str, ...] = (),
    hosts: tuple[str, ...] = (),
    max_taint: DataClass = SECRET,
    result_class: DataClass = PRIVATE,
    untrusted: bool = False,
    expires: str | None = None,
    when_untrusted: Mode | None = None,
) -> Grant:
    if tool in (R, W) and not paths:
        paths = ("/home/kyle/notes",)
    if tool is H and not hosts:
        hosts = ("example.com",)
    return Grant(
        id=gid,
        tool=tool,
        mode=mode,
        max_taint=max_taint,
        result_class=result_class,
        untrusted=untrusted,
        expires=expires,
        paths=paths,
        hosts=hosts,
        sha256=hashlib.sha256(
            f"{gid}/{mode}/{paths}/{hosts}/{result_class}/{when_untrusted}".encode()
        ).hexdigest(),
        when_untrusted=when_untrusted,
    )


def grant_set(*grants: Grant) -> GrantSet:
    return GrantSet(grants=tuple(grants))


def req(tool: str, arguments: str, call: str = "c-1") -> ToolRequest:
    return ToolRequest(session="chat-1", call=call, tool=tool, arguments=arguments)


def read(path: str) -> ToolRequest:
    return req("read_file", f'{{"path":"{path}"}}')


def write(path: str) -> ToolRequest:
    return req("write_file", f'{{"path":"{path}","content":"x"}}')


def shell(cwd: str | None = None, command: str = "ls") -> ToolRequest:
    if cwd is None:
        return req("shell", f'{{"command":"{command}"}}')
    return req("shell", f'{{"command":"{command}","cwd":"{cwd}"}}')


def fetch(url: str) -> ToolRequest:
    return req("http_fetch", f'{{"url":"{url}"}}')


def run(
    request: ToolRequest, *grants: Grant, taint: DataClass = PRIVATE, now: str = NOW
) -> Outcome:
    return decide(request, grant_set(*grants), SessionState(taint=taint), now)


@dataclass(frozen=True)
class Want:
    """What an outcome should be; None fields are not checked."""

    outcome: str  # allowed, ask, denied
    reason: DenyReason | None = None
    grant: str | None = None
    matched: str | None = None
    result_class: DataClass | None = None
    untrusted: bool | None = None
    why: Literal["untrusted"] | None = None  # an ask's AskRecord.why


def check(outcome: Outcome, want: Want) -> None:
    if want.outcome == "denied":
        assert isinstance(outcome, Denial), f"expected a denial, got {summary(outcome)}"
        assert outcome.reason is want.reason
        assert outcome.grant == want.grant
        assert outcome.record() == DeniedRecord(reason=want.reason)
        return
    kind = Decision if want.outcome == "allowed" else Ask
    assert isinstance(outcome, kind), f"expected {want.outcome}, got {summary(outcome)}"
    assert not isinstance(outcome, Decision if kind is Ask else Ask)
    assert outcome.grant.id == want.grant
    assert outcome.matched == want.matched
    if want.result_class is not None:
        assert outcome.result_class is want.result_class
    if want.untrusted is not None:
        assert outcome.untrusted is want.untrusted
    assert outcome.record() == (AllowedRecord() if kind is Decision else AskRecord(why=want.why))


def summary(outcome: Outcome) -> dict[str, Any]:
    if isinstance(outcome, Denial):
        return {"denied": outcome.reason, "grant": outcome.grant}
    return {
        "kind": type(outcome).__name__,
        "grant": outcome.grant.id,
        "matched": outcome.matched,
        "class": outcome.result_class,
        "untrusted": outcome.untrusted,
    }


def allowed(gid: str, matched: str | None = None, **kw: Any) -> Want:
    return Want("allowed", grant=gid, matched=matched, **kw)


def asks(gid: str, matched: str | None = None, **kw: Any) -> Want:
    return Want("ask", grant=gid, matched=matched, **kw)


def denied(reason: DenyReason, gid: str | None = None) -> Want:
    return Want("denied", reason=reason, grant=gid)


NO_GRANT = denied(DenyReason.NO_GRANT)
INVALID = denied(DenyReason.INVALID_ARGUMENTS)

# --- "What each tool takes, and what its constraints cover" ------------------------

NOTES = "/home/kyle/notes"
SCRATCH = "/home/kyle/scratch"

TOOL_TABLE = [
    # read_file: path inside one of the grant's paths
    pytest.param(
        read(f"{NOTES}/a.md"), [grant("g", R, paths=(NOTES,))], allowed("g", NOTES), id="read-in"
    ),
    pytest.param(read("/etc/passwd"), [grant("g", R, paths=(NOTES,))], NO_GRANT, id="read-out"),
    pytest.param(
        read(f"{NOTES}/a.md"),
        [grant("g", R, paths=("/srv", NOTES))],
        allowed("g", NOTES),
        id="read-second-path",
    ),
    # write_file: inside, and not the grant path itself
    pytest.param(
        write(f"{SCRATCH}/out.txt"),
        [grant("g", W, paths=(SCRATCH,))],
        allowed("g", SCRATCH),
        id="write-in",
    ),
    pytest.param(
        write(SCRATCH), [grant("g", W, paths=(SCRATCH,))], NO_GRANT, id="write-the-grant-path"
    ),
    pytest.param(
        write("/tmp/out.txt"), [grant("g", W, paths=(SCRATCH,))], NO_GRANT, id="write-out"
    ),
    pytest.param(
        read(SCRATCH), [grant("g", R, paths=(SCRATCH,))], allowed("g", SCRATCH), id="read-dir"
    ),
    # shell: no paths and no cwd, or cwd inside a path
    pytest.param(shell(), [grant("g", S)], allowed("g"), id="shell-nopaths-nocwd"),
    pytest.param(shell("/tmp"), [grant("g", S)], NO_GRANT, id="shell-nopaths-cwd"),
    pytest.param(
        shell(SCRATCH),
        [grant("g", S, paths=(SCRATCH,))],
        allowed("g", SCRATCH),
        id="shell-cwd-is-the-path",
    ),
    pytest.param(
        shell(f"{SCRATCH}/sub"),
        [grant("g", S, paths=(SCRATCH,))],
        allowed("g", SCRATCH),
        id="shell-cwd-inside",
    ),
    pytest.param(
        shell("/tmp"), [grant("g", S, paths=(SCRATCH,))], NO_GRANT, id="shell-cwd-outside"
    ),
    pytest.param(shell(), [grant("g", S, paths=(SCRATCH,))], NO_GRANT, id="shell-paths-nocwd"),
    pytest.param(
        req("shell", '{"command":"ls","cwd":null}'),
        [grant("g", S)],
        allowed("g"),
        id="shell-null-cwd",
    ),
    pytest.param(
        shell(command="rm -rf / --no-preserve-root"),
        [grant("g", S)],
        allowed("g"),
        id="shell-command-not-inspected",
    ),
    # http_fetch: the URL's host matches one of the grant's hosts
    pytest.param(
        fetch("https://example.com/x"),
        [grant("g", H, hosts=("example.com",))],
        allowed("g", "example.com"),
        id="fetch-host",
    ),
    pytest.param(
        fetch("https://example.org/x"),
        [grant("g", H, hosts=("example.com",))],
        NO_GRANT,
        id="fetch-other-host",
    ),
    pytest.param(
        fetch("https://docs.python.org/3/"),
        [grant("g", H, hosts=("example.com", "docs.python.org"))],
        allowed("g", "docs.python.org"),
        id="fetch-second-host",
    ),
    # grants for other tools are not candidates
    pytest.param(
        read(f"{NOTES}/a.md"),
        [grant("w", W, paths=(NOTES,)), grant("s", S, paths=(NOTES,))],
        NO_GRANT,
        id="other-tools-do-not-count",
    ),
    pytest.param(read(f"{NOTES}/a.md"), [], NO_GRANT, id="empty-set"),
]


@pytest.mark.parametrize(("request_", "grants", "want"), TOOL_TABLE)
def test_what_each_tool_takes(request_: ToolRequest, grants: list[Grant], want: Want) -> None:
    check(run(request_, *grants), want)


def test_write_content_is_not_inspected() -> None:
    big = "\\u0000" + "x" * 10_000 + "\\n$(curl evil)"
    request = req("write_file", f'{{"path":"{SCRATCH}/a","content":"{big}"}}')
    check(run(request, grant("g", W, paths=(SCRATCH,))), allowed("g", SCRATCH))


# --- "Paths" ------------------------------------------------------------------------

PATH_TABLE = [
    pytest.param(f"{NOTES}/a.md", allowed("n", NOTES), id="inside"),
    pytest.param(NOTES, allowed("n", NOTES), id="the-directory-itself"),
    pytest.param("/home/kyle/notes2/a.md", NO_GRANT, id="not-inside"),
    pytest.param(f"{NOTES}/../.ssh/id", INVALID, id="dotdot"),
    pytest.param("notes/a.md", INVALID, id="relative"),
    pytest.param("/home/kyle//notes/./a.md", INVALID, id="double-slash-dot"),
]


@pytest.mark.parametrize(("path", "want"), PATH_TABLE)
def test_paths_table(path: str, want: Want) -> None:
    outcome = run(read(path), grant("n", R, paths=(NOTES,)))
    check(outcome, want)
    if want.reason is DenyReason.INVALID_ARGUMENTS:
        assert isinstance(outcome, Denial)
        assert outcome.detail is not None
        assert "path" in outcome.detail


def test_paths_table_root_grant_makes_the_file_invalid() -> None:
    text = HEAD_READ + '[constraints]\npaths = ["/"]\n'
    found, problems = parse_grant_file("root.toml", text.encode())
    assert found is None
    assert any("whole file system" in p.problem for p in problems)
    grants = GrantSet(grants=(), problems=tuple(problems))
    check(decide(read("/etc/passwd"), grants, SessionState(), NOW), GRANTS_INVALID)


HEAD_READ = 'tool = "read_file"\nmode = "auto"\nmax_taint = "secret"\nresult_class = "private"\n'
GRANTS_INVALID = denied(DenyReason.GRANTS_INVALID)


@pytest.mark.parametrize(
    ("paths", "requested", "matched"),
    [
        pytest.param(("/s", "/s/out"), "/s/out/a", "/s/out", id="longest-of-two"),
        pytest.param(("/s/out", "/s"), "/s/out/a", "/s/out", id="longest-of-two-reversed"),
        pytest.param(("/s", "/s/out"), "/s/other", "/s", id="only-the-shorter-contains"),
        pytest.param(("/s", "/s/out"), "/s/outside", "/s", id="component-not-prefix"),
    ],
)
def test_longest_path_of_one_grant_is_the_matched_path(
    paths: tuple[str, ...], requested: str, matched: str
) -> None:
    check(run(read(requested), grant("g", R, paths=paths)), allowed("g", matched))


@pytest.mark.parametrize(
    ("requested", "want"),
    [
        pytest.param("/s/out", allowed("g", "/s"), id="the-inner-grant-path-through-the-outer"),
        pytest.param("/s/out/a", allowed("g", "/s/out"), id="below-the-inner-path"),
        pytest.param("/s/x", allowed("g", "/s"), id="below-the-outer-path"),
        pytest.param("/s", NO_GRANT, id="the-outer-grant-path-itself"),
    ],
)
def test_write_file_grant_path_itself_does_not_count(requested: str, want: Want) -> None:
    check(run(write(requested), grant("g", W, paths=("/s", "/s/out"))), want)


def test_write_to_a_grant_path_is_covered_by_another_grant() -> None:
    outer = grant("outer", W, paths=("/s",))
    inner = grant("inner", W, paths=("/s/out",))
    check(run(write("/s/out"), outer, inner), allowed("outer", "/s"))
    check(run(write("/s/out/a"), outer, inner), allowed("inner", "/s/out"))


# --- "Hosts" ------------------------------------------------------------------------

HOST_TABLE = [
    pytest.param("example.com", "example.com", True, id="exact"),
    pytest.param("example.com", "www.example.com", False, id="exact-not-sub"),
    pytest.param("*.example.com", "www.example.com", True, id="wildcard-one"),
    pytest.param("*.example.com", "a.b.example.com", True, id="wildcard-two"),
    pytest.param("*.example.com", "example.com", False, id="wildcard-not-apex"),
]


@pytest.mark.parametrize(("pattern", "host", "matches"), HOST_TABLE)
def test_hosts_table(pattern: str, host: str, matches: bool) -> None:
    outcome = run(fetch(f"https://{host}/page"), grant("h", H, hosts=(pattern,)))
    check(outcome, allowed("h", pattern) if matches else NO_GRANT)


def test_hosts_listed_both_allow_both() -> None:
    g = grant("h", H, hosts=("example.com", "*.example.com"))
    check(run(fetch("https://example.com/"), g), allowed("h", "example.com"))
    check(run(fetch("https://www.example.com/"), g), allowed("h", "*.example.com"))


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("https://127.0.0.1/", id="ip"),
        pytest.param("https://127.1/", id="ip-short"),
        pytest.param("https://10.0.0.0x1/", id="ip-hex"),
        pytest.param("https://EXAMPLE.com/", id="uppercase"),
        pytest.param("https://[::1]/", id="bracket"),
        pytest.param("http://example.com/", id="http"),
        pytest.param("https://u@example.com/", id="userinfo"),
        pytest.param("https://example.com:8443/", id="port"),
        pytest.param("https://example.com/a b", id="space"),
        pytest.param("https://example.com/" + "a" * 2048, id="too-long"),
    ],
)
def test_invalid_urls_are_invalid_arguments(url: str) -> None:
    outcome = run(fetch(url), grant("h", H, hosts=("example.com", "*.example.com")))
    check(outcome, INVALID)
    assert isinstance(outcome, Denial)
    assert outcome.detail is not None
    assert outcome.detail.startswith("`url`")


def test_port_443_is_the_same_host() -> None:
    check(
        run(fetch("https://example.com:443/x"), grant("h", H, hosts=("example.com",))),
        allowed("h", "example.com"),
    )


# --- matching steps -----------------------------------------------------------------

P = "/home/kyle/notes"


@pytest.mark.parametrize(
    ("modes", "want"),
    [
        pytest.param(
            {"a": Mode.AUTO, "b": Mode.ASK, "c": Mode.DENY},
            denied(DenyReason.DENIED_BY_GRANT, "c"),
            id="deny-beats-ask-and-auto",
        ),
        pytest.param(
            {"a": Mode.DENY, "b": Mode.ASK, "c": Mode.AUTO},
            denied(DenyReason.DENIED_BY_GRANT, "a"),
            id="deny-beats-ask-and-auto-ids-reversed",
        ),
        pytest.param(
            {"a": Mode.AUTO, "b": Mode.AUTO, "c": Mode.ASK},
            asks("c", P),
            id="ask-beats-auto",
        ),
        pytest.param({"a": Mode.AUTO, "b": Mode.AUTO, "c": Mode.AUTO}, allowed("a", P), id="auto"),
    ],
)
def test_mode_precedence_among_three_matching_grants(modes: dict[str, Mode], want: Want) -> None:
    grants = [grant(gid, R, mode, paths=(P,)) for gid, mode in modes.items()]
    check(run(read(f"{P}/a.md"), *grants), want)


def test_mode_beats_path_length() -> None:
    broad_deny = grant("z-deny", R, Mode.DENY, paths=("/home/kyle",))
    narrow_auto = grant("a-auto", R, Mode.AUTO, paths=(f"{P}/keys",))
    narrow_ask = grant("a-ask", R, Mode.ASK, paths=(f"{P}/keys",))
    check(
        run(read(f"{P}/keys/id"), narrow_auto, broad_deny),
        denied(DenyReason.DENIED_BY_GRANT, "z-deny"),
    )
    broad_ask = grant("z-ask", R, Mode.ASK, paths=("/home/kyle",))
    check(run(read(f"{P}/keys/id"), narrow_auto, broad_ask), asks("z-ask", "/home/kyle"))
    check(run(read(f"{P}/keys/id"), narrow_ask, broad_ask), asks("a-ask", f"{P}/keys"))


def test_denied_by_grant_names_the_grant_and_its_hash() -> None:
    deny = grant("keys-deny", R, Mode.DENY, paths=(f"{P}/keys",))
    outcome = run(read(f"{P}/keys/id"), grant("notes", R, paths=(P,)), deny)
    assert isinstance(outcome, Denial)
    assert outcome.reason is DenyReason.DENIED_BY_GRANT
    assert outcome.grant == "keys-deny"
    assert outcome.grant_sha256 == deny.sha256
    assert outcome.detail is None


def test_deny_grant_does_not_cover_what_it_does_not_name() -> None:
    deny = grant("keys-deny", R, Mode.DENY, paths=(f"{P}/keys",))
    notes = grant("notes", R, paths=(P,))
    check(run(read(f"{P}/a.md"), notes, deny), allowed("notes", P))
    check(run(read(f"{P}/keys2"), notes, deny), allowed("notes", P))


@pytest.mark.parametrize(
    ("grants", "taint", "want"),
    [
        pytest.param(
            [
                grant("exp", R, paths=(P,), expires="2026-01-01T00:00:00.000Z"),
                grant("low", R, paths=(P,), max_taint=PUBLIC),
            ],
            PRIVATE,
            denied(DenyReason.GRANT_EXPIRED),
            id="expired-before-taint",
        ),
        pytest.param(
            [
                grant("low", R, paths=(P,), max_taint=PUBLIC),
                grant("exp", R, paths=(P,), expires="2026-01-01T00:00:00.000Z"),
            ],
            PRIVATE,
            denied(DenyReason.GRANT_EXPIRED),
            id="expired-before-taint-ids-reversed",
        ),
        pytest.param(
            [grant("low", R, paths=(P,), max_taint=PUBLIC)],
            PRIVATE,
            denied(DenyReason.TAINT_TOO_HIGH),
            id="taint-only",
        ),
        pytest.param(
            [grant("exp", R, paths=(P,), expires="2026-01-01T00:00:00.000Z")],
            PRIVATE,
            denied(DenyReason.GRANT_EXPIRED),
            id="expiry-only",
        ),
        pytest.param(
            [grant("both", R, paths=(P,), max_taint=PUBLIC, expires="2026-01-01T00:00:00.000Z")],
            PRIVATE,
            NO_GRANT,
            id="expired-and-too-tainted-is-neither-only",
        ),
        pytest.param(
            [
                grant("both", R, paths=(P,), max_taint=PUBLIC, expires="2026-01-01T00:00:00.000Z"),
                grant("low", R, paths=(P,), max_taint=PUBLIC),
            ],
            PRIVATE,
            denied(DenyReason.TAINT_TOO_HIGH),
            id="both-plus-taint-only",
        ),
        pytest.param(
            [grant("exp", R, paths=("/srv",), expires="2026-01-01T00:00:00.000Z")],
            PRIVATE,
            NO_GRANT,
            id="expired-but-not-covering",
        ),
        pytest.param(
            [grant("low", R, paths=("/srv",), max_taint=PUBLIC)],
            SECRET,
            NO_GRANT,
            id="too-tainted-but-not-covering",
        ),
        pytest.param(
            [grant("exp", W, paths=(P,), expires="2026-01-01T00:00:00.000Z")],
            PRIVATE,
            NO_GRANT,
            id="expired-other-tool",
        ),
        pytest.param(
            [
                grant("exp", R, paths=(P,), expires="2026-01-01T00:00:00.000Z"),
                grant("ok", R, paths=(P,)),
            ],
            PRIVATE,
            allowed("ok", P),
            id="a-live-grant-wins-over-reasons",
        ),
    ],
)
def test_reason_order(grants: list[Grant], taint: DataClass, want: Want) -> None:
    check(run(read(f"{P}/a.md"), *grants, taint=taint), want)


@pytest.mark.parametrize(
    ("now", "want"),
    [
        pytest.param("2026-11-30T11:59:59.999Z", allowed("g", P), id="one-ms-before"),
        pytest.param("2026-11-30T12:00:00.000Z", denied(DenyReason.GRANT_EXPIRED), id="exactly"),
        pytest.param("2026-11-30T12:00:00.001Z", denied(DenyReason.GRANT_EXPIRED), id="after"),
        pytest.param("2027-01-01T00:00:00.000Z", denied(DenyReason.GRANT_EXPIRED), id="later"),
    ],
)
def test_expiry_exactly_at_expires(now: str, want: Want) -> None:
    g = grant("g", R, paths=(P,), expires="2026-11-30T12:00:00.000Z")
    check(run(read(f"{P}/a.md"), g, now=now), want)


@pytest.mark.parametrize(
    ("taint", "max_taint", "passes"),
    [
        pytest.param(PUBLIC, PUBLIC, True, id="public-at-public"),
        pytest.param(PRIVATE, PUBLIC, False, id="private-over-public"),
        pytest.param(SECRET, PUBLIC, False, id="secret-over-public"),
        pytest.param(PUBLIC, PRIVATE, True, id="public-under-private"),
        pytest.param(PRIVATE, PRIVATE, True, id="private-at-private"),
        pytest.param(SECRET, PRIVATE, False, id="secret-over-private"),
        pytest.param(PUBLIC, SECRET, True, id="public-under-secret"),
        pytest.param(PRIVATE, SECRET, True, id="private-under-secret"),
        pytest.param(SECRET, SECRET, True, id="secret-at-secret"),
    ],
)
def test_taint_against_max_taint(taint: DataClass, max_taint: DataClass, passes: bool) -> None:
    g = grant("g", R, paths=(P,), max_taint=max_taint)
    want = allowed("g", P) if passes else denied(DenyReason.TAINT_TOO_HIGH)
    check(run(read(f"{P}/a.md"), g, taint=taint), want)


def test_longest_matched_path_wins_within_a_mode() -> None:
    home = grant("a-home", R, paths=("/home/kyle",))
    keys = grant("b-keys", R, paths=("/home/kyle/keys",))
    check(run(read("/home/kyle/keys/id"), home, keys), allowed("b-keys", "/home/kyle/keys"))
    check(run(read("/home/kyle/keys/id"), keys, home), allowed("b-keys", "/home/kyle/keys"))
    check(run(read("/home/kyle/a"), home, keys), allowed("a-home", "/home/kyle"))


def test_longest_matched_path_wins_within_ask() -> None:
    home = grant("a-home", R, Mode.ASK, paths=("/home/kyle",))
    keys = grant("b-keys", R, Mode.ASK, paths=("/home/kyle/keys",))
    auto = grant("c-auto", R, paths=("/home/kyle/keys/id",))
    check(run(read("/home/kyle/keys/id"), home, keys, auto), asks("b-keys", "/home/kyle/keys"))


def test_longest_path_counts_the_matched_path_not_the_grants_longest() -> None:
    # b has a longer path, but not one that contains the request
    a = grant("a", R, paths=("/home/kyle/notes",))
    b = grant("b", R, paths=("/home", "/home/kyle/notes/very/long/path/elsewhere"))
    check(run(read("/home/kyle/notes/x"), b, a), allowed("a", "/home/kyle/notes"))


@pytest.mark.parametrize(
    ("ids", "winner"),
    [
        pytest.param(("b", "a"), "a", id="a-before-b"),
        pytest.param(("ab", "b"), "ab", id="prefix-order"),
        pytest.param(("a0", "a-x"), "a-x", id="hyphen-before-digit"),
        pytest.param(("a", "1"), "1", id="digit-before-letter"),
        pytest.param(("abc", "ab"), "ab", id="shorter-prefix-first"),
    ],
)
def test_ties_go_to_the_lowest_id_in_byte_order(ids: tuple[str, str], winner: str) -> None:
    grants = [grant(gid, R, paths=(P,)) for gid in ids]
    check(run(read(f"{P}/a.md"), *grants), allowed(winner, P))
    grants = [grant(gid, H, hosts=("example.com",)) for gid in ids]
    check(run(fetch("https://example.com/"), *grants), allowed(winner, "example.com"))
    grants = [grant(gid, S) for gid in ids]
    check(run(shell(), *grants), allowed(winner))


def test_fetch_grants_all_tie_whatever_pattern_matched() -> None:
    exact = grant("b-exact", H, hosts=("www.example.com",))
    wild = grant("a-wild", H, hosts=("*.example.com",))
    check(run(fetch("https://www.example.com/"), exact, wild), allowed("a-wild", "*.example.com"))


@pytest.mark.parametrize(
    ("home_id", "keys_id"),
    [
        pytest.param("a-home", "b-keys", id="home-sorts-first"),
        pytest.param("b-home", "a-keys", id="keys-sorts-first"),
    ],
)
def test_home_and_keys_result_is_secret_whichever_id_sorts_first(
    home_id: str, keys_id: str
) -> None:
    home = grant(home_id, R, paths=("/home/kyle",), result_class=PRIVATE)
    keys = grant(keys_id, R, paths=("/home/kyle/keys",), result_class=SECRET)
    outcome = run(read("/home/kyle/keys/id"), home, keys)
    check(outcome, allowed(keys_id, "/home/kyle/keys", result_class=SECRET))
    # the wide grant winning alone still labels only what it covers
    check(
        run(read("/home/kyle/a"), home, keys), allowed(home_id, "/home/kyle", result_class=PRIVATE)
    )


def test_label_comes_from_every_grant_left_not_the_winner() -> None:
    winner = grant("a", R, paths=("/home/kyle/keys",), result_class=PUBLIC)
    wide = grant("b", R, paths=("/home/kyle",), result_class=SECRET)
    check(
        run(read("/home/kyle/keys/id"), winner, wide),
        allowed("a", "/home/kyle/keys", result_class=SECRET),
    )


def test_label_counts_grants_of_other_modes() -> None:
    asking = grant("a-ask", R, Mode.ASK, paths=(P,), result_class=PUBLIC)
    auto = grant("b-auto", R, paths=(P,), result_class=SECRET, untrusted=True)
    check(
        run(read(f"{P}/x"), asking, auto),
        asks("a-ask", P, result_class=SECRET, untrusted=True),
    )


def test_label_ignores_grants_that_dropped_out() -> None:
    g = grant("g", R, paths=(P,), result_class=PUBLIC)
    expired = grant("e", R, paths=(P,), result_class=SECRET, untrusted=True, expires=NOW)
    tainted = grant("t", R, paths=(P,), result_class=SECRET, untrusted=True, max_taint=PUBLIC)
    other = grant("o", R, paths=("/srv",), result_class=SECRET, untrusted=True)
    check(
        run(read(f"{P}/x"), g, expired, tainted, other),
        allowed("g", P, result_class=PUBLIC, untrusted=False),
    )


@pytest.mark.parametrize(
    "untrusted_id",
    [pytest.param("z-untrusted", id="loser-sorts-last"), pytest.param("0-untrusted", id="first")],
)
def test_an_untrusted_grant_among_the_matches_sets_the_flag(untrusted_id: str) -> None:
    winner = grant("m-winner", R, Mode.ASK, paths=(P,), untrusted=False)
    loser = grant(untrusted_id, R, Mode.AUTO, paths=(P,), untrusted=True)
    check(run(read(f"{P}/x"), winner, loser), asks("m-winner", P, untrusted=True))
    check(run(read(f"{P}/x"), winner), asks("m-winner", P, untrusted=False))


def test_untrusted_flag_in_session_does_not_change_the_decision() -> None:
    g = grant("g", R, paths=(P,))
    outcome = decide(read(f"{P}/x"), grant_set(g), SessionState(PRIVATE, untrusted=True), NOW)
    check(outcome, allowed("g", P, untrusted=False))


def test_an_expired_deny_no_longer_denies() -> None:
    deny = grant("keys-deny", R, Mode.DENY, paths=(P,), expires="2026-06-01T00:00:00.000Z")
    auto = grant("notes", R, paths=(P,))
    check(
        run(read(f"{P}/x"), deny, auto, now="2026-05-31T23:59:59.999Z"),
        denied(DenyReason.DENIED_BY_GRANT, "keys-deny"),
    )
    check(run(read(f"{P}/x"), deny, auto, now="2026-06-01T00:00:00.000Z"), allowed("notes", P))


def test_a_deny_grant_denies_at_every_taint() -> None:
    deny = grant("d", R, Mode.DENY, paths=(P,), max_taint=SECRET)
    auto = grant("a", R, paths=(P,), max_taint=SECRET)
    for taint in DataClass:
        check(run(read(f"{P}/x"), deny, auto, taint=taint), denied(DenyReason.DENIED_BY_GRANT, "d"))


def test_an_ask_grant_with_lower_max_taint_drops_out_when_taint_rises() -> None:
    ask = grant("a-ask", R, Mode.ASK, paths=(P,), max_taint=PRIVATE)
    auto = grant("b-auto", R, paths=(P,), max_taint=SECRET)
    check(run(read(f"{P}/x"), ask, auto, taint=PRIVATE), asks("a-ask", P))
    check(run(read(f"{P}/x"), ask, auto, taint=SECRET), allowed("b-auto", P))


@pytest.mark.parametrize(
    ("request_", "want"),
    [
        pytest.param(shell(), allowed("plain"), id="no-cwd-uses-a-pathless-grant"),
        pytest.param(shell(SCRATCH), allowed("scratch", SCRATCH), id="cwd-uses-a-path-grant"),
        pytest.param(shell(f"{SCRATCH}/deep/er"), allowed("scratch", SCRATCH), id="cwd-deeper"),
        pytest.param(shell("/etc"), NO_GRANT, id="cwd-elsewhere"),
    ],
)
def test_shell_with_and_without_cwd(request_: ToolRequest, want: Want) -> None:
    plain = grant("plain", S)
    scratch = grant("scratch", S, paths=(SCRATCH,))
    check(run(request_, plain, scratch), want)


def test_shell_pathless_grants_tie_and_the_lowest_id_wins() -> None:
    check(run(shell(), grant("b", S), grant("a", S, Mode.AUTO)), allowed("a"))
    check(run(shell(), grant("b", S, Mode.ASK), grant("a", S)), asks("b"))


# --- before matching ----------------------------------------------------------------


@pytest.mark.parametrize(
    "tool",
    [
        pytest.param("exec", id="unknown"),
        pytest.param("Read_File", id="case"),
        pytest.param("", id="empty"),
        pytest.param("run_shell", id="near-miss"),
    ],
)
def test_unknown_tool_is_no_grant_and_arguments_are_not_parsed(tool: str) -> None:
    g = grant("g", R, paths=(P,))
    for arguments in ('{"path":"/home/kyle/notes/a"}', "not json at all"):
        outcome = run(req(tool, arguments), g)
        check(outcome, NO_GRANT)
        assert isinstance(outcome, Denial)
        assert outcome.detail is None


@pytest.mark.parametrize(
    ("request_", "detail"),
    [
        pytest.param(
            req("read_file", '{"file":"/a"}'), "unknown field `file`, expected `path`", id="unknown"
        ),
        pytest.param(req("read_file", "{}"), "missing field `path`", id="missing"),
        pytest.param(req("read_file", '{"path":1}'), "invalid type for `path`", id="type"),
        pytest.param(req("read_file", "[]"), "must be a JSON object", id="not-object"),
        pytest.param(req("read_file", "{"), "not valid JSON", id="not-json"),
        pytest.param(req("shell", '{"command":"ls","cwd":"x"}'), "`cwd`", id="relative-cwd"),
        pytest.param(req("write_file", '{"path":"/a"}'), "missing field `content`", id="write"),
    ],
)
def test_invalid_arguments_carry_a_detail(request_: ToolRequest, detail: str) -> None:
    outcome = run(request_, grant("g", R, paths=(P,)), grant("s", S), grant("w", W))
    check(outcome, INVALID)
    assert isinstance(outcome, Denial)
    assert outcome.detail is not None
    assert detail in outcome.detail


def test_invalid_arguments_are_denied_even_without_grants() -> None:
    outcome = run(req("read_file", '{"file":"/a"}'))
    check(outcome, INVALID)


def test_invalid_argument_detail_is_one_printable_line() -> None:
    long_key = "k\\n\\u001b[8m" + "x" * 1000
    outcome = run(req("read_file", f'{{"{long_key}":1,"\\ud800":2}}'))
    assert isinstance(outcome, Denial)
    assert outcome.detail is not None
    assert len(outcome.detail) <= 300
    assert outcome.detail.isprintable()
    outcome.detail.encode("utf-8")
    outcome = run(req("read_file", '{"\\ud800":1}'))
    assert isinstance(outcome, Denial)
    assert outcome.detail is not None
    outcome.detail.encode("utf-8")


def test_an_invalid_set_denies_before_anything_else() -> None:
    bad = GrantSet(
        grants=(grant("g", R, paths=(P,)),),
        problems=(GrantProblem(file="x.toml", line=1, problem="broken"),),
    )
    for request in (read(f"{P}/a"), req("exec", "{}"), req("read_file", "{")):
        check(decide(request, bad, SessionState(), NOW), GRANTS_INVALID)


# --- what a Decision and an Ask hold ------------------------------------------------


def test_decision_holds_the_request_the_arguments_and_the_grant() -> None:
    g = grant("g", R, paths=(P,))
    request = req("read_file", '{"path":"\\u002fhome/kyle/notes/a"}', call="c-9")
    outcome = run(request, g)
    assert isinstance(outcome, Decision)
    assert outcome.request == request
    assert outcome.args == ReadFileArgs(path="/home/kyle/notes/a")
    assert outcome.grant == g
    assert outcome.tool is R
    assert outcome.matched_path == P
    assert outcome.matched_host is None


def test_ask_holds_the_asking_grant() -> None:
    g = grant("h", H, Mode.ASK, hosts=("*.example.com",))
    outcome = run(fetch("https://a.example.com/x"), g)
    assert isinstance(outcome, Ask)
    assert outcome.grant == g
    assert outcome.matched_host == "*.example.com"
    assert outcome.matched_path is None


# --- redecide -----------------------------------------------------------------------


def first_ask(*grants: Grant, taint: DataClass = PRIVATE) -> Ask:
    outcome = run(read(f"{P}/a.md"), *grants, taint=taint)
    assert isinstance(outcome, Ask), summary(outcome)
    return outcome


def test_redecide_ask_gives_a_decision() -> None:
    g = grant("g", R, Mode.ASK, paths=(P,), result_class=SECRET)
    ask = first_ask(g)
    decision = redecide(ask, grant_set(g), SessionState(PRIVATE), NOW)
    check(decision, allowed("g", P, result_class=SECRET))
    assert isinstance(decision, Decision)
    assert decision.request == ask.request
    assert decision.args == ask.args


def test_redecide_after_the_grant_file_changed_is_stale() -> None:
    old = grant("g", R, Mode.ASK, paths=(P,))
    new = grant("g", R, Mode.AUTO, paths=(P,), result_class=SECRET)
    assert new.sha256 != old.sha256
    stale = redecide(first_ask(old), grant_set(new), SessionState(PRIVATE), NOW)
    check(stale, denied(DenyReason.APPROVAL_STALE, "g"))
    assert isinstance(stale, Denial)
    assert stale.grant_sha256 == new.sha256  # what the Approval record names
    assert stale.detail == "the file of grant g changed"


def test_redecide_under_a_different_grant_is_stale() -> None:
    old = grant("old", R, Mode.ASK, paths=(P,))
    other = grant("other", R, Mode.AUTO, paths=("/home/kyle",))
    stale = redecide(first_ask(old), grant_set(other), SessionState(), NOW)
    check(stale, denied(DenyReason.APPROVAL_STALE, "other"))
    assert isinstance(stale, Denial)
    assert stale.detail == "grant other matches now, not old"


def test_redecide_with_an_auto_grant_added_beside_the_ask_grant_runs() -> None:
    # the ask grant still wins (ask beats auto): the same call, the same digest
    g = grant("g", R, Mode.ASK, paths=(P,))
    ask = first_ask(g)
    both = grant_set(g, grant("a-auto", R, Mode.AUTO, paths=(P,)))
    decision = redecide(ask, both, SessionState(PRIVATE), NOW)
    check(decision, allowed("g", P))
    assert isinstance(decision, Decision)
    assert decision.digest == ask.digest


def test_redecide_after_the_taint_rose_within_the_grant_is_stale() -> None:
    g = grant("g", R, Mode.ASK, paths=(P,), max_taint=SECRET)
    stale = redecide(first_ask(g), grant_set(g), SessionState(SECRET), NOW)
    check(stale, denied(DenyReason.APPROVAL_STALE, "g"))
    assert isinstance(stale, Denial)
    assert stale.detail == "the session's taint is secret now, not private"


def test_the_digest_binds_tool_arguments_grant_hash_and_taint() -> None:
    g = grant("g", R, Mode.ASK, paths=(P,))
    ask = first_ask(g)
    bound = {
        "tool": "read_file",
        "arguments": f'{{"path":"{P}/a.md"}}',
        "grant": "g",
        "grant_sha256": g.sha256,
        "taint": "private",
    }
    expected = hashlib.sha256(json.dumps(bound, separators=(",", ":")).encode()).hexdigest()
    assert ask.digest == expected
    # the canonical arguments, not the raw text: an escaped slash is the same call
    escaped = req("read_file", '{"path":"\\u002fhome/kyle/notes/a.md"}')
    same = decide(escaped, grant_set(g), SessionState(), NOW)
    assert isinstance(same, Ask)
    assert same.digest == ask.digest
    other = run(read(f"{P}/b.md"), g)
    assert isinstance(other, Ask)
    assert other.digest != ask.digest
    assert first_ask(g, taint=PUBLIC).digest != ask.digest


@pytest.mark.parametrize(
    ("grants", "taint", "now", "want"),
    [
        pytest.param([], PRIVATE, NOW, NO_GRANT, id="grant-removed"),
        pytest.param(
            [grant("g", R, Mode.ASK, paths=(P,), max_taint=PRIVATE)],
            SECRET,
            NOW,
            denied(DenyReason.TAINT_TOO_HIGH),
            id="taint-rose",
        ),
        pytest.param(
            [
                grant("g", R, Mode.ASK, paths=(P,), max_taint=PRIVATE),
                grant("z-deny", R, Mode.DENY, paths=("/home",)),
            ],
            PRIVATE,
            NOW,
            denied(DenyReason.DENIED_BY_GRANT, "z-deny"),
            id="deny-added",
        ),
        pytest.param(
            [grant("g", R, Mode.ASK, paths=(P,), max_taint=PRIVATE, expires=NOW)],
            PRIVATE,
            NOW,
            denied(DenyReason.GRANT_EXPIRED),
            id="expired-meanwhile",
        ),
        pytest.param(
            [grant("g", R, Mode.ASK, paths=("/srv",), max_taint=PRIVATE)],
            PRIVATE,
            NOW,
            NO_GRANT,
            id="grant-narrowed",
        ),
    ],
)
def test_redecide_denies(grants: list[Grant], taint: DataClass, now: str, want: Want) -> None:
    ask = first_ask(grant("g", R, Mode.ASK, paths=(P,), max_taint=PRIVATE))
    check(redecide(ask, grant_set(*grants), SessionState(taint), now), want)


def test_redecide_denial_carries_the_deny_grant_hash() -> None:
    deny = grant("z-deny", R, Mode.DENY, paths=(P,))
    ask = first_ask(grant("g", R, Mode.ASK, paths=(P,)))
    denial = redecide(
        ask, grant_set(grant("g", R, Mode.ASK, paths=(P,)), deny), SessionState(), NOW
    )
    assert isinstance(denial, Denial)
    assert denial.grant_sha256 == deny.sha256


def test_redecide_with_an_invalid_set_is_grants_invalid() -> None:
    g = grant("g", R, Mode.ASK, paths=(P,))
    bad = GrantSet(grants=(g,), problems=(GrantProblem(file="x.toml", problem="broken"),))
    check(redecide(first_ask(g), bad, SessionState(), NOW), GRANTS_INVALID)


# --- Decision and Ask are sealed ----------------------------------------------------


def a_decision() -> Decision:
    outcome = run(read(f"{P}/a"), grant("g", R, paths=(P,)))
    assert isinstance(outcome, Decision)
    return outcome


def an_ask() -> Ask:
    return first_ask(grant("g", R, Mode.ASK, paths=(P,)))


SEALED = [pytest.param(a_decision, id="decision"), pytest.param(an_ask, id="ask")]


@pytest.mark.parametrize("make", SEALED)
def test_cannot_be_built_outside_policy(make: Any) -> None:
    sealed = make()
    cls = type(sealed)
    match = policy._rematch(sealed)  # the very data a real one holds
    with pytest.raises(TypeError, match=r"boxmaker\.core\.policy"):
        cls(object(), match)
    with pytest.raises(TypeError, match=r"boxmaker\.core\.policy"):
        cls(None, match)


@pytest.mark.parametrize("make", SEALED)
def test_cannot_be_built_through_a_subclass(make: Any) -> None:
    cls = type(make())

    def build() -> object:
        class Forged(cls):  # type: ignore[valid-type, misc] # a subclass defined outside policy
            __slots__ = ()

            def __init__(self) -> None:
                pass

        return Forged()

    with pytest.raises(TypeError):
        build()


@pytest.mark.parametrize("make", SEALED)
def test_cannot_be_mutated(make: Any) -> None:
    sealed = make()
    other = grant("other", R, paths=("/",))
    with pytest.raises(AttributeError):
        sealed.grant = other
    with pytest.raises(AttributeError):
        sealed.result_class = PUBLIC
    with pytest.raises(AttributeError):
        sealed.new_field = 1
    assert sealed.grant.id == "g"
    assert sealed.result_class is PRIVATE


@pytest.mark.parametrize("make", SEALED)
def test_attributes_cannot_be_deleted(make: Any) -> None:
    sealed = make()
    with pytest.raises((AttributeError, TypeError)):
        del sealed.grant
    assert sealed.grant.id == "g"


@pytest.mark.parametrize("make", SEALED)
def test_cannot_be_copied(make: Any) -> None:
    sealed = make()
    with pytest.raises(TypeError):
        copy.copy(sealed)
    with pytest.raises(TypeError):
        copy.deepcopy(sealed)
    with pytest.raises(TypeError):
        copy.deepcopy({"inside": [sealed]})


@pytest.mark.parametrize("make", SEALED)
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_cannot_be_pickled(make: Any, protocol: int) -> None:
    with pytest.raises(TypeError):
        pickle.dumps(make(), protocol=protocol)


def test_denial_can_be_built_anywhere() -> None:
    denial = Denial(DenyReason.STATE_UNREADABLE)
    assert denial.record() == DeniedRecord(reason=DenyReason.STATE_UNREADABLE)
    assert denial.grant is None


# --- when_untrusted -----------------------------------------------------------------


def untrusted_run(request: ToolRequest, *grants: Grant) -> Outcome:
    return decide(request, grant_set(*grants), SessionState(untrusted=True), NOW)


@pytest.mark.parametrize(
    ("request_", "g", "want"),
    [
        pytest.param(
            read(f"{NOTES}/a"), grant("r", R, paths=(NOTES,)), allowed("r", NOTES), id="read"
        ),
        pytest.param(
            write(f"{SCRATCH}/a"),
            grant("w", W, paths=(SCRATCH,)),
            asks("w", SCRATCH, why="untrusted"),
            id="write",
        ),
        pytest.param(
            shell(SCRATCH),
            grant("s", S, paths=(SCRATCH,)),
            asks("s", SCRATCH, why="untrusted"),
            id="shell",
        ),
        pytest.param(
            fetch("https://example.com/"),
            grant("f", H, hosts=("example.com",)),
            asks("f", "example.com", why="untrusted"),
            id="fetch",
        ),
        pytest.param(
            req("memory_recall", '{"query":"x"}'),
            grant("m", ToolName.MEMORY_RECALL),
            allowed("m"),
            id="memory-recall",
        ),
        pytest.param(
            req("memory_note", '{"text":"x"}'),
            grant("m", ToolName.MEMORY_NOTE),
            allowed("m"),
            id="memory-note",
        ),
        pytest.param(
            req("memory_add", '{"kind":"memory","text":"x"}'),
            grant("m", ToolName.MEMORY_ADD),
            asks("m", why="untrusted"),
            id="memory-add",
        ),
    ],
)
def test_the_default_when_untrusted_of_each_tool(
    request_: ToolRequest, g: Grant, want: Want
) -> None:
    check(run(request_, g), Want("allowed", grant=want.grant, matched=want.matched))
    check(untrusted_run(request_, g), want)


@pytest.mark.parametrize(
    ("mode", "when", "want"),
    [
        pytest.param(Mode.AUTO, Mode.AUTO, allowed("w", SCRATCH), id="auto-keeps-auto"),
        pytest.param(
            Mode.AUTO, Mode.ASK, asks("w", SCRATCH, why="untrusted"), id="auto-becomes-ask"
        ),
        pytest.param(
            Mode.AUTO,
            Mode.DENY,
            denied(DenyReason.UNTRUSTED_SESSION, "w"),
            id="auto-becomes-denied",
        ),
        pytest.param(Mode.ASK, Mode.AUTO, asks("w", SCRATCH), id="ask-is-never-loosened"),
        pytest.param(
            Mode.ASK, Mode.DENY, denied(DenyReason.UNTRUSTED_SESSION, "w"), id="ask-becomes-denied"
        ),
        pytest.param(Mode.ASK, Mode.ASK, asks("w", SCRATCH), id="ask-stays-ask"),
    ],
)
def test_when_untrusted_in_an_untrusted_session(mode: Mode, when: Mode, want: Want) -> None:
    g = grant("w", W, mode, paths=(SCRATCH,), when_untrusted=when)
    check(untrusted_run(write(f"{SCRATCH}/a"), g), want)
    # a trusted session never sees it
    trusted = run(write(f"{SCRATCH}/a"), g)
    assert type(trusted) is (Decision if mode is Mode.AUTO else Ask)


def test_an_untrusted_deny_carries_the_grant_and_its_hash() -> None:
    g = grant("w", W, paths=(SCRATCH,), when_untrusted=Mode.DENY)
    denial = untrusted_run(write(f"{SCRATCH}/a"), g)
    assert isinstance(denial, Denial)
    assert (denial.grant, denial.grant_sha256) == ("w", g.sha256)


def test_an_untrusted_ask_counts_as_ask_when_grants_compete() -> None:
    # the auto grant is ask now; the longer-path ask grant wins within ask
    outer = grant("a-outer", W, paths=(SCRATCH,))
    inner = grant("b-inner", W, Mode.ASK, paths=(f"{SCRATCH}/in",))
    check(untrusted_run(write(f"{SCRATCH}/in/a"), outer, inner), asks("b-inner", f"{SCRATCH}/in"))
    # and a grant denied only by when_untrusted beats both
    deny = grant("c-deny", W, paths=(SCRATCH,), when_untrusted=Mode.DENY)
    check(
        untrusted_run(write(f"{SCRATCH}/in/a"), outer, inner, deny),
        denied(DenyReason.UNTRUSTED_SESSION, "c-deny"),
    )


def test_redecide_of_an_untrusted_ask_runs_the_same_call() -> None:
    g = grant("w", W, paths=(SCRATCH,))
    ask = untrusted_run(write(f"{SCRATCH}/a"), g)
    assert isinstance(ask, Ask)
    decision = redecide(ask, grant_set(g), SessionState(untrusted=True), NOW)
    check(decision, allowed("w", SCRATCH))
    assert isinstance(decision, Decision)
    assert decision.digest == ask.digest
