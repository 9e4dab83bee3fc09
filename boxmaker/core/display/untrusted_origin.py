"""Why a session is untrusted, in words: the call whose result made it so. Pure, no I/O.

brokerd records the call (`messages.UntrustedBy`), and the flag rule its result
matched when that, not its grant, made the session untrusted. `bxctl approvals`
and gatewayd's approval post both show it with `untrusted_since`, so the owner
reads the same words in a terminal and in chat. The tool and the rule are shown
as data (`core.display.escape`); the session and the call are checked identifiers.
"""

from __future__ import annotations

from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.wire.broker_admin import UntrustedBy


def untrusted_since(by: UntrustedBy) -> str:
    """`since call C (TOOL) of session S`, then `: its result matched the flag rule R`
    when a flag rule is what made the session untrusted."""
    line = f"since call {by.call} ({escape_arguments(by.tool)}) of session {by.session}"
    if by.rule is not None:
        line += f": its result matched the flag rule {escape_arguments(by.rule)}"
    return line
