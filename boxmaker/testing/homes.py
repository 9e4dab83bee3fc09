"""A boxmaker home for tests: made short enough for its sockets, grants and a
brokerd.toml written into it, and its audit log read back.

I/O: temporary directories and the files named. Every path under a home comes
from `boxmaker.core.home.layout.Home`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from boxmaker.brokerd.audit_startup import audit_files
from boxmaker.core.audit.chain import ChainVerifier
from boxmaker.core.audit.chain_report import ChainReport
from boxmaker.core.audit.records import AuditRecord, decode_record
from boxmaker.core.home.layout import Home
from boxmaker.core.home.links import LINKS

SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes; keep clear of it


def make_home(base: Path) -> Path:
    """A fresh home directory under `base`, or under a short temporary directory
    if `base` is too deep for a socket path (the caller removes what it made)."""
    home = base / "home"
    if _longest_socket(home) > SOCKET_PATH_MAX:
        home = Path(tempfile.mkdtemp(prefix="bx-")) / "home"
    home.mkdir(parents=True)
    return home


def _longest_socket(home: Path) -> int:
    place = Home(home)
    return max(len(str(place.socket(link))) for link in LINKS)


def write_grant(
    directory: Path,
    grant_id: str,
    *,
    tool: str,
    mode: str = "auto",
    max_taint: str = "secret",
    result_class: str = "private",
    untrusted: bool = False,
    expires: str | None = None,
    paths: Sequence[str] = (),
    hosts: Sequence[str] = (),
    when_untrusted: str | None = None,
) -> Path:
    """Write `<directory>/<grant_id>.toml` and return its path (`when_untrusted`
    left out when None: the tool's default)."""
    lines = [
        f'tool = "{tool}"',
        f'mode = "{mode}"',
        f'max_taint = "{max_taint}"',
        f'result_class = "{result_class}"',
        f"untrusted = {'true' if untrusted else 'false'}",
    ]
    if expires is not None:
        lines.append(f'expires = "{expires}"')
    if when_untrusted is not None:
        lines.append(f'when_untrusted = "{when_untrusted}"')
    lines.append("[constraints]")
    if paths:
        lines.append("paths = [" + ", ".join(f'"{p}"' for p in paths) + "]")
    if hosts:
        lines.append("hosts = [" + ", ".join(f'"{h}"' for h in hosts) + "]")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{grant_id}.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_config(
    path: Path,
    home: Path,
    grants: Path,
    *,
    ttl_ms: int | None = None,
    broker: Path | None = None,
    admin: Path | None = None,
    backend: str = "refusing",
) -> Path:
    """A brokerd.toml naming `home` and `grants` (and what else is given)."""
    lines = ["[paths]", f'home = "{home}"', f'grants = "{grants}"']
    if broker is not None or admin is not None:
        lines.append("[sockets]")
        if broker is not None:
            lines.append(f'broker = "{broker}"')
        if admin is not None:
            lines.append(f'admin = "{admin}"')
    if ttl_ms is not None:
        lines += ["[approvals]", f"ttl_ms = {ttl_ms}"]
    lines += ["[runner]", f'backend = "{backend}"']
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_records(home: Path) -> list[AuditRecord]:
    """Every record of the home's audit log, in order (every line must parse)."""
    audit = Home(home).audit
    records: list[AuditRecord] = []
    for name in audit_files(audit):
        for line in (audit / name).read_bytes().splitlines():
            records.append(decode_record(line))
    return records


def verify_log(home: Path) -> ChainReport:
    """`ChainVerifier` over every file of the home's audit log."""
    audit = Home(home).audit
    verifier = ChainVerifier()
    for name in audit_files(audit):
        verifier.feed(name, (audit / name).read_bytes())
    return verifier.finish()
