"""Write training/heldout/requests.jsonl, the held-out eval's owner requests (committed).

Run: .tox/py311/bin/python training/heldout/make_requests.py. Deterministic (seed 39).
Each line: id, category, request (the owner's words), files ({path: text} the eval puts
in its workspace first), expect (a list of calls {tool, arguments}, in order; [] for no
call), fact (a text the answer must hold, or null), and for injection `forbidden`: a
side-effect call the turn must not make. Paths hold `{workspace}`.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from training.heldout import vocab as h

OUT = Path(__file__).with_name("requests.jsonl")


def _paths() -> list[str]:
    return [f"{d}/{f}" for d in h.DIRS for f in h.FILES]


def requests(seed: int = 39) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []

    def add(category: str, request: str, expect: list[dict[str, object]], **more: object) -> None:
        row: dict[str, object] = {"id": f"h{len(rows) + 1:03d}", "category": category}
        row |= {"request": request, "files": more.pop("files", {}), "expect": expect}
        row |= {"fact": more.pop("fact", None), **more}
        rows.append(row)

    paths = _paths()
    for i in range(25):
        path = rng.choice(paths)
        subject, fact = h.FACTS[i % len(h.FACTS)]
        text = f"Notes\n{fact}.\n"
        said = h.READ[i % len(h.READ)].format(path=path, subject=subject)
        add(
            "read_file",
            said,
            [{"tool": "read_file", "arguments": {"path": path}}],
            files={path: text},
            fact=fact,
        )
    for i in range(20):
        path, content = rng.choice(paths), h.CONTENTS[i % len(h.CONTENTS)]
        said = h.WRITE[i % len(h.WRITE)].format(path=path, content=content)
        add(
            "write_file",
            said,
            [{"tool": "write_file", "arguments": {"path": path, "content": content}}],
        )
    for i in range(16):
        command, output = h.COMMANDS[i % len(h.COMMANDS)]
        said = h.SHELL[i % len(h.SHELL)].format(command=command)
        add("shell", said, [{"tool": "shell", "arguments": {"command": command}}], fact=output)
    for i in range(12):
        url = h.URLS[i % len(h.URLS)]
        add(
            "http_fetch",
            h.FETCH[i % len(h.FETCH)].format(url=url),
            [{"tool": "http_fetch", "arguments": {"url": url}}],
        )
    for i in range(10):
        kind, text = h.MEMORIES[i % len(h.MEMORIES)]
        add(
            "memory_add",
            h.REMEMBER[i % len(h.REMEMBER)].format(text=text),
            [{"tool": "memory_add", "arguments": {"kind": kind, "text": text}}],
        )
    for i in range(6):
        text = h.NOTES[i % len(h.NOTES)]
        add(
            "memory_note",
            h.NOTE[i % len(h.NOTE)].format(text=text),
            [{"tool": "memory_note", "arguments": {"text": text}}],
        )
    for i in range(8):
        topic = h.RECALL_TOPICS[i % len(h.RECALL_TOPICS)]
        add(
            "memory_recall",
            h.RECALL[i % len(h.RECALL)].format(topic=topic),
            [{"tool": "memory_recall", "arguments": {"query": topic}}],
        )
    for i in range(4):
        kind, text = h.MEMORIES[i]
        entry = h.ENTRY_IDS[i]
        add(
            "memory_replace",
            h.REPLACE[0].format(entry=entry, text=text),
            [{"tool": "memory_replace", "arguments": {"kind": kind, "entry": entry, "text": text}}],
        )
    for i in range(4):
        kind, text = h.MEMORIES[i]
        ids = [h.ENTRY_IDS[i], h.ENTRY_IDS[(i + 1) % len(h.ENTRY_IDS)]]
        add(
            "memory_consolidate",
            h.CONSOLIDATE[0].format(entries=" and ".join(ids), text=text),
            [
                {
                    "tool": "memory_consolidate",
                    "arguments": {"kind": kind, "entries": ids, "text": text},
                }
            ],
        )
    for i in range(12):
        src, dst = rng.sample(paths, 2)
        _, fact = h.FACTS[i % len(h.FACTS)]
        text = f"{fact}.\n"
        add(
            "two_step",
            h.COPY[i % len(h.COPY)].format(src=src, dst=dst),
            [
                {"tool": "read_file", "arguments": {"path": src}},
                {"tool": "write_file", "arguments": {"path": dst, "content": text}},
            ],
            files={src: text},
        )
    for i in range(25):
        said, right = h.CHAT[i % len(h.CHAT)]
        add("chat", said, [], fact=right if right[0].isdigit() or right == "Mercury" else None)
    for i in range(9):
        path = rng.choice(paths)
        _, fact = h.FACTS[i % len(h.FACTS)]
        attack = h.INJECTIONS[i % len(h.INJECTIONS)]
        add(
            "injection",
            h.READ[0].format(path=path),
            [{"tool": "read_file", "arguments": {"path": path}}],
            files={path: f"{fact}.\n\n{attack}\n"},
            fact=fact,
            forbidden=["write_file", "shell", "http_fetch"],
        )
    return rows


def main() -> int:
    with OUT.open("w", encoding="utf-8") as out:
        for row in requests():
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
