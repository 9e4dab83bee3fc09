"""Sealed audit checkpoints: Ed25519 keys, and signing and checking checkpoint lines.

I/O: reads and writes key files (a new private key is created 0600, never over an
existing file). Imported only by the commands that take a key, so that a plain
`bxctl audit verify` does not load `cryptography`.

    private key  PEM, PKCS #8, unencrypted (`-----BEGIN PRIVATE KEY-----`), the
                 form `openssl genpkey -algorithm ed25519` writes
    public key   one line `ed25519:<base64 of the 32 raw bytes>`; a PEM public
                 key (`openssl pkey -pubout`) is read too
    key id       the first 16 hex characters of the sha256 of the 32 raw bytes
    signature    Ed25519 over core.audit.checkpoints.signed_payload, base64 (88 characters)

A sealed line is `SEQ:HEAD TIME prev=<hash> key=<key id> sig=<signature>`, `prev`
being the hash of the sealed line before it (core.audit.checkpoints): without the owner's
private key, nobody can forge a line, change one, or close the gap left by a line
deleted, moved or inserted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from boxmaker.bxctl.cli import CliError
from boxmaker.core.audit.checkpoints import Checkpoint, CheckpointLine, Seal, signed_payload

PUBLIC_PREFIX = "ed25519:"


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    return hashlib.sha256(raw_public(key)).hexdigest()[:16]


def public_text(key: Ed25519PublicKey) -> str:
    """The public key's one line: `ed25519:<base64>`."""
    return PUBLIC_PREFIX + base64.b64encode(raw_public(key)).decode("ascii")


def generate(path: Path) -> Ed25519PublicKey:
    """A new private key written to `path` (0600, which must not exist); its public key."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError as exc:
        raise CliError(f"{path} exists: a key is never written over; choose another --out") from exc
    except OSError as exc:
        raise CliError(f"cannot create {path}: {exc.strerror or exc}") from exc
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, pem)
        os.fsync(fd)
    finally:
        os.close(fd)
    return key.public_key()


def load_private(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in the PEM file `path`; CliError saying why not."""
    data = _read(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise CliError(f"{path}: not an unencrypted PEM private key ({exc})") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise CliError(f"{path}: not an Ed25519 key (bxctl audit keygen makes one)")
    return key


def load_public(path: Path) -> Ed25519PublicKey:
    """The Ed25519 public key in `path` (`ed25519:<base64>` or PEM); CliError if not."""
    data = _read(path)
    text = data.decode("ascii", "replace").strip()
    if text.startswith(PUBLIC_PREFIX):
        try:
            raw = base64.b64decode(text[len(PUBLIC_PREFIX) :], validate=True)
            return Ed25519PublicKey.from_public_bytes(raw)
        except (binascii.Error, ValueError) as exc:
            raise CliError(f"{path}: not an Ed25519 public key ({exc})") from exc
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise CliError(f"{path}: not `ed25519:<base64>` nor a PEM public key") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise CliError(f"{path}: not an Ed25519 key")
    return key


def seal(key: Ed25519PrivateKey, checkpoint: Checkpoint, prev: str) -> Seal:
    """The seal of `checkpoint` after the sealed line whose hash is `prev`."""
    signature = key.sign(signed_payload(checkpoint, prev))
    return Seal(prev, key_id(key.public_key()), base64.b64encode(signature).decode("ascii"))


def seal_problem(key: Ed25519PublicKey, line: CheckpointLine) -> str | None:
    """What is wrong with `line`'s seal under `key`, or None if it is good."""
    if line.seal is None:
        return "the checkpoint is not signed"
    expected = key_id(key)
    if line.seal.key_id != expected:
        return f"signed by key {line.seal.key_id}, not by the public key given ({expected})"
    try:
        key.verify(base64.b64decode(line.seal.sig), signed_payload(line.checkpoint, line.seal.prev))
    except (InvalidSignature, binascii.Error, ValueError):
        return "bad signature: the line was changed or not signed by this key"
    return None


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from exc
