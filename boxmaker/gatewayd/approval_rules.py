"""Approvals over chat, the rules: the approval post's text, its outcome, and which answers count.

No I/O: no clock (`now` is an argument), no Mattermost, no sockets. gatewayd's
approvals module feeds it brokerd's `approval_request` and the chat's events,
and does what the values say.

The post. Everything in it comes from brokerd's `PendingApproval` (never from
loopd or the model): the approval id, tool, session, grant, taint, expiry, the
digest the approval is bound to (its first 12 hex characters, as `bxctl
approvals` shows it), the call that made the session untrusted (when it is) and
the flag rule its result matched, if that is what did, in `bxctl approvals`'
words (`core.display.untrusted_origin`), and the canonical arguments. The fields are
shown as data in one fenced code block whose fence is longer than any run of
backticks inside it, so nothing in them can
close the block and be read as Markdown (no link, image, mention or emphasis);
hidden characters (`core.display.hidden_chars`: controls, bidi and zero-width
characters, ...) are shown in JSON's `\\uhhhh` spelling (`core.display.escape`), so
what the owner reads is what brokerd decides on. Arguments too long for one
post are cut, and the post says so and where to read them whole (`bxctl
approvals`). Then the instructions: react with an approve or a refuse emoji, or
reply in the post's thread `approve <id>` or `refuse <id> [reason]`.

The outcome. When brokerd reports how the approval was settled
(`approval_outcome`), the post is edited to the same block, without the
instructions, and one line saying who answered and what came of it; from then
on no answer counts.

The answer. An event counts as the owner's answer only if every rule holds, in
this order (the first that fails is the `Ignore`'s reason):

    1. a posted message that is an edit, a system post (any `type`) or sent by a
       webhook (`from_webhook`) never counts;
    2. its user is the owner (gatewayd.toml's `[mattermost] owner`);
    3. its channel is the owner's direct-message channel with the bot;
    4. its post (a reaction's `post_id`, a reply's `root_id`) is one of the
       pending approval posts this gatewayd made (`posts`: post id -> approval);
       the caller removes a post from that table, atomically, as soon as one
       answer counts, so only the first answer counts;
    5. the approval has not expired: now < expires;
       (an approve on a post that cannot show the arguments, because with them it
       would pass Mattermost's post length, never counts: the post says to use
       bxctl, and only a refusal counts there)
    6. a reaction's emoji is in APPROVE_EMOJI (approve) or REFUSE_EMOJI
       (refuse); a reply's whole text, surrounding whitespace aside, is
       `approve <id>` or `refuse <id>` optionally followed by one space and a
       reason, the verb in any case, `<id>` exactly the decimal id of that
       post's approval. A reason is one line of at most MAX_REASON_CHARS
       characters with no control character (the wire's own bound).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from boxmaker.core.audit.records import ApprovalAnswer
from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.display.untrusted_origin import untrusted_since
from boxmaker.core.policy import DIGEST_SHORT
from boxmaker.core.wire.broker_admin import PendingApproval
from boxmaker.core.wire.gateway import (
    BY_BXCTL,
    MAX_REASON_CHARS,
    ApprovalOutcome,
    ReplyAnswer,
    check_reason,
)

# reactions (Mattermost emoji names) that answer an approval post
APPROVE_EMOJI = frozenset({"white_check_mark", "heavy_check_mark", "+1"})
REFUSE_EMOJI = frozenset({"x", "no_entry", "-1", "no_entry_sign"})

MAX_SHOWN_ARGUMENTS = 12_000  # what is left after the rest of the post, with room to spare
MAX_SHOWN_POST = 15_000  # the block's most, leaving room for the lines around it

_REPLY = re.compile(r"(approve|refuse) ([0-9]+)(?: (.*))?", re.IGNORECASE | re.DOTALL)


# --- the post -----------------------------------------------------------------------


def fenced(text: str, info: str = "text") -> str:
    """`text` as a fenced code block: the fence is longer than any backtick run in it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def shown_arguments(arguments: str) -> tuple[str, str | None]:
    """The arguments as shown (escaped, maybe cut), and a note when they were cut."""
    shown = escape_arguments(arguments)
    if len(shown) <= MAX_SHOWN_ARGUMENTS:
        return shown, None
    note = (
        f"The arguments are {len(shown)} characters; the first {MAX_SHOWN_ARGUMENTS} are"
        " shown. Read them whole with `bxctl approvals` before you approve."
    )
    return shown[:MAX_SHOWN_ARGUMENTS], note


def _fields(item: PendingApproval) -> list[str]:
    lines = [
        f"approval   {item.approval}",
        f"tool       {escape_arguments(item.tool)}",
        f"session    {item.session}",
        f"grant      {escape_arguments(item.grant)}",
        f"taint      {item.taint}",
        f"expires    {item.expires}",
        f"digest     {item.digest[:DIGEST_SHORT]}",
    ]
    if item.untrusted_by is not None:
        lines.append(f"untrusted  {untrusted_since(item.untrusted_by)}")
    return lines


def details(item: PendingApproval) -> str:
    """The approval's fields as one fenced block (the part both texts share); without
    the arguments when, with them, the post would pass Mattermost's length."""
    return _details(item)[0]


def shows_arguments(item: PendingApproval) -> bool:
    """Whether the post shows the arguments (some or all): only then may chat approve."""
    return _details(item)[1]


def _details(item: PendingApproval) -> tuple[str, bool]:
    arguments, note = shown_arguments(item.arguments)
    block = fenced("\n".join([*_fields(item), f"arguments  {arguments}"]))
    whole = block if note is None else f"{block}\n{note}"
    if len(whole) <= MAX_SHOWN_POST:
        return whole, True
    length = len(escape_arguments(item.arguments))
    notice = (
        f"Its arguments ({length:,} characters) cannot be shown in a post. Read them with"
        f" `bxctl approvals`, then answer there: `bxctl approve {item.approval}` or"
        f" `bxctl refuse {item.approval}`. Here, only a refusal counts."
    )
    return f"{fenced(chr(10).join(_fields(item)))}\n{notice}", False


def post_text(item: PendingApproval) -> str:
    """The approval post: what waits, as data, then how to answer it."""
    n = item.approval
    return "\n".join(
        [
            f"#### Approval {n} is waiting for you",
            details(item),
            "Approve: react with :white_check_mark: (or :heavy_check_mark:, :+1:), or reply"
            f" in this thread `approve {n}`.",
            "Refuse: react with :x: (or :no_entry:, :no_entry_sign:, :-1:), or reply in this"
            f" thread `refuse {n}` or `refuse {n} <reason>`.",
            f"Or from a terminal: `bxctl approve {n}` / `bxctl refuse {n}`.",
        ]
    )


def outcome_text(item: PendingApproval, outcome: ApprovalOutcome) -> str:
    """The post once settled: the same block, who answered, and what came of it."""
    answered = {
        ApprovalAnswer.APPROVED: "Approved",
        ApprovalAnswer.REFUSED: "Refused",
        ApprovalAnswer.EXPIRED: "Expired",
    }[outcome.answer]
    if outcome.by == BY_BXCTL:
        answered += " with bxctl"
    elif outcome.by is not None:
        answered += " in chat"
    said = fenced(escape_arguments(outcome.outcome))
    return "\n".join(
        [f"#### Approval {item.approval}: {answered.lower()}", details(item), "Outcome:", said]
    )


# --- the answer ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PostedApproval:
    """A pending approval post this gatewayd made."""

    post: str
    approval: int
    expires: str  # brokerd's expiry, a wire timestamp
    shown: bool = True  # the post shows the arguments: False, only refusing counts


@dataclass(frozen=True, slots=True)
class ReactionAdded:
    user_id: str
    post_id: str
    emoji: str  # the emoji's name, without colons
    channel_id: str


@dataclass(frozen=True, slots=True)
class Posted:
    """A message posted (or edited) in a channel the bot can see."""

    user_id: str
    channel_id: str
    root_id: str  # the thread's first post; "" when not a reply
    message: str
    is_edit: bool = False
    type: str = ""  # "" for a user's post; "system_..." for the server's
    from_webhook: bool = False


@dataclass(frozen=True, slots=True)
class Approve:
    approval: int
    post: str


@dataclass(frozen=True, slots=True)
class Refuse:
    approval: int
    post: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class Ignore:
    why: str


Event = ReactionAdded | Posted
Judgement = Approve | Refuse | Ignore


def judge(
    event: Event,
    posts: Mapping[str, PostedApproval],
    owner: str,
    owner_dm: str,
    now: str,
) -> Judgement:
    """Whether `event` answers a pending approval post (the rules in the module docstring)."""
    if isinstance(event, Posted):
        if event.is_edit:
            return Ignore("an edited message never counts")
        if event.type:
            return Ignore(f"a system post ({event.type}) never counts")
        if event.from_webhook:
            return Ignore("a webhook post never counts")
    if event.user_id != owner:
        return Ignore("not the owner")
    if event.channel_id != owner_dm:
        return Ignore("not the owner's direct channel")
    target = event.post_id if isinstance(event, ReactionAdded) else event.root_id
    posted = posts.get(target) if target else None
    if posted is None:
        return Ignore("not a pending approval post")
    if not now < posted.expires:
        return Ignore(f"approval {posted.approval} has expired")
    if isinstance(event, ReactionAdded):
        return _by_emoji(event.emoji, posted)
    return _by_reply(event.message, posted)


NOT_SHOWN = "the post does not show the arguments: approve it with bxctl"


def _by_emoji(emoji: str, posted: PostedApproval) -> Judgement:
    if emoji in APPROVE_EMOJI:
        if not posted.shown:
            return Ignore(NOT_SHOWN)
        return Approve(posted.approval, posted.post)
    if emoji in REFUSE_EMOJI:
        return Refuse(posted.approval, posted.post, None)
    return Ignore(f"the emoji {emoji!r} neither approves nor refuses")


def _by_reply(message: str, posted: PostedApproval) -> Judgement:
    match = _REPLY.fullmatch(message.strip())
    if match is None:
        return Ignore("not `approve <id>` or `refuse <id> [reason]`")
    verb, ident = match.group(1).lower(), match.group(2)
    reason = None if match.group(3) is None else match.group(3).strip() or None
    if ident != str(posted.approval):
        return Ignore(f"the reply names {ident}, not approval {posted.approval}")
    if verb == ReplyAnswer.APPROVE:
        if match.group(3) is not None:
            return Ignore("`approve <id>` takes nothing after the id")
        if not posted.shown:
            return Ignore(NOT_SHOWN)
        return Approve(posted.approval, posted.post)
    if reason is None:
        return Refuse(posted.approval, posted.post, None)
    try:
        return Refuse(posted.approval, posted.post, check_reason(reason))
    except ValueError:
        return Ignore(f"a reason is one line of at most {MAX_REASON_CHARS} characters")
