"""What the model tests need of the machine: llama-cpp-python, and the vocabulary files.

`require_llama_cpp` skips the calling test module loudly when llama-cpp-python
cannot be imported, and fails it instead when `CI` is set (CI installs it).
`fetch_vocabularies` runs scripts/fetch-vocabularies (the vocabulary-only GGUFs of
the pinned llama-cpp-python source package, fetched once into the cache) and
returns their directory; a failure fails, never skips.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.skips import skip_or_fail

FETCH = Path(__file__).resolve().parents[2] / "scripts" / "fetch-vocabularies"


def require_llama_cpp(what: str) -> None:
    """Skip the calling module (loudly) without llama-cpp-python; in CI, fail it."""
    try:
        importlib.import_module("llama_cpp")
    except ImportError as exc:
        why = (
            f"llama-cpp-python cannot be imported ({exc}): {what} did NOT run; "
            "install it (pip install llama-cpp-python) to run them"
        )
        skip_or_fail(why, allow_module_level=True)


def fetch_vocabularies() -> Path:
    """The directory of the extracted vocabulary files; the test fails if they cannot be had."""
    done = subprocess.run(
        [str(FETCH)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHON": sys.executable},  # pip of the environment under test
        timeout=600,
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/fetch-vocabularies failed ({done.returncode}): {done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])
