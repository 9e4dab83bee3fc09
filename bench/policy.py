"""How fast is the decision core? Decisions per second and frame round trips per second.

Figures, measured in one run:
- `decide` over 100 grants for 10,000 requests, in decisions per second;
- encode + decode of a 1 KiB tool_request envelope (frame and JSON), per second;
each as a ratio to a bare `orjson.loads` of the same request bytes (the limit: the
least work any decision must do is read its request).
"""

from __future__ import annotations

import random
import time

import orjson

from boxmaker.core.grants.loading import parse_grant_file
from boxmaker.core.grants.model import GrantSet
from boxmaker.core.labels import DataClass
from boxmaker.core.policy import SessionState, decide
from boxmaker.core.wire.broker import ToolRequest
from boxmaker.core.wire.envelope import Envelope, decode_envelope, encode_envelope
from boxmaker.core.wire.frames import FrameDecoder, encode_frame

GRANTS = 100
REQUESTS = 10_000
NOW = "2026-11-30T12:00:00.000Z"


def make_grants(rng: random.Random) -> GrantSet:
    grants = []
    for n in range(GRANTS):
        tool = rng.choice(["read_file", "write_file", "shell", "http_fetch"])
        mode = rng.choice(["auto", "ask", "deny"])
        taint = "secret" if mode == "deny" else rng.choice(["public", "private", "secret"])
        if tool == "http_fetch":
            constraint = f'hosts = ["*.site{n % 10}.example", "site{n % 10}.example"]'
        else:
            constraint = f'paths = ["/home/owner/d{n % 10}", "/home/owner/d{n % 10}/sub{n % 3}"]'
        text = (
            f'tool = "{tool}"\nmode = "{mode}"\nmax_taint = "{taint}"\n'
            f'result_class = "{rng.choice(["public", "private", "secret"])}"\n'
            f"[constraints]\n{constraint}\n"
        )
        grant, problems = parse_grant_file(f"g{n:03d}.toml", text.encode())
        assert grant is not None, problems
        grants.append(grant)
    return GrantSet(grants=tuple(grants))


def make_requests(rng: random.Random) -> list[ToolRequest]:
    requests = []
    for n in range(REQUESTS):
        tool = rng.choice(["read_file", "write_file", "shell", "http_fetch"])
        d = rng.randrange(12)
        if tool == "http_fetch":
            arguments = {"url": f"https://www.site{d}.example/page/{n}"}
        elif tool == "shell":
            arguments = {"command": "ls", "cwd": f"/home/owner/d{d}/sub{n % 3}"}
        elif tool == "write_file":
            arguments = {"path": f"/home/owner/d{d}/sub{n % 3}/f{n}", "content": "x"}
        else:
            arguments = {"path": f"/home/owner/d{d}/f{n}.md"}
        requests.append(
            ToolRequest(
                session="bench", call=f"c{n}", tool=tool, arguments=orjson.dumps(arguments).decode()
            )
        )
    return requests


def per_second(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def best_of(runs: int, work: object) -> float:
    """The fastest of `runs` timings of `work()`, in seconds (the least disturbed run)."""
    assert callable(work)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    rng = random.Random(20261130)
    grants = make_grants(rng)
    requests = make_requests(rng)
    state = SessionState(taint=DataClass.PRIVATE)
    raw = [encode_envelope(Envelope(id=r.call, final=True, message=r)) for r in requests]

    bare = best_of(3, lambda: [orjson.loads(b) for b in raw])
    decisions = best_of(3, lambda: [decide(r, grants, state, NOW) for r in requests])

    def request_of(padding: int) -> Envelope:
        content = "x" * padding
        arguments = orjson.dumps({"path": "/home/owner/d1/sub1/f", "content": content}).decode()
        message = ToolRequest(session="bench", call="c1", tool="write_file", arguments=arguments)
        return Envelope(id="c1", final=True, message=message)

    overhead = len(encode_envelope(request_of(0)))
    one_kib = request_of(1024 - overhead)
    payload = encode_envelope(one_kib)
    rounds = 10_000

    def round_trip() -> None:
        for _ in range(rounds):
            (frame,) = FrameDecoder().feed(encode_frame(encode_envelope(one_kib)))
            decode_envelope(frame)

    frames = best_of(3, round_trip)
    bare_kib = best_of(3, lambda: [orjson.loads(payload) for _ in range(rounds)])

    bare_rate = per_second(REQUESTS, bare)
    decide_rate = per_second(REQUESTS, decisions)
    frame_rate = per_second(rounds, frames)
    bare_kib_rate = per_second(rounds, bare_kib)
    print(
        f"policy: {GRANTS} grants, {REQUESTS} requests, request envelopes avg {sum(map(len, raw)) // len(raw)} bytes"
    )
    print(f"  bare orjson.loads of the request bytes: {bare_rate:,.0f}/s (the limit)")
    print(
        f"  decide:                                  {decide_rate:,.0f}/s  ratio {decide_rate / bare_rate:.4f}"
    )
    print(f"frames: {len(payload)}-byte tool_request envelope")
    print(f"  bare orjson.loads of the same bytes:     {bare_kib_rate:,.0f}/s (the limit)")
    print(
        f"  encode + frame + decode:                 {frame_rate:,.0f}/s  ratio {frame_rate / bare_kib_rate:.4f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
