"""brokerd's console script: `brokerd serve --config PATH [--accept-break]`.

Runs in the foreground and logs to stderr (supervisord expects both). Exit
statuses: 0 after a clean stop, 1 when it cannot start (the reason and its
runbook pointer are logged), 2 for a usage or configuration error or
`--accept-break` with nothing to accept.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from boxmaker.brokerd.config import load_config
from boxmaker.brokerd.listener import StartupError
from boxmaker.brokerd.serve import serve
from boxmaker.core.errors import ConfigError


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
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="brokerd %(levelname)s %(message)s"
    )
    try:
        config = load_config(args.config, os.environ)
    except ConfigError as exc:
        logging.getLogger("brokerd").error("%s", exc)
        return 2
    try:
        return serve(config, accept_break=args.accept_break)
    except StartupError as exc:
        logging.getLogger("brokerd").error("%s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
