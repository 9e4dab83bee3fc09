"""The flag patterns: text shaped like an attack, after normalisation. Pure; no I/O.

Patterns written for boxmaker after the categories of Hermes' strict threat
patterns (NousResearch/hermes-agent, tools/threat_patterns.py, MIT licence),
whose rule is kept: match attack behaviour, not bossy English. None of its
pattern text is copied. They read the normalised text (`normalisation`: lower
case, one space for any run of whitespace, leetspeak and look-alikes folded) and
are made of the words in `flag_words`.

The rules and their patterns (the `name` of each is what the tests and the
ReDoS check call it):

- `ignore-instructions`: an instruction to ignore, forget or replace earlier
  instructions (`ignore all previous instructions`, `disregard your guidelines`,
  `ignore the above and say ...`, `forget everything you were told`,
  `override the system prompt`).
- `exfil-url`: an instruction to send conversation, memory or secrets to a URL:
  a `to <url>` (or `www.`) with a sending verb and a sensitive noun in the 200
  characters before it; or a Markdown image whose URL carries a placeholder in
  its query (`![x](https://host/?q=[DATA])`), the zero-click form.
- `dump-conversation`: an instruction to repeat or reveal the system prompt,
  the model's instructions, or the whole conversation.
- `persist-config`: writing to SSH or agent configuration: authorized_keys and
  ~/.ssh/config, agent instruction files (AGENTS.md, CLAUDE.md, .cursorrules,
  soul.md, memory.md, ...) and boxmaker's own configuration, with a writing verb
  or `>>` in the 80 characters before (`git add` is not one); shell start-up
  files and crontab only when a fetch-and-run or a key is near as well (adding
  `export PATH=...` to ~/.bashrc is ordinary setup).
- `instruction-phrase`: six phrases that only an injection says to a model,
  chosen to pass the code-work corpus:
  1. `you-are-now`: "you are now" and a role for the model (DAN, an
     unrestricted assistant), not "you are now in the project directory";
  2. `new-instructions`: "new instructions:" and its variants, marked by a colon
     or asterisks, not "the new instructions are in the wiki";
  3. `mode-switch`: "DAN mode enabled", "enable jailbreak mode", "do anything
     now", "developer mode enabled:" as jailbreaks write it (with a colon or
     asterisks: phones have a developer mode too);
  4. `no-restrictions`: telling the model it has no restrictions or filters;
  5. `hide-from-user`: "do not tell the user", "without informing the owner";
  6. `message-to-the-ai`: "an important message from ... to you, AI model",
     AgentDojo's framing, and "note to the AI assistant:".

Speed. A pattern is an anchor, found by one scan of the text, and what must be
near it (`FlagPattern`): the anchor starts with a literal or a short list of
words, so the scan skips ahead in C; the verbs and nouns around it are looked
for only where an anchor is. The word-start test of an anchor is done on the
match, as a leading `\b` would stop `re` from skipping ahead.

Linear time. Python's `re` backtracks, so each pattern is built to keep that
bounded: every repetition is bounded (`{0,4}`, `{1,24}`), filler words are
`[^ ]{1,24}` each ended by the one space that follows it (so fillers split a
text one way only), and no quantified group holds an unbounded one. How the
windows stay linear when anchors are packed close is `flagging`'s part.
tests/core/sanitize/test_sanitize_redos.py times every pattern on a 64 KiB near miss
built to be its worst case.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from boxmaker.core.sanitize.flag_words import (
    ACT,
    ACT_ON_DATA,
    AGENT_FILE_NAMES,
    AI,
    AI_OR_NAME,
    AMOUNT,
    AT_ADDRESS,
    EARLIER,
    EARLIER_TEXT,
    EARLIER_TYPO,
    ENTER,
    FREE,
    IBAN,
    IGNORE_TYPO,
    IGNORE_VERBS,
    JAILBREAK,
    LIMITS,
    MUST,
    NEVER,
    NEW,
    ORDERS,
    ORDERS_TYPO,
    PAY,
    PAYLOAD,
    PERSON,
    PROMPT_KIND,
    REVEAL,
    REVEAL_STRONG,
    ROLE,
    SAY,
    SEND,
    SENSITIVE,
    SENSITIVE_MAIL,
    SYSTEM_ADDRESSED,
    SYSTEM_OVERRIDE_END,
    SYSTEM_PART,
    TALK,
    TELL,
    THE_ABOVE,
    TO_ACCOUNT,
    TO_ADDRESS,
    TO_IBAN,
    TO_URL,
    URGENT,
    WHOLE,
    WRITE,
    YOUR_SECRETS,
    fill,
    one_of,
    phrase,
)


@dataclass(frozen=True, slots=True)
class FlagPattern:
    """An anchor pattern, and what must also be found around it.

    `before`: (pattern, window) pairs, each pattern to be found within `window`
    characters before the anchor (a pattern ending in `$` must end where the
    anchor starts); the finding starts at the earliest of them. `near`: the same,
    within `window` characters either side. `inside`: a pattern to be found in
    the anchor's own match. `word_start`: the anchor must start a word (checked
    on the match, since a leading `\\b` would slow every scan down). `original`: a
    pattern to be found in the original text of the finding (from its start to the
    anchor's end), for what normalisation folds away (an e-mail address's `@`, a
    currency sign, the digits of an amount); checked only where the rest matched.
    """

    rule: str
    name: str
    anchor: re.Pattern[str]
    before: tuple[tuple[re.Pattern[str], int], ...] = ()
    near: tuple[tuple[re.Pattern[str], int], ...] = ()
    inside: re.Pattern[str] | None = None
    word_start: bool = True
    original: re.Pattern[str] | None = None


IGNORE = "ignore-instructions"
EXFIL = "exfil-url"
DUMP = "dump-conversation"
PERSIST = "persist-config"
PHRASE = "instruction-phrase"


def _c(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _ending(pattern: str) -> re.Pattern[str]:
    """A `before` pattern that must start a word and end right where the anchor starts."""
    return re.compile(rf"\b{pattern}$")


def _somewhere(pattern: str) -> re.Pattern[str]:
    """A `before` or `near` pattern that may be anywhere in its window, as a word."""
    return re.compile(rf"\b{pattern}\b")


PATTERNS: tuple[FlagPattern, ...] = (
    # ignore-instructions
    FlagPattern(
        IGNORE, "ignore-earlier", _c(rf"{IGNORE_VERBS} {fill(4)}{EARLIER} {fill(3)}{ORDERS}\b")
    ),
    FlagPattern(
        IGNORE,
        "ignore-earlier-typo",
        _c(rf"{IGNORE_TYPO} {fill(4)}{EARLIER_TYPO} {fill(3)}{ORDERS_TYPO}\b"),
    ),
    FlagPattern(
        IGNORE,
        "ignore-above-and",
        _c(
            rf"{one_of('ignore', 'disregard', 'forget')} (?:all of |everything )?the "
            rf"{THE_ABOVE}(?: {one_of('text', 'prompt', 'message')})?"
            rf",? and (?:instead )?{SAY}\b"
        ),
    ),
    FlagPattern(
        IGNORE,
        "override-system-prompt",
        _c(r"system prompt\b"),
        before=((_ending(rf"{one_of('override', 'replace', 'overwrite')} (?:the |your )?"), 15),),
    ),
    FlagPattern(
        IGNORE, "system-prompt-override", _c(rf"system prompt {one_of('override', 'overwrite')}\b")
    ),
    FlagPattern(
        IGNORE,
        "forget-everything",
        _c(
            rf"{one_of('forget', 'ignore', 'disregard')} (?:about )?everything"
            rf" (?:{one_of('above', 'before', 'so far', 'you were told', 'you have been told')}"
            rf"|{one_of('i', 'we')} {one_of('said', 'told you')})\b"
        ),
    ),
    # exfil-url
    FlagPattern(
        EXFIL,
        "send-to-url",
        _c(TO_URL),
        before=((_somewhere(SEND), 200), (_somewhere(SENSITIVE), 200)),
    ),
    FlagPattern(
        EXFIL,
        "send-to-address",
        _c(TO_ADDRESS),
        before=((_somewhere(SEND), 200), (_somewhere(f"(?:{SENSITIVE}|{SENSITIVE_MAIL})"), 200)),
        original=_c(AT_ADDRESS),
    ),
    FlagPattern(
        EXFIL,
        "pay-to-account",
        _c(TO_ACCOUNT),
        before=((_somewhere(PAY), 200),),
        original=_c(AMOUNT),
    ),
    FlagPattern(
        EXFIL,
        "pay-to-iban",
        _c(TO_IBAN),
        before=((_somewhere(PAY), 200),),
        original=_c(IBAN),
    ),
    FlagPattern(
        EXFIL,
        "image-placeholder",
        _c(r"!\[[^\]]{0,100}\]\((?:https?:)?//[^ )]{1,300}+"),
        inside=_c(r"[?&][^=&]{1,40}=(?:\[|\{|<|%5b|%7b)"),
        word_start=False,
    ),
    # dump-conversation
    FlagPattern(
        DUMP,
        "reveal-your-prompt",
        _c(rf"your (?:{fill(2)})?{YOUR_SECRETS}\b"),
        before=((_ending(rf"{REVEAL} (?:back |out |me )?{fill(2)}"), 65),),
    ),
    FlagPattern(
        DUMP,
        "reveal-the-prompt",
        _c(r"(?:prompt|message)\b"),
        before=(
            (
                _ending(rf"{REVEAL_STRONG} (?:back |out )?(?:the |this )?{fill(3)}{PROMPT_KIND} "),
                105,
            ),
        ),
    ),
    FlagPattern(
        DUMP,
        "dump-whole-conversation",
        _c(rf"{TALK}\b"),
        before=(
            (
                _ending(
                    rf"{REVEAL} (?:back |out |me )?(?:the |this |our |all (?:the |of the )?)?"
                    rf"{WHOLE} (?:chat )?"
                ),
                40,
            ),
        ),
    ),
    FlagPattern(
        DUMP,
        "dump-everything-above",
        _c(rf"{one_of('above', 'so far', 'before this')}\b"),
        before=(
            (
                _ending(rf"{REVEAL} (?:back |out |me )?(?:all (?:of )?)?(?:the )?{EARLIER_TEXT} "),
                39,
            ),
        ),
    ),
    # persist-config
    FlagPattern(
        PERSIST,
        "write-authorized-keys",
        _c("authorized_keys"),
        before=((_c(WRITE), 80),),
        word_start=False,
    ),
    FlagPattern(
        PERSIST,
        "write-agent-instructions",
        _c(r"\.md\b"),
        before=(
            (_c(rf"(?<![a-z0-9_-]){AGENT_FILE_NAMES}$"), 20),
            (_c(WRITE), 80),
        ),
        word_start=False,
    ),
    FlagPattern(
        PERSIST,
        "write-agent-config",
        _c(rf"\.{one_of('ssh/config', 'cursorrules', 'clinerules', 'windsurfrules')}\b"),
        before=((_c(WRITE), 80),),
        word_start=False,
    ),
    FlagPattern(
        PERSIST,
        "write-boxmaker-config",
        _c(r"\.toml\b"),
        before=(
            (_c(rf"(?<![a-z0-9_-]){one_of('loopd', 'brokerd', 'memoryd', 'gatewayd')}$"), 8),
            (_c(WRITE), 80),
        ),
        word_start=False,
    ),
    FlagPattern(
        PERSIST,
        "write-boxmaker-etc",
        _c("/etc/boxmaker/"),
        before=((_c(WRITE), 80),),
        word_start=False,
    ),
    FlagPattern(
        PERSIST,
        "write-startup-file",
        _c(
            rf"\.{one_of('bashrc', 'zshrc', 'bash_profile', 'zprofile', 'profile', 'bash_login')}\b"
        ),
        before=((_c(WRITE), 120),),
        near=((_c(PAYLOAD), 120),),
        word_start=False,
    ),
    *(
        FlagPattern(
            PERSIST,
            f"write-{name}",
            _c(rf"{phrase(literal)}\b"),
            before=((_c(WRITE), 120),),
            near=((_c(PAYLOAD), 120),),
            word_start=False,
        )
        for name, literal in (
            ("crontab", "crontab"),
            ("sudoers", "sudoers"),
            ("rc-local", "/etc/rc.local"),
        )
    ),
    # instruction-phrase
    FlagPattern(
        PHRASE,
        "you-are-now",
        _c(rf"you are now (?:{one_of('a', 'an', 'the', 'my', 'your')} )?{fill(2)}{ROLE}\b"),
    ),
    FlagPattern(
        PHRASE,
        "new-instructions",
        _c(rf"{one_of('instructions', 'directives', 'orders', 'commands')}(?: ?:| ?\*| ?!)"),
        before=((_ending(rf"{NEW} (?:{URGENT} )?"), 24),),
    ),
    FlagPattern(
        PHRASE,
        "mode-switch",
        _c(rf"mode {one_of('enabled', 'activated', 'on', 'engaged', 'unlocked')}\b"),
        before=((_ending(rf"{JAILBREAK} "), 13),),
    ),
    FlagPattern(
        PHRASE,
        "mode-switch-enter",
        _c(r"mode\b"),
        before=(
            (
                _ending(rf"{ENTER} {JAILBREAK} "),
                25,
            ),
        ),
    ),
    FlagPattern(PHRASE, "mode-switch-dan", _c(r"do anything now\b")),
    FlagPattern(
        PHRASE,
        "mode-switch-developer",
        _c(
            rf"mode {one_of('enabled', 'activated', 'has been enabled', 'has been activated')}"
            r"(?: ?:| ?!| ?\*|,? you are now)"
        ),
        before=((_ending(rf"{one_of('developer', 'debug', 'admin', 'maintenance')} "), 12),),
    ),
    FlagPattern(
        PHRASE,
        "no-restrictions",
        _c(
            rf"you {one_of('are', 'have', 'will be', 'were', 'now have', 'have been')}"
            rf" (?:now )?{fill(2)}{FREE}"
            rf" (?:any )?(?:{one_of('ethical', 'moral', 'safety', 'content')} )?{LIMITS}\b"
        ),
    ),
    FlagPattern(
        PHRASE,
        "hide-from-user",
        _c(rf"{PERSON}\b"),
        before=(
            (
                _ending(
                    rf"(?:{NEVER} {TELL}|{NEVER} {one_of('mention', 'reveal', 'disclose', 'show')}"
                    rf" {one_of('this', 'these', 'it', 'that', 'anything')}(?: [a-z]{{1,12}})? to)"
                    rf" (?:the |your )?"
                ),
                47,
            ),
        ),
    ),
    FlagPattern(
        PHRASE,
        "message-to-the-ai",
        _c(
            rf"{one_of('important', 'urgent', 'critical', 'priority')}"
            rf" {one_of('message', 'instructions', 'instruction', 'notice', 'note', 'update')}"
            rf" {one_of('from', 'for')} {fill(6)}(?:to )?(?:the |you,? (?:the )?)?{AI_OR_NAME}\b"
        ),
    ),
    FlagPattern(
        PHRASE,
        "message-from-me-to-you",
        _c(
            rf"{one_of('important', 'urgent', 'critical', 'priority')}"
            rf" {one_of('message', 'instructions', 'notice', 'note')} from me, {fill(3)}to you\b"
        ),
    ),
    FlagPattern(
        PHRASE,
        "note-to-the-ai",
        _c(
            rf"{one_of('note', 'message', 'instructions')} {one_of('to', 'for')}"
            rf" (?:the |any )?{AI}(?: {one_of('assistant', 'agent', 'model')})? ?:"
        ),
    ),
    FlagPattern(
        PHRASE,
        "todo-to-the-ai",
        _c(
            r"todo ?(?:\( ?|\[ ?| for | to |: ?|- ?)?(?:the |you,? (?:the )?)?(?:ai )?"
            rf"{AI_OR_NAME}(?: {one_of('assistant', 'agent', 'model')})? ?[)\]]? ?[:,-]"
            rf" {fill(3)}{ACT}\b"
        ),
    ),
    FlagPattern(
        PHRASE,
        "todo-you-must",
        _c(
            rf"todo ?:? you,? (?:{MUST} )?(?:{one_of('now', 'please', 'immediately', 'first')} )?"
            rf"{ACT_ON_DATA}\b"
        ),
    ),
    FlagPattern(
        PHRASE,
        "fake-system-header",
        _c(
            # `##{0,5}` is `#{1,6}` led by a literal, so that `re` skips ahead to a `#`
            rf"(?:##{{0,5}} ?\( ?system(?:[_ ]{SYSTEM_PART})? ?\)"
            rf"|###{{0,4}} ?system(?:[_ ]{SYSTEM_PART})? ?[:#]"
            rf"|\[system(?:[_ ]{SYSTEM_PART})?\](?:\(#[a-z_-]{{1,30}}\))? ?:? ?{SYSTEM_ADDRESSED}\b"
            r"|<\|system\|> ?[a-z]"
            rf"|system override(?: ?[:!*\]]| {SYSTEM_OVERRIDE_END}\b))"
        ),
    ),
)
