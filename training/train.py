"""Fine-tune the embedded model with LoRA on tokenized conversations.

The base is the embedded GGUF itself, loaded by `transformers` (which dequantizes
it to fp32: the very weights llama.cpp multiplies), so the adapter is trained on
what it will be applied to. The loss is taken only on the tokens the model writes
(`own`), and the logits (a 262,144-word output layer, most of the cost) are
computed only at the positions that predict them.

Every conversation opens with the same tokens (the `<bos>`, the turn marker and
loopd's system text), so each step runs that common prefix once, without
gradients, under the current adapter, and the batch's conversations continue from
its key/value cache. (Its keys and values are the adapter's, as at inference; only
the gradient through them is left out.)

Run in the training environment (torch, transformers, peft; `scripts/train-embedded`
makes it), never in the package's:

    python training/train.py --gguf M.gguf --tokens training/out/train.tokens.jsonl \
        --out training/out/adapter
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def load_examples(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def common_prefix(examples: list[dict[str, Any]]) -> int:
    """How many leading tokens every conversation shares, stopping before the first
    token any of them trains on (so every trained token is predicted in the batch)."""
    first = examples[0]["ids"]
    n = len(first)
    for ex in examples:
        ids = ex["ids"]
        k = 0
        limit = min(n, len(ids))
        while k < limit and ids[k] == first[k]:
            k += 1
        n = k
        n = min(n, ex["own"].index(1) - 1)
    return max(n, 0)


def load_model(gguf: Path, cache: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    if (cache / "config.json").is_file():
        return AutoModelForCausalLM.from_pretrained(cache, dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    # the dequantized fp32 weights, kept for the next run (a GGUF load takes ~45 s);
    # transformers will not save a model it loaded from a GGUF, so it is told that
    # this one is plain fp32 now, which it is
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(cache)
    return model


def _fmt(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02}:{seconds % 60:02}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, required=True, help="the embedded model")
    parser.add_argument("--hf-cache", type=Path, default=Path("training/out/hf"))
    parser.add_argument("--tokens", type=Path, default=Path("training/out/train.tokens.jsonl"))
    parser.add_argument("--out", type=Path, default=Path("training/out/adapter"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--alpha", type=float, default=32.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--save-every", type=int, default=25)
    ns = parser.parse_args(argv)

    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(ns.seed)
    torch.set_num_threads(ns.threads)
    examples = load_examples(ns.tokens)
    prefix_len = common_prefix(examples)
    order = list(range(len(examples)))
    rng = random.Random(ns.seed)
    batches: list[list[int]] = []
    for _epoch in range(math.ceil(ns.epochs)):
        rng.shuffle(order)
        batches += [order[i : i + ns.batch] for i in range(0, len(order), ns.batch)]
    total = max(1, int(len(examples) * ns.epochs) // ns.batch)
    batches = batches[:total]

    start = time.monotonic()
    model = load_model(ns.gguf, ns.hf_cache)
    config = LoraConfig(
        r=ns.rank, lora_alpha=ns.alpha, lora_dropout=0.0, target_modules=list(TARGETS)
    )
    model = get_peft_model(model, config)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(
        f"model loaded in {time.monotonic() - start:.0f} s; {trainable:,} trainable parameters; "
        f"{len(examples)} conversations, common prefix {prefix_len} tokens; "
        f"{total} steps of {ns.batch}",
        flush=True,
    )
    inner = model.get_base_model()
    decoder, head = inner.model, inner.lm_head
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=ns.lr, weight_decay=0.0)
    warmup: int = max(1, total // 20)

    def rate(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, rate)
    prefix = torch.tensor([examples[0]["ids"][:prefix_len]])
    ns.out.mkdir(parents=True, exist_ok=True)
    log = (ns.out / "train-log.jsonl").open("w", encoding="utf-8")
    smooth: float | None = None
    began = time.monotonic()
    model.train()
    for step, batch in enumerate(batches):
        rows = [examples[i] for i in batch]
        suffixes = [r["ids"][prefix_len:] for r in rows]
        width = max(len(s) for s in suffixes)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        for b, s in enumerate(suffixes):
            ids[b, : len(s)] = torch.tensor(s)
        with torch.no_grad():
            cache = decoder(input_ids=prefix, use_cache=True).past_key_values
            cache.batch_repeat_interleave(len(rows))
        hidden = decoder(input_ids=ids, past_key_values=cache, use_cache=True).last_hidden_state
        where_b: list[int] = []
        where_t: list[int] = []
        targets: list[int] = []
        for b, r in enumerate(rows):
            full, own = r["ids"], r["own"]
            for j in range(prefix_len + 1, len(full)):
                if own[j]:
                    where_b.append(b)
                    where_t.append(j - 1 - prefix_len)
                    targets.append(full[j])
        logits = head(hidden[where_b, where_t])
        loss = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(targets))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        value = float(loss)
        smooth = value if smooth is None else 0.9 * smooth + 0.1 * value
        done = step + 1
        elapsed = time.monotonic() - began
        left = elapsed / done * (total - done)
        print(
            f"step {done}/{total}  loss {value:.3f} (avg {smooth:.3f})  "
            f"{elapsed / done:.1f} s/step  elapsed {_fmt(elapsed)}  left {_fmt(left)}",
            flush=True,
        )
        log.write(json.dumps({"step": done, "loss": value, "elapsed": round(elapsed, 1)}) + "\n")
        log.flush()
        if done % ns.save_every == 0 or done == total:
            model.save_pretrained(ns.out)
    log.close()
    (ns.out / "train-args.json").write_text(
        json.dumps(
            {
                "seed": ns.seed,
                "epochs": ns.epochs,
                "batch": ns.batch,
                "lr": ns.lr,
                "rank": ns.rank,
                "alpha": ns.alpha,
                "steps": total,
                "examples": len(examples),
                "seconds": round(time.monotonic() - start),
                "final_loss_avg": smooth,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"adapter saved to {ns.out} after {_fmt(time.monotonic() - start)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
