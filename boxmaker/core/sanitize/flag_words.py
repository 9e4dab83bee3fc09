"""The words the flag patterns are made of, and how a phrase becomes a pattern. Pure; no I/O.

A phrase is written in lower case with single spaces, as the normalised text
reads (`normalisation`); `phrase` folds its leetspeak digits as the text's are
folded and lets an `i` (a folded `1`) stand where it spells `l`. The lists are
grouped by the rule of `flag_patterns` that uses them.
"""

from __future__ import annotations

import re

from boxmaker.core.sanitize.normalisation import LEET


def phrase(text: str) -> str:
    """A lower-case phrase as a pattern: its text as normalised (leetspeak digits
    folded: `base64` reads `base6a`), with `l` also matching `i`."""
    folded = "".join(LEET.get(char, char) for char in text)
    return "".join(
        "[li]" if char == "l" else " " if char == " " else re.escape(char) for char in folded
    )


def one_of(*phrases: str) -> str:
    return "(?:" + "|".join(phrase(text) for text in phrases) + ")"


def fill(most: int) -> str:
    """Up to `most` filler words, each ended by its one space."""
    return f"(?:[^ ]{{1,24}} ){{0,{most}}}"


# ignore-instructions
IGNORE_VERBS = one_of(
    "ignore", "disregard", "forget", "override", "overwrite", "bypass", "abandon", "discard",
    "skip", "neglect", "dismiss",
)  # fmt: skip
EARLIER = one_of(
    "previous", "prior", "above", "earlier", "preceding", "foregoing", "former", "original",
    "initial", "your", "system", "all",
)  # fmt: skip
ORDERS = one_of(
    "instructions", "instruction", "prompts", "prompt", "directives", "directions", "guidelines",
    "guardrails", "rules", "commands", "orders", "constraints", "restrictions", "programming",
    "requests",
)  # fmt: skip
THE_ABOVE = one_of("above", "foregoing", "previous")
SAY = one_of(
    "say", "print", "output", "respond", "reply", "write", "translate", "repeat", "tell",
    "answer", "do",
)  # fmt: skip

# exfil-url
SEND = one_of(
    "send", "post", "upload", "transmit", "forward", "exfiltrate", "leak", "submit", "email",
    "e-mail", "mail", "deliver", "share", "paste", "report", "push", "append", "write", "copy",
    "put", "log",
)  # fmt: skip
SENSITIVE = one_of(
    "conversation", "chat", "history", "transcript", "messages", "message", "context", "prompt",
    "instructions", "memory", "memories", "secrets", "secret", "credentials", "credential",
    "passwords", "password", "passwd", "tokens", "token", "api key", "api keys", "keys",
    "private key", "ssh", "id_rsa", ".env", "environment variables", "env vars", "cookies",
    "cookie", "session", "emails", "inbox", "everything",
)  # fmt: skip
TO_URL = (
    one_of("to", "at", "into", "onto", "via")
    + " (?:" + one_of("the", "this", "my", "our", "a", "an", "following") + " )?"
    + "(?:" + one_of("website", "site", "url", "link", "page", "endpoint", "server", "webhook")
    + " )?"
    + r"(?:https?://|hxxps?://|ftp://|www\.)"
)  # fmt: skip

# dump-conversation
REVEAL = one_of(
    "repeat", "reveal", "recite", "leak", "divulge", "disclose", "print", "output", "show",
    "display", "dump", "spell out", "write out", "copy", "paste", "share", "tell me",
    "give me", "send me", "list", "return", "echo",
)  # fmt: skip
REVEAL_STRONG = one_of(
    "repeat", "reveal", "recite", "leak", "divulge", "disclose", "dump", "spell out",
    "tell me", "show me", "give me", "send me", "output",
)  # fmt: skip
YOUR_SECRETS = one_of(
    "system prompt", "initial prompt", "original prompt", "hidden prompt", "instructions",
    "prompt", "system message", "rules", "guidelines", "configuration", "directives",
)  # fmt: skip
PROMPT_KIND = one_of("system", "initial", "original", "hidden", "secret", "developer", "first")
WHOLE = one_of("entire", "full", "whole", "complete", "previous", "prior", "earlier")
TALK = one_of("conversation", "chat", "history", "transcript", "context", "messages")
EARLIER_TEXT = one_of("everything", "words", "text", "lines", "instructions", "messages")

# persist-config
WRITE = (
    r"(?:>>?|\b(?<!git )"
    + one_of(
        "tee", "add", "append", "write", "insert", "put", "echo", "copy", "paste", "save",
        "store", "update", "modify", "edit", "change", "inject", "prepend", "place",
        "install", "overwrite", "replace",
    )
    + r"\b)"
)  # fmt: skip
AGENT_FILE_NAMES = one_of(
    "agents", "claude", "gemini", "soul", "memory", "user", "copilot-instructions",
)  # fmt: skip
PAYLOAD = (
    r"(?:\b"
    + one_of(
        "curl", "wget", "nc", "ncat", "netcat", "socat", "base64 -d", "base64 --decode",
        "ssh-rsa", "ssh-ed25519", "ssh-ecdsa", "alias sudo", "bash -i", "python -c",
    )
    + r"\b|/dev/tcp/|\| ?(?:ba|z)?sh\b)"
)  # fmt: skip

# instruction-phrase
ROLE = one_of(
    "ai", "assistant", "model", "bot", "chatbot", "agent", "persona", "character", "dan",
    "jailbroken", "unrestricted", "unfiltered", "uncensored", "evil", "liberated",
)  # fmt: skip
NEW = one_of(
    "new", "updated", "revised", "real", "actual", "true", "additional", "secret", "hidden",
)  # fmt: skip
URGENT = one_of("important", "urgent", "system", "secret", "top priority", "top-priority")
FREE = one_of(
    "no longer bound by", "not bound by", "no longer subject to", "not subject to", "free of",
    "free from", "no", "without", "not restricted by", "not limited by",
)  # fmt: skip
LIMITS = one_of(
    "restrictions", "limitations", "filters", "guidelines", "guardrails", "censorship",
    "constraints", "rules", "limits", "policies",
)  # fmt: skip
ENTER = one_of("enable", "enter", "activate", "switch to", "switch into", "unlock")
JAILBREAK = one_of("jailbreak", "jailbroken", "dan", "god", "unrestricted", "unfiltered", "evil")
NEVER = one_of("do not", "don't", "dont", "never", "without")
TELL = one_of(
    "tell", "telling", "inform", "informing", "notify", "notifying", "alert", "alerting", "let",
    "letting",
)  # fmt: skip
PERSON = one_of("user", "owner", "human", "operator")
AI = one_of("ai", "assistant", "model", "agent", "llm", "chatbot", "language model")
