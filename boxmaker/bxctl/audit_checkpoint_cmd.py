"""`bxctl audit checkpoint` and `bxctl audit keygen`: checkpoints to keep outside the box.

I/O: one `checkpoint` request on brokerd's admin.sock; appends to a checkpoint
file outside `<home>` (created 0600 if missing, fsynced); reads a private key
to sign with, or writes a new one. The wire models and `cryptography` are
imported only inside the handlers, so that `bxctl audit verify` stays light.

    bxctl audit checkpoint [--append FILE [--key KEYFILE]]
        prints `SEQ:HEAD TIME`, and with --append also appends that line to FILE.
        With --key the line is sealed, `... prev=<hash> key=<id> sig=<base64>`,
        chained to the last sealed line of FILE (`chain_prev`; the genesis value
        when FILE has none), so --key needs --append. A FILE inside `<home>` is
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

from boxmaker.bxctl.cli import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, CliError, err, out
from boxmaker.core.audit.checkpoints import GENESIS, CheckpointLine, chain_head, parse_line
from boxmaker.core.home.layout import home_from
from boxmaker.ipc.files import append_durable


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
        "--key",
        type=Path,
        metavar="KEYFILE",
        help="with --append: sign the line with this private key, chained to FILE's last",
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


def refuse_inside_home(path: Path, home: Path, status: int = EXIT_PROBLEM) -> None:
    """CliError (with `status`) if `path` (links resolved) lies inside `home`."""
    inside = path.resolve()
    root = home.resolve()
    if inside == root or root in inside.parents:
        raise CliError(
            f"{path} is inside boxmaker's home {home}: whoever holds the box could rewrite"
            " it along with the log; keep checkpoints outside the home (another machine, a"
            " removable disk)",
            status,
        )


def chain_prev(path: Path) -> str:
    """The prev of a sealed line appended to `path`: the hash of its last sealed line,
    GENESIS if it has none (or does not exist); CliError for a line that is not one."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return GENESIS
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    lines: list[CheckpointLine] = []
    for number, raw in enumerate(text.splitlines(), 1):
        try:
            parsed = parse_line(raw)
        except ValueError as exc:
            raise CliError(
                f"{path}:{number}: {exc}; fix the file before sealing a line after it"
                f" (`bxctl audit verify --checkpoints {path}` names every problem)"
            ) from exc
        if parsed is not None:
            lines.append(parsed)
    return chain_head(lines)


def append_line(path: Path, line: str) -> None:
    """Append `line` to `path`, created 0600 if missing, and fsync it (a link is followed:
    the owner named the path)."""
    try:
        append_durable(path, (line + "\n").encode("ascii"), follow=True)
    except OSError as exc:
        raise CliError(f"cannot append to {path}: {exc.strerror or exc}") from exc


def cmd_checkpoint(args: argparse.Namespace) -> int:
    # the wire models (pydantic) and cryptography: only for this command
    from boxmaker.bxctl.client import request
    from boxmaker.core.audit.checkpoints import Checkpoint, format_line
    from boxmaker.core.home.layout import Home
    from boxmaker.core.wire.broker_admin import AuditCheckpoint, CheckpointReply

    home: Path = args.home or home_from(os.environ)
    if args.key is not None and args.append is None:
        raise CliError(
            "--key chains the new line to the last sealed line of a checkpoint file:"
            " name that file with --append FILE",
            EXIT_USAGE,
        )
    if args.append is not None:
        refuse_inside_home(args.append, home)
    key = None
    prev = GENESIS
    if args.key is not None:
        from boxmaker.bxctl.seal import load_private

        key = load_private(args.key)
        prev = chain_prev(args.append)
    socket = args.admin_socket or Home(home).admin_socket
    answer = request(socket, AuditCheckpoint(), f"bxctl-{os.getpid()}")[-1].message
    if not isinstance(answer, CheckpointReply):
        raise CliError(f"brokerd answered {answer.kind}, not checkpoint_reply")
    checkpoint = Checkpoint(answer.seq, answer.head, answer.time)
    if key is None:
        line = format_line(checkpoint)
    else:
        from boxmaker.bxctl.seal import seal

        line = format_line(checkpoint, seal(key, checkpoint, prev))
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
