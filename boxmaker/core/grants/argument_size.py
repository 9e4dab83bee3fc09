"""The size limit on a tool call's `arguments`, and what the audit log keeps of larger ones.

No I/O. The model's arguments are JSON text; brokerd writes them whole into the
Decision record, so their size bounds what one request can make brokerd write.
The rules:

    1. `arguments` may hold at most MAX_ARGUMENT_BYTES (65,536) bytes of UTF-8.
    2. Over it, the call is denied `invalid_arguments` (policy, through
       `args.parse_arguments`), with the detail
       "the arguments are <n> bytes, over the 65536-byte limit".
    3. The Decision record of such a call carries, instead of the arguments,
       exactly (one line, <n> in decimal, <hex> 64 lowercase hex):

           [arguments not recorded: <n> bytes, over the 65536-byte limit; sha256 <hex>]

       where <hex> is the sha256 of the arguments' UTF-8 bytes. Arguments within
       the limit are recorded exactly as received.

Lone surrogates (which JSON text can carry as `\\ud800`) are counted and hashed
as their surrogate-pass encoding, so every string has a length and a hash.
"""

from __future__ import annotations

from boxmaker.core.hashes import sha256_hex

MAX_ARGUMENT_BYTES = 65_536


def argument_bytes(arguments: str) -> bytes:
    """The bytes the limit counts: UTF-8, lone surrogates passed through."""
    return arguments.encode("utf-8", "surrogatepass")


def size_problem(arguments: str) -> str | None:
    """The `invalid_arguments` detail when `arguments` is over the limit; else None."""
    # a str of n code points is at least n bytes of UTF-8 and at most 4 n
    if len(arguments) * 4 <= MAX_ARGUMENT_BYTES:
        return None
    size = len(argument_bytes(arguments))
    if size <= MAX_ARGUMENT_BYTES:
        return None
    return f"the arguments are {size} bytes, over the {MAX_ARGUMENT_BYTES}-byte limit"


def recorded_arguments(arguments: str) -> str:
    """What the Decision record carries for `arguments` (rule 3)."""
    if size_problem(arguments) is None:
        return arguments
    data = argument_bytes(arguments)
    return (
        f"[arguments not recorded: {len(data)} bytes, over the {MAX_ARGUMENT_BYTES}-byte"
        f" limit; sha256 {sha256_hex(data)}]"
    )
