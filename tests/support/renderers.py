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

from support.skips import skip_or_fail

DIRECTORY = Path(__file__).resolve().parents[1] / "renderers"


@dataclass(frozen=True, slots=True)
class Rendered:
    """What one renderer made of a post."""

    images: tuple[str, ...]
    links: tuple[str, ...]
    headings: tuple[str, ...]  # each heading's text
    text: str
    ms: float
    error: str = ""  # what the renderer threw (then nothing else is filled in)


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

    def render(self, message: str, *, failures: bool = False) -> dict[str, Rendered]:
        """Each renderer's reading of `message`: `web` and `mobile`. A renderer that throws
        is a RuntimeError, or with `failures` a `Rendered` holding only its `error`
        (Mattermost's own parsers throw on some Markdown: the mobile app's on a
        definition followed by a line of `-`)."""
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        self._process.stdin.write(json.dumps({"text": message}) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError("render.js ended without an answer")
        answer = json.loads(line)
        rendered: dict[str, Rendered] = {}
        for name, found in answer.items():
            if "error" in found and not failures:
                raise RuntimeError(f"render.js failed in {name}: {found['error']}")
            rendered[name] = (
                Rendered((), (), (), "", 0.0, error=found["error"])
                if "error" in found
                else Rendered(
                    tuple(found["images"]),
                    tuple(found["links"]),
                    tuple(found["headings"]),
                    found["text"],
                    found["ms"],
                )
            )
        return rendered

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
