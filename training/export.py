"""Write a peft LoRA adapter as a llama.cpp LoRA GGUF, and check it against peft.

The GGUF is what llama.cpp's `convert_lora_to_gguf.py` writes for Gemma 3:
`general.architecture = gemma3`, `general.type = adapter`, `adapter.type = lora`,
`adapter.lora.alpha`, and for each adapted matrix `blk.N.<name>.weight.lora_a`
(r x n_in) and `.lora_b` (n_out x r), in f16. (Gemma 3's conversion does not permute
the attention matrices, so peft's A and B go in as they are.) The training run's
settings go in as `boxmaker.training.*` keys.

`--check TOKENS` then loads the base GGUF with the written adapter in llama.cpp and
the same adapter in transformers + peft, and compares their next-token choice at
every position the model writes in the first conversations of TOKENS: the share
that agree is printed, and the command fails under 97 %.

    python training/export.py --adapter training/out/adapter --gguf M.gguf \
        --out training/out/embedded-lora.gguf [--check training/out/train.tokens.jsonl]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_PEFT = re.compile(r"^base_model\.model\.model\.layers\.(\d+)\.(.+)\.lora_([AB])\.weight$")


def gguf_name(peft_name: str) -> str:
    """`base_model.model.model.layers.3.mlp.up_proj.lora_A.weight` is `blk.3.ffn_up.weight.lora_a`
    in llama.cpp."""
    found = _PEFT.match(peft_name)
    if found is None or found.group(2) not in NAMES:
        raise ValueError(f"not an adapted matrix this export knows: {peft_name}")
    layer, module, which = found.groups()
    return f"blk.{layer}.{NAMES[module]}.weight.lora_{which.lower()}"


def write_gguf(adapter: Path, out: Path) -> str:
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    config = json.loads((adapter / "adapter_config.json").read_text())
    tensors = load_file(adapter / "adapter_model.safetensors")
    args: dict[str, Any] = {}
    if (adapter / "train-args.json").is_file():
        args = json.loads((adapter / "train-args.json").read_text())
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(out), "gemma3")
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(config["lora_alpha"]))
    writer.add_name("boxmaker embedded model adapter (Gemma 3 270M, issue 39)")
    for key in ("seed", "examples", "steps", "epochs", "batch", "lr", "rank"):
        if key in args:
            writer.add_float32(f"boxmaker.training.{key}", float(args[key]))
    for name in sorted(tensors, key=lambda n: (int(n.split(".")[4]), n)):
        writer.add_tensor(gguf_name(name), tensors[name].astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return hashlib.sha256(out.read_bytes()).hexdigest()


def check(
    adapter: Path, gguf_path: Path, hf_cache: Path, written: Path, tokens: Path, count: int
) -> float:
    """The share of model-written positions where llama.cpp with the written adapter
    and transformers with peft's pick the same next token."""
    import numpy as np
    import torch
    from llama_cpp import Llama
    from peft import PeftModel

    from training.train import load_model

    base = load_model(gguf_path, hf_cache)
    model = PeftModel.from_pretrained(base, adapter).eval()
    llm = Llama(str(gguf_path), lora_path=str(written), n_ctx=1024, logits_all=True, verbose=False)
    agree = total = 0
    with tokens.open(encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(count), f, strict=False)]
    for row in rows:
        ids, own = row["ids"], row["own"]
        with torch.no_grad():
            theirs = model(input_ids=torch.tensor([ids])).logits[0].argmax(-1).tolist()
        llm.reset()
        llm.eval(ids)
        ours = np.asarray(llm.scores[: len(ids)]).argmax(-1).tolist()
        for j in range(1, len(ids)):
            if own[j]:
                total += 1
                agree += int(theirs[j - 1] == ours[j - 1])
    return agree / max(1, total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", type=Path, required=True, help="peft's save_pretrained dir")
    parser.add_argument("--gguf", type=Path, required=True, help="the embedded model")
    parser.add_argument("--hf-cache", type=Path, default=Path("training/out/hf"))
    parser.add_argument("--out", type=Path, default=Path("training/out/embedded-lora.gguf"))
    parser.add_argument("--check", type=Path, help="tokenized conversations to compare on")
    parser.add_argument("--check-count", type=int, default=15)
    ns = parser.parse_args(argv)
    digest = write_gguf(ns.adapter, ns.out)
    print(f"wrote {ns.out} ({ns.out.stat().st_size:,} bytes), sha256 {digest}")
    if ns.check is not None:
        share = check(ns.adapter, ns.gguf, ns.hf_cache, ns.out, ns.check, ns.check_count)
        print(
            f"llama.cpp and peft pick the same next token at {share:.1%} of the model's positions"
        )
        if share < 0.97:
            print("the exported adapter does not match peft's: do not ship it", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
