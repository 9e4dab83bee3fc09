"""The runner seam: from a `Decision` to a `RunSpec`, and a `Runtime` that runs it.

brokerd's broker calls `run` with each allowed call and the configured runtime
(`boxmaker.sandbox.bwrap`, `boxmaker.sandbox.podman`, or `RefusingRuntime`); the
runtimes import the types here and nothing of brokerd's.

No I/O here; runtimes do it. `RunSpec` is built only by `build_spec` in this
module (its constructor demands a module-private token), from a `Decision`,
which only policy can build: so a spec in a runtime's hands proves the call was
allowed or approved. What goes in the spec, by tool:

    tool        mounts                                       egress
    read_file   the file decided on, read-only               none
    write_file  the file decided on, writable                none
    shell       every path of the grant, writable, less      none
                the decision's masks (a mask equal to a
                grant path hides that path whole)
    http_fetch  none                                         the URL's own host
    any other   none                                         none
                (a sandbox tool of the tool table with no row here; the toolkit
                runs its code, or refuses with NO_SUCH_TOOL when it has none)

A file tool's sandbox sees exactly the one file that policy decided on, never
the directory around it: a link or a denied sub-path beside it cannot be
reached. Each mount names the grant path it lies under (`granted`), so a
runtime can tell a grant path that is not what it says from a link below it.
http_fetch may reach only the host policy matched and labelled: a redirect to
another host, even one the grant lists, would bring back data labelled by the
first host's grants.

A runtime's failure is one of the fixed sentences of `RunFailure`, never text a
tool printed, read or received: loopd logs failures as public and trusted.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NoReturn, Protocol

from boxmaker.core.grants.tools import (
    HttpFetchArgs,
    ReadFileArgs,
    ShellArgs,
    ToolArgs,
    ToolName,
    WriteFileArgs,
)
from boxmaker.core.policy import Decision, is_genuine
from boxmaker.core.wire.broker import FailedResponse, ResultResponse


class RunFailure(StrEnum):
    """Every sentence a failed run may report. Values are shown to the model and owner."""

    NOT_CONFIGURED = "no sandbox runner is configured for tools"
    TIMED_OUT = "the tool timed out"
    SANDBOX_FAILED = "the sandbox could not start"
    OUT_OF_MEMORY = "the tool ran out of memory"
    GRANT_PATH_UNSAFE = "the granted path is a symlink or not where the grant says"
    GRANT_PATH_MISSING = "the granted path does not exist"
    PATH_HAS_SYMLINK = "the path holds a symbolic link"
    PATH_SWAPPED = "the path changed while the sandbox started"
    NOT_FOUND = "the file does not exist"
    NOT_A_FILE = "the path is not a regular file"
    NOT_TEXT = "the file is not UTF-8 text"
    WRITE_FAILED = "the file could not be written"
    FETCH_REFUSED = "the host is not allowed or could not be reached"
    FETCH_FAILED = "the fetch failed"
    NO_SUCH_TOOL = "the sandbox has no code for this tool"


@dataclass(frozen=True, slots=True)
class Mount:
    path: str
    writable: bool
    granted: str  # the grant path that `path` is, or lies under


@dataclass(frozen=True, slots=True)
class RunOutput:
    content: str
    truncated: bool


@dataclass(frozen=True, slots=True)
class RunError:
    failure: RunFailure


_TOKEN = object()


class RunSpec:
    """What a runtime may do for one call. Read-only; built only by `build_spec`."""

    __slots__ = ("arguments", "egress", "masks", "mounts", "tool")

    tool: ToolName
    arguments: ToolArgs
    mounts: tuple[Mount, ...]
    masks: tuple[str, ...]  # paths inside the mounts the sandbox must not see
    egress: tuple[str, ...] | None  # host names; None means no network at all

    def __init__(
        self,
        token: object,
        tool: ToolName,
        arguments: ToolArgs,
        mounts: tuple[Mount, ...],
        masks: tuple[str, ...],
        egress: tuple[str, ...] | None,
    ) -> None:
        if token is not _TOKEN:
            raise TypeError("RunSpec is built only by boxmaker.sandbox.runner")
        object.__setattr__(self, "tool", tool)
        object.__setattr__(self, "arguments", arguments)
        object.__setattr__(self, "mounts", mounts)
        object.__setattr__(self, "masks", masks)
        object.__setattr__(self, "egress", egress)

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError("RunSpec is read-only")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("RunSpec is read-only")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError("RunSpec cannot be subclassed")

    def __copy__(self) -> NoReturn:
        raise TypeError("RunSpec cannot be copied")

    def __deepcopy__(self, memo: Any) -> NoReturn:
        raise TypeError("RunSpec cannot be copied")

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise TypeError("RunSpec cannot be pickled")

    def __repr__(self) -> str:
        return (
            f"RunSpec({self.tool}, mounts={self.mounts}, masks={self.masks}, egress={self.egress})"
        )


class Runtime(Protocol):
    def run(self, spec: RunSpec) -> RunOutput | RunError: ...


def build_spec(decision: Decision) -> RunSpec:
    """The spec for an allowed call: mounts and egress exactly as the table above."""
    if not is_genuine(decision):
        raise TypeError("a RunSpec needs a Decision built by boxmaker.core.policy")
    grant = decision.grant
    args = decision.args
    mounts: tuple[Mount, ...] = ()
    masks: tuple[str, ...] = ()
    egress: tuple[str, ...] | None = None
    match args:
        case ReadFileArgs(path=path) | WriteFileArgs(path=path):
            assert decision.matched_path is not None
            writable = isinstance(args, WriteFileArgs)
            mounts = (Mount(path, writable=writable, granted=decision.matched_path),)
        case ShellArgs():
            shown = [path for path in grant.paths if path not in decision.masks]
            mounts = tuple(Mount(path, writable=True, granted=path) for path in shown)
            masks = tuple(m for m in decision.masks if m not in grant.paths)
        case HttpFetchArgs(url=url):
            egress = (url.host,)
        case _ if decision.tool.is_memory:
            raise TypeError(f"{decision.tool} runs in memoryd, never in a sandbox")
    return RunSpec(_TOKEN, decision.tool, args, mounts, masks, egress)


def run(decision: Decision, runtime: Runtime) -> ResultResponse | FailedResponse:
    """Run an allowed call; its result carries the decision's label."""
    outcome = runtime.run(build_spec(decision))
    if isinstance(outcome, RunError):
        return FailedResponse(message=outcome.failure.value)
    return ResultResponse(
        content=outcome.content,
        class_=decision.result_class,
        untrusted=decision.untrusted,
        truncated=outcome.truncated,
    )


class RefusingRuntime:
    """The runtime for `backend = "refusing"`: every call fails, nothing runs."""

    def run(self, spec: RunSpec) -> RunOutput | RunError:
        return RunError(RunFailure.NOT_CONFIGURED)
