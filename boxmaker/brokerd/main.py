"""brokerd's console script: `brokerd serve --config PATH [--accept-break]`.

Runs in the foreground and logs to stderr (supervisord expects both). Exit
statuses: 0 after a clean stop, 1 when it cannot start (the reason and its
runbook pointer are logged), 2 for a usage or configuration error or
`--accept-break` with nothing to accept.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from boxmaker.brokerd.config import BrokerdConfig, load_config
from boxmaker.brokerd.serve import serve
from boxmaker.ipc.role import CommandLine


def main(argv: Sequence[str] | None = None) -> int:
    line = CommandLine("brokerd", "boxmaker's tool-call broker")
    run = line.command("serve", "serve broker.sock and admin.sock in the foreground")
    run.add_argument(
        "--accept-break",
        action="store_true",
        help="accept the audit chain's first failure (see runbook.md#audit-chain-broken)",
    )
    return line.run(argv, load_config, run_command)


def run_command(args: argparse.Namespace, config: BrokerdConfig) -> int:
    return serve(config, accept_break=args.accept_break)


if __name__ == "__main__":
    sys.exit(main())
