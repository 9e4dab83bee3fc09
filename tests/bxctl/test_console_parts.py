"""The console's parts, without a terminal: the markdown renderer's safety, the screen's
frames, the status line, the history file's modes, the commands, and a turn's view.

The renderer's oracle is written here: after the SGR sequences are taken out, no
character of the output may be one `unicodedata` calls a control or format character.
"""

from __future__ import annotations

import io
import os
import re
import stat
import time
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.bxctl import console_markdown
from boxmaker.bxctl.chat_commands import command_of, help_lines
from boxmaker.bxctl.console_input import SlashCompleter, private_file
from boxmaker.bxctl.console_markdown import RENDER_LIMIT, only_styles, render_markdown
from boxmaker.bxctl.console_screen import Screen, fit
from boxmaker.bxctl.console_view import ConsoleView
from boxmaker.core.display.status_line import Standing, rate_of, status_line
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.loop import (
    ApprovalPendingEvent,
    ContentEvent,
    ReasoningEvent,
    TurnDone,
    UsageEvent,
)
from boxmaker.testing.hostile_text import CONTROLS, OSC_8, OSC_52, SPELLED, TITLE
from boxmaker.testing.waiting import wait_until

SGR = re.compile(r"\x1b\[[0-9;]*m")
EXPIRES = "2026-11-30T12:15:00.000Z"
COLOURS = ["256", "truecolor", "standard", None]


def visible(lines: list[str]) -> str:
    return SGR.sub("", "\n".join(lines))


def controls_in(text: str) -> list[str]:
    return [c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf")]


# --- the markdown renderer --------------------------------------------------------------

MARKDOWN_BITS = st.sampled_from(
    ["# ", "**", "`", "```python\n", "\n```\n", "- ", "[a](", ")", "<b>", "<!--", "-->", "\n", "|"]
)
TEXT = st.lists(
    st.one_of(MARKDOWN_BITS, st.text(max_size=12), st.sampled_from([CONTROLS, OSC_8, OSC_52])),
    max_size=12,
).map("".join)


@settings(max_examples=150, deadline=None)
@given(text=TEXT, colours=st.sampled_from(COLOURS))
def test_whatever_the_model_writes_only_styles_reach_the_terminal(
    text: str, colours: str | None
) -> None:
    lines = render_markdown(text, 60, colours)
    joined = "\n".join(lines)
    assert only_styles(joined)
    assert controls_in(SGR.sub("", joined)) == []
    if colours is None:
        assert "\x1b" not in joined


@pytest.mark.parametrize("colours", COLOURS)
def test_hostile_text_is_shown_spelled_out(colours: str | None) -> None:
    text = f"{TITLE}# Title {CONTROLS}\n\n{OSC_8} {OSC_52}\n\n```\n{OSC_52}\n```"
    shown = visible(render_markdown(text, 100, colours))
    for spelled in SPELLED:
        assert spelled in shown, spelled
    assert "\\u001b]52;c;cHduZWQ=\\u0007" in shown


def test_links_show_their_address_and_html_is_text() -> None:
    text = "See [the docs](https://evil.example/steal) <!-- hidden --> <b>bold?</b>"
    shown = visible(render_markdown(text, 100, "256"))
    assert "https://evil.example/steal" in shown
    assert "<!-- hidden -->" in shown
    assert "<b>bold?</b>" in shown
    assert "\x1b]8;" not in "\n".join(render_markdown(text, 100, "256"))


def test_markdown_is_rendered() -> None:
    shown = visible(render_markdown("# Head\n\n- one\n- **two**", 40, "256"))
    assert "•" in shown
    assert "**" not in shown
    assert "# Head" not in shown


def test_a_rendering_that_is_not_only_styles_falls_back_to_plain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Linking(console_markdown._TextHtmlMarkdown):
        def __init__(self, markup: str) -> None:
            super().__init__(markup)
            self.hyperlinks = True  # as rich's default would: an OSC 8 hyperlink

    monkeypatch.setattr(console_markdown, "_TextHtmlMarkdown", Linking)
    text = "[docs](https://evil.example/)"
    assert render_markdown(text, 80, "256") == [text]


def test_too_long_or_too_narrow_is_plain() -> None:
    long = "**x** " * (RENDER_LIMIT // 6 + 1)
    assert render_markdown(long, 80, "256") == [long]
    assert render_markdown("**x**\x1b", 10, "256") == ["**x**\\u001b"]


@pytest.mark.parametrize(
    ("text", "safe"),
    [
        ("\x1b[1;38;5;81mbold\x1b[0m", True),
        ("plain\nlines", True),
        ("\x1b]8;;https://e/\x1b\\x\x1b]8;;\x1b\\", False),
        ("\x1b[2J", False),
        ("\x1b[31", False),
        ("a\x07", False),
        ("\u202eevil", False),
    ],
)
def test_only_styles(text: str, safe: bool) -> None:
    assert only_styles(text) is safe


# --- the screen ---------------------------------------------------------------------


def test_each_frame_erases_the_last_live_lines_in_one_write() -> None:
    out = io.StringIO()
    screen = Screen(out)
    screen.frame(["done 1"], ["live a", "live b", "live c"])
    assert out.getvalue() == "done 1\nlive a\nlive b\nlive c"
    out.truncate(0)
    out.seek(0)
    screen.frame(["done 2"], ["live d"])
    assert out.getvalue() == "\r\x1b[2A\x1b[Jdone 2\nlive d"
    out.truncate(0)
    out.seek(0)
    screen.clear()
    assert out.getvalue() == "\r\x1b[J"
    out.truncate(0)
    out.seek(0)
    screen.frame([], [])
    assert out.getvalue() == ""


def test_fit_cuts_by_cells() -> None:
    assert fit("short", 10) == "short"
    assert fit("abcdefghij", 5) == "abcd…"
    assert fit("日本語テキスト", 5) == "日本…"


# --- the status line ----------------------------------------------------------------


def test_the_status_line() -> None:
    full = Standing(
        session="chat-1",
        used=1240,
        context=8192,
        rate=21.43,
        taint=DataClass.PRIVATE,
        untrusted=True,
        waiting=1,
        working_s=3.2,
    )
    assert status_line(full) == (
        "chat-1 · working 3s · context 1,240/8,192 (15%) · 21.4 tok/s · taint private"
        " · untrusted · 1 waiting"
    )
    assert status_line(Standing(session="s")) == "s"
    assert status_line(Standing(session="s", used=90)) == "s · context 90"
    assert status_line(Standing(session="s", broker_answered=False)) == "s · taint ?"
    assert status_line(Standing(session="s\x1b[2J")) == "s\\u001b[2J"


def test_the_rate_counts_the_gaps_between_tokens() -> None:
    assert rate_of(11, 0.5) == 20.0
    assert rate_of(1, 0.5) is None
    assert rate_of(10, 0.0) is None


# --- history: the owner's alone -----------------------------------------------------


def test_history_is_made_private(tmp_path: Path) -> None:
    path = private_file(tmp_path / "state" / "boxmaker" / "chat-history")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_history_left_readable_is_narrowed(tmp_path: Path) -> None:
    folder = tmp_path / "boxmaker"
    folder.mkdir(mode=0o755)
    path = folder / "chat-history"
    path.write_text("older line\n")
    path.chmod(0o644)
    private_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert path.read_text() == "older line\n"


def test_history_that_is_a_link_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("")
    folder = tmp_path / "boxmaker"
    folder.mkdir(mode=0o700)
    os.symlink(elsewhere, folder / "chat-history")
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        private_file(folder / "chat-history")


# --- commands -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "command"),
    [
        ("/status", "/status"),
        ("  /compact \n", "/compact"),
        ("/help", "/help"),
        ("/status now", None),
        ("/etc/hosts: what is in it?", None),
        ("/stat", None),
        ("status", None),
    ],
)
def test_a_command_is_a_whole_line(line: str, command: str | None) -> None:
    assert command_of(line) == command


def test_the_completer_offers_the_commands_at_the_start_only() -> None:
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    def offered(text: str) -> list[str]:
        found = SlashCompleter().get_completions(Document(text), CompleteEvent())
        return [c.text for c in found]

    assert offered("/s") == ["/sessions", "/status"]
    assert offered("/") == ["/compact", "/sessions", "/status", "/help"]
    assert offered("hello /s") == []
    assert offered("/status x") == []


def test_help_names_the_keys_of_each_chat() -> None:
    assert any("Esc then Enter" in line for line in help_lines(True))
    assert not any("Esc then Enter" in line for line in help_lines(False))


# --- a turn's view ------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0  # every frame is due
        return self.now


def view() -> tuple[ConsoleView, io.StringIO]:
    out = io.StringIO()
    return ConsoleView(Screen(out), Standing(session="s"), None, FakeClock(), tick_s=None), out


def test_the_reply_shows_once_on_one_terminal() -> None:
    shown, out = view()
    shown.begin()
    for piece in ["Hello", ", owner."]:
        shown.event(out, ContentEvent(text=piece))
    answer_out = io.StringIO()
    shown.answer(
        TurnDone(session="s", content="Hello, owner.", untrusted=False), True, out, answer_out
    )
    assert answer_out.getvalue() == ""
    final = out.getvalue().rsplit("\x1b[J", 1)[-1]
    assert final.count("Hello, owner.") == 1


def test_the_answer_goes_to_standard_output_when_it_is_elsewhere() -> None:
    shown, out = view()
    shown.begin()
    shown.event(out, ContentEvent(text="Hi\x1b[2J"))
    answer_out = io.StringIO()
    shown.answer(
        TurnDone(session="s", content="Hi\x1b[2J", untrusted=False), False, out, answer_out
    )
    assert answer_out.getvalue() == "Hi\\u001b[2J\n"


def test_an_answer_that_differs_from_the_run_is_shown_after_it() -> None:
    shown, out = view()
    shown.begin()
    shown.event(out, ContentEvent(text="Half a repl"))
    done = TurnDone(
        session="s", content="The turn stopped: it used its 10 tokens.", untrusted=False
    )
    shown.answer(done, True, out, io.StringIO())
    final = out.getvalue().rsplit("\x1b[J", 1)[-1]
    assert final.index("Half a repl") < final.index("The turn stopped")


def test_usage_and_reasoning_reach_the_status_and_the_fold() -> None:
    shown, out = view()
    shown.begin()
    shown.event(out, ReasoningEvent(text="one\ntwo\nthree\nfour\nfive"))
    assert "thinking" in out.getvalue()
    assert "five" in out.getvalue()
    shown.event(out, UsageEvent(prompt=100, generated=21, context=1000, seconds=1.0))
    assert "context 121/1,000 (12%) · 20.0 tok/s" in out.getvalue()
    shown.event(out, ContentEvent(text="Done."))
    assert "thought " in out.getvalue()
    assert "5 lines; Ctrl-T at the prompt shows them" in out.getvalue()
    assert shown.last_reasoning == "one\ntwo\nthree\nfour\nfive"


def test_between_events_the_status_line_ticks_but_not_over_a_question() -> None:
    out = io.StringIO()
    shown = ConsoleView(Screen(out), Standing(session="s"), None, tick_s=0.05)
    shown.begin()
    wait_until(lambda: "working" in out.getvalue(), 5, "a tick")
    shown.event(out, ApprovalPendingEvent(approval=41, tool="shell", expires=EXPIRES))
    asked = out.getvalue()
    time.sleep(0.3)  # ticks would come, and must not draw under the question
    assert out.getvalue() == asked
    shown.event(out, ContentEvent(text="ok"))
    shown.answer(TurnDone(session="s", content="ok", untrusted=False), True, out, io.StringIO())
    ended = out.getvalue()
    time.sleep(0.3)
    assert out.getvalue() == ended  # the ticker stopped with the turn
