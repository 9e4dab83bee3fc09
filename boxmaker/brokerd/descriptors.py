"""brokerd's file descriptors: the limit raised at start, and the connection caps sized to it.

I/O: `getrlimit` and `setrlimit` of RLIMIT_NOFILE, in `raise_descriptor_limit`
only; `connection_caps` is arithmetic. The rules:

    1. At start the soft descriptor limit is raised to the hard limit, but no
       higher than MAX_DESCRIPTORS (65,536); it is never lowered.
    2. admin.sock serves at most ADMIN_CAP (16) connections at once, broker.sock
       at most BROKER_CAP (128), each with a cap of its own, so that broker.sock's
       connections never take admin.sock's places.
    3. broker.sock's cap is lowered, when the limit is small, until every
       connection of both sockets can hold the descriptors its work needs with
       RESERVED left over for brokerd's own files (log, lock, grants, state):

           broker = min(BROKER_CAP, (limit - RESERVED - ADMIN_CAP * PER_ADMIN) // PER_CALL)

       and at least 1. So idle connections kept open on broker.sock can use up
       its places but never the descriptors that admin.sock needs to accept.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

MAX_DESCRIPTORS = 65_536
BROKER_CAP = 128
ADMIN_CAP = 16
RESERVED = 32  # standard streams, listening sockets, audit file and lock, grants, state
PER_ADMIN = 2  # the connection, and a grant or state file while it is answered
PER_CALL = 8  # the connection, the sandbox's pipes and process, a held path, egress sockets


@dataclass(frozen=True, slots=True)
class ConnectionCaps:
    """How many connections each socket serves at once."""

    broker: int = BROKER_CAP
    admin: int = ADMIN_CAP


DEFAULT_CAPS = ConnectionCaps()


def raise_descriptor_limit() -> int:
    """Raise the soft RLIMIT_NOFILE as rule 1 says; the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = MAX_DESCRIPTORS if hard == resource.RLIM_INFINITY else min(hard, MAX_DESCRIPTORS)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return MAX_DESCRIPTORS if soft == resource.RLIM_INFINITY else soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError):
        return soft
    return target


def connection_caps(limit: int) -> ConnectionCaps:
    """The caps for a soft descriptor limit of `limit` (rules 2 and 3)."""
    room = (limit - RESERVED - ADMIN_CAP * PER_ADMIN) // PER_CALL
    return ConnectionCaps(broker=max(1, min(BROKER_CAP, room)), admin=ADMIN_CAP)
