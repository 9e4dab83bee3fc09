"""A model's chat template run as hostile input: sandboxed, bounded in steps, time and size.

Pure apart from the clock it is handed; no I/O. A GGUF file's
`tokenizer.chat_template` is a Jinja program written by whoever made the file.
It runs here in jinja2's immutable sandbox (no attribute of a Python internal,
no mutation of a list or dict the template did not make), with the helpers
Hugging Face's `apply_chat_template` gives a template. This is the first line;
`boxmaker.ipc.template_worker` runs it in a child process whose memory and time
the kernel and the parent bound, the hard floor for whatever this line misses.
The rules, in the order a template meets them:

1. **Source.** A template's text may hold `MAX_SOURCE` characters (the largest
   real template known, Gemma 4's, holds 16,448): compiling is linear in it.
2. **Nothing runs at compile.** jinja2 evaluates constant expressions when it
   compiles (its optimizer, and the output's constants), before any bound
   exists: the optimizer is off (`optimized=False`), every filter and test is
   marked as needing the render's context (so none is ever folded), and `*`,
   `**`, `+` and `%` are intercepted operators (never folded either).
3. **Steps and time.** Every call, attribute or item lookup, filter, test,
   intercepted operator, item of `range` and item of *any* loop (the
   conversation's, a string's the template made, a recursive loop's next level)
   is a step; a render may take `max_steps`, and every step reads the clock: past
   `max_seconds` the render stops.
4. **Sizes before they are made.** Every operation that can make a large value
   is bounded by `core.model.template_bounds` before it runs, against `max_output`
   items: `*`, `+`, `%` and `~`, every method of a value (any method not in the
   table is refused), every filter, `range` (`MAX_RANGE` items), `lipsum`,
   `strftime_now`, `tojson` (bounded as it writes, with an indent of at most
   `MAX_INDENT`). Integers may have `MAX_INT_BITS` bits. An iterator handed to a
   filter or method that takes all its items (`join`, `list`, `sort`, ...:
   `core.model.template_bounds.CONSUMING`) is made a list of at most `max_output`
   items first; the lazy ones (`map`, `select`, ...) stay lazy.
5. **Output.** The rendered text may hold `max_output` characters, and every
   value written (into the output, a macro's text, a `set` block, a `filter`
   block) at most `max_output` items; everything written in one render, those
   included, at most `WRITTEN_FACTOR` times `max_output`.
6. **Recursion.** A macro that calls itself without end hits Python's limit.

What this line does not bound, and the worker does: the sum of the values a
template holds at once (each is bounded, not how many it keeps), and the time of
one step (a comparison of two nestings that share their parts runs 2^40 times
over inside one `==`; one filter over a million items). `ChatTemplate` keeps the
interface `TemplateRenderer` names, which the worker's `WorkerTemplate` keeps too.

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
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import Any, Protocol, cast

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator
from jinja2.filters import make_attrgetter
from jinja2.runtime import LoopContext, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import _PassArg, generate_lorem_ipsum, pass_context
from markupsafe import Markup

from boxmaker.core.errors import BoxmakerError
from boxmaker.core.model.template_bounds import (
    CONSUMING,
    ESCAPED,
    FILTERS,
    MAX_INT_BITS,
    Rule,
    format_bound,
    int_bits,
    is_value,
    lipsum_bound,
    method_rule,
    percent_bound,
    weight,
)

MAX_RANGE = 10_000
MAX_SOURCE = 65_536
MAX_INDENT = 64
WRITTEN_FACTOR = 8
ITERATE = "bx:iterate"  # the filter every loop's iterable goes through (no template can name it)


class TemplateError(BoxmakerError, ValueError):
    """The template cannot be rendered; the text says why in one line."""


class TemplateRenderer(Protocol):
    """What renders a chat template: `ChatTemplate` here, or the worker's stand-in for it
    (`boxmaker.ipc.template_worker.WorkerTemplate`), the same in every respect."""

    @property
    def source(self) -> str: ...

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
    ) -> str: ...


class _Bounds:
    """The running count of one render's steps and writes, checked against its limits."""

    def __init__(
        self, max_steps: int, max_seconds: float, max_written: int, clock: Callable[[], float]
    ) -> None:
        self.max_steps = max_steps
        self.clock = clock
        self.deadline = clock() + max_seconds
        self.max_seconds = max_seconds
        self.max_written = max_written
        self.steps = 0
        self.written = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.max_steps:
            raise TemplateError(f"the template took more than {self.max_steps} steps")
        if self.clock() > self.deadline:
            raise TemplateError(f"the template ran for more than {self.max_seconds:g} s")

    def write(self, size: int) -> None:
        self.written += size
        if self.written > self.max_written:
            raise TemplateError(
                f"the template wrote more than {self.max_written} characters in all "
                "(its macros and blocks included)"
            )


# The bounds of the render running in this thread (each thread has a context of its
# own, so renders in several threads count apart); None while compiling
_BOUNDS: ContextVar[_Bounds | None] = ContextVar("template_bounds", default=None)


def _step() -> None:
    bounds = _BOUNDS.get()
    if bounds is not None:
        bounds.step()


class _Counted:
    """A loop's iterable, one step an item (rule 3); its length is the iterable's."""

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        self._value = value

    def __len__(self) -> int:
        return len(self._value)

    def __iter__(self) -> Iterator[Any]:
        for item in self._value:
            _step()
            yield item


class _BoundedCodeGenerator(CodeGenerator):
    """jinja2's code generator with `~` and literal output text counted (rules 4, 5)."""

    def visit_Concat(self, node: nodes.Concat, frame: Any) -> None:  # noqa: N802 (jinja2's name)
        if frame.eval_ctx.volatile:
            join = "(markup_join if context.eval_ctx.volatile else str_join)"
        elif frame.eval_ctx.autoescape:
            join = "markup_join"
        else:
            join = "str_join"
        self.write(f"environment.bx_concat({join}, (")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write("))")

    def _output_const_repr(self, group: Iterable[Any]) -> str:
        return f"environment.bx_written({super()._output_const_repr(group)})"


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, max_output: int) -> None:
        super().__init__(
            trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, optimized=False
        )
        self.max_output = max_output
        self.finalize = self._finalize
        own: dict[str, Callable[..., Any]] = {
            "tojson": self._tojson,
            "sum": self._sum,
            ITERATE: _iterate,
        }
        offered: dict[str, Callable[..., Any]] = {**self.filters, **own}
        self.filters = {
            name: self._guarded(function, name)
            for name, function in offered.items()
            if name in FILTERS or name in own
        }
        tests = cast("dict[str, Callable[..., Any]]", self.tests)
        self.tests = {name: self._guarded(test, None) for name, test in tests.items()}
        self.globals["range"] = self._range
        self.globals["lipsum"] = self._lipsum
        self.globals["raise_exception"] = _raise_exception

    # -- compile ----------------------------------------------------------------

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(nodes.For):  # rule 3: every loop's items are steps
            loop.iter = nodes.Filter(loop.iter, ITERATE, [], [], None, None, lineno=loop.lineno)
            loop.iter.set_environment(self)
        return tree

    # -- sizes (rule 4) -----------------------------------------------------------

    def _made(self, size: int) -> None:
        if size > self.max_output:
            raise TemplateError(f"the template made a value of more than {self.max_output} items")

    def _listed(
        self, value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
        """The arguments, each iterator among them made a list of at most `max_output`
        items (rule 4), for a filter or method that takes its items."""

        def listed(item: Any) -> Any:
            if not isinstance(item, Iterator) or isinstance(item, LoopContext):
                return item
            items = []
            for each in item:
                items.append(each)
                if len(items) > self.max_output:
                    self._made(len(items))
            return items

        return (
            listed(value),
            tuple(listed(a) for a in args),
            {key: listed(v) for key, v in kwargs.items()},
        )

    def _check_binop(self, operator: str, left: Any, right: Any) -> None:
        budget = self.max_output
        numbers = isinstance(left, int) and isinstance(right, int)
        if operator == "**" and isinstance(right, int) and abs(right) > 64:
            raise TemplateError("the template raised a number to a power above 64")
        if operator == "**" and numbers and right > 0:
            bits = int_bits(left) * right
        elif operator == "*" and numbers:
            bits = int_bits(left) + int_bits(right)
        elif operator == "+" and numbers:
            bits = max(int_bits(left), int_bits(right)) + 1
        else:
            bits = 0
        if bits > MAX_INT_BITS:
            raise TemplateError(f"the template made a number of more than {MAX_INT_BITS} bits")
        if numbers:
            return
        if operator == "*":
            if isinstance(right, int) and not isinstance(right, bool):
                self._made(weight(left, budget) * max(right, 0))
            elif isinstance(left, int) and not isinstance(left, bool):
                self._made(weight(right, budget) * max(left, 0))
        elif operator == "+":
            self._made(weight(left, budget) + weight(right, budget))
        elif operator == "%":
            self._made(percent_bound(left, right, budget))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _step()
        self._check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)

    def bx_concat(self, join: Callable[[Iterable[Any]], str], parts: tuple[Any, ...]) -> str:
        """`~` (rule 4): the parts' weights, escaped where they would be."""
        _step()
        size = sum(weight(part, self.max_output) for part in parts)
        self._made(size * ESCAPED if join is not str_join else size)
        return join(parts)

    def _guarded(self, function: Callable[..., Any], name: str | None) -> Callable[..., Any]:
        """A filter (with its rule) or a test (`name` None), marked as needing the
        render's context so that it is never folded at compile (rule 2)."""
        rule = FILTERS.get(name) if name is not None else None
        consumes = name in CONSUMING
        pass_arg = _PassArg.from_obj(function)

        @pass_context
        def guarded(context: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
            _step()
            if consumes:
                value, args, kwargs = self._listed(value, args, kwargs)
            if rule is not None:
                self._made(rule(value, args, kwargs, self.max_output))
            if pass_arg is _PassArg.context:
                return function(context, value, *args, **kwargs)
            if pass_arg is _PassArg.eval_context:
                return function(context.eval_ctx, value, *args, **kwargs)
            if pass_arg is _PassArg.environment:
                return function(context.environment, value, *args, **kwargs)
            return function(value, *args, **kwargs)

        return guarded

    # -- calls (rules 3, 4) -----------------------------------------------------------

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _step()
        if isinstance(__obj, LoopContext) and args:  # a recursive loop's next level
            args = (_Counted(args[0]), *args[1:])
        elif isinstance(__obj, types.BuiltinFunctionType | types.MethodType):
            owner = getattr(__obj, "__self__", None)
            name = getattr(__obj, "__name__", "?")
            rule = __self._method_rule(__obj, owner, name)
            if rule is not None:
                if name in CONSUMING:
                    _, args, kwargs = __self._listed(None, args, kwargs)
                __self._made(rule(owner, args, kwargs, __self.max_output))
        return super().call(__context, __obj, *args, **kwargs)

    @staticmethod
    def _method_rule(function: Any, owner: Any, name: str) -> Rule | None:
        """Rule 4: a value's method's rule (refused if the table has none); None for a
        method of jinja's own objects or the helpers. A built-in function or method of
        anything but a value is refused."""
        if owner is not None and not isinstance(owner, types.ModuleType) and is_value(owner):
            rule = method_rule(owner, name)
            if rule is None:
                kind = (owner if isinstance(owner, type) else type(owner)).__name__
                raise TemplateError(f"the template called {kind}.{name}, which loopd does not run")
            return rule
        if isinstance(function, types.BuiltinFunctionType):
            raise TemplateError(f"the template called {name}, which loopd does not run")
        return None

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        formats = super().wrap_str_format(value)
        if formats is None:
            return None
        text: str = value.__self__
        factor = ESCAPED if isinstance(text, Markup) else 1

        def bounded(*args: Any, **kwargs: Any) -> str:
            arguments = [*args, *kwargs.values()]
            self._made(factor * format_bound(text, text.count("{"), arguments, self.max_output))
            return formats(*args, **kwargs)

        return bounded

    def getattr(self, obj: Any, attribute: str) -> Any:
        _step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _step()
        return super().getitem(obj, argument)

    # -- output (rule 5) ----------------------------------------------------------

    def _finalize(self, value: Any) -> Any:
        size = len(value) if isinstance(value, str) else weight(value, self.max_output)
        if size > self.max_output:
            raise TemplateError(f"the template wrote more than {self.max_output} characters")
        bounds = _BOUNDS.get()
        if bounds is not None:
            bounds.write(size)
        return value

    def bx_written(self, text: str) -> str:
        bounds = _BOUNDS.get()
        if bounds is not None:
            bounds.write(len(text))
        return text

    # -- helpers ------------------------------------------------------------------

    def _range(self, *args: int) -> Iterator[int]:
        numbers = range(*args)
        if len(numbers) > MAX_RANGE:
            raise TemplateError(f"the template asked for a range of more than {MAX_RANGE} items")
        for number in numbers:
            _step()
            yield number

    def _lipsum(self, n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
        self._made(lipsum_bound(n, max))
        return str(generate_lorem_ipsum(n, html, min, max))

    def _tojson(
        self,
        value: Any,
        indent: int | str | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        """Hugging Face's `tojson` (`json.dumps`, `ensure_ascii=False`), written piece by
        piece so that it stops at `max_output` characters."""
        wide = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
        if wide > MAX_INDENT:
            raise TemplateError(f"the template asked tojson for an indent over {MAX_INDENT}")
        encoder = json.JSONEncoder(
            ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys
        )
        size = 0
        pieces = []
        for piece in encoder.iterencode(value):
            size += len(piece)
            self._made(size)
            pieces.append(piece)
        return "".join(pieces)

    def _sum(
        self, iterable: Iterable[Any], attribute: str | int | None = None, start: Any = 0
    ) -> Any:
        """jinja2's `sum`, a step and a size check an item (adding lists is quadratic)."""
        if attribute is not None:
            iterable = map(make_attrgetter(self, attribute), iterable)
        total = start
        for item in iterable:
            _step()
            self._check_binop("+", total, item)
            total = total + item
        return total

    def strftime_now(self, now: datetime) -> Callable[[str], str]:
        def strftime(format: str) -> str:
            self._made(16 * weight(format, self.max_output))  # %c: 24 characters for 2
            return now.strftime(format)

        return strftime


@pass_context
def _iterate(context: Any, value: Any) -> _Counted:
    return _Counted(value)


def _raise_exception(message: object) -> None:
    raise TemplateError(f"the template refused the conversation: {message}")


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
        if len(source) > MAX_SOURCE:
            raise TemplateError(
                f"the template is {len(source)} characters long, over the {MAX_SOURCE} "
                "loopd compiles"
            )
        try:
            self._template = self._environment.from_string(source)
        except TemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise TemplateError(f"the template does not compile: {_one_line(exc)}") from exc
        except RecursionError as exc:
            raise TemplateError("the template nests too deeply to compile") from exc
        except MemoryError as exc:
            raise TemplateError("the template ran out of memory compiling") from exc
        except Exception as exc:  # Python's compile of jinja2's code: hostile input still
            raise TemplateError(f"the template does not compile: {_one_line(exc)}") from exc

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
        limit = environment.max_output
        bounds = _Bounds(self._max_steps, self._max_seconds, limit * WRITTEN_FACTOR, self._clock)
        token = _BOUNDS.set(bounds)
        variables: dict[str, Any] = {
            **(extra or {}),
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": bos_token,
            "eos_token": eos_token,
            "strftime_now": environment.strftime_now(now),
        }
        if tools is not None:  # absent, not None: templates test `tools is defined`
            variables["tools"] = tools
        size = 0
        pieces: list[str] = []
        try:
            for piece in self._template.generate(**variables):
                size += len(piece)
                if size > limit:
                    raise TemplateError(f"the template wrote more than {limit} characters")
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
