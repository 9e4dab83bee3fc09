"""Write training conversations for the embedded model's adapter, as JSON Lines.

Deterministic from `--seed`: example `i` is made by the category at `i mod N` of the
weighted schedule (`categories.SCHEDULE`) from a random source seeded by the seed and
`i` (a copy and its read twin share one: `categories.seed_key`). Each line:

    id, category, segments  [{text, special, model}]: the prompt as loopd renders it
                            (special: tokenize with special parsing), the model's own
                            texts and their closing marker flagged `model`
    calls                   [{tool, arguments, outcome}]: each call the model makes

Run: .tox/py311/bin/python training/generate.py --seed 1 --count 3100 --out training/out/train.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from training.render import render
from training.scenarios.categories import CATEGORIES, SCHEDULE, seed_key


def example(seed: int, index: int) -> dict[str, Any]:
    name = SCHEDULE[index % len(SCHEDULE)]
    rng = random.Random(seed_key(seed, index))
    conversation = CATEGORIES[name](rng)
    return {
        "id": f"{seed}-{index}",
        "category": name,
        "segments": [p.as_json() for p in render(conversation.turns)],
        "calls": [
            {"tool": tool, "arguments": args, "outcome": outcome.as_json()}
            for tool, args, outcome in conversation.calls
        ],
    }


def examples(seed: int, count: int) -> Iterator[dict[str, Any]]:
    for index in range(count):
        yield example(seed, index)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=3100)
    parser.add_argument("--out", type=Path, default=Path("training/out/train.jsonl"))
    ns = parser.parse_args(argv)
    start = time.monotonic()
    counts: Counter[str] = Counter()
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    with ns.out.open("w", encoding="utf-8") as out:
        for line in examples(ns.seed, ns.count):
            counts[str(line["category"])] += 1
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    took = time.monotonic() - start
    size = ns.out.stat().st_size
    print(f"wrote {ns.count} conversations, {size} bytes, to {ns.out} in {took:.1f} s")
    for name, count in sorted(counts.items()):
        print(f"  {name:20} {count}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
