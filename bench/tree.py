"""How long does the supervised tree take to come up, and what does a chat turn cost on top?

Figures, measured in one run with the embedded model in dev mode under a
temporary directory:

- the time from starting supervisord to every role answering `bxctl status`,
  over the time a fresh Python process takes to load the model and run loopd's
  self-test (the limit: the least any start can take, since a tree must start
  loopd's process and import llama-cpp-python; printed beside it, the same load
  in this already warm process, the limit issue 18 first measured against);
- the time of `bxctl chat --say` for a short reply (4 tokens) on a new session,
  from starting bxctl to its exit, over the time of the same generation called
  directly in llama-cpp-python: the same prompt ids (rendered by loopd's own turn
  loop), the same number of tokens, from an empty cache (the limit).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from boxmaker.core.chat_format import GEMMA
from boxmaker.loopd.config import load_config
from boxmaker.loopd.main import load_model, self_test
from boxmaker.loopd.session_log import SessionLogs, UserEntry
from boxmaker.loopd.turn import TurnLimits, TurnLoop
from boxmaker.testing.waiting import wait_until

BIN = Path(sys.executable).parent
REPLY_TOKENS = 4
TEXT = "hi"
FRESH = """
import os, sys
from pathlib import Path
from boxmaker.core.chat_format import GEMMA
from boxmaker.loopd.config import load_config
from boxmaker.loopd.main import load_model, self_test
config = load_config(Path(sys.argv[1]), os.environ)
assert not self_test(load_model(config), GEMMA)
"""


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bxtree-") as tmp:
        prefix = Path(tmp) / "bx"
        done = run(str(BIN / "bxctl"), "install", "--dev", "--prefix", str(prefix))
        if done.returncode != 0:
            print(done.stdout, done.stderr)
            return 1
        loopd_toml = prefix / "etc" / "loopd.toml"
        loopd_toml.write_text(
            loopd_toml.read_text().replace(
                'path = ""', f'path = ""\nmax_tokens = {REPLY_TOKENS}\nseed = 1'
            )
        )
        env = {**os.environ, "BOXMAKER_HOME": str(prefix / "home")}
        config = load_config(loopd_toml, {"BOXMAKER_HOME": str(prefix / "home")})
        load_model(config)  # assemble the embedded model once, outside the timings

        t0 = time.perf_counter()
        model = load_model(config)
        self_test(model, GEMMA)
        warm_start = time.perf_counter() - t0

        t0 = time.perf_counter()
        fresh = run(sys.executable, "-c", FRESH, str(loopd_toml), env=env)
        direct_start = time.perf_counter() - t0
        if fresh.returncode != 0:
            print(fresh.stderr)
            return 1

        conf = str(prefix / "etc" / "supervisord.conf")
        t0 = time.perf_counter()
        run(str(BIN / "supervisord"), "-c", conf)
        try:
            wait_until(
                lambda: run(str(BIN / "bxctl"), "status", env=env).returncode == 0,
                300,
                "every role answering",
                interval_s=0.05,  # fine-grained: the figure is this wait
            )
        except TimeoutError as exc:
            print(f"the tree did not come up: {exc}")
            return 1
        tree_start = time.perf_counter() - t0

        t0 = time.perf_counter()
        chat = run(str(BIN / "bxctl"), "chat", "--say", TEXT, env=env)
        chat_s = time.perf_counter() - t0
        run(str(BIN / "supervisorctl"), "-c", conf, "shutdown")
        if chat.returncode != 0:
            print(chat.stderr)
            return 1

        logs = SessionLogs(Path(tmp) / "direct")
        session = logs.open("bench")
        session.append(UserEntry(text=TEXT))
        turns = TurnLoop(model, GEMMA, logs, None, TurnLimits(reply_tokens=REPLY_TOKENS))
        prompt = turns.prompt(session)
        llm = model._llm  # the same Llama object loopd uses, driven directly
        llm.reset()
        t0 = time.perf_counter()
        for n, _ in enumerate(llm.generate(prompt, temp=0.7, top_k=40, top_p=0.95, reset=True), 1):
            if n >= REPLY_TOKENS:
                break
        direct_gen = time.perf_counter() - t0

    print(f"tree: supervisord start to every role answering {tree_start:.2f} s")
    print(
        f"      a fresh process loading the model and its self-test {direct_start:.2f} s"
        " (the limit)"
    )
    print(f"      ratio {tree_start / direct_start:.2f}")
    print(
        f"      (the same load in this warm process {warm_start:.2f} s,"
        f" ratio {tree_start / warm_start:.2f})"
    )
    print(f"chat: bxctl chat --say ({REPLY_TOKENS}-token reply) {chat_s:.2f} s")
    print(
        f"      the same generation in llama-cpp-python {direct_gen:.2f} s (the limit, {len(prompt)} prompt tokens)"
    )
    print(f"      ratio {chat_s / direct_gen:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
