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


TYPO_SHORTEST = 6  # a shorter word has too many neighbours that are other words


def typo(*words: str) -> str:
    """The words, each also at one edit from itself (a letter dropped, added, changed,
    or two neighbours swapped), never in its first letter and never by a letter added
    at its end (so `ignores` is not `ignore` misspelt). Words shorter than
    TYPO_SHORTEST are matched as written."""
    branches: list[str] = []
    for word in words:
        if len(word) < TYPO_SHORTEST:
            branches.append(phrase(word))
            continue
        head, rest = word[0], word[1:]
        tails = {phrase(rest)}
        for i in range(len(rest)):
            before, after = phrase(rest[:i]), phrase(rest[i + 1 :])
            tails.add(before + after)  # dropped
            tails.add(before + "[a-z]" + after)  # changed
            tails.add(before + "[a-z]" + phrase(rest[i:]))  # added before it
            if i + 1 < len(rest):  # swapped with the next
                tails.add(before + phrase(rest[i + 1] + rest[i]) + phrase(rest[i + 2 :]))
        branches.append(phrase(head) + "(?:" + "|".join(sorted(tails)) + ")")
    return "(?:" + "|".join(branches) + ")"


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
# the same, misspelt (`typo`): the key words only, as an attack written in haste has them
IGNORE_TYPO = typo("ignore", "disregard")
EARLIER_TYPO = typo("previous", "prior", "earlier", "preceding", "your", "all", "above")
ORDERS_TYPO = typo("instructions", "instruction", "directives", "guidelines", "prompts", "prompt")
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
SENSITIVE_MAIL = one_of(
    "security code", "verification code", "one-time code", "login code", "2fa code",
    "reset code", "otp", "contents", "attachments",
)  # fmt: skip
# `to` and what an e-mail address reads as once normalised (its `@` folded to `a`):
# flagging checks the original for the `@` (`FlagPattern.original`)
TO_ADDRESS = (
    "to (?:the )?(?:" + one_of("email", "e-mail", "mail") + " )?(?:address )?['\"<(]?"
    r"[a-z0-9][a-z0-9._%+-]{0,63}\.[a-z]{2,24}\b"
)
AT_ADDRESS = r"[A-Za-z0-9._%+-][@\uff20][A-Za-z0-9-]{1,63}\."
# money: a verb that moves it, where it goes, and (in the original) an amount or an IBAN
PAY = one_of("transfer", "wire", "send", "pay", "remit", "deposit", "move")
TO_ACCOUNT = (
    "to (?:" + one_of("the", "this", "my", "our", "a") + " )?"
    "(?:" + one_of("following", "new", "below") + " )?"
    "(?:" + one_of("bank", "savings", "checking", "recipient", "beneficiary", "receiving") + " )?"
    + one_of("account", "iban", "wallet") + r"\b"
)  # fmt: skip
TO_IBAN = (
    "to (?:the )?(?:following )?(?:bank )?(?:" + one_of("account", "iban") + "(?: number)? ?:? )?"
    r"['\"]?[a-z]{2}[0-9a-z]{13,32}\b"
)
AMOUNT = (
    r"(?i:[$\u20ac\u00a3\u00a5] ?\d|\b\d[\d,.]* ?"
    r"(?:usd|eur|gbp|chf|jpy|dollars?|euros?|pounds?|btc|eth|bitcoins?)\b)"
)
IBAN = r"(?i:\b[a-z]{2}\d{2}[a-z0-9]{11,30}\b)"
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
# models addressed by name (`gpt` reads `gpt-4`, `gpt-4o`: the word ends at the hyphen)
MODEL_NAMES = one_of(
    "claude", "chatgpt", "gpt", "gemini", "gemma", "llama", "qwen", "mistral", "copilot",
    "grok", "deepseek", "ornith", "command r",
)  # fmt: skip
AI_OR_NAME = f"(?:{AI}|{MODEL_NAMES})"

# message-to-the-ai: a TODO that gives the model an order
ACT = one_of(
    "send", "email", "e-mail", "mail", "forward", "upload", "post", "exfiltrate", "leak",
    "transfer", "wire", "ignore", "disregard", "forget", "run", "execute", "delete", "install",
    "download", "reveal",
)  # fmt: skip
MUST = one_of("must", "should", "need to", "have to", "will", "are to", "shall", "now")
ACT_ON_DATA = (
    "(?:" + one_of(
        "send", "email", "e-mail", "mail", "forward", "upload", "post", "exfiltrate", "leak",
        "transfer", "wire",
    )
    + "|" + one_of("ignore", "disregard", "forget") + " (?:all |any )?(?:of )?"
    + one_of("your", "previous", "prior", "earlier", "the user", "the owner", "the above",
             "instructions")
    + ")"
)  # fmt: skip

# fake-system-header: a made-up system turn or notice
SYSTEM_PART = one_of("message", "prompt", "instructions", "instruction", "note", "override")
SYSTEM_OVERRIDE_END = one_of(
    "mode", "enabled", "activated", "engaged", "initiated", "protocol", "accepted", "granted",
    "in effect",
)  # fmt: skip
SYSTEM_ADDRESSED = one_of(
    "you", "your", "the assistant", "assistant", "the ai", "the model", "ignore", "new",
    "override", "important", "attention", "from now on", "all", "note", "message",
    "instructions",
)  # fmt: skip
