"""One greedy reply of the model as loopd loads it, in a process of its own (registering
rpc-servers lasts as long as the process), for the RPC tests.

    python -m boxmaker.testing.rpc_generate HOME TOKENS ADAPTER [ENDPOINT ...]

loopd's own path: `[model] rpc_servers` set to the endpoints, `placement.plan` (the
endpoint rule, the registering, the backend and the plan), `startup.load_model` (the
embedded model assembled under HOME, with its shipped adapter), then TOKENS tokens
generated greedily after a fixed prompt. Prints one JSON line: the ids, where the
layers went (`placement`), and llama.cpp's count of layers offloaded.
"""

from __future__ import annotations

import json
import sys

from boxmaker.loopd.backend import read_backend
from boxmaker.loopd.config import LoopdConfig, ModelSection, PathsSection
from boxmaker.loopd.model import Sampling
from boxmaker.loopd.placement import placement, plan
from boxmaker.loopd.startup import load_model

PROMPT = "A short story about a lighthouse keeper named Ada.\n\nOnce upon a time,"


def main(argv: list[str]) -> int:
    home, tokens, adapter, endpoints = argv[0], int(argv[1]), argv[2], argv[3:]
    config = LoopdConfig(
        paths=PathsSection(home=home),
        model=ModelSection(
            rpc_servers=endpoints,
            adapter=adapter,
            flash_attn="off",
            context=2048,
            threads=2,
            seed=1,
        ),
    )
    offload = plan(config)
    model = load_model(config, offload)
    model.sampling = Sampling(temperature=0.0)
    prompt = model.tokenize(PROMPT, special=False)
    generation = model.generate(
        "rpc", prompt, max_tokens=tokens, stop=set(), on_text=lambda _text: None
    )
    result = {
        "ids": list(generation.ids),
        "placed": placement(read_backend(), offload, model.offloaded),
        "offloaded": model.offloaded,
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
