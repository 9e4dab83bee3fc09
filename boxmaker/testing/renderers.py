"""Mattermost's own Markdown renderers, run in node, for the tests of reply escaping.

tests/renderers/render.js (its header says what it runs and how) reads one JSON
line per post and answers what each renderer made of it: the web app's (the
marked fork it pins, with its URL autolinker) and the mobile app's
(`@mattermost/commonmark`). `Renderers` keeps one node process for a test module.
Installing them is `scripts/install-renderers` (CI runs it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from boxmaker.testing.skips import skip_or_fail

DIRECTORY = Path(__file__).resolve().parents[2] / "tests" / "renderers"


@dataclass(frozen=True, slots=True)
class Rendered:
    """What one renderer made of a post."""

    images: tuple[str, ...]
    links: tuple[str, ...]
    text: str
    ms: float


class Renderers:
    """One node process running tests/renderers/render.js."""

    def __init__(self) -> None:
        node = shutil.which("node")
        if node is None:
            skip_or_fail("node is not installed: run scripts/install-renderers")
        if not (DIRECTORY / "node_modules" / "@mattermost" / "commonmark").is_dir():
            skip_or_fail(
                "the Mattermost renderers are not installed: run scripts/install-renderers"
            )
        self._process = subprocess.Popen(
            [node, str(DIRECTORY / "render.js")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            cwd=DIRECTORY,
        )

    def render(self, message: str) -> dict[str, Rendered]:
        """Each renderer's reading of `message`: `web` and `mobile`."""
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        self._process.stdin.write(json.dumps({"text": message}) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError("render.js ended without an answer")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"render.js failed: {answer['error']}")
        return {
            name: Rendered(
                tuple(found["images"]), tuple(found["links"]), found["text"], found["ms"]
            )
            for name, found in answer.items()
        }

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=10)
        if self._process.stdout is not None:
            self._process.stdout.close()

    def __enter__(self) -> Renderers:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
