"""loopd serving the scripted model in a process of its own, for tests that read what
loopd's process does (its processor time, from /proc).

    python -m boxmaker.testing.scripted_loopd BASE SPEC.json

SPEC: {"replies": [...], "pace_s": 0.005, "busy": true, "limits": {TurnLimits' fields}}.
loopd's home is made under BASE; the socket's path is printed on standard output
once it listens. SIGTERM stops it.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path

from boxmaker.loopd.limits import TurnLimits
from boxmaker.testing.daemons import running_loopd
from boxmaker.testing.scripted_model import ScriptedModel


def main(argv: list[str]) -> int:
    base, spec_path = Path(argv[0]), Path(argv[1])
    spec = json.loads(spec_path.read_text())
    model = ScriptedModel(
        spec["replies"], pace_s=spec.get("pace_s", 0.0), serial=True, busy=spec.get("busy", False)
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    limits = TurnLimits(**spec.get("limits", {}))
    with running_loopd(base, model, limits=limits) as loopd:
        print(loopd.socket, flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
