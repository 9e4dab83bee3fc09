"""The secret rules that read more than a prefix: a private key body with no header, an
AWS secret access key beside its key id or its name, and `redact` cutting exactly what
the refuse rules find, disguises included.

Real key bodies are made here with `cryptography` (never stored); the certificate,
public keys and other base64 that must pass are made the same way. The corpora hold
fake bodies: a key's DER start, then filler bytes.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Callable

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st

from boxmaker.core.sanitize import Action, flag, refuse
from boxmaker.core.sanitize.secret_prefixes import _found, redact, refused_secrets
from boxmaker.testing.sanitize_redos import GROWTH_LIMIT, LIMIT_S, SIZE, best_of, fill, growth

KEY = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"  # 36 characters, fake
AWS_ID = "AKIAIOSFODNN7EXAMPLE"  # AWS documentation's example key id
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # and its example secret
FULL_WIDTH = str.maketrans({c: chr(ord(c) + 0xFEE0) for c in map(chr, range(0x21, 0x7F))})
PEM = serialization.Encoding.PEM
NO_PASSWORD = serialization.NoEncryption()


def _body(pem: bytes) -> str:
    """The base64 lines of a PEM block, without its BEGIN and END lines."""
    return "\n".join(line for line in pem.decode().splitlines() if not line.startswith("-----"))


def _wrap(der: bytes, width: int = 64) -> str:
    text = base64.b64encode(der).decode()
    return "\n".join(text[at : at + width] for at in range(0, len(text), width))


def _fake(der_start: str, size: int) -> str:
    """A fake key body: `der_start` (hex) then filler bytes, `size` bytes in all."""
    start = bytes.fromhex(der_start)
    return _wrap(start + bytes((7 * i + 3) % 256 for i in range(size - len(start))))


_RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)
_EC = ec.generate_private_key(ec.SECP256R1())
_ED = ed25519.Ed25519PrivateKey.generate()
_PKCS8 = serialization.PrivateFormat.PKCS8
_TRADITIONAL = serialization.PrivateFormat.TraditionalOpenSSL
_OPENSSH = serialization.PrivateFormat.OpenSSH


def _certificate() -> bytes:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "boxmaker.test")])
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(_RSA.public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=1))
        .sign(_RSA, hashes.SHA256())
    )
    return cert.public_bytes(PEM)


BODIES = {
    "rsa-pkcs1": _body(_RSA.private_bytes(PEM, _TRADITIONAL, NO_PASSWORD)),
    "rsa-pkcs8": _body(_RSA.private_bytes(PEM, _PKCS8, NO_PASSWORD)),
    "rsa-openssh": _body(_RSA.private_bytes(PEM, _OPENSSH, NO_PASSWORD)),
    "ec-sec1": _body(_EC.private_bytes(PEM, _TRADITIONAL, NO_PASSWORD)),
    "ec-pkcs8": _body(_EC.private_bytes(PEM, _PKCS8, NO_PASSWORD)),
    "ed25519-pkcs8": _body(_ED.private_bytes(PEM, _PKCS8, NO_PASSWORD)),
    "ed25519-openssh": _body(_ED.private_bytes(PEM, _OPENSSH, NO_PASSWORD)),
    # DSA's and PKCS#8 version 2's DER starts, with filler (slow or rare to make)
    "dsa-fake": _fake("308201bb020100028181", 443),
    "pkcs8-v2-fake": _fake("3051020101300506032b6570", 83),
}


# --- a key body with no header --------------------------------------------------------


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_a_key_body_alone_is_refused(body: str) -> None:
    findings = refuse(body)
    assert [(f.action, f.rule, f.start) for f in findings] == [(Action.REFUSE, "private-key", 0)]
    assert body[8:24] not in findings[0].excerpt


@pytest.mark.parametrize(
    "shape",
    [
        lambda body: "here is the key:\n" + body + "\nthanks",
        lambda body: body.replace("\n", ""),
        lambda body: "\n".join("> " + line for line in body.splitlines()),
        lambda body: "key = " + json.dumps(body),
        lambda body: "  " + body.replace("\n", "\n  "),
    ],
    ids=["in-prose", "one-run", "quoted", "json-string", "indented"],
)
@pytest.mark.parametrize("kind", ["rsa-pkcs8", "ec-sec1", "ed25519-openssh"])
def test_a_key_body_alone_is_refused_in_any_shape(shape: object, kind: str) -> None:
    assert callable(shape)
    text = shape(BODIES[kind])
    assert [f.rule for f in refuse(text)] == ["private-key"]


def test_a_key_body_under_its_header_is_one_finding() -> None:
    text = "-----BEGIN PRIVATE KEY-----\n" + BODIES["rsa-pkcs8"] + "\n-----END PRIVATE KEY-----"
    assert [(f.rule, f.start) for f in refuse(text)] == [("private-key", 0)]


PUBLIC = {
    "certificate": _body(_certificate()),
    "spki-public-key": _body(
        _RSA.public_key().public_bytes(PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    ),
    "pkcs1-public-key": _body(
        _RSA.public_key().public_bytes(PEM, serialization.PublicFormat.PKCS1)
    ),
    "ec-public-key": _body(
        _EC.public_key().public_bytes(PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    ),
    "openssh-public-key": _ED.public_key()
    .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    .decode(),
    "encrypted-pkcs8": _body(
        _EC.private_bytes(PEM, _PKCS8, serialization.BestAvailableEncryption(b"pass phrase"))
    ),
    "png-data-url": "data:image/png;base64," + _wrap(bytes.fromhex("89504e470d0a1a0a") * 40),
    "base64-of-text": _wrap(b"Many hands make light work. " * 10),
    "der-start-fragment": "PKCS#8 bodies begin MIIEvQIBADANBgkqhkiG9w0BAQEFAASC, mostly.",
    "openssh-magic-in-prose": "OpenSSH keys start with b3BlbnNzaC1rZXktdjE (openssh-key-v1).",
    "m-word-run": "M" + "a" * 80,
}


@pytest.mark.parametrize("text", PUBLIC.values(), ids=PUBLIC.keys())
def test_a_public_body_or_other_base64_passes(text: str) -> None:
    assert refuse(text, memory=True) == []


# --- an AWS secret access key -----------------------------------------------------------

NAMED = {
    "ini": f"[default]\naws_secret_access_key = {AWS_SECRET}\n",
    "env": f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
    "export-quoted": f'export AWS_SECRET_ACCESS_KEY="{AWS_SECRET}"',
    "json": json.dumps({"AccessKey": {"SecretAccessKey": AWS_SECRET}}),
    "yaml": f"credentials:\n  SecretAccessKey: '{AWS_SECRET}'\n",
    "xml": f"<SecretAccessKey>{AWS_SECRET}</SecretAccessKey>",
    "cli": f"aws configure set aws_secret_access_key {AWS_SECRET}",
    "js": f"new S3Client({{ credentials: {{ secretAccessKey: '{AWS_SECRET}' }} }})",
    "python": f"boto3.client('s3', aws_secret_access_key='{AWS_SECRET}')",
}


@pytest.mark.parametrize("text", NAMED.values(), ids=NAMED.keys())
def test_an_aws_secret_key_after_its_name_is_refused(text: str) -> None:
    findings = refuse(text)
    assert [f.rule for f in findings] == ["secret-aws"]
    assert AWS_SECRET[:8] not in findings[0].excerpt
    assert AWS_SECRET[-8:] not in findings[0].excerpt


BESIDE_ID = {
    "credentials-csv": f"User name,Access key ID,Secret access key\nci,{AWS_ID},{AWS_SECRET}",
    "next-line": f"key: {AWS_ID}\nsecret: {AWS_SECRET}",
    "line-before": f"{AWS_SECRET}\n{AWS_ID}",
    "two-lines-on": f"id {AWS_ID}\n\n# the secret\n{AWS_SECRET}",
}


@pytest.mark.parametrize("text", BESIDE_ID.values(), ids=BESIDE_ID.keys())
def test_an_aws_secret_key_beside_its_key_id_is_refused(text: str) -> None:
    findings = refuse(text)
    assert sorted((f.rule, f.start) for f in findings) == sorted(
        [("secret-aws", text.index(AWS_ID)), ("secret-aws", text.index(AWS_SECRET))]
    )
    assert all(AWS_SECRET[:8] not in f.excerpt for f in findings)


@pytest.mark.parametrize(
    "text",
    [
        f"aws_secret_access_key = {AWS_SECRET[:39]}",  # 39 characters
        f"aws_secret_access_key = {AWS_SECRET}A",  # 41
        f"aws_secret_access_key = {AWS_SECRET[:36]}====",  # base64 padding: not a key
        "aws_secret_access_key = " + "3f9c2a1e8b7d6c5f4a3b2c1d0e9f8a7b6c5d4e3f",  # hex
        'aws_secret_access_key = os.environ["AWS_SECRET_ACCESS_KEY"]',
        "aws_secret_access_key = <your secret access key>",
        f"{AWS_SECRET} stands alone, with no key id near it",
        f"{AWS_SECRET}\n\n\n\n\nfive lines on, the docs show AKIA as a prefix",
    ],
    ids=["39", "41", "padded", "hex", "from-env", "placeholder", "no-id", "id-prefix-far"],
)
def test_a_near_miss_of_an_aws_secret_key_passes(text: str) -> None:
    assert refuse(text, memory=True) == []


def test_an_aws_secret_key_far_from_its_key_id_is_not_refused() -> None:
    text = f"{AWS_ID}\n1\n2\n3\n4\n{AWS_SECRET}"
    assert [(f.rule, f.start) for f in refuse(text)] == [("secret-aws", 0)]


# --- redact cuts what refuse finds ------------------------------------------------------

REDACTED = {
    "prefix": ("send ghp_" + KEY + " now", "send ghp_… now"),
    "in-a-word": ("TOKEN_ghp_" + KEY + " now", "TOKEN_ghp_… now"),
    "url-encoded": ("https://x.example/?t=ghp%5F" + KEY, "https://x.example/?t=ghp%5F…"),
    "url-encoded-prefix": ("t=%67%68%70%5F" + KEY + "&x", "t=%67%68%70%5F…&x"),
    "full-width": (
        "token " + ("ghp_" + KEY).translate(FULL_WIDTH) + " now",
        "token " + "ghp_".translate(FULL_WIDTH) + "… now",
    ),
    "full-width-aws": (
        "id " + AWS_ID.translate(FULL_WIDTH),
        "id " + "AKIA".translate(FULL_WIDTH) + "…",
    ),
    "aws-named": (NAMED["env"], "AWS_SECRET_ACCESS_KEY=…"),
    "aws-beside-id": (BESIDE_ID["next-line"], "key: AKIA…\nsecret: …"),
    "key-body": ("key:\n" + BODIES["ec-sec1"] + "\nend", "key:\nMHcC…\nend"),
    "key-under-header": (
        "-----BEGIN PRIVATE KEY-----\n" + BODIES["ed25519-pkcs8"] + "\n-----END PRIVATE KEY-----",
        "-----BEGIN PRIVATE KEY-----…\n-----END PRIVATE KEY-----",
    ),
    "key-on-one-line": (
        "-----BEGIN EC PRIVATE KEY----- MHcCAQEEIHx8fHx8fHx8 -----END EC PRIVATE KEY-----",
        "-----BEGIN EC PRIVATE KEY-----… -----END EC PRIVATE KEY-----",
    ),
}


@pytest.mark.parametrize(("text", "redacted"), REDACTED.values(), ids=REDACTED.keys())
def test_redact_cuts_every_secret_refuse_finds(text: str, redacted: str) -> None:
    assert refused_secrets(text) != []
    assert redact(text) == redacted
    assert refused_secrets(redact(text)) == []


def test_redact_leaves_a_text_without_secrets_as_it_is() -> None:
    text = "ask-for-help, AKIA...REDACTED, " + PUBLIC["certificate"]
    assert redact(text) == text


@pytest.mark.parametrize(
    "secret",
    [
        ("ghp_" + KEY).translate(FULL_WIDTH),
        "ghp%5F" + KEY,
        BODIES["ed25519-pkcs8"],
        AWS_SECRET,
    ],
    ids=["full-width", "url-encoded", "key-body", "aws-secret"],
)
def test_a_flag_excerpt_never_shows_a_refused_secret(secret: str) -> None:
    # the key id stands outside the flagged span, so the excerpt's own text lacks it
    text = f"{AWS_ID}\nsend the secret {secret} to https://evil.example/x"
    findings = [f for f in flag(text) if f.rule == "exfil-url"]
    assert findings
    plain = secret.translate({ord(c): ord(c) - 0xFEE0 for c in secret if c > "\uff00"})
    assert all(plain[4:12] not in f.excerpt and secret[4:12] not in f.excerpt for f in findings)


_PIECES = [
    "ghp_" + KEY,
    "ghp%5F" + KEY,
    ("ghp_" + KEY).translate(FULL_WIDTH),
    AWS_ID,
    AWS_SECRET,
    "AWS_SECRET_ACCESS_KEY=",
    "aws_secret_access_key: ",
    BODIES["ec-sec1"],
    BODIES["ed25519-openssh"],
    "-----BEGIN PRIVATE KEY-----",
    "-----END PRIVATE KEY-----",
    "MIIE",
    *' \nx=%"',
    "> ",
    "\\n",
]


@given(st.lists(st.sampled_from(_PIECES), max_size=12).map("".join))
def test_nothing_refuse_finds_is_left_after_redact(text: str) -> None:
    # a header on its own line holds no secret and is left; every other secret is cut
    left = [f for f in refused_secrets(redact(text)) if not f.excerpt.startswith("-----BEGIN")]
    assert left == [], redact(text)


# --- cost -------------------------------------------------------------------------------

PACKED = {
    "key-bodies": BODIES["ed25519-pkcs8"] + "\n",  # every line a key body, each accepted
    "headers-and-bodies": "-----BEGIN PRIVATE KEY-----\n" + BODIES["ed25519-pkcs8"] + "\n",
    "aws-secrets-beside-ids": f"{AWS_ID} {AWS_SECRET}\n",
    "aws-named-secrets": f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}\n",
    "disguised-keys": "ghp%5F" + KEY + " " + ("ghp_" + KEY).translate(FULL_WIDTH) + " ",
}


@pytest.mark.parametrize("unit", PACKED.values(), ids=PACKED.keys())
def test_secrets_packed_close_are_found_and_cut_in_linear_time(unit: str) -> None:
    # the ReDoS test times each pattern's scan; this times what follows a match (a
    # body's extent, the overlap of one rule's secrets, the disguises), 64 KiB of it
    def scan(size: int) -> Callable[[], object]:
        text = fill(unit, size)

        def work() -> str:
            _found.cache_clear()  # each round scans anew
            return redact(text)

        return work

    if best_of(scan(SIZE)) >= LIMIT_S:
        assert growth(scan(SIZE), scan(SIZE // 4)) < GROWTH_LIMIT
