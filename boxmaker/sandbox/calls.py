"""What every runtime does around the sandbox itself: checks, the toolkit's request, its answer.

I/O: none here but reading the toolkit's source once; `boxmaker.sandbox.held`
opens what a call mounts. This module is pure: the toolkit's program and its code
compiled once (`TOOLKIT_PROGRAM`, `TOOLKIT_CODE`), building the toolkit's JSON
request from a `RunSpec` and what was held for it (the device and inode each
mount must have inside the sandbox), and turning the toolkit's output into a
`RunOutput` or a fixed `RunError`, never into text the sandbox chose as an error.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import sys
from dataclasses import dataclass
from pathlib import Path

from boxmaker.core.grants.args import argument_fields
from boxmaker.sandbox.held import HeldSpec
from boxmaker.sandbox.runner import RunError, RunFailure, RunOutput, RunSpec

TOOLKIT_SOURCE = (Path(__file__).with_name("toolkit.py")).read_text()
# compiled once here: a call that compiled the source again would spend about 2 ms on it
TOOLKIT_CODE = marshal.dumps(
    compile(TOOLKIT_SOURCE, "<toolkit>", "exec", dont_inherit=True, optimize=0)
)


def toolkit_program(source: str, code_size: int, cache_tag: str) -> str:
    """What `python3 -I -S -c` runs: the toolkit, compiled by brokerd when it can be.

    The program reads `code_size` bytes of standard input first: the toolkit's
    code object as `marshal` writes it (`TOOLKIT_CODE`; the runtime sends it
    before the request). Bytecode is the same for every Python with one cache tag
    (as `__pycache__` files are shared), so a sandbox Python with brokerd's tag
    runs that code; any other compiles the source, which the program carries too.
    """
    return (
        "import marshal, sys\n"
        f"SOURCE = {source!r}\n"
        f"CODE = sys.stdin.buffer.read({code_size})\n"
        f"if sys.implementation.cache_tag == {cache_tag!r}:\n"
        "    exec(marshal.loads(CODE))\n"
        "else:\n"
        '    exec(compile(SOURCE, "<toolkit>", "exec"))\n'
    )


TOOLKIT_PROGRAM = toolkit_program(
    TOOLKIT_SOURCE, len(TOOLKIT_CODE), sys.implementation.cache_tag or "none"
)

SANDBOX_PYTHON = "/usr/bin/python3"
PROXY_INSIDE = "/run/boxmaker/egress.sock"
CA_INSIDE = "/run/boxmaker/ca.crt"
DEFAULT_CA_FILE = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass(frozen=True)
class Limits:
    """What one call may use. Every runtime enforces all four."""

    timeout_s: float = 60.0
    memory_bytes: int = 512 * 1024 * 1024
    pids: int = 64
    output_bytes: int = 1_048_576


def call_prefix(home: Path) -> str:
    """The start of every call's cgroup or container name for brokerd's `home`.

    A start-up sweep removes only names with its own prefix: other brokerds on the
    same host share the cgroup parent and Podman's list, and their calls are theirs.
    """
    return f"bx-{hashlib.sha256(str(home).encode()).hexdigest()[:8]}-"


def toolkit_request(
    spec: RunSpec, limits: Limits, held: HeldSpec, also_read: tuple[str, ...] = ()
) -> bytes:
    """The JSON line the toolkit reads on standard input.

    `arguments` holds the call's fields as the tool table writes them
    (`core.grants.args.argument_fields`: the canonical form, so an absent cwd is left out).
    `expect` lists every bound path with the device and inode brokerd held: the
    toolkit refuses to start (PATH_SWAPPED) unless each is exactly that. `landlock`
    lists what the toolkit confines itself to: /usr and /proc, the read-only
    mounts and the CA file to read; /tmp, /dev and the writable mounts to write;
    and `also_read`, what a runtime's own wrapper must read afterwards.
    """
    egress = spec.egress is not None
    read = ["/usr", "/proc", *(m.path for m in spec.mounts if not m.writable), *also_read]
    write = ["/tmp", "/dev", *(m.path for m in spec.mounts if m.writable)]  # noqa: S108
    if egress:
        read.append(CA_INSIDE)
    return (
        json.dumps(
            {
                "tool": spec.tool.value,
                "arguments": argument_fields(spec.arguments),
                "output_bytes": limits.output_bytes,
                "proxy": PROXY_INSIDE if egress else None,
                "cafile": CA_INSIDE if egress else None,
                "expect": held.expected,
                "landlock": {"read": read, "write": write},
            }
        ).encode()
        + b"\n"
    )


def answer_limit(limits: Limits) -> int:
    """The most bytes a correct toolkit answer can take (JSON escapes included)."""
    return limits.output_bytes * 6 + 65536


def parse_answer(stdout: bytes) -> RunOutput | RunError:
    """The toolkit's answer; anything malformed is the sandbox failing, never its text."""
    try:
        answer = json.loads(stdout)
    except (ValueError, RecursionError):
        return RunError(RunFailure.SANDBOX_FAILED)
    if not isinstance(answer, dict):
        return RunError(RunFailure.SANDBOX_FAILED)
    if answer.get("ok") is True:
        content, truncated = answer.get("content"), answer.get("truncated")
        if isinstance(content, str) and isinstance(truncated, bool):
            return RunOutput(content=content, truncated=truncated)
        return RunError(RunFailure.SANDBOX_FAILED)
    code = answer.get("failure")
    if isinstance(code, str) and code in RunFailure.__members__:
        return RunError(RunFailure[code])
    return RunError(RunFailure.SANDBOX_FAILED)
