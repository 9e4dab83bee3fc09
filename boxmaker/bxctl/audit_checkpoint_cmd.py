"""`bxctl audit checkpoint` and `bxctl audit keygen`: checkpoints to keep outside the box.

I/O: one `checkpoint` request on brokerd's admin.sock; appends to a checkpoint
file outside `<home>` (created 0600 if missing, fsynced); reads a private key
to sign with, or writes a new one. The wire models and `cryptography` are
imported only inside the handlers, so that `bxctl audit verify` stays light.

    bxctl audit checkpoint [--append FILE] [--key KEYFILE]
        prints `SEQ:HEAD TIME` (with --key: `... key=<id> sig=<base64>`), and
        with --append also appends that line to FILE. A FILE inside `<home>` is
        refused: whoever holds the box could rewrite it along with the log.
    bxctl audit keygen --out KEYFILE
        writes a new Ed25519 private key (PEM, 0600; never over a file) and
        prints its public key, `ed25519:<base64>`, and its key id.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from boxmaker.bxctl.cli import EXIT_OK, CliError, err, out
from boxmaker.core.layout import home_from


def add_parsers(sub: Any) -> None:
    """Register `checkpoint` and `keygen` under `bxctl audit`."""
    checkpoint = sub.add_parser(
        "checkpoint", help="ask brokerd for a checkpoint of the audit log, to keep off the box"
    )
    checkpoint.add_argument(
        "--append",
        type=Path,
        metavar="FILE",
        help="also append the line to FILE (outside boxmaker's home; created 0600)",
    )
    checkpoint.add_argument(
        "--key", type=Path, metavar="KEYFILE", help="sign the line with this private key"
    )
    checkpoint.add_argument(
        "--home",
        type=Path,
        default=None,
        help="boxmaker's home (default: $BOXMAKER_HOME, else /var/lib/boxmaker)",
    )
    checkpoint.add_argument(
        "--admin-socket", type=Path, help="brokerd's admin socket (default: under the home)"
    )
    checkpoint.set_defaults(handler=cmd_checkpoint)
    keygen = sub.add_parser("keygen", help="make an Ed25519 key to sign checkpoints with")
    keygen.add_argument(
        "--out", type=Path, required=True, metavar="KEYFILE", help="the new private key's file"
    )
    keygen.set_defaults(handler=cmd_keygen)


def refuse_inside_home(path: Path, home: Path) -> None:
    """CliError if `path` (links resolved) lies inside `home`."""
    inside = path.resolve()
    root = home.resolve()
    if inside == root or root in inside.parents:
        raise CliError(
            f"{path} is inside boxmaker's home {home}: whoever holds the box could rewrite"
            " it along with the log; keep checkpoints outside the home (another machine, a"
            " removable disk)"
        )


def append_line(path: Path, line: str) -> None:
    """Append `line` to `path`, created 0600 if missing, and fsync it."""
    created = not path.exists()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            data = (line + "\n").encode("ascii")
            if os.write(fd, data) != len(data):
                raise OSError("short write")
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    except OSError as exc:
        raise CliError(f"cannot append to {path}: {exc.strerror or exc}") from exc


def cmd_checkpoint(args: argparse.Namespace) -> int:
    # the wire models (pydantic) and cryptography: only for this command
    from boxmaker.bxctl.client import request
    from boxmaker.core.checkpoints import Checkpoint, format_line
    from boxmaker.core.layout import Home
    from boxmaker.core.messages import AuditCheckpoint, CheckpointReply

    home: Path = args.home or home_from(os.environ)
    if args.append is not None:
        refuse_inside_home(args.append, home)
    key = None
    if args.key is not None:
        from boxmaker.bxctl.seal import load_private

        key = load_private(args.key)
    socket = args.admin_socket or Home(home).admin_socket
    answer = request(socket, AuditCheckpoint(), f"bxctl-{os.getpid()}")[-1].message
    if not isinstance(answer, CheckpointReply):
        raise CliError(f"brokerd answered {answer.kind}, not checkpoint_reply")
    checkpoint = Checkpoint(answer.seq, answer.head, answer.time)
    if key is None:
        line = format_line(checkpoint)
    else:
        from boxmaker.bxctl.seal import seal

        line = format_line(checkpoint, seal(key, checkpoint))
    if args.append is not None:
        append_line(args.append, line)
    out(line)
    return EXIT_OK


def cmd_keygen(args: argparse.Namespace) -> int:
    from boxmaker.bxctl.seal import generate, key_id, public_text

    public = generate(args.out)
    out(public_text(public))
    err(
        f"audit: key {key_id(public)} written to {args.out}; keep it off the box, and the"
        " public key line above wherever you verify"
    )
    return EXIT_OK
