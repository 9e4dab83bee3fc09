"""Absolute paths as grants and arguments spell them, and whole-component matching.

No I/O. Paths are never normalised and symlinks are never resolved here: a path
is checked for form and compared as written. A valid path starts with `/`, is at
most 4,096 bytes, has no NUL, no empty component (no `//`, no trailing `/` except
the root itself), and no `.` or `..` component.
"""

from __future__ import annotations

MAX_PATH_BYTES = 4096


def path_problem(path: str) -> str | None:
    """Why `path` is not a valid absolute path, or None when it is."""
    if not path.startswith("/"):
        return "it is not absolute (it must start with /)"
    if "\x00" in path:
        return "it contains a NUL character"
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"it is longer than {MAX_PATH_BYTES} bytes"
    if path == "/":
        return None
    for component in path[1:].split("/"):
        if component == "":
            return "it has an empty component (// or a trailing /)"
        if component in (".", ".."):
            return f"it has a {component} component"
    return None


def is_valid_path(path: str) -> bool:
    return path_problem(path) is None


def is_inside(container: str, path: str) -> bool:
    """True when `path` is `container` or lies under it, by whole components.

    Both must be valid paths; `/home/kyle/notes2` is not inside `/home/kyle/notes`.
    """
    if container == "/":
        return True
    return path == container or path.startswith(container + "/")
