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
import sys
from collections.abc import Sequence

from boxmaker.core.runbook import Runbook
from boxmaker.gatewayd.config import TOKEN, GatewaydConfig, load_config
from boxmaker.ipc.role import CommandLine

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
    line = CommandLine("gatewayd", "boxmaker's Mattermost bot")
    line.command("serve", "follow the owner's Mattermost in the foreground")
    line.command(
        "check",
        "post one escaped message to the owner and read what the server fetched",
        config_required=True,
    )
    return line.run(argv, load_config, run_command)


def run_command(args: argparse.Namespace, config: GatewaydConfig) -> int:
    """The command `args` names, with `config`."""
    return live_check(config) if args.command == "check" else serve(config)


if __name__ == "__main__":
    sys.exit(main())
