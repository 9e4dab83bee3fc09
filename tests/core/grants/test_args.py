"""Strict parsing of each tool's arguments, and their canonical form."""

from __future__ import annotations

import pytest

from boxmaker.core.errors import ArgsError
from boxmaker.core.grants.args import canonical_arguments, parse_arguments
from boxmaker.core.grants.tools import (
    HttpFetchArgs,
    ReadFileArgs,
    ShellArgs,
    ToolArgs,
    ToolName,
    WriteFileArgs,
    tool_name,
    tool_names,
)

R, W, S, H = ToolName.READ_FILE, ToolName.WRITE_FILE, ToolName.SHELL, ToolName.HTTP_FETCH


@pytest.mark.parametrize(
    ("text", "tool"),
    [
        pytest.param("read_file", R, id="read_file"),
        pytest.param("write_file", W, id="write_file"),
        pytest.param("shell", S, id="shell"),
        pytest.param("http_fetch", H, id="http_fetch"),
        pytest.param("exec", None, id="unknown"),
        pytest.param("Read_File", None, id="case-matters"),
        pytest.param("read_file ", None, id="trailing-space"),
        pytest.param("", None, id="empty"),
    ],
)
def test_tool_name(text: str, tool: ToolName | None) -> None:
    assert tool_name(text) is tool


@pytest.mark.parametrize(
    ("tool", "raw", "expected"),
    [
        pytest.param(R, '{"path":"/a/b"}', ReadFileArgs(path="/a/b"), id="read"),
        pytest.param(
            W,
            '{"path":"/a/b","content":"hi\\nthere"}',
            WriteFileArgs(path="/a/b", content="hi\nthere"),
            id="write",
        ),
        pytest.param(
            W, '{"content":"","path":"/a"}', WriteFileArgs(path="/a", content=""), id="write-empty"
        ),
        pytest.param(S, '{"command":"ls -l"}', ShellArgs(command="ls -l", cwd=None), id="shell"),
        pytest.param(
            S,
            '{"command":"ls","cwd":"/s"}',
            ShellArgs(command="ls", cwd="/s"),
            id="shell-cwd",
        ),
        pytest.param(
            S,
            '{"command":"ls","cwd":null}',
            ShellArgs(command="ls", cwd=None),
            id="shell-cwd-null-is-absent",
        ),
        pytest.param(
            R, ' \n{ "path" : "\\u002fetc" }\t', ReadFileArgs(path="/etc"), id="whitespace-escape"
        ),
        pytest.param(R, '{"path":"/"}', ReadFileArgs(path="/"), id="root-is-a-valid-argument"),
    ],
)
def test_parses(tool: ToolName, raw: str, expected: ToolArgs) -> None:
    assert parse_arguments(tool, raw) == expected


def test_http_fetch_parses_url_and_host() -> None:
    args = parse_arguments(H, '{"url":"https://docs.python.org/3/"}')
    assert isinstance(args, HttpFetchArgs)
    assert args.url.text == "https://docs.python.org/3/"
    assert args.url.host == "docs.python.org"


def test_cwd_null_equals_cwd_absent() -> None:
    assert parse_arguments(S, '{"command":"x","cwd":null}') == parse_arguments(S, '{"command":"x"}')


@pytest.mark.parametrize(
    ("tool", "raw", "message"),
    [
        # unknown fields
        pytest.param(
            R, '{"file":"/a"}', "unknown field `file`, expected `path`", id="unknown-file"
        ),
        pytest.param(R, '{"path":"/a","mode":"r"}', "unknown field `mode`", id="unknown-extra"),
        pytest.param(
            S, '{"cmd":"ls"}', "unknown field `cmd`, expected one of `command`, `cwd`", id="shell"
        ),
        pytest.param(
            W,
            '{"path":"/a","content":"x","append":true}',
            "unknown field `append`",
            id="write-extra",
        ),
        pytest.param(H, '{"uri":"https://a.com"}', "unknown field `uri`", id="fetch-unknown"),
        pytest.param(R, '{"Path":"/a"}', "unknown field `Path`", id="case-sensitive-field"),
        # missing fields
        pytest.param(R, "{}", "missing field `path`", id="missing-path"),
        pytest.param(W, '{"path":"/a"}', "missing field `content`", id="missing-content"),
        pytest.param(W, '{"content":"x"}', "missing field `path`", id="missing-write-path"),
        pytest.param(S, '{"cwd":"/a"}', "missing field `command`", id="missing-command"),
        pytest.param(H, "{}", "missing field `url`", id="missing-url"),
        # wrong types
        pytest.param(R, '{"path":1}', "invalid type for `path`", id="path-number"),
        pytest.param(R, '{"path":null}', "invalid type for `path`", id="path-null"),
        pytest.param(R, '{"path":["/a"]}', "invalid type for `path`", id="path-list"),
        pytest.param(R, '{"path":{"p":"/a"}}', "invalid type for `path`", id="path-object"),
        pytest.param(R, '{"path":true}', "invalid type for `path`", id="path-bool"),
        pytest.param(W, '{"path":"/a","content":1}', "invalid type for `content`", id="content"),
        pytest.param(W, '{"path":"/a","content":null}', "invalid type for `content`", id="c-null"),
        pytest.param(S, '{"command":["ls"]}', "invalid type for `command`", id="command-list"),
        pytest.param(S, '{"command":"ls","cwd":1}', "invalid type for `cwd`", id="cwd-number"),
        pytest.param(H, '{"url":null}', "invalid type for `url`", id="url-null"),
        # duplicates
        pytest.param(R, '{"path":"/a","path":"/b"}', "duplicate field `path`", id="duplicate"),
        pytest.param(
            R, '{"path":"/a","path":"/a"}', "duplicate field `path`", id="duplicate-same-value"
        ),
        pytest.param(
            S, '{"command":"a","cwd":null,"cwd":"/x"}', "duplicate field `cwd`", id="dup-cwd"
        ),
        # not JSON, not an object
        pytest.param(R, "", "not valid JSON", id="empty-text"),
        pytest.param(R, "{", "not valid JSON", id="truncated"),
        pytest.param(R, "{'path':'/a'}", "not valid JSON", id="single-quotes"),
        pytest.param(R, '{"path":"/a"} {}', "not valid JSON", id="trailing-data"),
        pytest.param(R, '{"path":"/a",}', "not valid JSON", id="trailing-comma"),
        pytest.param(R, "null", "must be a JSON object", id="null"),
        pytest.param(R, '["/a"]', "must be a JSON object", id="array"),
        pytest.param(R, '"/a"', "must be a JSON object", id="string"),
        pytest.param(R, "1", "must be a JSON object", id="number"),
        pytest.param(R, "[" * 60_000, "not valid JSON", id="deep-nesting"),
        # lone surrogates
        pytest.param(R, '{"path":"/a\\ud800"}', "lone surrogate", id="surrogate-path"),
        pytest.param(
            W, '{"path":"/a","content":"\\udfff"}', "lone surrogate", id="surrogate-content"
        ),
        pytest.param(S, '{"command":"\\udc80"}', "lone surrogate", id="surrogate-command"),
        pytest.param(H, '{"url":"https://a.com/\\ud800"}', "lone surrogate", id="surrogate-url"),
        # form checks on paths and urls
        pytest.param(R, '{"path":"a/b"}', "`path` is not a valid absolute path", id="relative"),
        pytest.param(R, '{"path":"/a/../b"}', "`path` is not a valid absolute path", id="dotdot"),
        pytest.param(R, '{"path":"/a//b"}', "`path` is not a valid absolute path", id="dslash"),
        pytest.param(R, '{"path":"/a/"}', "`path` is not a valid absolute path", id="trailing"),
        pytest.param(R, '{"path":"/a\\u0000"}', "`path` is not a valid absolute path", id="nul"),
        pytest.param(R, '{"path":""}', "`path` is not a valid absolute path", id="empty-path"),
        pytest.param(
            W, '{"path":"/a/.","content":""}', "`path` is not a valid absolute path", id="w-dot"
        ),
        pytest.param(
            S, '{"command":"ls","cwd":"rel"}', "`cwd` is not a valid absolute path", id="cwd-rel"
        ),
        pytest.param(
            S, '{"command":"ls","cwd":""}', "`cwd` is not a valid absolute path", id="cwd-empty"
        ),
        pytest.param(H, '{"url":"http://a.com/"}', "`url` is not allowed", id="url-http"),
        pytest.param(H, '{"url":"https://127.0.0.1/"}', "`url` is not allowed", id="url-ip"),
    ],
)
def test_refused(tool: ToolName, raw: str, message: str) -> None:
    with pytest.raises(ArgsError) as caught:
        parse_arguments(tool, raw)
    assert message in str(caught.value)


def test_args_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="missing field"):
        parse_arguments(R, "{}")


@pytest.mark.parametrize("tool", tool_names(), ids=str)
def test_error_messages_are_one_line(tool: ToolName) -> None:
    for raw in ("{", "[]", '{"zz":1}', "{}", '{"path":"/a","path":"/a"}'):
        with pytest.raises(ArgsError) as caught:
            parse_arguments(tool, raw)
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("tool", "raw", "canonical"),
    [
        pytest.param(R, '{"path":"\\u002fetc"}', '{"path":"/etc"}', id="escaped-slash-shown"),
        pytest.param(R, '{ "path" : "/a" }', '{"path":"/a"}', id="compact"),
        pytest.param(
            W,
            '{"content":"x","path":"/a"}',
            '{"path":"/a","content":"x"}',
            id="write-field-order",
        ),
        pytest.param(
            S, '{"cwd":"/s","command":"ls"}', '{"command":"ls","cwd":"/s"}', id="shell-order"
        ),
        pytest.param(S, '{"command":"ls","cwd":null}', '{"command":"ls"}', id="null-cwd-left-out"),
        pytest.param(S, '{"command":"ls"}', '{"command":"ls"}', id="absent-cwd-left-out"),
        pytest.param(
            H,
            '{"url":"https:\\/\\/a.com\\/x"}',
            '{"url":"https://a.com/x"}',
            id="url-escapes",
        ),
        pytest.param(
            W,
            '{"path":"/a","content":"\\u00e9\\n\\"q\\""}',
            '{"path":"/a","content":"é\\n\\"q\\""}',
            id="unicode-and-escapes",
        ),
    ],
)
def test_canonical_arguments(tool: ToolName, raw: str, canonical: str) -> None:
    assert canonical_arguments(parse_arguments(tool, raw)) == canonical


def test_canonical_round_trips() -> None:
    for tool, raw in [
        (R, '{"path":"/x/y"}'),
        (W, '{"path":"/x","content":"a\\u0000b"}'),
        (S, '{"command":"echo \\"hi\\"","cwd":"/w"}'),
        (H, '{"url":"https://a.example.com/q?x=1"}'),
    ]:
        parsed = parse_arguments(tool, raw)
        assert parse_arguments(tool, canonical_arguments(parsed)) == parsed
