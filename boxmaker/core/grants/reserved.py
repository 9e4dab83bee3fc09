"""The places no grant may reach: boxmaker's own state and code. Pure; I/O is passed in.

A sandbox that could see brokerd's home could approve its own waiting calls over
admin.sock, write itself a grant, or rewrite another session's taint; one that
could see the install prefix could change brokerd's code. So a grant path is
refused (the grant file is invalid, and with it the whole set) when it is, lies
under, or contains any of:

    home             brokerd's home (`[paths] home`)
    audit log        <home>/audit
    grants           the grants directory
    sockets          each socket's directory
    install prefix   the Python prefix boxmaker runs from, and the directory
                     that holds the `boxmaker` package (a checkout, when the
                     install is editable)

Each place is taken both as written (made absolute and normalised) and as the
file system resolves it (`resolve`, e.g. `os.path.realpath`, given by the
caller), since a grant path is compared as written but the sandbox reaches
what is really there. `/` itself is never a place: no grant may be `/` anyway.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable

from boxmaker.core.grants.paths import is_inside, is_valid_path
from boxmaker.core.runbook import Runbook

Place = tuple[str, str]  # (what it is, absolute path)


def install_places(prefix: str, package_file: str) -> list[tuple[str, str]]:
    """The install prefix: `prefix` (sys.prefix) and the folder above the package's folder.

    `package_file` is `boxmaker.__file__`, so `.../boxmaker/__init__.py` gives `...`.
    """
    package_root = posixpath.dirname(posixpath.dirname(package_file))
    return [("install prefix", prefix), ("install prefix", package_root)]


def reserved_places(
    places: Iterable[tuple[str, str]], resolve: Callable[[str], str]
) -> tuple[Place, ...]:
    """Each (what, path) as written and as resolved, absolute and normalised, once."""
    found: list[Place] = []
    for what, raw in places:
        if not raw:
            continue
        written = posixpath.normpath(raw) if raw.startswith("/") else None
        for path in (written, resolve(raw)):
            if path is None or path == "/" or not is_valid_path(path):
                continue
            if (what, path) not in found:
                found.append((what, path))
    return tuple(found)


def reserved_problem(path: str, places: Iterable[Place]) -> str | None:
    """Why grant path `path` may not be granted, or None."""
    for what, place in places:
        if is_inside(place, path) or is_inside(path, place):
            return (
                f"the path {path!r} reaches boxmaker's own {what} ({place}): no grant may"
                f" cover it; {Runbook.GRANT_COVERS_BOXMAKER.pointer}"
            )
    return None
