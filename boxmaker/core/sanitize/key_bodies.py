"""What a private key looks like in text: its header, and its base64 body with or
without one. Pure; no I/O. The private-key rule (`secret_prefixes`) is made of these.

The rules:

1. A header (`-----BEGIN ... PRIVATE KEY-----`) counts when it is a line of its own
   (spaces, and quote, comment or list marks `> # // * ; -` before it, allowed), or
   when a key body follows it: 16 base64 characters on the same line after spaces
   (a key pasted on one line), or after a newline, or the two characters `\\n` of a
   JSON string (a service account file), and up to eight such marks (a key quoted
   or commented line by line). A header quoted inside code
   (`startswith("-----BEGIN ...")`) is neither.
2. A body with no header counts when it starts a run of base64 of at least 64
   characters (one PEM line; the smallest key, Ed25519 in PKCS#8, is exactly that)
   and its start is a private key's, read rather than guessed from letters:
   - OpenSSH: `openssh-key-v1` and a zero byte (`b3BlbnNzaC1rZXktdjE...`), which
     only private keys carry (a public key line is `ssh-ed25519 AAAA...`);
   - DER: its first 12 bytes decoded are a SEQUENCE whose first element is the
     INTEGER 0 or 1 (the version of PKCS#1 RSA, DSA, SEC1 EC and PKCS#8 keys),
     followed by an INTEGER, an OCTET STRING or a SEQUENCE. A certificate, a
     public key, a CSR or an encrypted PKCS#8 key starts its SEQUENCE with a
     SEQUENCE; a PKCS#1 public key's first INTEGER is the long modulus; a PKCS#12
     file's version is 3: none of them counts.
   The run starts a word: no base64 character right before it, except the `n` of
   a `\\n` in a JSON string.
3. What is secret, to cut from an excerpt: after a header or from a body's fifth
   character on, the body's lines: base64 on the same line after spaces, or on the
   next lines after a newline (or `\\n`) and quote or comment marks, while each
   piece is at least 16 characters long, or ends in `=` padding, or is followed by
   an END line (a key's last line is short).

Every repetition is bounded or a single character class with no overlap with what
follows it, and the body's lines are walked once, so the work is linear.
"""

from __future__ import annotations

import binascii
import re

# what may stand before a line of a pasted key: a quote, a comment, a list marker
LINE_MARKS = " \t>#/*;-"
HEADER = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
DER_BODY = re.compile(r"M[A-Za-z0-9+/]{63,}")
OPENSSH_BODY = re.compile(r"b3BlbnNzaC1rZXktdjE[A-Za-z0-9+/]{45,}")
SHOWN = 4  # characters of a body an excerpt shows (a DER or OpenSSH start, no secret)

_LINE_END = re.compile(r"[ \t]*(?:\r?\n|$)")
# a key body after its header: on the same line after spaces, or on the next line
# (a newline, or `\n` in a JSON string) after quote, comment or list marks
_KEY_BODY = re.compile(r"[ \t]*(?:(?:\r?\n|\\n)[ \t>#/*;-]{0,8})?[A-Za-z0-9+/=]{16}")
# one more piece of a body: after a line break and marks (no `-`, which starts the
# END line), or after spaces on the same line
_BODY_PIECE = re.compile(r"(?:[ \t]*(?:\r?\n|\\n)[ \t>#/*;]{0,8}|[ \t]*)([A-Za-z0-9+/=]+)")
_END_NEXT = re.compile(r"[ \t]*(?:(?:\r?\n|\\n)[ \t>#/*;]{0,8})?-----END ")
_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
_VERSIONS = (b"\x02\x01\x00", b"\x02\x01\x01")  # INTEGER 0, INTEGER 1
_NEXT_TAGS = (0x02, 0x04, 0x30)  # INTEGER, OCTET STRING, SEQUENCE


def header_counts(text: str, match: re.Match[str]) -> bool:
    """Rule 1: `match` (of HEADER) is a line of its own, or a body follows it."""
    start = match.start()
    line_start = text.rfind("\n", 0, start) + 1
    before = text[line_start:start].strip(LINE_MARKS)
    own_line = before == "" and _LINE_END.match(text, match.end())
    return bool(own_line) or _KEY_BODY.match(text, match.end()) is not None


def _starts_run(text: str, start: int) -> bool:
    if start == 0 or text[start - 1] not in _BASE64:
        return True
    return text[start - 2 : start] == "\\n"


def der_body_counts(text: str, match: re.Match[str]) -> bool:
    """Rule 2 for DER: `match` (of DER_BODY) starts a run and decodes as a key's start."""
    if not _starts_run(text, match.start()):
        return False
    try:
        head = binascii.a2b_base64(match.group()[:16])  # 12 bytes
    except binascii.Error:
        return False
    length = head[1]
    if length < 0x80:
        at = 2
    elif 0x81 <= length <= 0x83:
        at = 2 + (length & 0x7F)
    else:
        return False
    return head[at : at + 3] in _VERSIONS and head[at + 3] in _NEXT_TAGS


def openssh_body_counts(text: str, match: re.Match[str]) -> bool:
    """Rule 2 for OpenSSH: `match` (of OPENSSH_BODY) starts a run."""
    return _starts_run(text, match.start())


def body_end(text: str, at: int) -> int:
    """Rule 3: where the body's last piece from `at` on ends (`at` when none)."""
    while True:
        piece = _BODY_PIECE.match(text, at)
        if piece is None:
            return at
        chunk = piece.group(1)
        if len(chunk) < 16 and not chunk.endswith("=") and not _END_NEXT.match(text, piece.end()):
            return at
        at = piece.end()
