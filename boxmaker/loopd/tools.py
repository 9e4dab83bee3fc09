"""The tools the model sees, and the texts loopd gives it for what brokerd decided.

No I/O. The model is offered three core tools, always: `clock`, `find_tool` and
`call_tool`. `find_tool` finds the tools brokerd decides on (the four sandbox
tools and the five memory tools, which brokerd hands to memoryd), with their
argument schemas; `call_tool` asks brokerd to run one. A denial comes back to the
model as an ordinary tool result in plain words (class public, trusted), so the
model can explain it and the turn goes on.
"""

from __future__ import annotations

from typing import Any

import orjson

from boxmaker.core.decisions import DenyReason
from boxmaker.core.tool_calls import CallSyntax

CORE_TOOLS = ("clock", "find_tool", "call_tool")

# The three core tools as a template's `tools` (the OpenAI function form every
# chat template that writes a tools block reads); their `parameters` also type
# the values of a call written in the XML syntax
TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "clock",
            "description": "Tell the current time (UTC).",
            "parameters": {"type": "object", "properties": {}, "required": []},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "find_tool",
            "description": "List the tools call_tool can run, with their arguments.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "words to look for"}},
                "required": [],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "call_tool",
            "description": "Run one of the tools find_tool lists. The owner's grants decide:"
            " the call may be denied, or wait for the owner's approval.",
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "the tool's name"},
                    "arguments": {"type": "object", "description": "the tool's arguments"},
                },
                "required": ["name", "arguments"],
            },
        },
    },
]
SCHEMAS: dict[str, dict[str, Any]] = {
    t["function"]["name"]: t["function"]["parameters"] for t in TOOL_SCHEMAS
}

_PATH = "/home/owner/notes/todo.md"
# How a model is shown a call in its own syntax, where its prompt does not show it
EXAMPLES: dict[CallSyntax, str] = {
    CallSyntax.BARE_JSON: "reply with only a JSON object, for example: "
    '{"name": "call_tool", "arguments": {"name": "read_file", "arguments": {"path": "'
    + _PATH
    + '"}}}',
    CallSyntax.TAGGED_JSON: "write <tool_call>"
    '{"name": "call_tool", "arguments": {"name": "read_file", "arguments": {"path": "'
    + _PATH
    + '"}}}'
    "</tool_call>",
    CallSyntax.XML: "write <tool_call>\n<function=call_tool>\n<parameter=name>\nread_file\n"
    '</parameter>\n<parameter=arguments>\n{"path": "' + _PATH + '"}\n</parameter>\n'
    "</function>\n</tool_call>",
    CallSyntax.LLAMA3_JSON: "reply with only a JSON object, for example: "
    '{"name": "call_tool", "parameters": {"name": "read_file", "arguments": {"path": "'
    + _PATH
    + '"}}}',
    CallSyntax.MISTRAL: "write [TOOL_CALLS]"
    '[{"name": "call_tool", "arguments": {"name": "read_file", "arguments": {"path": "'
    + _PATH
    + '"}}}]',
}

BROKER_TOOLS: dict[str, dict[str, Any]] = {
    "read_file": {
        "description": "Read a text file. The owner's grants decide which paths.",
        "arguments": {"path": "absolute path of the file"},
        "required": ["path"],
    },
    "write_file": {
        "description": "Write a text file, replacing it. The owner's grants decide where.",
        "arguments": {"path": "absolute path of the file", "content": "the text to write"},
        "required": ["path", "content"],
    },
    "shell": {
        "description": "Run a shell command in a sandbox with no network.",
        "arguments": {"command": "the command", "cwd": "optional absolute working directory"},
        "required": ["command"],
    },
    "http_fetch": {
        "description": "Fetch an https:// URL from a host the owner allows.",
        "arguments": {"url": "an https:// URL"},
        "required": ["url"],
    },
    "memory_add": {
        "description": "Remember a lasting fact: about your work (kind memory) or the owner"
        " (kind user).",
        "arguments": {"kind": "memory or user", "text": "the fact, one short paragraph"},
        "required": ["kind", "text"],
    },
    "memory_replace": {
        "description": "Replace one remembered entry, named by its id, with new text.",
        "arguments": {"kind": "memory or user", "entry": "the entry's id", "text": "new text"},
        "required": ["kind", "entry", "text"],
    },
    "memory_consolidate": {
        "description": "Merge several remembered entries, named by their ids, into one.",
        "arguments": {
            "kind": "memory or user",
            "entries": "the ids to merge, a list",
            "text": "the merged text",
        },
        "required": ["kind", "entries", "text"],
    },
    "memory_note": {
        "description": "Save a note for later; untrusted true when it comes from something"
        " you read.",
        "arguments": {"text": "the note", "untrusted": "optional, true or false"},
        "required": ["text"],
    },
    "memory_recall": {
        "description": "Search remembered entries and notes; the best matches come back.",
        "arguments": {
            "query": "words to search for",
            "limit": "optional, 1 to 50 (5)",
            "page": "optional: the page an answer too long for one asks for next (1)",
        },
        "required": ["query"],
    },
}

DENIALS: dict[DenyReason, str] = {
    DenyReason.NO_GRANT: "Denied: no grant allows this call.",
    DenyReason.GRANT_EXPIRED: "Denied: the grant for this call has expired.",
    DenyReason.TAINT_TOO_HIGH: "Denied: this session has seen data too sensitive for this call.",
    DenyReason.DENIED_BY_GRANT: "Denied: a grant forbids this call.",
    DenyReason.APPROVAL_REFUSED: "Denied: the owner refused this call.",
    DenyReason.APPROVAL_EXPIRED: "Denied: the approval request expired without an answer.",
    DenyReason.APPROVAL_STALE: (
        "Denied: the grant or the session changed before the owner approved; ask again."
    ),
    DenyReason.UNTRUSTED_SESSION: (
        "Denied: this session has read untrusted content, and the grant forbids this call now."
    ),
    DenyReason.INVALID_ARGUMENTS: "Denied: the arguments are not valid for this tool.",
    DenyReason.GRANTS_INVALID: "Denied: the grant files have an error; the owner has been told.",
    DenyReason.AUDIT_UNAVAILABLE: (
        "Denied: the audit log cannot be written; the owner has been told."
    ),
    DenyReason.STATE_UNREADABLE: (
        "Denied: this session's broker state is damaged; the owner has been told."
    ),
}


def denial_text(reason: DenyReason, detail: str | None) -> str:
    """What the model reads for a denial; invalid_arguments carries the parser's detail."""
    text = DENIALS[reason]
    if reason is DenyReason.INVALID_ARGUMENTS and detail:
        return f"{text[:-1]}: {detail}"
    return text


def find_tools(query: str) -> str:
    """The broker tools matching `query` (all of them for an empty one), as JSON text."""
    words = query.lower().split()
    found = [
        {"name": name, **spec}
        for name, spec in BROKER_TOOLS.items()
        if not words or any(w in name or w in spec["description"].lower() for w in words)
    ]
    if not found:
        found = [{"name": name, **spec} for name, spec in BROKER_TOOLS.items()]
    return orjson.dumps(found).decode()


def system_prompt(syntax: CallSyntax, prompt_teaches_syntax: bool = False) -> str:
    """How the model is told to use its tools: the call syntax of its own dialect, and
    only that one, unless its prompt (the template's tools block) already teaches it."""
    example = EXAMPLES.get(syntax, EXAMPLES[CallSyntax.TAGGED_JSON])
    how = "" if prompt_teaches_syntax else f"To call a tool, {example}\n"
    return (
        "You are a helpful assistant working for your owner on their own machine.\n"
        "You have three tools. clock (no arguments) tells the current time. "
        'find_tool {"query": "..."} lists the tools you can call and their arguments. '
        'call_tool {"name": "...", "arguments": {...}} runs one of them.\n'
        "Every call_tool is decided by your owner's grants: it may be denied, or wait for "
        "the owner's approval. When a call is denied, tell the owner why in plain words.\n"
        + how
        + "When you do not need a tool, just answer."
    )
