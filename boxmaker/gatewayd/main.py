"""gatewayd's console script: `gatewayd serve --config PATH`.

`serve` reads the bot's token (`[secrets.mattermost_token]`), finds the owner's
direct-message channel, binds gateway.sock for brokerd and follows the owner's
messages until SIGTERM or SIGINT (`boxmaker.gatewayd.serve`). A gatewayd.toml
with no `[mattermost] url` is a tree that has no chat yet: gatewayd says so in
one line and exits 0, and supervisord leaves it stopped. Exit statuses
(`boxmaker.ipc.role`): 0 after a clean stop or when not configured, 1 when it
cannot start (the log says why), 2 for a configuration error.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from boxmaker.core.runbook import Runbook
from boxmaker.gatewayd.config import TOKEN, GatewaydConfig, load_config
from boxmaker.ipc.role import run_role

log = logging.getLogger("gatewayd")


def serve(config: GatewaydConfig) -> int:
    if not config.configured:
        log.info(
            "event=not_configured set [mattermost] url and owner, and [secrets.mattermost_token],"
            " in gatewayd.toml; %s",
            Runbook.GATEWAY_NOT_CONFIGURED.pointer,
        )
        return 0
    from boxmaker.gatewayd.serve import serve as serve_chat  # aiohttp only when needed

    return serve_chat(config)


def live_check(config: GatewaydConfig) -> int:
    if not config.configured:
        log.error("nothing to check: %s", Runbook.GATEWAY_NOT_CONFIGURED.pointer)
        return 2
    import asyncio

    from boxmaker.gatewayd.live_check import check
    from boxmaker.ipc.secrets import load_secrets

    secrets = load_secrets({TOKEN: config.secrets[TOKEN]})
    try:
        return asyncio.run(check(config, secrets[TOKEN].reveal().decode("utf-8", "strict")))
    finally:
        secrets.wipe()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gatewayd", description="boxmaker's Mattermost bot")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("serve", help="follow the owner's Mattermost in the foreground")
    run.add_argument("--config", type=Path, help="gatewayd.toml (default: every default)")
    probe = commands.add_parser(
        "check", help="post one escaped message to the owner and read what the server fetched"
    )
    probe.add_argument("--config", type=Path, required=True, help="gatewayd.toml")
    args = parser.parse_args(argv)
    body = live_check if args.command == "check" else serve
    return run_role("gatewayd", lambda: load_config(args.config, os.environ), body)


if __name__ == "__main__":
    sys.exit(main())
