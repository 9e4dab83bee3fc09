"""A reply as terminal lines: its markdown rendered by rich, from escaped text. No I/O.

The text is escaped first (`core.display.escape.escape_model_text`: every hidden
character spelled `\\uhhhh`, newline and tab kept), so what rich is given cannot
hold a control character. Rich adds styles of its own, and a rendering is used only
when its every escape sequence is a colour or style (SGR, `ESC [ ... m`) and nothing
else in it is hidden: otherwise the escaped text is shown plain. Links are written as
their text and their address (no OSC 8 hyperlink, whose target the owner would not
see), and HTML is shown as the text it is, never dropped as markup the terminal has
no use for: a comment the model wrote is on the screen.

A long reply (over `RENDER_LIMIT` characters) is shown plain: highlighting is
regular-expression work whose cost the model's text chooses.
"""

from __future__ import annotations

import io
import re

from markdown_it import MarkdownIt
from rich.console import Console
from rich.markdown import Markdown

from boxmaker.core.display.escape import escape_model_text
from boxmaker.core.display.hidden_chars import is_hidden

RENDER_LIMIT = 64 * 1024  # characters
CODE_THEME = "monokai"
_SGR = re.compile(r"\x1b\[[0-9;]*m")


class _TextHtmlMarkdown(Markdown):
    """Rich's markdown, its parser told to read HTML as text."""

    def __init__(self, markup: str) -> None:
        super().__init__("", code_theme=CODE_THEME, hyperlinks=False)
        parser = MarkdownIt("commonmark", {"html": False}).enable("strikethrough").enable("table")
        self.markup = markup
        self.parsed = parser.parse(markup)


def plain_lines(text: str) -> list[str]:
    """`text` escaped, as lines (no styling)."""
    return escape_model_text(text).split("\n")


def only_styles(rendered: str) -> bool:
    """Whether `rendered` holds no terminal control but colours and styles."""
    return not any(char != "\n" and is_hidden(char) for char in _SGR.sub("", rendered))


def render_markdown(text: str, width: int, color_system: str | None) -> list[str]:
    """`text` as markdown rendered to lines of at most `width` cells, with the styles of
    `color_system` (rich's name: "standard", "256", "truecolor"; None: no styles);
    plain escaped lines when it is too long to render or the rendering is not safe."""
    if len(text) > RENDER_LIMIT or width < 20:
        return plain_lines(text)
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        color_system=color_system,  # type: ignore[arg-type]  # rich's names
        force_terminal=color_system is not None,
        no_color=color_system is None,
        markup=False,
        emoji=False,
        highlight=False,
        legacy_windows=False,
        soft_wrap=False,
    )
    console.print(_TextHtmlMarkdown(escape_model_text(text)))
    rendered = buffer.getvalue().removesuffix("\n")
    if not only_styles(rendered):
        return plain_lines(text)
    return [line.rstrip() if color_system is None else line for line in rendered.split("\n")]
