"""Paths, host names, host patterns and URLs: the form checks and the matching rules."""

from __future__ import annotations

import pytest

from boxmaker.core.grants.hosts import (
    MAX_HOST_BYTES,
    MAX_URL_BYTES,
    host_matches,
    host_pattern_problem,
    host_problem,
    parse_url,
)
from boxmaker.core.grants.paths import MAX_PATH_BYTES, is_inside, is_valid_path, path_problem

# --- paths: the spec's table, as whole-component containment ----------------------

# (grant path, requested path, inside?) for the rows where both are valid paths
PATH_TABLE_MATCHES = [
    pytest.param("/home/kyle/notes", "/home/kyle/notes/a.md", True, id="file-inside"),
    pytest.param("/home/kyle/notes", "/home/kyle/notes", True, id="the-directory-itself"),
    pytest.param("/home/kyle/notes", "/home/kyle/notes2/a.md", False, id="sibling-prefix"),
]


@pytest.mark.parametrize(("grant", "requested", "inside"), PATH_TABLE_MATCHES)
def test_path_table_matching(grant: str, requested: str, inside: bool) -> None:
    assert is_valid_path(grant)
    assert is_valid_path(requested)
    assert is_inside(grant, requested) is inside


@pytest.mark.parametrize(
    ("requested", "fragment"),
    [
        pytest.param("/home/kyle/notes/../.ssh/id", "..", id="dotdot"),
        pytest.param("notes/a.md", "absolute", id="relative"),
        pytest.param("/home/kyle//notes/./a.md", "empty component", id="double-slash-and-dot"),
    ],
)
def test_path_table_invalid_rows(requested: str, fragment: str) -> None:
    problem = path_problem(requested)
    assert problem is not None
    assert fragment in problem
    assert not is_valid_path(requested)


@pytest.mark.parametrize(
    ("container", "path", "inside"),
    [
        pytest.param("/a", "/a/b/c", True, id="deep"),
        pytest.param("/a/b", "/a", False, id="parent-is-not-inside-child"),
        pytest.param("/a/b", "/a/bc", False, id="partial-component"),
        pytest.param("/a/b", "/a/b.txt", False, id="partial-component-with-dot"),
        pytest.param("/a/b", "/A/b", False, id="case-sensitive"),
        pytest.param("/", "/anything/at/all", True, id="root-contains-everything"),
        pytest.param("/a b", "/a b/c", True, id="spaces-compared-as-written"),
    ],
)
def test_is_inside_by_whole_components(container: str, path: str, inside: bool) -> None:
    assert is_inside(container, path) is inside


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        pytest.param("", "absolute", id="empty"),
        pytest.param("relative", "absolute", id="relative"),
        pytest.param("./a", "absolute", id="dot-relative"),
        pytest.param("~/a", "absolute", id="tilde"),
        pytest.param("/a\x00b", "NUL", id="nul"),
        pytest.param("/a//b", "empty component", id="double-slash"),
        pytest.param("//a", "empty component", id="leading-double-slash"),
        pytest.param("/a/", "empty component", id="trailing-slash"),
        pytest.param("/a/./b", ". component", id="dot-middle"),
        pytest.param("/a/.", ". component", id="dot-last"),
        pytest.param("/.", ". component", id="root-dot"),
        pytest.param("/a/../b", ".. component", id="dotdot-middle"),
        pytest.param("/a/..", ".. component", id="dotdot-last"),
        pytest.param("/..", ".. component", id="root-dotdot"),
        pytest.param("/" + "a" * MAX_PATH_BYTES, "4096 bytes", id="4097-bytes"),
        pytest.param("/" + "é" * 2048, "4096 bytes", id="4097-bytes-multibyte"),
    ],
)
def test_invalid_paths(path: str, fragment: str) -> None:
    problem = path_problem(path)
    assert problem is not None, path
    assert fragment in problem
    assert not is_valid_path(path)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/", id="root"),
        pytest.param("/a", id="one-component"),
        pytest.param("/home/kyle/notes/a.md", id="deep"),
        pytest.param("/a/.hidden", id="hidden-file"),
        pytest.param("/a/...", id="three-dots-is-a-name"),
        pytest.param("/a/..b", id="dotdot-prefix-is-a-name"),
        pytest.param("/a b/ü/日本", id="spaces-and-unicode"),
        pytest.param("/" + "a" * (MAX_PATH_BYTES - 1), id="exactly-4096-bytes"),
        pytest.param("/" + "é" * 2047 + "a", id="exactly-4096-bytes-multibyte"),
    ],
)
def test_valid_paths(path: str) -> None:
    assert path_problem(path) is None
    assert is_valid_path(path)


def test_path_length_is_counted_in_bytes_not_characters() -> None:
    four_byte = "\U0001f600"  # one character, four UTF-8 bytes
    path = "/" + four_byte * 1024  # 1025 characters, 4097 bytes
    assert len(path) < MAX_PATH_BYTES
    assert path_problem(path) is not None


# --- hosts: the spec's table -------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "host", "matches"),
    [
        pytest.param("example.com", "example.com", True, id="exact"),
        pytest.param("example.com", "www.example.com", False, id="exact-does-not-cover-sub"),
        pytest.param("*.example.com", "www.example.com", True, id="wildcard-one-label"),
        pytest.param("*.example.com", "a.b.example.com", True, id="wildcard-two-labels"),
        pytest.param("*.example.com", "example.com", False, id="wildcard-not-the-apex"),
        pytest.param("*.example.com", "badexample.com", False, id="wildcard-label-boundary"),
        pytest.param("example.com", "example.org", False, id="other-name"),
        pytest.param("www.example.com", "example.com", False, id="sub-does-not-cover-apex"),
        pytest.param("*.example.com", "www.example.com.evil.org", False, id="suffix-only"),
    ],
)
def test_host_table(pattern: str, host: str, matches: bool) -> None:
    assert host_pattern_problem(pattern) is None
    assert host_problem(host) is None
    assert host_matches(pattern, host) is matches


def _host_of_length(n: int) -> str:
    """A valid host name of exactly `n` bytes (labels of at most 63)."""
    labels: list[str] = []
    remaining = n
    while remaining > 0:
        size = min(63, remaining)
        if remaining - size == 1:  # never leave a remainder that a dot alone would eat
            size -= 1
        labels.append("a" * size)
        remaining -= size + 1
    host = ".".join(labels)
    assert len(host) == n
    return host


@pytest.mark.parametrize(
    "host",
    [
        pytest.param("example.com", id="two-labels"),
        pytest.param("a.b", id="one-letter-labels"),
        pytest.param("docs.python.org", id="three-labels"),
        pytest.param("x-1.example.com", id="hyphen-inside"),
        pytest.param("123.example.com", id="digits-first-label"),
        pytest.param("example.c0m", id="last-label-starts-with-letter"),
        pytest.param("a" * 63 + ".com", id="label-63"),
        pytest.param(_host_of_length(MAX_HOST_BYTES), id="host-253"),
    ],
)
def test_valid_hosts(host: str) -> None:
    assert host_problem(host) is None
    assert host_pattern_problem(host) is None
    assert host_pattern_problem("*." + host) is None


@pytest.mark.parametrize(
    "host",
    [
        pytest.param("", id="empty"),
        pytest.param("localhost", id="one-label"),
        pytest.param("Example.com", id="uppercase"),
        pytest.param("EXAMPLE.COM", id="all-uppercase"),
        pytest.param("127.0.0.1", id="ipv4"),
        pytest.param("127.1", id="ipv4-short"),
        pytest.param("10.0.0.0x1", id="ipv4-hex-tail"),
        pytest.param("0x7f.1", id="ipv4-hex-head"),
        pytest.param("2130706433.0", id="ipv4-decimal"),
        pytest.param("example.123", id="numeric-tld"),
        pytest.param("[::1]", id="ipv6-literal"),
        pytest.param("-a.example.com", id="label-starts-with-hyphen"),
        pytest.param("a-.example.com", id="label-ends-with-hyphen"),
        pytest.param("a..com", id="empty-label"),
        pytest.param(".example.com", id="leading-dot"),
        pytest.param("example.com.", id="trailing-dot"),
        pytest.param("a_b.example.com", id="underscore"),
        pytest.param("exa mple.com", id="space"),
        pytest.param("exämple.com", id="non-ascii"),
        pytest.param("a" * 64 + ".com", id="label-64"),
        pytest.param(_host_of_length(MAX_HOST_BYTES + 1), id="host-254"),
        pytest.param("example.com:443", id="with-port"),
        pytest.param("*.example.com", id="wildcard-is-not-a-host-name"),
    ],
)
def test_invalid_hosts(host: str) -> None:
    assert host_problem(host) is not None


@pytest.mark.parametrize(
    "pattern",
    [
        pytest.param("*", id="bare-star"),
        pytest.param("*.", id="star-dot"),
        pytest.param("*.com", id="star-one-label"),
        pytest.param("*example.com", id="star-without-dot"),
        pytest.param("www.*.com", id="star-in-the-middle"),
        pytest.param("*.*.example.com", id="two-stars"),
        pytest.param("*.127.0.0.1", id="star-ip"),
        pytest.param("*.Example.com", id="star-uppercase"),
        pytest.param("127.0.0.1", id="ip"),
    ],
)
def test_invalid_host_patterns(pattern: str) -> None:
    assert host_pattern_problem(pattern) is not None


# --- URLs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "host"),
    [
        pytest.param("https://example.com", "example.com", id="bare"),
        pytest.param("https://example.com/", "example.com", id="root"),
        pytest.param("https://example.com:443/x", "example.com", id="port-443"),
        pytest.param("https://example.com:443", "example.com", id="port-443-no-path"),
        pytest.param("https://docs.python.org/3/?q=a&b=c#frag", "docs.python.org", id="query"),
        pytest.param("https://example.com/a@b", "example.com", id="at-in-path"),
        pytest.param("https://example.com/~!$%27()*+,;=:", "example.com", id="punctuation"),
        pytest.param(
            "https://example.com/" + "a" * (MAX_URL_BYTES - len("https://example.com/")),
            "example.com",
            id="exactly-2048-bytes",
        ),
    ],
)
def test_valid_urls(url: str, host: str) -> None:
    parsed = parse_url(url)
    assert parsed.host == host
    assert parsed.text == url


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        pytest.param(
            "https://example.com/" + "a" * (MAX_URL_BYTES - len("https://example.com/") + 1),
            "2048",
            id="2049-bytes",
        ),
        pytest.param("http://example.com/", "https://", id="http"),
        pytest.param("HTTPS://example.com/", "https://", id="scheme-uppercase"),
        pytest.param("ftp://example.com/", "https://", id="ftp"),
        pytest.param("//example.com/", "https://", id="scheme-relative"),
        pytest.param("https:/example.com/", "https://", id="one-slash"),
        pytest.param(" https://example.com/", "https://", id="leading-space"),
        pytest.param("https://user@example.com/", "@", id="userinfo"),
        pytest.param("https://user:pw@example.com/", "@", id="userinfo-password"),
        pytest.param("https://example.com@evil.org/", "@", id="userinfo-confusion"),
        pytest.param("https://example.com:8443/", "port", id="port-8443"),
        pytest.param("https://example.com:80/", "port", id="port-80"),
        pytest.param("https://example.com:/", "port", id="empty-port"),
        pytest.param("https://example.com:0443/", "port", id="port-0443"),
        pytest.param("https://127.0.0.1/", "host", id="ipv4"),
        pytest.param("https://127.1/", "host", id="ipv4-short"),
        pytest.param("https://10.0.0.0x1/", "host", id="ipv4-hex"),
        pytest.param("https://Example.com/", "host", id="uppercase-host"),
        pytest.param("https://localhost/", "host", id="one-label-host"),
        pytest.param("https:///path", "host", id="empty-host"),
        pytest.param("https://example.com./", "host", id="trailing-dot-host"),
        pytest.param("https://example.com/a b", "printable", id="space-in-path"),
        pytest.param("https://example.com/\t", "printable", id="tab-in-path"),
        pytest.param("https://example.com/\x7f", "printable", id="del-in-path"),
        pytest.param("https://example.com/\x1b[8m", "printable", id="escape-in-path"),
        pytest.param("https://example.com/é", "printable", id="non-ascii-path"),
        pytest.param("https://example.com/\u202e", "printable", id="bidi-override-in-path"),
    ],
)
def test_invalid_urls(url: str, fragment: str) -> None:
    with pytest.raises(ValueError, match="url") as caught:
        parse_url(url)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("https://[::1]/", id="ipv6-literal"),
        pytest.param("https://[2001:db8::1]:443/", id="ipv6-literal-port"),
        pytest.param("https://exa[mple.com/", id="bracket-in-host"),
    ],
)
def test_urls_with_brackets_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="url"):
        parse_url(url)
