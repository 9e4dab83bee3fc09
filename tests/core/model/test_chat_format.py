"""Each chat format renders a conversation as the segments its family expects.

One conversation for every format: a system text, the owner's message, the
model's reply (replayed as its ids), a tool result, and the prompt for the next
reply. Markers are special text, message text never is, the model's reply is
its ids. Gemma's and ChatML's rendering is pinned here byte for byte, as the
turn loop's prompts were before Llama 3, Phi-3 and Mistral joined them.
"""

from __future__ import annotations

import pytest

from boxmaker.core.model.chat_format import (
    CHATML,
    GEMMA,
    KNOWN_FORMATS,
    LLAMA3,
    MISTRAL,
    PHI3,
    ChatFormat,
    Role,
    Segment,
    Text,
    Tokens,
    Turn,
    detect_formats,
    format_for,
    missing_markers,
)

REPLY_IDS = (7, 8, 9)
CONVERSATION = [
    Turn(Role.SYSTEM, "Be brief."),
    Turn(Role.USER, "read my notes"),
    Turn(Role.MODEL, "<call>", ids=REPLY_IDS),
    Turn(Role.TOOL, "buy milk", name="call_tool"),
]


def M(text: str) -> Text:  # noqa: N802 - reads as a marker in the tables below
    return Text(text, special=True)


def T(text: str) -> Text:  # noqa: N802
    return Text(text)


REPLY = Tokens(REPLY_IDS)

EXPECTED: dict[str, list[Segment]] = {
    "gemma": [
        M("<bos>"),
        *(M("<start_of_turn>"), T("user\n"), T("Be brief.\n\n"), T("read my notes")),
        *(M("<end_of_turn>"), T("\n")),
        *(M("<start_of_turn>"), T("model\n"), REPLY, M("<end_of_turn>"), T("\n")),
        *(M("<start_of_turn>"), T("user\n"), T("[result of call_tool]\n"), T("buy milk")),
        *(M("<end_of_turn>"), T("\n")),
        *(M("<start_of_turn>"), T("model\n")),
    ],
    "chatml": [
        *(M("<|im_start|>"), T("system\n"), T("Be brief."), M("<|im_end|>"), T("\n")),
        *(M("<|im_start|>"), T("user\n"), T("read my notes"), M("<|im_end|>"), T("\n")),
        *(M("<|im_start|>"), T("assistant\n"), REPLY, M("<|im_end|>"), T("\n")),
        *(M("<|im_start|>"), T("tool\n"), T("buy milk"), M("<|im_end|>"), T("\n")),
        *(M("<|im_start|>"), T("assistant\n")),
    ],
    "llama3": [
        M("<|begin_of_text|>"),
        *(M("<|start_header_id|>"), T("system"), M("<|end_header_id|>"), T("\n\n")),
        *(T("Be brief."), M("<|eot_id|>")),
        *(M("<|start_header_id|>"), T("user"), M("<|end_header_id|>"), T("\n\n")),
        *(T("read my notes"), M("<|eot_id|>")),
        *(M("<|start_header_id|>"), T("assistant"), M("<|end_header_id|>"), T("\n\n")),
        *(REPLY, M("<|eot_id|>")),
        *(M("<|start_header_id|>"), T("ipython"), M("<|end_header_id|>"), T("\n\n")),
        *(T("buy milk"), M("<|eot_id|>")),
        *(M("<|start_header_id|>"), T("assistant"), M("<|end_header_id|>"), T("\n\n")),
    ],
    "phi3": [
        *(M("<|system|>"), T("\n"), T("Be brief."), M("<|end|>"), T("\n")),
        *(M("<|user|>"), T("\n"), T("read my notes"), M("<|end|>"), T("\n")),
        *(M("<|assistant|>"), T("\n"), REPLY, M("<|end|>"), T("\n")),
        *(M("<|user|>"), T("\n"), T("[result of call_tool]\n"), T("buy milk")),
        *(M("<|end|>"), T("\n")),
        *(M("<|assistant|>"), T("\n")),
    ],
    "mistral": [
        M("<s>"),
        *(M("[INST]"), T(" "), T("Be brief.\n\n"), T("read my notes"), M("[/INST]")),
        *(REPLY, M("</s>")),
        *(M("[INST]"), T(" "), T("[result of call_tool]\n"), T("buy milk"), M("[/INST]")),
    ],
}

U, A = "<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>"  # DeepSeek's, full-width bars
BEGIN, END = "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"
EXPECTED["deepseek_r1"] = [
    M(BEGIN),
    *(M(U), T("Be brief.\n\n"), T("read my notes")),
    *(M(A), REPLY, M(END)),
    *(M(U), T("[result of call_tool]\n"), T("buy milk")),
    M(A),
]
EXPECTED["gemma4"] = [
    M("<bos>"),
    *(M("<|turn>"), T("system\n"), T("Be brief."), M("<turn|>"), T("\n")),
    *(M("<|turn>"), T("user\n"), T("read my notes"), M("<turn|>"), T("\n")),
    *(M("<|turn>"), T("model\n"), REPLY, M("<turn|>"), T("\n")),
    *(M("<|turn>"), T("user\n"), T("[result of call_tool]\n"), T("buy milk")),
    *(M("<turn|>"), T("\n")),
    *(M("<|turn>"), T("model\n")),
]

SPELLED = {
    "gemma": (
        "<bos><start_of_turn>user\nBe brief.\n\nread my notes<end_of_turn>\n"
        "<start_of_turn>model\n#<end_of_turn>\n"
        "<start_of_turn>user\n[result of call_tool]\nbuy milk<end_of_turn>\n"
        "<start_of_turn>model\n"
    ),
    "chatml": (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nread my notes<|im_end|>\n"
        "<|im_start|>assistant\n#<|im_end|>\n<|im_start|>tool\nbuy milk<|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
    "llama3": (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nread my notes<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n#<|eot_id|>"
        "<|start_header_id|>ipython<|end_header_id|>\n\nbuy milk<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    "phi3": (
        "<|system|>\nBe brief.<|end|>\n<|user|>\nread my notes<|end|>\n"
        "<|assistant|>\n#<|end|>\n<|user|>\n[result of call_tool]\nbuy milk<|end|>\n"
        "<|assistant|>\n"
    ),
    "mistral": (
        "<s>[INST] Be brief.\n\nread my notes[/INST]#</s>"
        "[INST] [result of call_tool]\nbuy milk[/INST]"
    ),
    "deepseek_r1": (
        f"{BEGIN}{U}Be brief.\n\nread my notes{A}#{END}{U}[result of call_tool]\nbuy milk{A}"
    ),
    "gemma4": (
        "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nread my notes<turn|>\n"
        "<|turn>model\n#<turn|>\n<|turn>user\n[result of call_tool]\nbuy milk<turn|>\n"
        "<|turn>model\n"
    ),
}


def _spelled(segments: list[Segment]) -> str:
    return "".join(s.text if isinstance(s, Text) else "#" for s in segments)


@pytest.mark.parametrize("name", list(KNOWN_FORMATS))
def test_a_conversation_renders_as_the_family_expects(name: str) -> None:
    segments = KNOWN_FORMATS[name].render(CONVERSATION)
    assert segments == EXPECTED[name]
    assert _spelled(segments) == SPELLED[name]


@pytest.mark.parametrize("name", list(KNOWN_FORMATS))
def test_markers_are_special_and_nothing_else_is(name: str) -> None:
    chat_format = KNOWN_FORMATS[name]
    segments = chat_format.render(CONVERSATION)
    special = {s.text for s in segments if isinstance(s, Text) and s.special}
    assert special <= set(chat_format.markers)
    texts = {s.text for s in segments if isinstance(s, Text) and not s.special}
    assert not texts & set(chat_format.markers)
    assert [s for s in segments if isinstance(s, Tokens)] == [REPLY]


@pytest.mark.parametrize("name", list(KNOWN_FORMATS))
def test_each_prompt_extends_the_one_before(name: str) -> None:
    chat_format = KNOWN_FORMATS[name]
    before = chat_format.render(CONVERSATION[:2])
    after = chat_format.render(CONVERSATION)
    assert after[: len(before)] == before


@pytest.mark.parametrize("name", list(KNOWN_FORMATS))
def test_a_reply_without_ids_is_ordinary_text(name: str) -> None:
    turns = [Turn(Role.USER, "hi"), Turn(Role.MODEL, "<|eot_id|>[/INST]")]
    segments = KNOWN_FORMATS[name].render(turns, generation_prompt=False)
    assert Text("<|eot_id|>[/INST]") in segments
    assert not any(isinstance(s, Tokens) for s in segments)


def test_the_known_formats() -> None:
    assert set(KNOWN_FORMATS) == {
        "gemma",
        "chatml",
        "llama3",
        "phi3",
        "mistral",
        "deepseek_r1",
        "gemma4",
    }


@pytest.mark.parametrize(
    ("chat_format", "markers"),
    [
        (GEMMA, ("<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>")),
        (CHATML, ("<|im_start|>", "<|im_end|>", "<|endoftext|>")),
        (
            LLAMA3,
            (
                "<|begin_of_text|>",
                "<|start_header_id|>",
                "<|end_header_id|>",
                "<|eot_id|>",
                "<|end_of_text|>",
            ),
        ),
        (PHI3, ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>")),
        (MISTRAL, ("<s>", "[INST]", "[/INST]", "</s>")),
    ],
    ids=lambda value: value.name if isinstance(value, ChatFormat) else "",
)
def test_the_markers_of_each_format(chat_format: ChatFormat, markers: tuple[str, ...]) -> None:
    assert chat_format.markers == markers
    assert set(chat_format.detect) <= set(chat_format.markers)


# --- choosing ---------------------------------------------------------------------------


def test_a_name_picks_its_format_whatever_the_template() -> None:
    for name, chat_format in KNOWN_FORMATS.items():
        assert format_for(name, None) is chat_format
        assert format_for(name, "<|im_start|><|im_end|>") is chat_format
    assert format_for("llama2", None) is None


@pytest.mark.parametrize("chat_format", list(KNOWN_FORMATS.values()), ids=lambda f: f.name)
def test_auto_picks_the_format_whose_markers_the_template_spells(chat_format: ChatFormat) -> None:
    template = "{% for m in messages %}" + "{{ m.content }}".join(chat_format.detect)
    assert detect_formats(template) == [chat_format]
    assert format_for("auto", template) is chat_format


@pytest.mark.parametrize(
    "template",
    [
        None,
        "",
        "{{ messages }}",
        "<start_of_turn>{{ m.content }}",  # half of gemma
        "[INST] {{ m.content }}",  # half of mistral
        "<|im_start|><|im_end|>[INST][/INST]",  # two families: no guess
    ],
)
def test_auto_finds_no_format_in_a_template_it_does_not_know(template: str | None) -> None:
    assert format_for("auto", template) is None


def test_missing_markers_are_those_that_are_not_one_token() -> None:
    single = {"<s>", "</s>"}

    def tokenize(text: str) -> list[int]:
        return [1] if text in single else [1] * len(text)

    assert missing_markers(MISTRAL, tokenize) == ["[INST]", "[/INST]"]
    single |= {"[INST]", "[/INST]"}
    assert missing_markers(MISTRAL, tokenize) == []
