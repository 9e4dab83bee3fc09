"""The remembered head: the newest checkpoint `bxctl audit verify --checkpoints` accepted.

I/O: reads and writes one small file in the owner's own state, never inside
`<home>`: `--head-file FILE`, else `$XDG_STATE_HOME/boxmaker/audit-head`, else
`~/.local/state/boxmaker/audit-head`. It is replaced atomically
(`boxmaker.ipc.files.write_atomic`, 0600; its directory is created 0700). Its
format is core.audit.checkpoints' head file: a `#` note and one checkpoint line.

A missing file is no head (a first verify); a file that is not a head file is an
error, never a fresh start: whoever could delete the head unseen could roll the
checkpoint files back. A verify that finds a problem leaves the file as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from boxmaker.bxctl.cli import EXIT_USAGE, CliError
from boxmaker.core.audit.checkpoints import CheckpointLine, decode_head, encode_head
from boxmaker.ipc.files import write_atomic

HEAD_NAME = Path("boxmaker") / "audit-head"


def head_path(named: Path | None, environ: Mapping[str, str]) -> Path:
    """The head file: `named`, else under the owner's XDG state directory."""
    if named is not None:
        return named
    state = environ.get("XDG_STATE_HOME", "")
    if state and Path(state).is_absolute():
        return Path(state) / HEAD_NAME
    home = environ.get("HOME", "")
    if home and Path(home).is_absolute():
        return Path(home) / ".local" / "state" / HEAD_NAME
    raise CliError(
        "cannot tell where to remember the checkpoint head (no HOME nor XDG_STATE_HOME):"
        " name a file outside boxmaker's home with --head-file FILE",
        EXIT_USAGE,
    )


def read_head(path: Path) -> CheckpointLine | None:
    """The head remembered in `path`; None if there is no file; CliError if unreadable."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return decode_head(data)
    except ValueError as exc:
        raise CliError(
            f"{path}: {exc}: restore it from a copy, or remove it to trust the checkpoint"
            " files as they are now (docs/audit-checkpoints.md, the remembered head)"
        ) from exc


def write_head(path: Path, line: CheckpointLine) -> None:
    """Remember `line` in `path`, atomically; CliError if it cannot be written."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, encode_head(line))
    except OSError as exc:
        raise CliError(
            f"cannot remember the checkpoint head in {path}: {exc.strerror or exc}"
        ) from exc
