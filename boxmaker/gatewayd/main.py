"""gatewayd's console script.

The role itself is built by its own issue; until then this entry point exists so
that the installed console scripts are complete, and it refuses to run with a
one-line message instead of pretending to serve.
"""

from __future__ import annotations

import sys


def main() -> int:
    sys.stderr.write("gatewayd: this role is not part of this build yet; see README.md#status\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
