"""`gatewayd check`: an opt-in check against the owner's real Mattermost server.

I/O: Mattermost (through the client) and standard output. It posts ONE message
in the owner's direct channel with the bot, built the way gatewayd builds an
untrusted reply (`core.display.reply_escape`: a Markdown image and a bare URL, both as
code, the notice, `unsafe_links`), waits `wait_s` for the server to process
it, reads the post back and prints what the server says it fetched or would
preview (`metadata.embeds`, `metadata.images`). Both must be empty; exit 0
when they are, 1 when not (the server fetched something gatewayd's escaping
should have stopped), 2 for a configuration error. The post is left in the
channel for the owner to see; nothing else is written.
"""

from __future__ import annotations

import asyncio
import json
import sys

from boxmaker.core.display.reply_escape import escape_reply
from boxmaker.gatewayd.config import GatewaydConfig
from boxmaker.gatewayd.mattermost import MattermostClient

PROBE = (
    "boxmaker live check: this image ![probe](https://example.com/boxmaker-probe.png) and"
    " this link https://example.com/boxmaker-probe must show as code, and nothing be fetched."
)


async def check(config: GatewaydConfig, token: str, wait_s: float = 3.0) -> int:
    escaped = escape_reply(PROBE, untrusted=True)
    props = {"unsafe_links": "true"} if escaped.unsafe_links else {}
    async with MattermostClient(config.mattermost.url, token) as client:
        me = await client.me()
        channel = await client.direct_channel(me.id, config.mattermost.owner)
        post = await client.create_post(channel.id, escaped.message, props=props)
        await asyncio.sleep(wait_s)
        read = await client.get_post(post.id)
    embeds = read.metadata.get("embeds") or []
    images = read.metadata.get("images") or {}
    print(f"posted {post.id} in {channel.id}")
    print(f"props: {json.dumps(read.props, sort_keys=True)}")
    print(f"metadata.embeds: {json.dumps(embeds, sort_keys=True)}")
    print(f"metadata.images: {json.dumps(images, sort_keys=True)}")
    if embeds or images:
        sys.stderr.write("gatewayd check: the server fetched or will preview a URL; see above\n")
        return 1
    print("check: ok, nothing fetched")
    return 0
