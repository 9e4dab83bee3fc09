"""Tokenize generated conversations with the embedded model's own vocabulary.

Reads the generator's JSON Lines and writes one line per conversation:
`{"id", "category", "ids": [...], "own": [...]}`, where `own[i]` is 1 when the
model wrote token `i` (the loss is taken on those). Each segment is tokenized as
`TurnLoop` tokenizes a prompt segment: by llama.cpp, with special parsing only
where the segment is a marker, so the training ids are the ids loopd hands the model.

Run inside the environment that has boxmaker and llama-cpp-python (`.tox/py311`):

    .tox/py311/bin/python training/tokenize_data.py --model M.gguf \
        --data training/out/train.jsonl --out training/out/train.tokens.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="the embedded GGUF")
    parser.add_argument("--data", type=Path, default=Path("training/out/train.jsonl"))
    parser.add_argument("--out", type=Path, default=Path("training/out/train.tokens.jsonl"))
    ns = parser.parse_args(argv)

    from llama_cpp import Llama

    llm = Llama(str(ns.model), vocab_only=True, verbose=False)
    start = time.monotonic()
    lengths: list[int] = []
    with ns.data.open(encoding="utf-8") as src, ns.out.open("w", encoding="utf-8") as out:
        for line in src:
            example = json.loads(line)
            ids: list[int] = []
            own: list[int] = []
            for segment in example["segments"]:
                part = llm.tokenize(
                    segment["text"].encode("utf-8"), add_bos=False, special=segment["special"]
                )
                ids += part
                own += [1 if segment["model"] else 0] * len(part)
            lengths.append(len(ids))
            record = {"id": example["id"], "category": example["category"], "ids": ids, "own": own}
            out.write(json.dumps(record) + "\n")
    took = time.monotonic() - start
    lengths.sort()
    print(
        f"tokenized {len(lengths)} conversations in {took:.1f} s: "
        f"median {lengths[len(lengths) // 2]} tokens, longest {lengths[-1]}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
