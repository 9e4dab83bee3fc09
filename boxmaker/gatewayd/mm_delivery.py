"""Exactly-once delivery of Mattermost events across WebSocket drops. Pure; no I/O.

The WebSocket loses every event sent while it is down, so after each reconnect
`mm_events` asks the REST API for what changed (`posts_since`) and `Delivery`
decides which of it is new. The rules, in the order they apply:

1. **One key per happening.** A post is delivered once as `Posted` (key: its
   id); an edit once per `edit_at` (key: id and edit_at); a reaction once per
   (post, user, emoji, create_at), so a reaction removed and added again is new.
   Whatever delivers a key first (socket or catch-up), the other is dropped.
2. **The watermark is the server's clock.** It is the newest server timestamp
   seen in any event or catch-up answer (`create_at`, `update_at`, `edit_at`, a
   reaction's `create_at`); it never goes back. Only server times are compared,
   never this machine's clock.
3. **A catch-up asks from `watermark - margin_ms`** (`since`). Mattermost answers
   every post whose `update_at` is after `since`; a reaction or an edit updates
   its post's `update_at`, so posts with reactions or edits in the gap come back
   too. The margin covers posts whose `create_at` is older than one already
   seen but that were committed later (two writers racing on the server), and
   posts in the same millisecond.
4. **What a catch-up delivers**, oldest first by its own timestamp, each only
   if its key is not delivered yet: a post created after `since` and not
   deleted as `Posted` (its latest version; its edits so far count as
   delivered); else an edit after `since` as `PostEdited` (intermediate edits
   made during the gap collapse into the latest one); every reaction created
   after `since` as `ReactionAdded` (the caller fetches them for the posts that
   `wants_reactions` names).
5. **Keys older than the window are forgotten**: a key whose timestamp is at or
   before the last `since` can no longer come back from a catch-up, so it is
   dropped then, and whenever more than `max_keys` are held.

Known gaps (documented in docs/gatewayd.md): reactions removed during a drop
are not reported; a post committed more than `margin_ms` after a newer post was
seen, during a drop, is missed; the first connection delivers nothing older
than the channel's newest post unless the caller passes `since_ms`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from boxmaker.gatewayd.mm_model import Event, Post, Posted, PostEdited, Reaction, ReactionAdded

Key = tuple[str, ...]


def _key_and_time(event: Event) -> tuple[Key, int]:
    if isinstance(event, Posted):
        return ("posted", event.post.id), event.post.create_at
    if isinstance(event, PostEdited):
        return ("edited", event.post.id, str(event.post.edit_at)), event.post.edit_at
    reaction = event.reaction
    key = ("reaction", reaction.post_id, reaction.user_id, reaction.emoji_name)
    return (*key, str(reaction.create_at)), reaction.create_at


def _server_time(event: Event) -> int:
    if isinstance(event, Posted | PostEdited):
        post = event.post
        return max(post.create_at, post.update_at, post.edit_at)
    return event.reaction.create_at


class Delivery:
    """The keys delivered so far and the watermark (rules 1 to 5)."""

    def __init__(
        self, *, since_ms: int | None = None, margin_ms: int = 5000, max_keys: int = 10_000
    ) -> None:
        self.watermark_ms = since_ms if since_ms is not None else 0
        self.started = since_ms is not None
        self.margin_ms = margin_ms
        self.max_keys = max_keys
        self._delivered: dict[Key, int] = {}

    def start_at(self, newest: Sequence[Post]) -> None:
        """The first connection, with no `since_ms`: what exists now is history."""
        self.watermark_ms = max([self.watermark_ms, *(_post_time(post) for post in newest)])
        self.started = True

    def since(self) -> int:
        """Where the next catch-up starts (rule 3)."""
        return max(self.watermark_ms - self.margin_ms, 0)

    def fresh(self, event: Event) -> bool:
        """Whether `event` (from the socket) is new; it counts as delivered if so."""
        self.watermark_ms = max(self.watermark_ms, _server_time(event))
        key, at = _key_and_time(event)
        if key in self._delivered:
            return False
        self._delivered[key] = at
        if len(self._delivered) > self.max_keys:
            self._forget(self.since())
        return True

    @staticmethod
    def wants_reactions(post: Post, since: int) -> bool:
        """Whether a catch-up should fetch `post`'s reactions (changed after `since`)."""
        return post.has_reactions and post.update_at > since and not post.delete_at

    def replay(
        self, since: int, posts: Iterable[Post], reactions: Mapping[str, Sequence[Reaction]]
    ) -> list[Event]:
        """The events a catch-up from `since` delivers (rule 4), oldest first."""
        found: list[tuple[int, int, Event]] = []
        for post in posts:
            self.watermark_ms = max(self.watermark_ms, _post_time(post))
            if post.delete_at:
                continue
            if post.create_at > since and ("posted", post.id) not in self._delivered:
                found.append((post.create_at, len(found), Posted(post, replayed=True)))
            elif post.edit_at > since:
                found.append((post.edit_at, len(found), PostEdited(post, replayed=True)))
            for reaction in reactions.get(post.id, ()):
                if reaction.create_at > since:
                    added = ReactionAdded(reaction, post.channel_id, replayed=True)
                    found.append((reaction.create_at, len(found), added))
        out: list[Event] = []
        for _, _, event in sorted(found, key=lambda item: (item[0], item[1])):
            key, at = _key_and_time(event)
            if key in self._delivered:
                continue
            self._delivered[key] = at
            if isinstance(event, Posted) and event.post.edit_at:
                edited = PostEdited(event.post)
                self._delivered[_key_and_time(edited)[0]] = event.post.edit_at
            out.append(event)
        self._forget(since)
        return out

    def _forget(self, floor: int) -> None:
        self._delivered = {key: at for key, at in self._delivered.items() if at > floor}


def _post_time(post: Post) -> int:
    return max(post.create_at, post.update_at, post.edit_at)
