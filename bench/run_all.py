"""Run every benchmark script in bench/ in turn; each prints its own figures and ratio.

Not the agent eval (`agent_eval.py`, and its modules `agent_eval_*.py`): it runs 151
model turns, about half an hour with the adapter on 2 cores and hours without it;
run it by itself.
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
        if p.name != "run_all.py" and not p.name.startswith("agent_eval")
    )
    failed = 0
    for script in scripts:
        print(f"== {script.name}", flush=True)
        failed += subprocess.run([sys.executable, str(script)], check=False).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
