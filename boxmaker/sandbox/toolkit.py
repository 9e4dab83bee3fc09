"""The in-sandbox toolkit: the sandbox tools' code, run by /usr/bin/python3 inside the sandbox.

Standard library only, and self-contained: the runtimes pass this file's source
with `python3 -I -S -c`, so nothing of boxmaker (or of its virtual environment)
needs to be visible inside the sandbox. I/O: reads one JSON request, one line,
on standard input, does the one tool call (a file read or write, a shell command, an HTTPS
fetch through the egress proxy's Unix socket), and writes one JSON answer on
standard output:

    in:  {"tool": T, "arguments": {...}, "output_bytes": N,
          "proxy": "/run/boxmaker/egress.sock" | null, "cafile": path | null,
          "expect": [[path, dev, ino], ...], "landlock": {"read": [...], "write": [...]}}
    out: {"ok": true, "content": "...", "truncated": bool}
       | {"ok": false, "failure": "<RunFailure member name>"}

`TOOLS` holds the code of each tool of the tool table that runs in the sandbox
(`boxmaker.core.grants.tools`, which this file cannot import: tests hold the two to the
same names); `arguments` are its fields as the table writes them. A tool the
table has and `TOOLS` has not is refused with NO_SUCH_TOOL.

brokerd keeps standard input open while the call runs: when it closes, brokerd
has gone (killed, perhaps), and the toolkit exits at once. In a Podman container
the toolkit is process 1, so everything the call started goes with it, as
bubblewrap's `--die-with-parent` does for its sandbox.

A failure is a code, never text: brokerd turns it into its own fixed sentence,
so nothing a tool printed, read or received can pose as brokerd speaking. A
shell command that exits non-zero is a result, with its exit status.

Every call pays for this program's start (docs/performance.md, "Sandbox start"),
so it imports at the top only what the interpreter has loaded already or what
costs next to nothing (`codecs`, `os`, `stat`, `sys`; not `typing`). A tool
imports what only it needs when it runs: `subprocess`, `http.client` or `ssl`
would each cost more than a whole read_file. The request is read and the answer
written with json's C half (`import json` compiles regular expressions, which
takes as long as the interpreter's own start), the watcher is a bare `_thread`,
a shell is started with `os.posix_spawn`, and the process ends with `os._exit`
as soon as its answer is out.
"""

from __future__ import annotations

import codecs
import os
import stat
import sys

TYPE_CHECKING = False  # typing is not imported at run time (the interpreter's start)
if TYPE_CHECKING:
    import ssl
    from typing import Any

MAX_REDIRECTS = 5
FETCH_TIMEOUT_S = 30.0


class ToolError(Exception):
    """A tool call that failed; `code` names a RunFailure member."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class _JsonContext:
    """What json's C scanner reads from a decoder: `json.loads`'s own defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    array_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> float:
        return float(name)  # NaN, Infinity, -Infinity, as json.loads reads them


def parse_request(line: bytes) -> Any:
    """One line of JSON, read as `json.loads` reads it.

    With json's C scanner when this Python has it: importing `json` compiles its
    regular expressions, which costs about as much as starting the interpreter.
    """
    text = line.decode("utf-8")
    try:
        import _json
    except ImportError:  # a Python built without json's accelerator
        import json

        return json.loads(text)
    scan = _json.make_scanner(_JsonContext)  # type: ignore[arg-type]
    start = len(text) - len(text.lstrip(" \t\n\r"))
    try:
        value, end = scan(text, start)
    except StopIteration as exc:
        raise ValueError("the request is not JSON") from exc
    if text[end:].strip(" \t\n\r"):
        raise ValueError("the request line holds more than its JSON value")
    return value


def json_text(value: str) -> str:
    """`value` as a JSON string, exactly as `json.dumps` writes it (ASCII only)."""
    try:
        from _json import encode_basestring_ascii
    except ImportError:
        import json

        return json.dumps(value)
    return encode_basestring_ascii(value)


def answer_text(answer: dict[str, Any]) -> str:
    """The answer's JSON, as `json.dumps` writes it: a failure or a result."""
    if answer["ok"] is not True:
        return f'{{"ok": false, "failure": {json_text(answer["failure"])}}}'
    content = json_text(answer["content"])
    truncated = "true" if answer["truncated"] else "false"
    return f'{{"ok": true, "content": {content}, "truncated": {truncated}}}'


def cap_text(data: bytes, limit: int, *, strict: bool) -> tuple[str, bool]:
    """`data` as text of at most `limit` bytes, never cutting a character in two."""
    truncated = len(data) > limit
    decoder = codecs.getincrementaldecoder("utf-8")("strict" if strict else "replace")
    try:
        text = decoder.decode(data[:limit], final=not truncated)
    except UnicodeDecodeError as exc:
        raise ToolError("NOT_TEXT") from exc
    return text, truncated


def check_expected(expected: list[list[Any]]) -> None:
    """Refuse to start unless every bound path is the very file brokerd held open.

    brokerd opened each path without following links and handed the runtime that
    descriptor; whatever the runtime did with it, the mount must be that device
    and inode, or someone swapped the path between brokerd's check and the mount.
    """
    for path, dev, ino in expected:
        try:
            found = os.lstat(path)
        except OSError as exc:
            raise ToolError("PATH_SWAPPED") from exc
        if stat.S_ISLNK(found.st_mode) or (found.st_dev, found.st_ino) != (dev, ino):
            raise ToolError("PATH_SWAPPED")


def read_file(args: dict[str, Any], limit: int, request: dict[str, Any]) -> tuple[str, bool]:
    path = args["path"]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError as exc:
        raise ToolError("NOT_FOUND") from exc
    except OSError as exc:
        raise ToolError("NOT_FOUND") from exc
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolError("NOT_A_FILE")
        data = f.read(limit + 1)
    return cap_text(data, limit, strict=True)


def write_file(args: dict[str, Any], limit: int, request: dict[str, Any]) -> tuple[str, bool]:
    path, content = args["path"], args["content"]
    data = content.encode("utf-8")
    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644
        )
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise ToolError("WRITE_FAILED") from exc
    return f"wrote {len(data)} bytes to {path}", False


def shell(args: dict[str, Any], limit: int, request: dict[str, Any]) -> tuple[str, bool]:
    """`/bin/sh -c command` in `cwd`, its output and exit status, as subprocess would run it.

    Spawned with `os.posix_spawn` (importing `subprocess` costs more than a whole
    read_file call): standard input from /dev/null, standard output and error into
    one pipe, no other descriptor (as `close_fds`: the toolkit's own are
    close-on-exec, and any it was handed is made so), and the signals Python
    ignores (SIGPIPE, SIGXFSZ) back to their defaults.
    """
    import _signal  # type: ignore[import-not-found]  # the interpreter loaded it at start

    cwd = args.get("cwd") or "/tmp"  # noqa: S108 (the sandbox's own tmpfs)
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2:
            try:
                os.set_inheritable(int(name), False)
            except OSError:
                continue  # the listing's own descriptor, closed by now
    reader, writer = os.pipe()
    try:
        os.chdir(cwd)  # the toolkit's own: posix_spawn cannot change the child's
        pid = os.posix_spawn(
            "/bin/sh",
            ["/bin/sh", "-c", args["command"]],
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, writer, 1),
                (os.POSIX_SPAWN_DUP2, writer, 2),
            ],
            setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ),
        )
    except OSError as exc:
        os.close(reader)
        raise ToolError("SANDBOX_FAILED") from exc
    finally:
        os.close(writer)
    kept = bytearray()
    try:
        while chunk := os.read(reader, 65536):
            if len(kept) <= limit:
                kept += chunk[: limit + 1 - len(kept)]
    finally:
        os.close(reader)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    text, truncated = cap_text(bytes(kept), limit, strict=False)
    return f"{text}\n[exit status {status}]", truncated


def _socks_connect(proxy: str, host: str) -> Any:
    """A Unix socket to the egress proxy, after a SOCKS5 CONNECT to `host`:443."""
    import socket

    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.settimeout(FETCH_TIMEOUT_S)
    try:
        raw.connect(proxy)
        name = host.encode("ascii")
        raw.sendall(b"\x05\x01\x00")
        if _recv_exact(raw, 2) != b"\x05\x00":
            raise ToolError("FETCH_REFUSED")
        raw.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + (443).to_bytes(2, "big"))
        reply = _recv_exact(raw, 4)
        if reply[1] != 0:
            raise ToolError("FETCH_REFUSED")
        skip = {1: 4, 4: 16}.get(reply[3])
        if skip is None:
            skip = _recv_exact(raw, 1)[0]
        _recv_exact(raw, skip + 2)
    except (OSError, IndexError) as exc:
        raw.close()
        raise ToolError("FETCH_REFUSED") from exc
    except ToolError:
        raw.close()
        raise
    return raw


def _proxied_https(host: str, proxy: str, context: ssl.SSLContext) -> Any:
    """An HTTPS connection whose TCP leg is a SOCKS5 CONNECT over a Unix socket."""
    import http.client

    class ProxiedHTTPS(http.client.HTTPSConnection):
        def connect(self) -> None:
            raw = _socks_connect(proxy, self.host)
            try:
                self.sock = context.wrap_socket(raw, server_hostname=self.host)
            except OSError as exc:
                raw.close()
                raise ToolError("FETCH_REFUSED") from exc

    return ProxiedHTTPS(host, 443, timeout=FETCH_TIMEOUT_S, context=context)


def _recv_exact(sock: Any, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ToolError("FETCH_REFUSED")
        data += chunk
    return data


def http_fetch(args: dict[str, Any], limit: int, request: dict[str, Any]) -> tuple[str, bool]:
    """GET `url` through the request's egress proxy, trusting its CA file."""
    proxy, cafile = request.get("proxy"), request.get("cafile")
    if proxy is None:
        raise ToolError("FETCH_REFUSED")
    import http.client
    import ssl
    import urllib.parse

    context = ssl.create_default_context(cafile=cafile)
    url = args["url"]
    for _ in range(MAX_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https" or not parts.hostname or parts.port not in (None, 443):
            raise ToolError("FETCH_REFUSED")
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        conn = _proxied_https(parts.hostname, proxy, context)
        try:
            conn.request(
                "GET",
                target,
                headers={"User-Agent": "boxmaker-toolkit", "Accept-Encoding": "identity"},
            )
            response = conn.getresponse()
            location = response.getheader("Location")
            if 300 <= response.status < 400 and location:
                url = urllib.parse.urljoin(url, location)
                continue
            body = response.read(limit + 1)
            kind = response.getheader("Content-Type", "")
            text, truncated = cap_text(body, limit, strict=False)
            return (
                f"HTTP {response.status} {response.reason}\ncontent-type: {kind}\n\n{text}",
                truncated,
            )
        except ToolError:
            raise
        except (OSError, http.client.HTTPException, ssl.SSLError) as exc:
            raise ToolError("FETCH_FAILED") from exc
        finally:
            conn.close()
    raise ToolError("FETCH_FAILED")


# Landlock, the second wall: even inside the sandbox's mount namespace, this
# process and everything it starts may touch only the paths the request names.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FILE_ONLY = _EXECUTE | _WRITE_FILE | _READ_FILE | (1 << 14) | (1 << 15)  # truncate, ioctl_dev


def _landlock_rights(abi: int) -> int:
    """Every filesystem right this ABI knows (rights beyond it would be refused)."""
    last = {1: 12, 2: 13, 3: 14}.get(abi, 15)
    return (1 << (last + 1)) - 1


def restrict(read: list[str], write: list[str]) -> int:
    """Confine this process to `read` (read and execute) and `write` (everything).

    Returns the Landlock ABI applied, or 0 where the kernel has no Landlock.
    A path that does not exist is skipped; any other failure raises OSError.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    if abi <= 0:
        return 0
    handled = _landlock_rights(abi)
    attr = (ctypes.c_uint64 * 1)(handled)  # handled_access_fs only: no network rules
    ruleset = syscall(_SYS_CREATE_RULESET, attr, ctypes.c_size_t(8), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")

    class _PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))

    try:
        reading = _EXECUTE | _READ_FILE | _READ_DIR
        for paths, rights in ((read, reading), (write, handled)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
                try:
                    allowed = rights if stat.S_ISDIR(os.fstat(fd).st_mode) else rights & _FILE_ONLY
                    rule = _PathBeneath(allowed & handled, fd)
                    if syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0):
                        raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
                finally:
                    os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if syscall(_SYS_RESTRICT_SELF, ruleset, 0):
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return int(abi)


# every tool's code takes its arguments, the output limit and the whole request
TOOLS = {"read_file": read_file, "write_file": write_file, "shell": shell, "http_fetch": http_fetch}

REQUESTER_GONE = 125  # the exit status when brokerd's end of standard input closes


def watch_requester() -> None:
    """Exit the whole process as soon as standard input reaches its end."""

    import _thread  # loaded already by the interpreter; `threading` costs a few ms

    def wait_for_end() -> None:
        # the descriptor, not sys.stdin: a thread blocked inside a buffered reader
        # holds its lock, and the interpreter cannot then shut down cleanly
        while os.read(0, 65536):
            continue  # nothing more is ever sent; anything that is, is ignored
        os._exit(REQUESTER_GONE)

    _thread.start_new_thread(wait_for_end, ())  # a daemon: it never delays the exit


def main() -> int:
    try:
        request = parse_request(sys.stdin.buffer.readline())
        tool, args, limit = request["tool"], request["arguments"], int(request["output_bytes"])
        check_expected(request.get("expect") or [])
        walls = request.get("landlock")
        if walls is not None:
            try:
                restrict(walls["read"], walls["write"])
            except OSError as exc:
                raise ToolError("SANDBOX_FAILED") from exc
        watch_requester()  # after Landlock: a thread started later inherits its walls
        code = TOOLS.get(tool)
        if code is None:
            raise ToolError("NO_SUCH_TOOL")
        content, truncated = code(args, limit, request)
        answer: dict[str, Any] = {"ok": True, "content": content, "truncated": truncated}
    except ToolError as exc:
        answer = {"ok": False, "failure": exc.code}
    except MemoryError:
        answer = {"ok": False, "failure": "OUT_OF_MEMORY"}
    sys.stdout.write(answer_text(answer))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    status = main()
    sys.stderr.flush()
    os._exit(status)  # the answer is out: the interpreter's own teardown only delays the call
