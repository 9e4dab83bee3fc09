"""The refuse rules on secrets: credentials known by their prefix, and private keys. Pure; no I/O.

Each rule has a minimum length after its prefix, so that prose naming the prefix
does not match (`sk-learn` is not a key, nor is a short `AKIA` mention). A match
of `sk-` must also start a word: no letter, digit, `_` or `-` right before it
(so `ask-for-help` and `task-...` never start one); the other prefixes are
distinctive enough to count anywhere, inside a word too (`TOKEN_ghp_...`).
Each rule is also run over the text's disguises: full-width ASCII folded
(U+FF47 U+FF48 U+FF50 U+FF3F for `ghp_`) and %XX escapes decoded
(`ghp%5F...`), a finding placed where the disguise starts.

- `secret-github`: ghp_, gho_, ghu_, ghs_ or ghr_ then at least 30 letters or
  digits (a token has 36); github_pat_ then at least 22 of letters, digits and `_`.
- `secret-gitlab`: glpat- then at least 20 of letters, digits, `_` and `-`.
- `secret-openai`: sk- then at least 20 key characters (letters, digits, `_`,
  `-`; sk-proj-, sk-ant-api03- and the like included), of which at least one is
  an upper-case letter or a digit: a key is random, while a kebab-case name
  (`sk-learn-compatible-estimators`) is all lower case.
- `secret-slack`: xoxb-, xoxa-, xoxp-, xoxr- or xoxs- then at least 10 letters,
  digits or `-`.
- `secret-aws`: AKIA or ASIA then exactly 16 upper-case letters or digits, with
  no letter or digit after them.
- `private-key`: a `-----BEGIN ... PRIVATE KEY-----` header (OpenSSH, RSA, EC,
  DSA, ENCRYPTED, PGP's `PRIVATE KEY BLOCK`) that is a line of its own (spaces,
  and quote, comment or list marks `> # // * ; -` before it, allowed), or that
  is followed by a key body: 16 base64 characters on the same line after spaces
  (a key pasted on one line), or after a newline, or the two characters `\\n` of
  a JSON string (a service account file), and up to eight such marks (a key
  quoted or commented line by line). A header quoted inside code
  (`startswith("-----BEGIN ...")`) is neither.

Every pattern starts with a literal, so a scan skips to candidates at `memchr`
speed; the word-start test is done on the candidate, not by a look-behind (which
would cost that speed). Every repetition is a single character class with no
overlap with what follows it, so a scan is linear.

An excerpt shows the prefix and an ellipsis (`ghp_…`), never the key; a
private-key excerpt is its header line, which holds no secret.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from boxmaker.core.sanitize.findings import Action, Finding

GITHUB = "secret-github"
GITLAB = "secret-gitlab"
OPENAI = "secret-openai"
SLACK = "secret-slack"
AWS = "secret-aws"
PRIVATE_KEY = "private-key"

_WORDISH = re.compile(r"[A-Za-z0-9_-]")
_RANDOM = re.compile(r"[A-Z0-9]")
_LINE_END = re.compile(r"[ \t]*(?:\r?\n|$)")
# what may stand before a line of a pasted key: a quote, a comment, a list marker
_LINE_MARKS = " \t>#/*;-"
# a key body after its header: on the same line after spaces, or on the next line
# (a newline, or `\n` in a JSON string) after quote, comment or list marks
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_KEY_BODY = re.compile(r"[ \t]*(?:(?:\r?\n|\\n)[ \t>#/*;-]{0,8})?[A-Za-z0-9+/=]{16}")


@dataclass(frozen=True, slots=True)
class SecretPattern:
    rule: str
    name: str  # for tests: which pattern of the rule
    regex: re.Pattern[str]
    prefix: Callable[[str], str]  # the matched text -> what the excerpt shows
    accept: Callable[[str, re.Match[str]], bool]  # text, candidate -> is it one


def _starts_word(text: str, match: re.Match[str]) -> bool:
    start = match.start()
    return start == 0 or _WORDISH.match(text, start - 1) is None


def _openai(text: str, match: re.Match[str]) -> bool:
    return _starts_word(text, match) and _RANDOM.search(match.group(), 3) is not None


def _anywhere(text: str, match: re.Match[str]) -> bool:
    """A prefix distinctive enough to count inside a word (`TOKEN_ghp_...`)."""
    return True


def _private_key(text: str, match: re.Match[str]) -> bool:
    start = match.start()
    line_start = text.rfind("\n", 0, start) + 1
    before = text[line_start:start].strip(_LINE_MARKS)
    own_line = before == "" and _LINE_END.match(text, match.end())
    return bool(own_line) or _KEY_BODY.match(text, match.end()) is not None


def _cut_at(separator: str) -> Callable[[str], str]:
    """The excerpt for a token: its text up to and including `separator`."""
    return lambda token: token[: token.index(separator) + 1]


PATTERNS: tuple[SecretPattern, ...] = (
    SecretPattern(
        GITHUB,
        "github-classic",
        re.compile(r"gh[pousr]_[A-Za-z0-9]{30,}"),
        _cut_at("_"),
        _anywhere,
    ),
    SecretPattern(
        GITHUB,
        "github-fine-grained",
        re.compile(r"github_pat_[A-Za-z0-9_]{22,}"),
        lambda _: "github_pat_",
        _anywhere,
    ),
    SecretPattern(
        GITLAB, "gitlab", re.compile(r"glpat-[A-Za-z0-9_-]{20,}"), _cut_at("-"), _anywhere
    ),
    SecretPattern(OPENAI, "openai", re.compile(r"sk-[A-Za-z0-9_-]{20,}"), _cut_at("-"), _openai),
    SecretPattern(
        SLACK, "slack", re.compile(r"xox[baprs]-[A-Za-z0-9-]{10,}"), _cut_at("-"), _anywhere
    ),
    SecretPattern(
        AWS, "aws", re.compile(r"A[KS]IA[A-Z0-9]{16}(?![A-Za-z0-9])"), lambda t: t[:4], _anywhere
    ),
    SecretPattern(
        PRIVATE_KEY,
        "private-key",
        re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"),
        lambda header: header,
        _private_key,
    ),
)


def secret_matches(text: str) -> list[tuple[SecretPattern, re.Match[str]]]:
    """Every accepted candidate of every pattern, in pattern order."""
    return [
        (pattern, match)
        for pattern in PATTERNS
        for match in pattern.regex.finditer(text)
        if pattern.accept(text, match)
    ]


def _disguised(text: str) -> list[tuple[str, list[int]]]:
    """`text` as a key in disguise would read: full-width ASCII folded, and
    %XX escapes decoded (`ghp%5F`); each with the original offset of every
    character. Only the forms that differ from `text` are given."""
    forms: list[tuple[str, list[int]]] = []
    if any("\uff01" <= c <= "\uff5e" for c in text):
        folded = "".join(chr(ord(c) - 0xFEE0) if "\uff01" <= c <= "\uff5e" else c for c in text)
        forms.append((folded, list(range(len(text)))))
    if "%" in text:
        chars: list[str] = []
        origin: list[int] = []
        at = 0
        while at < len(text):
            escape = _PERCENT.match(text, at)
            if escape is not None:
                chars.append(chr(int(escape.group(1), 16)))
                origin.append(at)
                at = escape.end()
            else:
                chars.append(text[at])
                origin.append(at)
                at += 1
        forms.append(("".join(chars), origin))
    return forms


def refused_secrets(text: str) -> list[Finding]:
    """One refuse finding per secret found in `text`, or in a disguise of it (full
    width, %XX escapes: `_disguised`), at its place in `text`."""
    found = {
        (pattern.rule, match.start()): _finding(pattern, match.group(), match.start())
        for pattern, match in secret_matches(text)
    }
    for form, origin in _disguised(text):
        for pattern, match in secret_matches(form):
            start = origin[match.start()]
            found.setdefault((pattern.rule, start), _finding(pattern, match.group(), start))
    return sorted(found.values(), key=lambda f: (f.start, f.rule))


def _finding(pattern: SecretPattern, matched: str, start: int) -> Finding:
    excerpt = pattern.prefix(matched) + ("" if pattern.rule == PRIVATE_KEY else "…")
    return Finding(Action.REFUSE, pattern.rule, start, excerpt)


def redact(text: str) -> str:
    """`text` with every secret cut to its prefix and an ellipsis (for excerpts)."""
    for pattern, match in sorted(secret_matches(text), key=lambda pm: -pm[1].start()):
        if pattern.rule != PRIVATE_KEY:
            cut = pattern.prefix(match.group()) + "…"
            text = text[: match.start()] + cut + text[match.end() :]
    return text
