"""A hostile template's attempt, run in a process of its own under a memory cap, measured.

For tests/core/model/test_template_bounds.py (the sandbox in this process) and
tests/ipc/test_template_worker.py (the worker). `attempt` starts
`python -m boxmaker.testing.template_attempts` with the shape, waits for it by a
deadline, and returns what it measured; so a shape that escapes its bounds takes
that process down, never the test runner. The process:

- caps its own address space (`RLIMIT_AS`) at what it has mapped plus `CAP_MIB`;
- warms up (the modules imported, a small template compiled and rendered: in the
  worker's case, in a worker of its own, closed, whose peak resident memory is the
  baseline);
- compiles the shape, then (at the render stage) renders it for a conversation of
  `messages` messages, timing the stage's call;
- prints one JSON line: the outcome (`rendered`, or `refused` and the one-line
  reason), the stage it ended at, the seconds of that stage's call, and the peak
  resident memory over the baseline in MiB (`rss_mib`: of this process for the
  sandbox; of the worker's children for the worker, with this process's own as
  `parent_rss_mib`).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

CAP_MIB = 768
WARM = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@dataclass(frozen=True)
class Shape:
    """One hostile shape of issue 38: where it is met, and how it must end."""

    name: str
    source: str
    stage: str = "render"  # where it is timed: compile, or render (after a compile)
    messages: int = 3
    reasons: tuple[str, ...] = ("made a value of more than",)  # (): it must render
    floor: bool = False  # only the worker bounds it: the sandbox alone is not asked to


def _sets(count: int) -> str:
    """`count` distinct strings of a million characters, all held at once."""
    made = "".join(f"{{% set s{n} = s ~ {n} %}}" for n in range(count))
    return "{% set s = 'x' * 1000000 %}" + made + "{{ s0|length }}"


def _big_source(size: int) -> str:
    """A template of about `size` characters: a condition and an output, over and over."""
    unit = "{%% if messages[%d] is defined %%}{{ messages[%d].content ~ 'x' }}{%% endif %%}"
    units = [unit % (n % 3, n % 3) for n in range(size // len(unit % (0, 0)))]
    return "".join(units)


NESTED = (
    "{% for a in messages %}{% for b in messages %}{% for c in messages %}"
    "{% for d in messages %}{% for e in messages %}{{ '' }}"
    "{% endfor %}{% endfor %}{% endfor %}{% endfor %}{% endfor %}"
)
FOLDED = (
    "{{ 'x'|center(2*10**8) }}{% if ('x'|center(2*10**8)) %}{% endif %}"
    "{% autoescape ('x'|center(2*10**8))|length > 0 %}{% endautoescape %}"
    "{{ '%0200000000d' % 1 }}{{ ('x'|center(2*10**8)) is string }}"
    "{% macro m(x='y'|center(2*10**8)) %}{% endmacro %}"
)
TIME = ("took more than", "ran for more than")
DOUBLED = (
    "{% set ns = namespace(x='x' * 100000) %}"
    "{% for i in range(40) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}"
)

# The shapes of issue 38, each a row: the sandbox's tests and the worker's read them all
SHAPES = [
    # memory: operators
    Shape("repeat-a-string", "{{ 'x' * 10**9 }}"),
    Shape("repeat-a-list", "{{ [0] * 10**9 }}"),
    Shape("percent-width", "{{ '%0900000000d' % 1 }}"),
    Shape("percent-star", "{{ '%*d' % (900000000, 1) }}"),
    Shape(
        "tilde-doubling",
        "{% set ns = namespace(s='x') %}{% for i in range(40) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    ),
    Shape(
        "square-a-number",
        "{% set ns = namespace(n=10**60) %}{% for i in range(40) %}"
        "{% set ns.n = ns.n * ns.n %}{% endfor %}{{ ns.n > 0 }}",
        reasons=("made a number of more than",),
    ),
    # memory: methods
    Shape("ljust", "{{ 'x'.ljust(10**9) }}"),
    Shape("center", "{{ 'x'.center(10**9) }}"),
    Shape("zfill", "{{ 'x'.zfill(10**9) }}"),
    Shape("expandtabs", "{{ '\t'.expandtabs(10**9) }}"),
    Shape("replace", "{{ ('x' * 1000).replace('x', 'y' * 1000000) }}"),
    Shape("format-width", "{{ '{:>1000000000}'.format(1) }}"),
    Shape("format-nested-width", "{{ '{:>{}}'.format(1, 10**9) }}"),
    Shape("join-a-huge-separator", "{{ ('y' * 1000000).join(['a'] * 10000) }}"),
    Shape("int-to-bytes", "{{ (1).to_bytes(10**9, 'big')|length }}"),
    Shape("a-method-not-listed", "{{ ''.maketrans('a', 'b') }}", reasons=("does not run",)),
    # memory: filters and helpers
    Shape("filter-center", "{{ 'x'|center(10**9) }}"),
    Shape("filter-indent", "{{ ('x\n' * 500000)|indent(1000) }}"),
    Shape("filter-indent-width", "{{ 'x\ny'|indent(10**9, true) }}"),
    Shape("filter-wordwrap", "{{ ('x ' * 500000)|wordwrap(1, wrapstring='y' * 1000) }}"),
    Shape("filter-join", "{{ (['a'] * 10000)|join('y' * 1000000) }}"),
    Shape("filter-replace", "{{ ('x' * 1000)|replace('x', 'y' * 1000000) }}"),
    Shape("filter-format", "{{ '%0900000000d'|format(1) }}"),
    Shape("filter-list", "{{ ('x' * 1000000)|list|length }}"),
    Shape("filter-batch-fill", "{{ [1]|batch(10**9, 'x')|list|length }}"),
    Shape("filter-slice", "{{ [1]|slice(10**9)|list|length }}"),
    Shape("lipsum", "{{ lipsum(n=300000) }}"),
    Shape("strftime", "{{ strftime_now('%c' * 500000) }}"),
    Shape("repeat-a-big-string-in-a-list", "{% set s = 'x' * 1000000 %}{{ [s] * 1000 }}"),
    Shape(
        "shared-nesting-written",
        DOUBLED + "{{ ns.x }}",
        reasons=("wrote more than",),
    ),
    Shape("shared-nesting-tojson", DOUBLED + "{{ ns.x|tojson }}"),
    Shape("a-namespace-written", DOUBLED + "{{ ns }}", reasons=("wrote more than",)),
    Shape("a-filter-block", "{% filter center(10**9) %}x{% endfilter %}"),
    Shape("shared-nesting-string", DOUBLED + "{{ ns.x|string|length }}"),
    Shape(
        "set-block",
        "{% set s = 'x' * 1000000 %}{% set b %}{% for i in range(10000) %}{{ s }}"
        "{% endfor %}{% endset %}{{ b|length }}",
        reasons=("in all",),
    ),
    # time
    Shape(
        "loop-over-a-made-string",
        "{% for c in 'x' * 1000000 %}{% for d in 'x' * 1000000 %}{% endfor %}{% endfor %}",
        reasons=TIME,
    ),
    Shape("nested-loops-on-the-sample", NESTED, messages=3, reasons=()),
    Shape("nested-loops-at-80-messages", NESTED, messages=80, reasons=TIME),
    Shape(
        "recursive-loop",
        "{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}",
        reasons=("recursed without end", *TIME),
    ),
    # compile
    Shape("folded-constants-compile", FOLDED, stage="compile", reasons=()),
    Shape("folded-constants-render", FOLDED),
    Shape(
        "a-546-KiB-template",
        _big_source(546 * 1024),
        stage="compile",
        reasons=("characters long",),
    ),
    Shape("a-template-at-the-size-cap", _big_source(65536), stage="compile", reasons=()),
    Shape(
        "deep-nesting",
        "{{ " + "(" * 2000 + "1" + ")" * 2000 + " }}",
        stage="compile",
        reasons=("nests too deeply",),
    ),
    # the floor: only the worker's caps bound these
    Shape("many-values-held-at-once", _sets(300), reasons=("ran out of memory",), floor=True),
    Shape(
        "one-comparison-of-shared-nestings",
        "{% set ns = namespace(x='x', y='x') %}{% for i in range(40) %}"
        "{% set ns.x = [ns.x, ns.x] %}{% set ns.y = [ns.y, ns.y] %}{% endfor %}"
        "{{ ns.x == ns.y }}",
        reasons=("ran for more than",),
        floor=True,
    ),
]


@dataclass(frozen=True)
class Attempt:
    outcome: str  # rendered, refused
    reason: str
    stage: str  # compile, render
    seconds: float
    rss_mib: float
    parent_rss_mib: float


def conversation(count: int) -> list[dict[str, Any]]:
    """`count` messages, a user and an assistant in turn, as Hugging Face hands them over."""
    roles = ("user", "assistant")
    return [{"role": roles[n % 2], "content": f"message {n}"} for n in range(count)]


def attempt(
    mode: str, source: str, *, stage: str, messages: int, max_seconds: float, timeout: float
) -> Attempt:
    """Run one attempt (`mode`: `sandbox` or `worker`) in a process of its own."""
    spec = {
        "mode": mode,
        "source": source,
        "stage": stage,
        "messages": messages,
        "max_seconds": max_seconds,
    }
    done = subprocess.run(
        [sys.executable, "-m", "boxmaker.testing.template_attempts"],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise AssertionError(
            f"the attempt's process failed (status {done.returncode}): {done.stderr[-2000:]}"
        )
    return Attempt(**json.loads(lines[-1]))


def judge(shape: Shape, result: Attempt, max_seconds: float, rss_mib: float) -> None:
    """Issue 38's bar: refused in one line naming the bound (or rendered, where the shape
    must render), at the stage it is met, within 1.5 times the time bound and `rss_mib`
    of memory over the baseline."""
    said = f"{shape.name}: {result}"
    if shape.reasons:
        assert result.outcome == "refused", said
        assert any(reason in result.reason for reason in shape.reasons), said
        assert "\n" not in result.reason, said
    else:
        assert result.outcome == "rendered", said
    assert result.stage == shape.stage, said
    assert result.seconds <= 1.5 * max_seconds, said
    assert result.rss_mib < rss_mib, said
    assert result.parent_rss_mib < rss_mib, said


def _cap() -> None:
    with open("/proc/self/statm", "rb") as statm:
        mapped = int(statm.read().split()[0]) * resource.getpagesize()
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (mapped + CAP_MIB * 1024 * 1024, hard))


def _peak_mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def _run(spec: dict[str, Any]) -> dict[str, Any]:
    from boxmaker.core.model.template_sandbox import ChatTemplate, TemplateError
    from boxmaker.ipc.template_worker import TemplateWorker, WorkerTemplate

    messages = conversation(spec["messages"])
    arguments: dict[str, Any] = {
        "tools": None,
        "add_generation_prompt": True,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "now": NOW,
    }
    worker = spec["mode"] == "worker"
    if worker:
        with TemplateWorker() as warm:
            WorkerTemplate(WARM, worker=warm).render(messages, **arguments)
        base = _peak_mib(resource.RUSAGE_CHILDREN)
    else:
        ChatTemplate(WARM, clock=time.monotonic).render(messages, **arguments)
    own_base = _peak_mib(resource.RUSAGE_SELF)
    stage, outcome, reason = "compile", "rendered", ""
    seconds = 0.0
    with TemplateWorker() as attempts:
        start = time.monotonic()
        try:
            template: ChatTemplate | WorkerTemplate
            if worker:
                template = WorkerTemplate(
                    spec["source"], worker=attempts, max_seconds=spec["max_seconds"]
                )
            else:
                template = ChatTemplate(
                    spec["source"], clock=time.monotonic, max_seconds=spec["max_seconds"]
                )
            seconds = time.monotonic() - start
            if spec["stage"] == "render":
                stage = "render"
                start = time.monotonic()
                template.render(messages, **arguments)
                seconds = time.monotonic() - start
        except TemplateError as exc:
            seconds = time.monotonic() - start
            outcome, reason = "refused", str(exc)
    own = _peak_mib(resource.RUSAGE_SELF) - own_base
    return {
        "outcome": outcome,
        "reason": reason,
        "stage": stage,
        "seconds": seconds,
        "rss_mib": max(_peak_mib(resource.RUSAGE_CHILDREN) - base, 0.0) if worker else own,
        "parent_rss_mib": own if worker else 0.0,
    }


def main() -> int:
    spec = json.loads(sys.stdin.read())
    _cap()
    print(json.dumps(_run(spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
