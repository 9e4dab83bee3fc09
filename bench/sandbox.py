"""How much does the sandbox cost? Latency of one call and throughput of four at once.

Figures, measured in one run, for each runtime this host can run (its preflight
passes; the others are named with what they lack):
- the median and p90 of a read_file of a 1 KiB file, decided by policy and run
  through the runtime, as a ratio to the same figures for `/usr/bin/python3 -c
  pass` run bare (the limit: the toolkit is a Python process, and no sandbox can
  start it faster than the host starts Python);
- calls per second with 4 calls in flight at once (threads, as brokerd serves);
- the median of a shell call (`true`) whose mount holds three deny-covered
  sub-paths, each masked, one behind a pinned parent: what holding the paths
  by descriptor, pinning and masking add, against the same ratio.

I/O: temporary directories, the runtimes' cgroups and containers, child processes.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from boxmaker.core.grants.loading import parse_grant_file
from boxmaker.core.grants.model import GrantSet
from boxmaker.core.policy import Decision, SessionState, decide
from boxmaker.core.wire.broker import ResultResponse, ToolRequest
from boxmaker.sandbox.bwrap import BwrapRuntime
from boxmaker.sandbox.calls import SANDBOX_PYTHON, Limits
from boxmaker.sandbox.cgroups import Cgroups
from boxmaker.sandbox.podman import DEFAULT_ROOTFS, PodmanRuntime, ensure_rootfs, rootfs_problem
from boxmaker.sandbox.runner import Runtime, run

NOW = "2026-11-30T12:00:00.000Z"
LIMITS = Limits(timeout_s=30.0, memory_bytes=256 * 1024 * 1024, pids=64, output_bytes=65536)
SAMPLES = {"bare": 40, "bwrap": 40, "podman": 20}
CONCURRENT = 4
CALLS_AT_ONCE = {"bwrap": 40, "podman": 20}


def percentile(times: list[float], fraction: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def timings(samples: int, work: Callable[[], None]) -> list[float]:
    work()  # warm up: page cache, podman's storage
    found = []
    for _ in range(samples):
        start = time.perf_counter()
        work()
        found.append(time.perf_counter() - start)
    return found


def read_decision(folder: Path) -> Decision:
    (folder / "notes").mkdir()
    (folder / "notes" / "one-kib.txt").write_text("x" * 1023 + "\n")
    text = (
        'tool = "read_file"\nmode = "auto"\nmax_taint = "secret"\nresult_class = "private"\n'
        f'constraints.paths = ["{folder}/notes"]\n'
    )
    grant, problems = parse_grant_file("notes.toml", text.encode())
    assert grant is not None, problems
    arguments = json.dumps({"path": f"{folder}/notes/one-kib.txt"})
    request = ToolRequest(session="bench", call="c1", tool="read_file", arguments=arguments)
    decision = decide(request, GrantSet(grants=(grant,)), SessionState(), NOW)
    assert isinstance(decision, Decision), decision
    return decision


def masked_shell_decision(folder: Path) -> Decision:
    scratch = folder / "scratch"
    for sub in ("a/keys", "b", "c/d"):
        (scratch / sub).mkdir(parents=True)
    auto = 'mode = "auto"\nmax_taint = "secret"\nresult_class = "private"\n'
    deny = 'mode = "deny"\nmax_taint = "secret"\nresult_class = "secret"\n'
    texts = {
        "shell.toml": f'tool = "shell"\n{auto}constraints.paths = ["{scratch}"]\n',
        "keys.toml": f'tool = "read_file"\n{deny}constraints.paths = ["{scratch}/a/keys",'
        f' "{scratch}/b", "{scratch}/c/d"]\n',
    }
    grants = []
    for name, text in texts.items():
        grant, problems = parse_grant_file(name, text.encode())
        assert grant is not None, problems
        grants.append(grant)
    arguments = json.dumps({"command": "true", "cwd": str(scratch)})
    request = ToolRequest(session="bench", call="c2", tool="shell", arguments=arguments)
    decision = decide(request, GrantSet(grants=tuple(grants)), SessionState(), NOW)
    assert isinstance(decision, Decision), decision
    assert len(decision.masks) == 3, decision.masks
    return decision


def runtimes(folder: Path) -> tuple[dict[str, Runtime], dict[str, list[str]]]:
    ready: dict[str, Runtime] = {}
    missing: dict[str, list[str]] = {}
    home = folder / "home"
    problems = BwrapRuntime.preflight()
    if problems:
        missing["bwrap"] = problems
    else:
        ready["bwrap"] = BwrapRuntime(home, LIMITS, Cgroups.detect())
    rootfs = DEFAULT_ROOTFS
    if rootfs_problem(rootfs) is not None:
        rootfs = ensure_rootfs(folder / "rootfs")
    problems = PodmanRuntime.preflight(rootfs)
    if problems:
        missing["podman"] = problems
    else:
        ready["podman"] = PodmanRuntime(home, LIMITS, rootfs=rootfs)
    return ready, missing


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bx-bench-") as name:
        folder = Path(name).resolve()
        decision = read_decision(folder)
        masked = masked_shell_decision(folder)
        ready, missing = runtimes(folder)

        def bare() -> None:
            subprocess.run([SANDBOX_PYTHON, "-c", "pass"], check=True)

        bare_times = timings(SAMPLES["bare"], bare)
        bare_median, bare_p90 = statistics.median(bare_times), percentile(bare_times, 0.9)
        print(f"sandbox: read_file of a 1 KiB file, decided by policy; limits {LIMITS}")
        print(
            f"  bare {SANDBOX_PYTHON} -c pass:  median {bare_median * 1000:7.1f} ms"
            f"  p90 {bare_p90 * 1000:7.1f} ms (the limit)"
        )
        for kind, problems in missing.items():
            print(f"  {kind}: not available here: {' | '.join(problems)}")
        for kind, runtime in ready.items():

            def one(runtime: Runtime = runtime) -> None:
                response = run(decision, runtime)
                assert isinstance(response, ResultResponse), response
                assert len(response.content) == 1024

            times = timings(SAMPLES[kind], one)
            median, p90 = statistics.median(times), percentile(times, 0.9)
            print(
                f"  {kind:6} read_file:          median {median * 1000:7.1f} ms"
                f"  p90 {p90 * 1000:7.1f} ms"
                f"  ratio (bare / {kind}) median {bare_median / median:.3f}"
                f"  p90 {bare_p90 / p90:.3f}"
            )

            def shell(runtime: Runtime = runtime) -> None:
                response = run(masked, runtime)
                assert isinstance(response, ResultResponse), response

            shell_median = statistics.median(timings(SAMPLES[kind], shell))
            print(
                f"  {kind:6} shell, 3 masks:      median {shell_median * 1000:7.1f} ms"
                f"  ratio (bare / {kind}) median {bare_median / shell_median:.3f}"
            )
            calls = CALLS_AT_ONCE[kind]
            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=CONCURRENT) as pool:
                list(pool.map(lambda _: one(), range(calls)))
            elapsed = time.perf_counter() - start
            print(
                f"  {kind:6} {CONCURRENT} concurrent calls:  {calls / elapsed:7.1f} calls/s"
                f" ({calls} calls in {elapsed:.2f} s)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
