"""A model's chat template run as hostile input: sandboxed, bounded in steps, time and output.

Pure apart from the clock it is handed; no I/O. A GGUF file's
`tokenizer.chat_template` is a Jinja program written by whoever made the file.
It runs here in jinja2's immutable sandbox (no attribute of a Python internal,
no mutation of a list or dict the template did not make), with the helpers
Hugging Face's `apply_chat_template` gives a template, and within bounds:

1. **Steps.** Every function or macro call, attribute or item lookup, filter,
   intercepted operator and item of `range` is a step; a render may take
   `max_steps`. (A loop over the conversation itself takes no step per item:
   it is bounded by the conversation.)
2. **Time.** Every 256 steps the clock is read; past `max_seconds` the render stops.
3. **Output.** The rendered text may hold `max_output` characters; `range` may
   make `MAX_RANGE` items, and `*`, `**` and `+` may not make a value (a string,
   list or number) past `max_output` characters or items.
4. **Recursion.** A macro that calls itself without end hits Python's limit.

Whatever goes wrong (a bound, `raise_exception`, a syntax error, a type error
the template runs into) is one `TemplateError` whose text names it in one line.

The helpers: `raise_exception(message)`, `strftime_now(format)` (the time handed
in, never the clock: a render is a function of its arguments), the `tojson`
filter as Hugging Face defines it (`ensure_ascii=False`, `indent`,
`separators`, `sort_keys`), and the variables `bos_token`, `eos_token`,
`add_generation_prompt`, `messages` and `tools` that the caller passes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from boxmaker.core.errors import BoxmakerError

MAX_RANGE = 10_000
CLOCK_EVERY = 256


class TemplateError(BoxmakerError, ValueError):
    """The template cannot be rendered; the text says why in one line."""


class _Bounds:
    """The running count of one render's steps, checked against its limits."""

    def __init__(self, max_steps: int, max_seconds: float, clock: Callable[[], float]) -> None:
        self.max_steps = max_steps
        self.clock = clock
        self.deadline = clock() + max_seconds
        self.max_seconds = max_seconds
        self.steps = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.max_steps:
            raise TemplateError(f"the template took more than {self.max_steps} steps")
        if self.steps % CLOCK_EVERY == 0 and self.clock() > self.deadline:
            raise TemplateError(f"the template ran for more than {self.max_seconds:g} s")


def _size(value: Any) -> int:
    if isinstance(value, str | list | tuple | dict):
        return len(value)
    if isinstance(value, int):
        return value.bit_length() // 3  # about its decimal digits
    return 0


# The bounds of the render running in this thread (each thread has a context of its
# own, so renders in several threads count apart)
_BOUNDS: ContextVar[_Bounds | None] = ContextVar("template_bounds", default=None)


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+"})

    def __init__(self, max_output: int) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False)
        self.max_output = max_output
        self.filters = {name: self._counted(f) for name, f in self.filters.items()}
        self.filters["tojson"] = self._counted(_tojson)
        self.globals["range"] = self._range
        self.globals["raise_exception"] = _raise_exception

    def _step(self) -> None:
        bounds = _BOUNDS.get()
        if bounds is not None:
            bounds.step()

    def _counted(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self._step()
            return function(*args, **kwargs)

        # keep jinja's pass_context / pass_environment marks
        for mark in ("jinja_pass_arg",):
            if hasattr(function, mark):
                setattr(counted, mark, getattr(function, mark))
        return counted

    def _range(self, *args: int) -> Iterator[int]:
        numbers = range(*args)
        if len(numbers) > MAX_RANGE:
            raise TemplateError(f"the template asked for a range of more than {MAX_RANGE} items")
        for number in numbers:
            self._step()
            yield number

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        __self._step()
        return super().call(__context, __obj, *args, **kwargs)

    def getattr(self, obj: Any, attribute: str) -> Any:
        self._step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self._step()
        return super().getitem(obj, argument)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        self._step()
        if operator == "**" and isinstance(right, int) and abs(right) > 64:
            raise TemplateError("the template raised a number to a power above 64")
        if operator == "*" and isinstance(right, int) and isinstance(left, int):
            pass  # numbers: bounded by `**`
        elif operator == "*" and _size(left) * _size(right) + _size(left) + _size(right) > (
            self.max_output
        ):
            raise TemplateError(f"the template made a value of more than {self.max_output} items")
        result = super().call_binop(context, operator, left, right)
        if _size(result) > self.max_output:
            raise TemplateError(f"the template made a value of more than {self.max_output} items")
        return result


def _raise_exception(message: object) -> None:
    raise TemplateError(f"the template refused the conversation: {message}")


def _tojson(
    value: Any,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys
    )


class ChatTemplate:
    """One compiled chat template; `render` runs it within the bounds."""

    def __init__(
        self,
        source: str,
        *,
        clock: Callable[[], float],
        max_steps: int = 2_000_000,
        max_seconds: float = 5.0,
        max_output: int = 1 << 20,
    ) -> None:
        self.source = source
        self._clock = clock
        self._max_steps = max_steps
        self._max_seconds = max_seconds
        self._environment = _BoundedEnvironment(max_output)
        try:
            self._template = self._environment.from_string(source)
        except jinja2.TemplateError as exc:
            raise TemplateError(f"the template does not compile: {_one_line(exc)}") from exc
        except RecursionError as exc:
            raise TemplateError("the template nests too deeply to compile") from exc

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        add_generation_prompt: bool,
        bos_token: str,
        eos_token: str,
        now: datetime,
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        """The template's text for `messages`; TemplateError on anything but text."""
        environment = self._environment
        token = _BOUNDS.set(_Bounds(self._max_steps, self._max_seconds, self._clock))
        variables: dict[str, Any] = {
            **(extra or {}),
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": bos_token,
            "eos_token": eos_token,
            "strftime_now": now.strftime,
        }
        if tools is not None:  # absent, not None: templates test `tools is defined`
            variables["tools"] = tools
        size = 0
        pieces: list[str] = []
        try:
            for piece in self._template.generate(**variables):
                size += len(piece)
                if size > environment.max_output:
                    raise TemplateError(
                        f"the template wrote more than {environment.max_output} characters"
                    )
                pieces.append(piece)
        except TemplateError:
            raise
        except RecursionError as exc:
            raise TemplateError("the template recursed without end") from exc
        except MemoryError as exc:
            raise TemplateError("the template ran out of memory") from exc
        except Exception as exc:  # a template is hostile input: anything it raises is its fault
            raise TemplateError(f"the template failed: {_one_line(exc)}") from exc
        finally:
            _BOUNDS.reset(token)
        return "".join(pieces)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]
