"""A new session's memory block, fitted to loopd's own token budget. No I/O but logging.

memoryd bounds the block in bytes (`core.model.memory_block.BLOCK_BYTES`); a model with
a small context needs a bound of its own, in its own tokens. The rules:

1. The budget is `[memory] block_tokens` (0: an eighth of the context, never more
   than a quarter of it; `loopd.main.turn_limits`); None (the context is not
   known) keeps the block as memoryd sent it.
2. The block is measured as the model is shown it: neutralised with the loop's
   tags, counted with the model's own tokenizer without special-token parsing (the
   count compaction and result cuts use). A text of at most `budget` bytes fits
   without a count: every token is at least one byte.
3. The block is cut by `core.model.memory_block.fit_block` (rule 3): whole entries, in
   memoryd's order, until the next one does not fit; that one and all after it are
   left out, and named (the first LOGGED_IDS ids) in one log line,
   `event=memory_block_over_budget`. A soul that alone does not fit is cut, and
   logged `event=memory_soul_cut`. An entry is never cut.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from boxmaker.core.model.memory_block import LOGGED_IDS, BlockEntry, fit_block
from boxmaker.core.sanitize import neutralise

log = logging.getLogger(__name__)

Count = Callable[[str], int]


def fit_memory(
    session: str,
    soul: str,
    entries: Sequence[BlockEntry],
    budget: int | None,
    count: Count,
    tags: Sequence[str],
) -> str:
    """The block's text within `budget` tokens once neutralised with `tags` (rules 1 to 3),
    not yet neutralised."""
    if budget is None:
        return fit_block(soul, entries, lambda _text: True).block.text

    def fits(text: str) -> bool:
        shown = neutralise(text, tuple(tags)).text
        return len(shown.encode(errors="surrogatepass")) <= budget or count(shown) <= budget

    fitted = fit_block(soul, entries, fits)
    if fitted.soul_cut:
        log.warning(
            "event=memory_soul_cut session=%s tokens=%d chars=%d",
            session,
            budget,
            len(fitted.block.text),
        )
    if fitted.left_out:
        named = fitted.left_out[:LOGGED_IDS]
        log.warning(
            "event=memory_block_over_budget session=%s tokens=%d count=%d ids=%s more=%d",
            session,
            budget,
            len(fitted.left_out),
            ",".join(f"{e.kind}/{e.id}" for e in named),
            len(fitted.left_out) - len(named),
        )
    return fitted.block.text
