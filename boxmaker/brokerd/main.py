"""brokerd's console script: `brokerd serve --config PATH [--accept-break]`.

Runs in the foreground and logs to stderr (supervisord expects both). Exit
statuses: 0 after a clean stop, 1 when it cannot start (the reason and its
runbook pointer are logged), 2 for a usage or configuration error or
`--accept-break` with nothing to accept.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from boxmaker.brokerd.config import load_config
from boxmaker.brokerd.serve import serve
from boxmaker.ipc.role import run_role


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="brokerd", description="boxmaker's tool-call broker")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("serve", help="serve broker.sock and admin.sock in the foreground")
    run.add_argument("--config", type=Path, help="brokerd.toml (default: every default)")
    run.add_argument(
        "--accept-break",
        action="store_true",
        help="accept the audit chain's first failure (see runbook.md#audit-chain-broken)",
    )
    args = parser.parse_args(argv)
    return run_role(
        "brokerd",
        lambda: load_config(args.config, os.environ),
        lambda config: serve(config, accept_break=args.accept_break),
    )


if __name__ == "__main__":
    sys.exit(main())
