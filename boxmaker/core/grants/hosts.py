"""Host names, host patterns and `https://` URLs, as grants and arguments spell them.

No I/O, no DNS. A host name is 1 to 253 bytes, lowercase, at least two labels of
1 to 63 bytes of `[a-z0-9-]` not starting or ending with `-`, and its last label
starts with a letter, which rules out every spelling of an IPv4 address. A host
pattern is a host name or `*.` followed by one. A URL is `https://`, a host name,
no userinfo, no port or port 443, then optionally `/` and printable ASCII.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_HOST_BYTES = 253
MAX_URL_BYTES = 2048

_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_PRINTABLE = re.compile(r"[\x21-\x7e]*")


def host_problem(host: str) -> str | None:
    """Why `host` is not a valid host name, or None when it is."""
    if not host:
        return "it is empty"
    if len(host.encode("utf-8", "surrogatepass")) > MAX_HOST_BYTES:
        return f"it is longer than {MAX_HOST_BYTES} bytes"
    if host != host.lower():
        return "it has upper-case letters (host names are written in lower case)"
    labels = host.split(".")
    if len(labels) < 2:
        return "it needs at least two labels, like example.com"
    for label in labels:
        if _LABEL.fullmatch(label) is None:
            return (
                f"the label {label!r} is not 1 to 63 characters of a-z, 0-9 and -"
                " that neither starts nor ends with -"
            )
    if not labels[-1][0].isalpha():
        return "its last label must start with a letter (IP addresses are not allowed)"
    return None


def host_pattern_problem(pattern: str) -> str | None:
    """Why `pattern` is not a valid host pattern (`host` or `*.host`), or None."""
    return host_problem(pattern[2:] if pattern.startswith("*.") else pattern)


def host_matches(pattern: str, host: str) -> bool:
    """`example.com` matches only itself; `*.example.com` matches any name under it."""
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


@dataclass(frozen=True, slots=True)
class Url:
    """A URL that passed `parse_url`: the text as given and its host."""

    text: str
    host: str


def parse_url(text: str) -> Url:
    """Check `text` is an allowed https URL; ValueError with a one-line reason if not."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_URL_BYTES:
        raise ValueError(f"the url is longer than {MAX_URL_BYTES} bytes")
    if not text.startswith("https://"):
        raise ValueError("the url must start with https://")
    rest = text[len("https://") :]
    slash = rest.find("/")
    authority, tail = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    if "@" in authority:
        raise ValueError("the url must not carry a user name or password (@)")
    host, colon, port = authority.partition(":")
    if colon and port != "443":
        raise ValueError("the url may name no port other than 443")
    problem = host_problem(host)
    if problem is not None:
        raise ValueError(f"the url's host {host!r} is not a host name: {problem}")
    if _PRINTABLE.fullmatch(tail) is None:
        raise ValueError("the url's path must be printable ASCII with no spaces")
    return Url(text=text, host=host)
