"""Who a socket's client is, by its peer credentials: the role `core.home.links` rule 5 asks for.

I/O: `SO_PEERCRED` of an accepted Unix socket (`peer_uid`), and the user database
(`pwd`) once at start (`peers_for`). The rules:

    1. Dev mode (`[sockets] group_access = false`): every peer is the owner. Every
       role runs as one user, the owner, and the socket (0600) admits only that
       user: there is nobody else to tell apart.
    2. A root install: a peer is the owner when its uid is the uid of the owner's
       user, the one named at install (loopd.toml's `[sockets] owner_user`). A group
       never makes a peer the owner: the link's group holds gatewayd's user as
       well, and a primary group can be shared (`users`), so only the uid says
       who connected. Any other peer (gatewayd's user, a member the install did
       not add, root) is no client role in particular (None): it may send the
       kinds open to every peer and no other.
    3. The owner is never a role's user: a name of `core.home.links.ROLE_USERS`, or a
       user with the uid of one, is a StartupError, so gatewayd's user can never
       be taken for the owner.
    4. A root install that names no owner (a loopd.toml written before the key
       existed): no peer is the owner, and the owner's kinds are refused to all.
"""

from __future__ import annotations

import pwd
import socket
import struct
from dataclasses import dataclass

from boxmaker.core.errors import StartupError
from boxmaker.core.home.links import ROLE_USERS, Role

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True, slots=True)
class Peers:
    """How a socket tells its peers' roles: by the owner's uid, or everyone the owner."""

    owner_uid: int | None = None  # a root install's owner (rule 2); None: no owner known
    everyone_owner: bool = False  # dev mode (rule 1)

    def role_of(self, uid: int) -> Role | None:
        """The role of a peer whose uid is `uid`; None: no client role in particular."""
        if self.everyone_owner or uid == self.owner_uid:
            return Role.OWNER
        return None

    @property
    def knows_owner(self) -> bool:
        """Whether some peer can be the owner (not rule 4)."""
        return self.everyone_owner or self.owner_uid is not None


DEV_PEERS = Peers(everyone_owner=True)
NO_OWNER = Peers()


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of `sock` (as it was when it connected)."""
    data = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    _, uid, _ = _UCRED.unpack(data)
    return int(uid)


def peers_for(group_access: bool, owner: str) -> Peers:
    """The peers of a role's sockets: rule 1 in dev mode, else rules 2 to 4 for the
    user named `owner` ("" names none); StartupError for an owner that is no user,
    or that is a role's user."""
    if not group_access:
        return DEV_PEERS
    if not owner:
        return NO_OWNER
    if owner in ROLE_USERS.values():
        raise StartupError(
            f"[sockets] owner_user = {owner!r} is a role's user: name the owner's own user"
        )
    try:
        uid = pwd.getpwnam(owner).pw_uid
    except KeyError as exc:
        raise StartupError(f"[sockets] owner_user = {owner!r}: there is no such user") from exc
    for role_user in ROLE_USERS.values():
        try:
            same = pwd.getpwnam(role_user).pw_uid == uid
        except KeyError:
            continue
        if same:
            raise StartupError(
                f"[sockets] owner_user = {owner!r} has the uid of {role_user}:"
                " name the owner's own user"
            )
    return Peers(owner_uid=uid)
