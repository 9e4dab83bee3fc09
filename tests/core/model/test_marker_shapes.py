"""Which token texts are marker-shaped (boxmaker.core.model.marker_shapes)."""

from __future__ import annotations

import pytest

from boxmaker.core.model.marker_shapes import is_marker_shaped

L, R = "<", ">"

SHAPED = {
    "angle-bar open": L + "|im_start|" + R,
    "angle-bar one side": L + "|tool_call" + R,
    "bar angle": L + "channel|" + R,
    "full-width bar": L + "\uff5cbegin\u2581of\u2581sentence\uff5c" + R,
    "quote bar": L + '|"|' + R,
    "start of": L + "start_of_image" + R,
    "end of": L + "end_of_turn" + R,
    "think": L + "think" + R,
    "closing think": L + "/think" + R,
    "tool call": L + "tool_call" + R,
    "fim": L + "fim_prefix" + R,
    "unused": L + "unused12" + R,
    "soft token": L + "image_soft_token" + R,
    "pad": L + "pad" + R,
    "inst": "[INST]",
    "closing inst": "[/INST]",
    "multimodal": "[multimodal]",
    "padding": "[PAD151646]",
    "falcon": R + R + "TITLE" + L + L,
}
PLAIN = {
    "spaces": "    ",
    "newlines": "\n\n",
    "tab": "\t",
    "table": L + "table" + R,
    "closing code": L + "/code" + R,
    "strike": L + "s" + R,
    "img": L + "img" + R,
    "word": "hello",
    "index": "[i]",
    "checkbox": "[ ]",
    "comparison": "a<b>c",
    "empty": "",
    "half": L + "|",
}


@pytest.mark.parametrize("text", SHAPED.values(), ids=SHAPED.keys())
def test_marker_shaped(text: str) -> None:
    assert is_marker_shaped(text)


@pytest.mark.parametrize("text", PLAIN.values(), ids=PLAIN.keys())
def test_plain_text(text: str) -> None:
    assert not is_marker_shaped(text)
