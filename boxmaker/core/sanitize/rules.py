"""The rule table: every rule's name, its action and one sentence. Pure data; no I/O.

Used for docs/sanitizer.md and by `bxctl`; a test checks that every rule a
finding can carry is here and that docs/sanitizer.md lists each.
"""

from __future__ import annotations

from types import MappingProxyType

from boxmaker.core.sanitize import characters, flag_patterns, secret_prefixes, tags
from boxmaker.core.sanitize.findings import Action, Rule

_R, _N, _F = Action.REFUSE, Action.NEUTRALISE, Action.FLAG

RULES = MappingProxyType(
    {
        characters.CONTROL: Rule(_R, "A control character other than line feed and tab."),
        characters.INVISIBLE: Rule(
            _R,
            "An invisible or format character (zero-width, joiner, variation selector, tag,"
            " filler, line or paragraph separator, Braille blank) outside an emoji sequence.",
        ),
        characters.BIDI: Rule(
            _R, "A bidirectional control, which can make code read differently (Trojan Source)."
        ),
        characters.PRIVATE_USE: Rule(_R, "A private-use character, which has no agreed meaning."),
        characters.NONCHARACTER: Rule(_R, "A noncharacter, which never belongs in text."),
        characters.SURROGATE: Rule(_R, "A lone surrogate, which UTF-8 cannot carry."),
        secret_prefixes.GITHUB: Rule(
            _R, "A GitHub token (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_)."
        ),
        secret_prefixes.GITLAB: Rule(_R, "A GitLab personal access token (glpat-)."),
        secret_prefixes.OPENAI: Rule(
            _R, "An API key of the sk- form (OpenAI, Anthropic and others)."
        ),
        secret_prefixes.SLACK: Rule(_R, "A Slack token (xoxb-, xoxa-, xoxp-, xoxr-, xoxs-)."),
        secret_prefixes.AWS: Rule(
            _R,
            "An AWS access key id (AKIA or ASIA and 16 characters), or a secret access key"
            " after its name or beside its key id.",
        ),
        secret_prefixes.PRIVATE_KEY: Rule(
            _R, "A private key block (-----BEGIN ... PRIVATE KEY-----), or a key body without it."
        ),
        tags.REFUSED: Rule(_R, "A chat-template tag in a memory write."),
        tags.NEUTRALISED: Rule(
            _N, "A chat-template tag, whose angle brackets are turned into look-alikes."
        ),
        flag_patterns.IGNORE: Rule(
            _F, "An instruction to ignore, forget or replace earlier instructions."
        ),
        flag_patterns.EXFIL: Rule(
            _F,
            "An instruction to send the conversation, memory or secrets to a URL or an"
            " e-mail address, or to transfer money to an account.",
        ),
        flag_patterns.DUMP: Rule(
            _F, "An instruction to reveal the system prompt or dump the conversation."
        ),
        flag_patterns.PERSIST: Rule(
            _F, "An instruction to write to SSH, shell start-up or agent configuration."
        ),
        flag_patterns.PHRASE: Rule(
            _F, "A phrase only an injection says to a model (you are now, new instructions:, ...)."
        ),
    }
)
