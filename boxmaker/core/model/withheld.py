"""The ids a streaming llama-server withheld, recovered from the text it sent. Pure.

llama-server sends a streamed completion one token an event, but not a token whose
text leaves the reply inside a UTF-8 character (a byte token of a rare character, a
byte-level BPE piece cut mid-character): it holds it back until the character is
whole, then sends the text of all of them with the last id only (tools/server,
`process_token` and `validate_utf8`, in the llama.cpp llama-cpp-python 0.3.36
vendors). The count it keeps (`tokens_predicted`, `timings.predicted_n`) says how many
were held back; their text is the event's text less the last id's own piece.

Those ids are found again here, from the vocabulary: the one sequence of exactly that
many tokens whose pieces spell the held-back bytes, each of them leaving the text
inside a character (else the server would have sent it). With byte tokens (Gemma,
Llama) there is one such sequence; where the vocabulary allows two, nothing is
guessed: `ServedReplyError`, and the turn ends (docs/backends.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

from boxmaker.core.model.served import ServedReplyError

SEARCH_LIMIT = 64  # bytes held back at most: a few characters, in practice one


def ends_inside_character(data: bytes) -> bool:
    """Whether `data` ends inside a multi-byte UTF-8 character, by llama-server's own
    rule (`validate_utf8`: a lead byte among the last four whose character needs more
    bytes than follow it)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if (byte & 0xE0) == 0xC0 and back < 2:
            return True
        if (byte & 0xF0) == 0xE0 and back < 3:
            return True
        if (byte & 0xF8) == 0xF0 and back < 4:
            return True
    return False


def withheld_ids(
    held: bytes,
    count: int,
    *,
    before: bytes,
    pieces: Callable[[bytes], Sequence[int]],
) -> tuple[int, ...]:
    """The `count` ids whose pieces spell `held`, each ending inside a character of
    `before + held` (`before`: the reply's text the server had sent, its last bytes
    are enough). `pieces(b)`: the ids whose piece is exactly `b`. ServedReplyError
    where no such sequence or more than one is found."""
    if count <= 0 or not held or len(held) > SEARCH_LIMIT:
        raise _unreadable(count, held)
    context = before[-4:]
    # a token may end only where the text is left inside a character
    cuts = [end for end in range(1, len(held) + 1) if ends_inside_character(context + held[:end])]

    @cache
    def ways(start: int, left: int) -> int:
        """How many sequences of `left` ids spell held[start:], counted up to 2."""
        if start == len(held) or left == 0:
            return int(start == len(held) and left == 0)
        total = 0
        for end in cuts:
            if end > start:
                total += len(pieces(held[start:end])) * ways(end, left - 1)
                if total > 1:
                    return 2
        return total

    if ways(0, count) != 1:
        raise _unreadable(count, held, several=ways(0, count) > 1)
    found: list[int] = []
    start = 0
    while start < len(held):
        end, token = next(
            (end, token)
            for end in cuts
            if end > start
            for token in pieces(held[start:end])
            if ways(end, count - len(found) - 1) == 1
        )
        found.append(token)
        start = end
    return tuple(found)


def _unreadable(count: int, held: bytes, *, several: bool = False) -> ServedReplyError:
    why = "several token sequences spell them" if several else "no token sequence spells them"
    return ServedReplyError(
        f"the server held back {count} token id(s) of its reply ({held[:16]!r}) and "
        f"{why}, so the reply cannot be kept as the ids the model made"
    )
