"""The template worker's child: compiles and renders chat templates, under its own caps.

Started by `boxmaker.ipc.template_worker` as a fresh interpreter (never forked
from loopd, whose address space holds the model), with `MEMORY_MIB` as its argument. Its
I/O: frames of `core.wire.template_wire` on stdin (requests) and stdout (answers),
nothing else; stderr goes nowhere. The rules, in the order they apply:

1. **Caps first.** Before it reads a request it caps its own address space
   (`RLIMIT_AS`) at what it has mapped once started plus `MEMORY_MIB` (or what
   its parent allowed, if less), then says `ready`. Whatever a template
   allocates past that fails in Python as a `MemoryError`, answered as a
   refusal; where Python cannot even answer, the child exits with `EXIT_MEMORY`
   and the parent says so.
2. **CPU time.** Before each request it sets its CPU-time limit (`RLIMIT_CPU`)
   to what it has used plus the request's time bound, twice over, plus 2 s (or
   what its parent allowed, if less): the parent's wall-clock kill comes first;
   this one ends a child whose parent is gone (SIGXCPU).
3. **The first line runs inside.** Each template is a `core.model.template_sandbox`
   `ChatTemplate`, with the clock of this process and the bounds the parent
   sent; its refusals go back as they are. The child holds the `HELD`
   templates compiled last; a render of another is answered `unknown`.
4. **End.** End of stdin (the parent closed it, or died) ends the child; so
   does a frame it cannot read.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections import OrderedDict
from datetime import datetime

from boxmaker.core.errors import ProtocolError
from boxmaker.core.model.template_sandbox import ChatTemplate, TemplateError
from boxmaker.core.wire.template_wire import (
    Compile,
    Decoder,
    Done,
    Message,
    Ready,
    Refused,
    Render,
    Unknown,
    encode,
)

HELD = 8
EXIT_MEMORY = 3
EXIT_PROTOCOL = 2
REQUEST_LIMIT = 1 << 30  # the parent's own requests: their bound is the parent's
ANSWER_LIMIT = 1 << 30  # the parent reads an answer against its own, smaller, limit
READ = 1 << 16


def _address_space() -> int:
    """Bytes this process has mapped (its VmSize)."""
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[0]) * resource.getpagesize()


def cap_memory(headroom_mib: int) -> None:
    """Rule 1: no more address space than now plus `headroom_mib`."""
    limit = _address_space() + headroom_mib * 1024 * 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    for inherited in (soft, hard):  # never more than a parent allowed
        if inherited != resource.RLIM_INFINITY:
            limit = min(limit, inherited)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


_INHERITED_CPU = resource.getrlimit(resource.RLIMIT_CPU)  # what a parent allowed


def cap_cpu(seconds: float) -> None:
    """Rule 2: the CPU time used so far, plus twice `seconds`, plus 2 s (never more than a
    parent allowed)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(usage.ru_utime + usage.ru_stime + 2 * seconds) + 2
    for inherited in _INHERITED_CPU:
        if inherited != resource.RLIM_INFINITY:
            soft = min(soft, inherited)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, _INHERITED_CPU[1]))


class Templates:
    """The templates this child holds (rule 3), and the answer to each request."""

    def __init__(self) -> None:
        self._held: OrderedDict[int, tuple[ChatTemplate, float]] = OrderedDict()

    def answer(self, request: Message) -> Message:
        if isinstance(request, Compile):
            cap_cpu(request.max_seconds)
            try:
                template = ChatTemplate(
                    request.source,
                    clock=time.monotonic,
                    max_steps=request.max_steps,
                    max_seconds=request.max_seconds,
                    max_output=request.max_output,
                )
            except TemplateError as exc:
                return Refused(str(exc))
            self._held[request.id] = (template, request.max_seconds)
            while len(self._held) > HELD:
                self._held.popitem(last=False)
            return Done("")
        if isinstance(request, Render):
            held = self._held.get(request.id)
            if held is None:
                return Unknown()
            self._held.move_to_end(request.id)
            template, seconds = held
            cap_cpu(seconds)
            try:
                return Done(
                    template.render(
                        request.messages,
                        tools=request.tools,
                        add_generation_prompt=request.add_generation_prompt,
                        bos_token=request.bos_token,
                        eos_token=request.eos_token,
                        now=datetime.fromisoformat(request.now),
                        extra=request.extra,
                    )
                )
            except TemplateError as exc:
                return Refused(str(exc))
        return Refused(f"the template worker got a {type(request).__name__}, not a request")


def _write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def serve(headroom_mib: int) -> int:
    """Rules 1 to 4, on fds 0 and 1."""
    cap_memory(headroom_mib)
    templates = Templates()
    decoder = Decoder(REQUEST_LIMIT)
    _write(encode(Ready(), ANSWER_LIMIT))
    while True:
        data = os.read(0, READ)
        if not data:
            return 0
        try:
            requests = decoder.feed(data)
        except ProtocolError:
            return EXIT_PROTOCOL
        for request in requests:
            try:
                answer = templates.answer(request)
            except MemoryError:
                answer = Refused("the template ran out of memory")
            _write(encode(answer, ANSWER_LIMIT))


def main(argv: list[str]) -> int:
    sys.stdout = sys.stderr  # fd 1 carries frames and nothing else
    try:
        return serve(int(argv[0]))
    except MemoryError:
        os._exit(EXIT_MEMORY)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
