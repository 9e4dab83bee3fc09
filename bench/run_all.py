"""Run every benchmark script in bench/ in turn; each prints its own figures and ratio.

A script is a file that runs as one (`if __name__ == "__main__"`); the helpers beside
them (`raw_llama.py`, the agent eval's modules) are not. Not the agent eval
(`agent_eval.py`): it runs 151 model turns, about 4 minutes with the adapter on 2 cores
and over an hour without it; run it by itself.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    scripts = sorted(
        p
        for p in here.glob("*.py")
        if p.name != "run_all.py"
        and not p.name.startswith("agent_eval")
        and '__name__ == "__main__"' in p.read_text(encoding="utf-8")
    )
    failed = 0
    for script in scripts:
        print(f"== {script.name}", flush=True)
        failed += subprocess.run([sys.executable, str(script)], check=False).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
