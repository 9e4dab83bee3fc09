"""`core.audit.grant_suggest`: which approved asks make a narrower grant, table by table."""

from __future__ import annotations

import json

import pytest

from boxmaker.core.audit.ask_history import PastAsk
from boxmaker.core.audit.grant_suggest import suggest_grants
from boxmaker.core.grants.loading import parse_grant_file
from boxmaker.core.grants.model import Grant, GrantSet, Mode

FILES = """tool = "read_file"
mode = "{mode}"
max_taint = "secret"
result_class = "secret"
[constraints]
paths = ["/home/k/p", "/home/k/p/deep"]
"""
SHELL = """tool = "shell"
mode = "ask"
max_taint = "private"
result_class = "private"
[constraints]
paths = ["/home/k/s"]
"""
FETCH = """tool = "http_fetch"
mode = "ask"
max_taint = "private"
result_class = "public"
[constraints]
hosts = ["*.example.com", "example.org"]
"""


def grant(name: str, text: str) -> Grant:
    found, problems = parse_grant_file(f"{name}.toml", text.encode())
    assert found is not None, problems
    return found


GRANTS = GrantSet(
    grants=(
        grant("files", FILES.format(mode="ask")),
        grant("auto-files", FILES.format(mode="auto")),
        grant("scratch", SHELL),
        grant("web", FETCH),
        grant("exact", FETCH.replace('"*.example.com", ', "")),
    )
)


def asked(grant: str, tool: str, answer: str, n: int = 0, **arguments: str) -> PastAsk:
    time = f"2026-11-30T10:00:{n:02d}.000Z"
    return PastAsk(n, grant, tool, json.dumps(arguments), time, answer, time)


def read(answer: str, path: str, n: int = 0, grant: str = "files") -> PastAsk:
    return asked(grant, "read_file", answer, n, path=path)


def narrowed(asks: list[PastAsk], min_approvals: int = 2) -> list[tuple[str, tuple[str, ...]]]:
    found = suggest_grants(asks, GRANTS, min_approvals, "out.toml")
    return [(s.grant, s.paths or s.hosts) for s in found]


CASES = {
    "common-parent": (
        [read("approved", "/home/k/p/a/x"), read("approved", "/home/k/p/a/b/y")],
        [("files", ("/home/k/p/a",))],
    ),
    "too-few": ([read("approved", "/home/k/p/a/x")], []),
    "parent-is-the-grant-path": (
        [read("approved", "/home/k/p/x"), read("approved", "/home/k/p/a/y")],
        [],
    ),
    "grouped-by-the-covering-grant-path": (
        [read("approved", "/home/k/p/deep/q/x"), read("approved", "/home/k/p/deep/q/y")],
        [("files", ("/home/k/p/deep/q",))],
    ),
    "a-refusal-inside-drops-it": (
        [
            read("approved", "/home/k/p/a/x"),
            read("approved", "/home/k/p/a/y"),
            read("refused", "/home/k/p/a/z"),
        ],
        [],
    ),
    "a-refusal-outside-does-not": (
        [
            read("approved", "/home/k/p/a/x"),
            read("approved", "/home/k/p/a/y"),
            read("refused", "/home/k/p/b/z"),
        ],
        [("files", ("/home/k/p/a",))],
    ),
    "expired-and-abandoned-count-for-nothing": (
        [read("approved", "/home/k/p/a/x"), read("expired", "/home/k/p/a/y")],
        [],
    ),
    "an-auto-grant-is-not-narrowed": (
        [read("approved", "/home/k/p/a/x", grant="auto-files")] * 2,
        [],
    ),
    "a-grant-no-longer-there": ([read("approved", "/home/k/p/a/x", grant="gone")] * 2, []),
    "bad-arguments-are-left-out": ([read("approved", "relative")] * 2, []),
    "shell-by-cwd": (
        [asked("scratch", "shell", "approved", command="make", cwd="/home/k/s/b")] * 2,
        [("scratch", ("/home/k/s/b",))],
    ),
    "shell-cwd-is-the-grant-path": (
        [asked("scratch", "shell", "approved", command="make", cwd="/home/k/s")] * 2,
        [],
    ),
    "hosts-exact-refused-dropped": (
        [
            asked("web", "http_fetch", "approved", url="https://a.example.com/1"),
            asked("web", "http_fetch", "approved", url="https://a.example.com/2"),
            asked("web", "http_fetch", "approved", url="https://b.example.com/"),
            asked("web", "http_fetch", "refused", url="https://b.example.com/x"),
        ],
        [("web", ("a.example.com",))],
    ),
    "hosts-equal-to-the-grant-are-not-narrower": (
        [asked("exact", "http_fetch", "approved", url="https://example.org/")] * 2,
        [],
    ),
}


@pytest.mark.parametrize(("asks", "expected"), CASES.values(), ids=CASES.keys())
def test_suggestions(asks: list[PastAsk], expected: list[tuple[str, tuple[str, ...]]]) -> None:
    assert narrowed(asks) == expected


def test_most_approvals_first_and_each_text_loads_as_an_auto_grant() -> None:
    asks = [read("approved", f"/home/k/p/a/{i}", i) for i in range(3)]
    asks += [
        asked("scratch", "shell", "approved", i, command="x", cwd="/home/k/s/b") for i in range(2)
    ]
    found = suggest_grants(asks, GRANTS, 2, "out.toml")
    assert [(s.grant, s.approvals) for s in found] == [("files", 3), ("scratch", 2)]
    assert (found[0].first, found[0].last) == (
        "2026-11-30T10:00:00.000Z",
        "2026-11-30T10:00:02.000Z",
    )
    for suggestion in found:
        loaded, problems = parse_grant_file("out.toml", suggestion.text.encode())
        assert problems == []
        assert loaded is not None
        assert loaded.mode is Mode.AUTO


def test_a_suggestion_reaching_a_reserved_place_is_left_out() -> None:
    asks = [read("approved", "/home/k/p/a/x"), read("approved", "/home/k/p/a/y")]
    assert suggest_grants(asks, GRANTS, 2, "out.toml", [("home", "/home/k/p/a/x")]) == []
    assert suggest_grants(asks, GRANTS, 2, "Bad.toml") == []
