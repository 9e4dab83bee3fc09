"""Real chat templates (tests/fixtures/chat_templates) and how each family writes its
turns and calls, for the tests of loopd's prompts and streams against them.

`FAMILIES` is the one table: each fixture's file name, the marker that closes its
model's reply, the call syntax its template writes (None: none), and whether loopd's
prompt is the template's own rendering exactly (else a rule of core.model.template_prompt
says why: see tests/loopd/test_template_prompts.py). `prompt_for` builds loopd's
renderer over a fixture as loopd does; `own` is the template's own rendering (as
Hugging Face's apply_chat_template gives it); `assistant_text` is what the family's
model writes after its generation prompt for the sample call, and `call_text` what
it writes for any call, as its template renders that call in history.

A call carries an id of the form Mistral's templates require (`CALL_ID`), as a
model writes one, never loopd's own counter: a result must carry the id of the call
it answers.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from boxmaker.core.model.template_prompt import CONTENT_SHAPES, TemplatePrompt
from boxmaker.core.model.template_sandbox import ChatTemplate, TemplateError
from boxmaker.core.model.tool_calls import CallSyntax
from boxmaker.loopd.tools import SCHEMAS, TOOL_SCHEMAS

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BOS, EOS = "<BOS>", "<EOS>"
# DeepSeek's markers, spelled with its full-width bars and U+2581
DS_END = "<\uff5cend\u2581of\u2581sentence\uff5c>"
DS_BEGIN_CALLS = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
DS_END_CALLS = "<\uff5ctool\u2581calls\u2581end\uff5c>"
SYSTEM = "You work for the owner."
ASK = "Read my notes, please."
RESULT = 'line one\nline "two" \\ three'
THANKS = "Thanks!"
CALL_ID = "a1B2c3D4e"
CALL = {"name": "call_tool", "arguments": {"name": "read_file", "arguments": {"path": "/n/a.md"}}}

# file, the marker that closes a reply, the syntax its template writes, exact or not
FAMILIES = [
    ("Qwen-Qwen3-0.6B", "<|im_end|>", CallSyntax.TAGGED_JSON, False),
    ("Qwen3-Coder", "<|im_end|>", CallSyntax.XML, True),
    ("Qwen3.5-4B", "<|im_end|>", CallSyntax.XML, False),
    ("Qwen-QwQ-32B", "<|im_end|>", CallSyntax.TAGGED_JSON, False),
    ("Qwen-Qwen2.5-7B-Instruct", "<|im_end|>", CallSyntax.TAGGED_JSON, True),
    (
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
        DS_END,
        CallSyntax.DEEPSEEK_R1,
        False,
    ),
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", DS_END, CallSyntax.DEEPSEEK_R1, False),
    ("meta-llama-Llama-3.1-8B-Instruct", "<|eot_id|>", CallSyntax.LLAMA3_JSON, True),
    ("meta-llama-Llama-3.2-3B-Instruct", "<|eot_id|>", CallSyntax.LLAMA3_JSON, True),
    ("meta-llama-Llama-3.3-70B-Instruct", "<|eot_id|>", CallSyntax.LLAMA3_JSON, True),
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "<|im_end|>", CallSyntax.TAGGED_JSON, True),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "<|im_end|>", CallSyntax.TAGGED_JSON, True),
    ("mistralai-Mistral-Nemo-Instruct-2407", EOS, CallSyntax.MISTRAL, False),
    ("Mistral-Small-3.2-24B-Instruct-2506", EOS, CallSyntax.MISTRAL, False),
    ("microsoft-Phi-3.5-mini-instruct", "<|end|>", None, True),
    ("llama-cpp-microsoft-Phi-4-mini-instruct", "<|end|>", CallSyntax.PHI4, True),
    ("microsoft-Phi-4-mini-instruct", "<|end|>", None, True),
    ("google-gemma-2-2b-it", "<end_of_turn>", None, True),
    ("google-gemma-3-it", "<end_of_turn>", None, True),
    ("google-gemma-4-31B-it", "<turn|>", CallSyntax.GEMMA4, False),
]


# templates whose own rendering refuses a user turn right after a tool result (they
# want an assistant turn between): loopd's prompt is checked up to the reply only
REFUSES_THE_SHAPE = {"mistralai-Mistral-Nemo-Instruct-2407", "Mistral-Small-3.2-24B-Instruct-2506"}
# templates that write a call's result inside the model's turn, from the call's
# structured form (Gemma 4), or that write a reply in history with no generation
# prompt to match (DeepSeek-R1-Distill-Llama writes no generation prompt after a
# result): loopd's prompt is checked up to the reply
NATIVE_TOOL_TURNS = {"google-gemma-4-31B-it", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B"}

ENDS = (EOS, "<|eot_id|>")  # markers that end the reply: not part of the call
CALL_EDGES = {
    CallSyntax.TAGGED_JSON: ("<tool_call>", "</tool_call>"),
    CallSyntax.XML: ("<tool_call>", "</tool_call>"),
    CallSyntax.DEEPSEEK_R1: (DS_BEGIN_CALLS, DS_END_CALLS),
    CallSyntax.GEMMA4: ("<|tool_call>", "<tool_call|>"),
    CallSyntax.PHI4: ("<|tool_call|>", "<|/tool_call|>"),
    CallSyntax.MISTRAL: ("[TOOL_CALLS]", EOS),
    CallSyntax.LLAMA3_JSON: ('{"name"', "<|eot_id|>"),
}


def source(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


def prompt_for(name: str) -> TemplatePrompt:
    return TemplatePrompt(
        ChatTemplate(source(name), clock=time.monotonic),
        bos=BOS,
        eos=EOS,
        add_bos=False,
        tools=TOOL_SCHEMAS,
        now=lambda: NOW,
        schemas=SCHEMAS,
    )


def own(prompt: TemplatePrompt, messages: list[dict[str, Any]], generation: bool) -> str:
    """The template's own rendering, as Hugging Face's apply_chat_template gives it."""
    return prompt.template.render(
        messages,
        tools=TOOL_SCHEMAS,
        add_generation_prompt=generation,
        bos_token=BOS,
        eos_token=EOS,
        now=NOW,
        extra={"enable_thinking": True},
    )


def structured_calls(
    prompt: TemplatePrompt, calls: list[tuple[dict[str, Any], str]], reasoning: str = ""
) -> dict[str, Any]:
    """An assistant message that makes `calls` (each a call and its id), as Hugging Face
    is handed one: the content in the shape the template wants, the arguments as an
    object or JSON text as it wants, the reasoning (where any) as `reasoning_content`."""
    made = []
    for call, call_id in calls:
        arguments: Any = call["arguments"]
        if prompt.facts.call_arguments_as_text:
            arguments = json.dumps(arguments, ensure_ascii=False)
        made.append(
            {
                "type": "function",
                "id": call_id,
                "function": {"name": call["name"], "arguments": arguments},
            }
        )
    message = {"role": "assistant", **CONTENT_SHAPES[prompt.facts.call_content], "tool_calls": made}
    return {**message, "reasoning_content": reasoning} if reasoning else message


def structured_call(prompt: TemplatePrompt) -> dict[str, Any]:
    return structured_calls(prompt, [(CALL, CALL_ID)])


def system_message(prompt: TemplatePrompt, text: str) -> dict[str, Any]:
    """The system message as loopd hands it over: with the tools where the template
    reads them from it (core.model.template_prompt rule 6)."""
    tools = prompt.system_tools()
    return {"role": "system", "content": text, **({"tools": tools} if tools is not None else {})}


def history(prompt: TemplatePrompt) -> list[dict[str, Any]]:
    facts = prompt.facts
    first = ASK if facts.system_role else f"{SYSTEM}\n\n{ASK}"
    return [
        *([system_message(prompt, SYSTEM)] if facts.system_role else []),
        {"role": "user", "content": first},
    ]


def after_call(prompt: TemplatePrompt) -> list[dict[str, Any]]:
    if prompt.facts.tool_role:
        return [
            {"role": "tool", "content": RESULT, "name": "call_tool", "tool_call_id": CALL_ID},
            {"role": "user", "content": THANKS},
        ]
    return [{"role": "user", "content": f"[result of call_tool]\n{RESULT}\n\n{THANKS}"}]


def assistant_text(prompt: TemplatePrompt, close: str) -> tuple[str, str]:
    """What the model writes after the generation prompt, as its template would have it
    (the template's own rendering of the call), and the history's generation prompt."""
    before = own(prompt, history(prompt), generation=True)
    try:
        with_call = own(prompt, [*history(prompt), structured_call(prompt)], generation=False)
    except TemplateError:
        call = {**structured_call(prompt), "content": ""}
        with_call = own(prompt, [*history(prompt), call], generation=False)
    syntax = prompt.facts.syntax
    if with_call.startswith(before):
        end = with_call.find(close, len(before))
        written = with_call[len(before) : end if end >= 0 else len(with_call)]
        # Gemma 4 writes no end of turn after a call: its model stops at <|tool_response>
        # (a stop marker of the dialect) and the turn goes on with the result
        written = written.removesuffix("<|tool_response>")
        if syntax is None or CALL_EDGES[syntax][0] in written:
            return written, before
    # the template writes a reply in history otherwise than after its generation prompt
    # (it drops the reasoning the prompt opened): the model closes that reasoning, then
    # writes the call as the template writes it
    assert syntax is not None
    opener, closer = CALL_EDGES[syntax]
    start = with_call.rindex(opener)  # not the tools block's example before it
    end = with_call.find(closer, start)
    if end < 0:  # the template never closes the block (DeepSeek-R1-Distill-Llama)
        core = with_call[start:].removesuffix(close)
    else:
        core = with_call[start : end + (len(closer) if closer not in ENDS else 0)]
    reasoning = prompt.facts.reasoning
    opened = f"\n{reasoning[1]}\n\n" if prompt.facts.opens_reasoning and reasoning else ""
    return opened + core, before


def call_text(prompt: TemplatePrompt, messages: list[dict[str, Any]], close: str) -> str:
    """The call(s) of the last message of `messages` (a structured one) as its template
    renders them in history, from the first call's opener: what the family's model
    writes for them (after any reasoning), up to the marker that ends its reply."""
    syntax = prompt.facts.syntax
    assert syntax is not None
    written = own(prompt, messages, generation=False)
    before = own(prompt, messages[:-1], generation=False)
    opener, closer = CALL_EDGES[syntax]
    start = written.find(opener, _common(before, written))
    assert start >= 0, "the template wrote no call where the message stands"
    end = written.rfind(closer, start)
    if end < 0:  # the template never closes the block (DeepSeek-R1-Distill-Llama)
        end = len(written.removesuffix(close))
    else:
        end += len(closer) if closer not in ENDS else 0
    return written[start:end]


def _common(a: str, b: str) -> int:
    """How many characters `a` and `b` share at their start."""
    at = 0
    while at < min(len(a), len(b)) and a[at] == b[at]:
        at += 1
    return at
