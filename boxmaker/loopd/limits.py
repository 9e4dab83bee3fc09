"""A turn's bounds: tool calls, tokens generated, reasoning, streaming, the context and
compaction. Pure: one frozen dataclass, read by `loopd.turn` and the parts it drives
(`loopd.replying`, `loopd.tool_runs`, `loopd.compaction`); `loopd.main` fills it from
the configuration."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TurnLimits:
    max_tool_calls: int = 8
    max_tokens: int = 65_536  # generated in one turn, all replies together
    reply_tokens: int = 16_384  # one reply
    reasoning_tokens: int = 8_192  # of a reply, in reasoning: past it the block is closed
    # a reply is generated in stretches of this many tokens, and after each one that
    # does not end it, one that only repeats itself is stopped (`core.model.repetition`)
    repeat_check_tokens: int = 512
    stream_interval_s: float = 0.05  # streamed text merged within it (`loopd.pacing`)
    # a tool result's budget in the prompt (`core.model.result_cut`); None: never cut
    result_tokens: int | None = None
    # the model's context in tokens; None: unknown, and a session is never compacted
    context: int | None = None
    compact_at: float = 0.85  # of the context: a longer next prompt compacts first
    summary_tokens: int = 512  # a compaction's summary, at most
    keep_turns: int = 2  # the owner's last turns kept verbatim when they fit
    # a new session's memory block, at most (`loopd.memory_fit`); None: as memoryd sent it
    block_tokens: int | None = None
