"""How long does the supervised tree take to come up, and what does a chat turn cost on top?

Figures, measured with the embedded model in dev mode under a temporary directory,
the start in rounds (`--rounds`, 3): each round starts the tree and the fresh
process once, back to back, and the median of the rounds' ratios is printed
beside every round's, since one start swings by a second on a shared machine:

- the time from starting supervisord to every role answering `bxctl status`
  (asked in this process, as `bxctl status` asks: a `bxctl` process started
  every few milliseconds would take one of the machine's cores from the tree it
  is timing, and run late by its own start-up), over the time a fresh Python
  process takes to load the model and run loopd's self-test (the limit: the least any start can take, since a tree must start
  loopd's process and import llama-cpp-python; printed beside it, the same load
  in this already warm process, the limit issue 18 first measured against);
- the time of `bxctl chat --say` for a short reply (4 tokens) on a new session,
  from starting bxctl to its exit, over the time of the same generation called
  directly in llama-cpp-python: the same prompt ids (rendered by loopd's own turn
  loop), the same number of tokens, from an empty cache (the limit).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from boxmaker.bxctl.client import BROKERD, LOOPD, MEMORYD
from boxmaker.bxctl.status_cmd import ask
from boxmaker.core.home.layout import Home
from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.model.dialect import from_format
from boxmaker.core.wire.common import StatusReport
from boxmaker.loopd.config import load_config
from boxmaker.loopd.dialects import self_test
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.session_log import SessionLogs, UserEntry
from boxmaker.loopd.startup import load_model
from boxmaker.loopd.turn import TurnLoop
from boxmaker.testing.waiting import wait_until

BIN = Path(sys.executable).parent
REPLY_TOKENS = 4
TREE_LIMIT = 1.5
TEXT = "hi"
FRESH = """
import os, sys
from pathlib import Path
from boxmaker.bxctl.client import BROKERD, LOOPD, MEMORYD
from boxmaker.bxctl.status_cmd import ask
from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.home.layout import Home
from boxmaker.core.wire.common import StatusReport
from boxmaker.loopd.config import load_config
from boxmaker.loopd.dialects import self_test
from boxmaker.loopd.startup import load_model
config = load_config(Path(sys.argv[1]), os.environ)
assert not self_test(load_model(config), GEMMA)
"""


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)


def answering(home: Path) -> bool:
    """Whether every role answers `status` on its socket, as `bxctl status` asks them."""
    layout = Home(home)
    roles = (
        (layout.admin_socket, BROKERD),
        (layout.owner_memory_socket, MEMORYD),
        (layout.loop_socket, LOOPD),
    )
    return all(isinstance(ask(path, server), StatusReport) for path, server in roles)


def start_fresh(loopd_toml: Path, env: dict[str, str]) -> float | None:
    """Seconds for a fresh process to load the model and run the self-test; None if it fails."""
    t0 = time.perf_counter()
    fresh = run(sys.executable, "-c", FRESH, str(loopd_toml), env=env)
    took = time.perf_counter() - t0
    if fresh.returncode != 0:
        print(fresh.stderr)
        return None
    return took


def start_tree(conf: str, prefix: Path) -> float | None:
    """Seconds from starting supervisord to every role answering; None if it never does."""
    t0 = time.perf_counter()
    run(str(BIN / "supervisord"), "-c", conf)
    try:
        wait_until(
            lambda: answering(prefix / "home"),
            300,
            "every role answering",
            interval_s=0.02,  # fine-grained: the figure is this wait
        )
    except TimeoutError as exc:
        print(f"the tree did not come up: {exc}")
        stop_tree(conf, prefix)
        return None
    return time.perf_counter() - t0


def stop_tree(conf: str, prefix: Path) -> None:
    """Stop supervisord and wait for it (and so every role) to be gone."""
    pidfile = prefix / "run" / "supervisord.pid"  # a dev install's {run}
    run(str(BIN / "supervisorctl"), "-c", conf, "shutdown")
    wait_until(lambda: not pidfile.exists(), 60, "supervisord to stop")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="tree and fresh starts, paired")
    rounds = parser.parse_args().rounds
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

        conf = str(prefix / "etc" / "supervisord.conf")
        fresh_starts, tree_starts, ratios = [], [], []
        for r in range(rounds):  # each ratio within its round; the order alternates
            tree_first = r % 2 == 1
            if tree_first:
                tree_start = start_tree(conf, prefix)
            direct_start = start_fresh(loopd_toml, env)
            if not tree_first:
                tree_start = start_tree(conf, prefix)
            if direct_start is None or tree_start is None:
                return 1
            status = run(str(BIN / "bxctl"), "status", env=env)
            chat = None
            if r == rounds - 1:
                t0 = time.perf_counter()
                chat = run(str(BIN / "bxctl"), "chat", "--say", TEXT, env=env)
                chat_s = time.perf_counter() - t0
            stop_tree(conf, prefix)
            if status.returncode != 0:
                print(f"bxctl status failed once every role answered: {status.stdout}")
                return 1
            if chat is not None and chat.returncode != 0:
                print(chat.stderr)
                return 1
            fresh_starts.append(direct_start)
            tree_starts.append(tree_start)
            ratios.append(tree_start / direct_start)

        logs = SessionLogs(Path(tmp) / "direct")
        session = logs.open("bench")
        session.append(UserEntry(text=TEXT))
        turns = TurnLoop(
            model, from_format(GEMMA), logs, None, TurnLimits(reply_tokens=REPLY_TOKENS)
        )
        prompt = turns.prompt(session)
        llm = model._llm  # the same Llama object loopd uses, driven directly
        llm.reset()
        t0 = time.perf_counter()
        for n, _ in enumerate(llm.generate(prompt, temp=0.7, top_k=40, top_p=0.95, reset=True), 1):
            if n >= REPLY_TOKENS:
                break
        direct_gen = time.perf_counter() - t0

    tree_start = statistics.median(tree_starts)
    print(f"tree: supervisord start to every role answering {tree_start:.2f} s (median)")
    print(
        "      a fresh process loading the model and its self-test"
        f" {statistics.median(fresh_starts):.2f} s (the limit)"
    )
    print(
        f"      ratio {statistics.median(ratios):.2f}, median of {rounds} rounds (issue 18 asks"
        f" at most {TREE_LIMIT}); each round, tree s / fresh s: "
        + ", ".join(f"{t:.2f}/{f:.2f}" for t, f in zip(tree_starts, fresh_starts, strict=True))
    )
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
