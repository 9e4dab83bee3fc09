"""The refuse rules on secrets: credentials known by their prefix or their name, and
private keys; and `redact`, which cuts what they find. Pure; no I/O.

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
  no letter or digit after them (an access key id); or a secret access key:
  exactly 40 of letters, digits, `/` and `+`, upper and lower case among them,
  with none of those or `=` on either side, that follows its name
  (`aws_secret_access_key`, `AWS_SECRET_ACCESS_KEY`, `SecretAccessKey`,
  `secret-access-key`, any case) after up to eight of space, quote, `:`, `=` and
  `>` (ini, env, JSON, YAML, XML, a command line), or that has an access key id
  within 256 characters and three line breaks of it (a credentials file or CSV).
- `private-key`: a header or a body with no header, as `key_bodies` says.

Every pattern but the secret access key's two starts with a literal, so a scan
skips to candidates at `memchr` speed (those two run only on a text holding
`ccess` or `CCESS`, or `AKIA` or `ASIA`: `needs`); the word-start test is done on the candidate, not
by a look-behind (which would cost that speed). Every repetition is a single
character class with no overlap with what follows it, so a scan is linear.

An excerpt shows the prefix and an ellipsis (`ghp_…`), never the key: a secret
access key's shows its name (`aws_secret_access_key = …`) or nothing (`…`), a key
body its first four characters (`MIIE…`), a private-key header itself, which
holds no secret. `redact` cuts from a text exactly what `refused_secrets` finds,
disguises included, to what its excerpt shows.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from functools import lru_cache

from boxmaker.core.sanitize import key_bodies
from boxmaker.core.sanitize.findings import Action, Finding, printable

GITHUB = "secret-github"
GITLAB = "secret-gitlab"
OPENAI = "secret-openai"
SLACK = "secret-slack"
AWS = "secret-aws"
PRIVATE_KEY = "private-key"

_WORDISH = re.compile(r"[A-Za-z0-9_-]")
_RANDOM = re.compile(r"[A-Z0-9]")
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_FULL_WIDTH = re.compile("[\uff01-\uff5e]")
_FOLD = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)}
_AWS_ID = re.compile(r"A[KS]IA[A-Z0-9]{16}(?![A-Za-z0-9])")
_AWS_SECRET = 40
_AWS_REACH = 256  # characters between a secret access key and its key id, at most
_AWS_LINES = 3  # line breaks between them, at most


@dataclasses.dataclass(frozen=True, slots=True)
class SecretPattern:
    rule: str
    name: str  # for tests: which pattern of the rule
    regex: re.Pattern[str]
    prefix: Callable[[str], str]  # the matched text -> what the excerpt shows of it
    accept: Callable[[str, re.Match[str]], bool]  # text, candidate -> is it one
    # text, accepted candidate -> where what is secret ends (the match's end by default)
    extent: Callable[[str, re.Match[str]], int] = lambda _, match: match.end()
    needs: tuple[str, ...] = ()  # one of these must be in the text for a match (a fast test)


def _starts_word(text: str, match: re.Match[str]) -> bool:
    start = match.start()
    return start == 0 or _WORDISH.match(text, start - 1) is None


def _openai(text: str, match: re.Match[str]) -> bool:
    return _starts_word(text, match) and _RANDOM.search(match.group(), 3) is not None


def _anywhere(text: str, match: re.Match[str]) -> bool:
    """A prefix distinctive enough to count inside a word (`TOKEN_ghp_...`)."""
    return True


def _mixed_case(key: str) -> bool:
    """A random key has both cases; a hex digest or an all-caps name does not."""
    return key.lower() != key != key.upper()


def _aws_named(text: str, match: re.Match[str]) -> bool:
    return _mixed_case(match.group()[-_AWS_SECRET:])


def _aws_beside_id(text: str, match: re.Match[str]) -> bool:
    """Exactly 40 key characters, both cases, an access key id near (not inside)."""
    start, end = match.span()
    if end - start != _AWS_SECRET or not _mixed_case(match.group()):
        return False
    if text[end : end + 1] == "=":  # base64 padding: not a key (a run ends at the match)
        return False
    for key_id in _AWS_ID.finditer(text, max(0, start - _AWS_REACH), end + _AWS_REACH):
        gap = (key_id.end(), start) if key_id.end() <= start else (end, key_id.start())
        if gap[0] <= gap[1] and text.count("\n", *gap) <= _AWS_LINES:
            return True
    return False


def _key_body_end(text: str, match: re.Match[str]) -> int:
    return key_bodies.body_end(text, match.end())


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
    SecretPattern(AWS, "aws", _AWS_ID, lambda t: t[:4], _anywhere),
    SecretPattern(
        AWS,
        "aws-secret-named",
        re.compile(
            r"(?i:(?:aws[_-]?)?secret[_ -]?access[_ -]?key)[ \t\"':=>]{1,8}"
            r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
        ),
        lambda t: t[:-_AWS_SECRET],
        _aws_named,
        needs=("ccess", "CCESS"),
    ),
    SecretPattern(
        AWS,
        "aws-secret-beside-id",
        re.compile(r"[A-Za-z0-9/+]{40,}"),
        lambda _: "",
        _aws_beside_id,
        needs=("AKIA", "ASIA"),
    ),
    SecretPattern(
        PRIVATE_KEY,
        "private-key",
        key_bodies.HEADER,
        lambda header: header,
        key_bodies.header_counts,
        _key_body_end,
    ),
    SecretPattern(
        PRIVATE_KEY,
        "key-body-der",
        key_bodies.DER_BODY,
        lambda body: body[: key_bodies.SHOWN],
        key_bodies.der_body_counts,
        _key_body_end,
    ),
    SecretPattern(
        PRIVATE_KEY,
        "key-body-openssh",
        key_bodies.OPENSSH_BODY,
        lambda body: body[: key_bodies.SHOWN],
        key_bodies.openssh_body_counts,
        _key_body_end,
    ),
)


@dataclasses.dataclass(frozen=True, slots=True)
class _Found:
    """One secret at its place in the original text: `text[start:shown]` is what an
    excerpt shows of it (as written there), `text[shown:end]` what is cut."""

    pattern: SecretPattern
    start: int
    shown: int
    end: int
    excerpt: str


def _disguised(text: str) -> list[tuple[str, Sequence[int]]]:
    """`text` as a key in disguise would read: full-width ASCII folded, and
    %XX escapes decoded (`ghp%5F`); each with the original offset of every
    character, and of the end. Only the forms that differ from `text` are given."""
    forms: list[tuple[str, Sequence[int]]] = []
    if _FULL_WIDTH.search(text):
        forms.append((text.translate(_FOLD), range(len(text) + 1)))
    if "%" in text:
        pieces: list[str] = []
        origin: list[int] = []
        at = 0
        for escape in _PERCENT.finditer(text):
            pieces.append(text[at : escape.start()])
            origin.extend(range(at, escape.start() + 1))
            pieces.append(chr(int(escape.group(1), 16)))
            at = escape.end()
        if pieces:
            pieces.append(text[at:])
            origin.extend(range(at, len(text) + 1))
            forms.append(("".join(pieces), origin))
    return forms


@lru_cache(maxsize=8)
def _found(text: str) -> tuple[_Found, ...]:
    """Every secret in `text` and in its disguises, mapped back to `text`; of those
    of one rule that overlap (a header and its body, a named key and the same key
    beside its id), the first, reaching as far as any of them. Sorted by start.
    Kept for the last few texts, since each flag finding's excerpt asks again for
    the same text."""
    found: list[_Found] = []
    forms = [(text, range(len(text) + 1)), *_disguised(text)]
    for form, origin in forms:
        for pattern in PATTERNS:
            reach = 0  # a candidate inside the last one's extent is part of it
            if pattern.needs and not any(literal in form for literal in pattern.needs):
                continue
            for match in pattern.regex.finditer(form):
                if match.start() < reach or not pattern.accept(form, match):
                    continue
                reach = pattern.extent(form, match)
                prefix = pattern.prefix(match.group())
                excerpt = prefix if prefix == match.group() else printable(prefix) + "…"
                start, shown = origin[match.start()], origin[match.start() + len(prefix)]
                found.append(_Found(pattern, start, shown, origin[reach], excerpt))
    found.sort(key=lambda f: (f.start, -f.end))
    kept: list[_Found] = []
    furthest: dict[str, int] = {}  # rule -> the index in `kept` of its furthest-reaching
    for secret in found:
        rule = secret.pattern.rule
        at = furthest.get(rule)
        if at is None or secret.start >= kept[at].end:
            furthest[rule] = len(kept)
            kept.append(secret)
        elif secret.end > kept[at].end:  # overlapping: one secret, reaching to both ends
            kept[at] = dataclasses.replace(kept[at], end=secret.end)
    return tuple(kept)


def refused_secrets(text: str) -> list[Finding]:
    """One refuse finding per secret found in `text`, or in a disguise of it (full
    width, %XX escapes: `_disguised`), at its place in `text`."""
    return sorted(
        (Finding(Action.REFUSE, f.pattern.rule, f.start, f.excerpt) for f in _found(text)),
        key=lambda f: (f.start, f.rule),
    )


def redact(text: str, first: int = 0, last: int | None = None) -> str:
    """`text[first:last]` with every secret that `refused_secrets` finds in the whole
    `text` cut to what its excerpt shows and an ellipsis (`ghp_…`, `MIIE…`), so that a
    secret reaching past the slice is cut all the same (flag excerpts)."""
    last = len(text) if last is None else last
    out: list[str] = []
    at = first
    for secret in _found(text):
        if secret.end <= at or secret.start >= last or secret.shown >= secret.end:
            continue
        cut_from = max(secret.shown, at)
        if cut_from < last:
            out.append(text[at:cut_from] + "…")
            at = min(secret.end, last)
    out.append(text[at:last])
    return "".join(out)
