"""How big a value a chat template's operation can make, known before it is made: the table.

Pure; no I/O. `core.model.template_sandbox` asks these rules before it lets a template
run an operation that could build a large value, and refuses the operation when
the answer is over its limit (`max_output`). The rules, each an upper bound that
is cheap to work out from the operands alone:

1. **Weight.** A value's weight is the items it holds: a string's (or bytes')
   characters, an integer's decimal digits (about), a container's items plus
   the weights of its keys and values (a dict's views and a `namespace` too),
   counted with a walk that stops as soon as it passes the budget (so weighing
   a value costs at most the budget, whatever it shares or nests). Any other
   value weighs 24. The text Python writes for a value (`str`, `repr`) is
   within a small factor of its weight (quotes, separators; an escape may take
   up to 10 characters for one), and the memory an item takes is at most about
   100 bytes: a weight bound is an item bound, not a byte bound (the worker's
   address-space cap is the byte bound).
2. **Methods.** A method of a string, bytes, number, list, tuple or dict (and
   of Markup, jinja's safe string) may be called only if `METHODS` lists it,
   with the rule that bounds its result from its receiver and arguments; any
   other method of such a value is refused. (A method of one of jinja's own
   objects or of the sandbox's helpers is not a value's method.)
3. **Filters.** Every filter jinja has is in `FILTERS`, with the rule that
   bounds its result; a filter missing from the table is not offered.
4. **Format strings.** `%`, `format` and `str.format` make at most the format
   string, plus for each `%` or `{` in it: twice the weight of all the
   arguments, the largest number written in the format string (a width or a
   precision; with `*` or a nested field, the largest integer argument too) and
   400 (a float's digits).
5. **Numbers.** An integer may have up to `MAX_INT_BITS` bits (about Python's
   own limit of 4,300 digits for writing one).

A rule returns an upper bound of its result's weight; `UNBOUNDED` where it
cannot give one (the operation is refused).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from jinja2.utils import Namespace
from markupsafe import Markup

MAX_INT_BITS = 14_000  # about 4,214 decimal digits
UNBOUNDED = 1 << 62
OTHER = 24  # the weight of a value that is neither text, number nor container
FLOAT_DIGITS = 400  # what one conversion of a float may add (1e308 has 309 digits)
ESCAPED = 6  # an HTML escape writes at most 6 characters for one (`&#34;` and kin)
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_DIGITS = re.compile(r"\d+")

_CONTAINERS: tuple[type[Collection[Any]], ...] = (list, tuple, set, frozenset)
_CONTAINERS += (type({}.keys()), type({}.values()), type({}.items()))

# (receiver, positional arguments, keyword arguments, budget) -> an upper bound
Rule = Callable[[Any, Sequence[Any], Mapping[str, Any], int], int]


def weight(value: object, budget: int) -> int:
    """Rule 1: an upper bound of the items `value` holds, or a number over `budget`."""
    if isinstance(value, str | bytes):
        return len(value)
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str | bytes | bytearray):
            total += len(item) + 2
        elif isinstance(item, int):
            total += item.bit_length() // 3 + 2
        elif isinstance(item, dict):
            total += len(item) + 2
            if total <= budget:
                stack.extend(item.keys())
                stack.extend(item.values())
        elif isinstance(item, _CONTAINERS):
            total += len(item) + 2
            if total <= budget:
                stack.extend(item)
        elif isinstance(item, Namespace):  # its text shows its attributes
            stack.append(object.__getattribute__(item, "_Namespace__attrs"))
        else:
            total += OTHER
        if total > budget:
            return total
    return total


def int_bits(value: object) -> int:
    """The bits of an integer (0 for anything else)."""
    return value.bit_length() if isinstance(value, int) else 0


def largest_number(text: str, arguments: Sequence[Any], nested: bool) -> int:
    """The largest width or precision a format string can ask for (rule 4)."""
    largest = 0
    for run in _DIGITS.findall(text):
        if len(run) > 9:
            return UNBOUNDED
        largest = max(largest, int(run))
    if nested:
        for argument in arguments:
            if isinstance(argument, int) and not isinstance(argument, bool):
                largest = max(largest, abs(argument))
    return largest


def format_bound(text: str, marks: int, arguments: Sequence[Any], budget: int) -> int:
    """Rule 4 for a format string with `marks` places a value can go."""
    spread = 0
    for argument in arguments:
        spread += weight(argument, budget)
        if spread > budget:
            return UNBOUNDED
    nested = "*" in text or "{" in text
    widest = largest_number(text, arguments, nested)
    if widest >= UNBOUNDED:
        return UNBOUNDED
    return len(text) + marks * (2 * spread + widest + FLOAT_DIGITS)


def percent_bound(text: object, arguments: object, budget: int) -> int:
    """`text % arguments` (rule 4); 0 when it is not a string's formatting."""
    if not isinstance(text, str | bytes):
        return 0
    if isinstance(arguments, tuple):
        values: list[Any] = list(arguments)
    elif isinstance(arguments, Mapping):
        values = [*arguments.keys(), *arguments.values()]
    else:
        values = [arguments]
    plain = text if isinstance(text, str) else text.decode("latin-1")
    marks = plain.count("%")
    bound = format_bound(plain, marks, values, budget)
    return bound * ESCAPED if isinstance(text, Markup) else bound


# ---- argument helpers ---------------------------------------------------------------


def _argument(args: Sequence[Any], kwargs: Mapping[str, Any], at: int, name: str) -> Any:
    if len(args) > at:
        return args[at]
    return kwargs.get(name)


def _count(value: object) -> int:
    """A non-negative integer argument's value (0 for anything else: Python refuses it)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return max(value, 0)
    return 0


# ---- rules --------------------------------------------------------------------------


def _answer(receiver: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    """A result that is a number, a truth, or a value that already exists."""
    return OTHER


def _scaled(factor: int) -> Rule:
    def rule(receiver: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
        return factor * weight(receiver, budget) + 2

    return rule


def _padded(receiver: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    """`center`, `ljust`, `rjust`, `zfill` and the `center` filter: the width asked for."""
    width = _argument(args, kwargs, 0, "width")
    return max(weight(receiver, budget), _count(80 if width is None else width))


def _expandtabs(receiver: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    size = _argument(args, kwargs, 0, "tabsize")
    tabs = receiver.count("\t" if isinstance(receiver, str) else b"\t")
    return int(len(receiver) + tabs * _count(8 if size is None else size))


def _replace(receiver: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    """`str.replace` and the `replace` filter: each occurrence may become `new`."""
    text = receiver if isinstance(receiver, str | bytes) else str(receiver)
    old, new = _argument(args, kwargs, 0, "old"), _argument(args, kwargs, 1, "new")
    limit = _argument(args, kwargs, 2, "count")
    if not isinstance(old, str | bytes) or type(old) is not type(new):
        old, new = str(old), str(new)
        if not isinstance(text, str):
            return len(text)
    try:
        found = len(text) + 1 if not old else text.count(old)
    except TypeError:
        return len(text)  # Python refuses the call
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
        found = min(found, limit)
    return len(text) + found * len(new)


def _join(receiver: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    """`str.join`: the separator between every two items, and the items."""
    items = _argument(args, kwargs, 0, "iterable")
    if not isinstance(items, Collection):
        return UNBOUNDED  # the sandbox makes an iterator a list first (CONSUMING)
    separator = len(receiver) * max(len(items) - 1, 0)
    if separator > budget:
        return separator
    return separator + weight(list(items), budget)


def _translate(receiver: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    table = _argument(args, kwargs, 0, "table")
    if not isinstance(table, dict):
        return UNBOUNDED
    widest = max((weight(v, budget) for v in table.values()), default=1)
    return len(receiver) * max(widest, 1)


def _to_bytes(receiver: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    return _count(_argument(args, kwargs, 0, "length")) + 1


def _of_argument(factor: int) -> Rule:
    """A result the size of the first argument (`fromhex`, `fromkeys`)."""

    def rule(receiver: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
        return factor * weight(list(args), budget) + 2

    return rule


def _each(names: str, rule: Rule) -> dict[str, Rule]:
    """`rule` for each of the space-separated `names`."""
    return dict.fromkeys(names.split(), rule)


_SAME = _scaled(1)
_CASED = _scaled(3)  # Unicode case mappings write up to 3 characters for one
_SPLIT = _scaled(4)  # the pieces of a string, each a new string in a list

_TEXT_METHODS: dict[str, Rule] = {
    **_each(
        "count endswith find index isalnum isalpha isascii isdecimal isdigit isidentifier "
        "islower isnumeric isprintable isspace istitle isupper rfind rindex startswith",
        _answer,
    ),
    **_each("lstrip rstrip strip removeprefix removesuffix decode", _SAME),
    **_each("capitalize casefold lower swapcase title upper", _CASED),
    **_each("split rsplit splitlines partition rpartition", _SPLIT),
    **_each("center ljust rjust zfill", _padded),
    "encode": _scaled(4),
    "hex": _scaled(3),
    "expandtabs": _expandtabs,
    "replace": _replace,
    "join": _join,
    "translate": _translate,
    "fromhex": _of_argument(1),
}


def _escaping(rule: Rule) -> Rule:
    """A Markup method escapes what it is given: up to ESCAPED characters for one."""

    def escaped(receiver: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
        return ESCAPED * rule(receiver, args, kwargs, budget)

    return escaped


# Rule 2: the methods a template may call, by the kind of value they belong to
METHODS: dict[type, dict[str, Rule]] = {
    Markup: {
        **{name: _escaping(rule) for name, rule in _TEXT_METHODS.items()},
        "escape": _scaled(ESCAPED),
        "unescape": _SAME,
        "striptags": _SAME,
    },
    str: _TEXT_METHODS,
    bytes: _TEXT_METHODS,
    bool: {"bit_length": _answer, "bit_count": _answer, "conjugate": _answer},
    int: {
        "bit_length": _answer,
        "bit_count": _answer,
        "conjugate": _answer,
        "as_integer_ratio": _answer,
        "to_bytes": _to_bytes,
        "from_bytes": _of_argument(3),
    },
    float: _each("as_integer_ratio conjugate hex is_integer fromhex", _answer),
    list: {"index": _answer, "count": _answer, "copy": _SAME},
    tuple: {"index": _answer, "count": _answer},
    dict: {
        "get": _answer,
        "items": _SAME,
        "keys": _SAME,
        "values": _SAME,
        "copy": _SAME,
        "fromkeys": _of_argument(2),
    },
    type({}.keys()): {"isdisjoint": _answer},
    type({}.items()): {"isdisjoint": _answer},
    type({}.values()): {},
}


def method_rule(owner: object, name: str) -> Rule | None:
    """Rule 2: the rule for `owner.name()` where `owner` is a value (or a value's type,
    for a class method); None where the table does not list it."""
    kind = owner if isinstance(owner, type) else type(owner)
    for base in kind.__mro__:
        table = METHODS.get(base)
        if table is not None:
            return table.get(name)
    return None


def is_value(owner: object) -> bool:
    """Whether `owner` is one of the kinds of value rule 2 covers (or such a type)."""
    kind = owner if isinstance(owner, type) else type(owner)
    return any(base in METHODS for base in kind.__mro__)


# ---- filters (rule 3) ---------------------------------------------------------------


def _center_filter(value: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    return _padded(value, args, kwargs, budget)


def _indent(value: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    width = _argument(args, kwargs, 0, "width")
    pad = len(width) if isinstance(width, str) else _count(4 if width is None else width)
    if pad > budget:
        return pad
    text = value if isinstance(value, str) else ""
    lines = sum(text.count(mark) for mark in LINE_BREAKS) + 2
    return weight(value, budget) + lines * pad + 1


def _join_filter(value: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    separator = _argument(args, kwargs, 0, "d")
    items = value if isinstance(value, Collection) else [value]
    size = weight(separator if separator is not None else "", budget)
    total = size * max(len(items) - 1, 0)
    if total > budget:
        return total
    per_item = OTHER * 3 if _argument(args, kwargs, 1, "attribute") is not None else 0
    return ESCAPED * (total + weight(value, budget) + per_item * len(items))


def _format_filter(value: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    text = value if isinstance(value, str) else str(value)
    return percent_bound(text, dict(kwargs) if kwargs else tuple(args), budget)


def _wordwrap(value: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    wrap = _argument(args, kwargs, 2, "wrapstring")
    size = weight(value, budget)
    return size + (size + 1) * (len(wrap) if isinstance(wrap, str) else 2)


def _batch(value: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    count = _count(_argument(args, kwargs, 0, "linecount"))
    fill = _argument(args, kwargs, 1, "fill_with")
    return 3 * weight(value, budget) + (
        count * (weight(fill, budget) + 1) if fill is not None else 0
    )


def _slice(value: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    slices = _count(_argument(args, kwargs, 0, "slices"))
    fill = _argument(args, kwargs, 1, "fill_with")
    return 3 * weight(value, budget) + slices * (weight(fill, budget) + 3)


def _truncate(value: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    end = _argument(args, kwargs, 2, "end")
    return weight(value, budget) + weight(end if end is not None else "...", budget)


def _urlize(value: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    size = weight(value, budget)
    extra = sum(weight(v, budget) for v in (*args, *kwargs.values()))
    return ESCAPED * (2 * size + (size // 2 + 1) * (64 + extra))


def _groupby(value: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    default = _argument(args, kwargs, 1, "default")
    return 3 * weight(value, budget) + weight(default, budget)


def _pprint(value: Any, args: Sequence[Any], kwargs: Mapping[str, Any], budget: int) -> int:
    # pprint indents each nested item by its depth; a depth is at most the weight
    size = weight(value, budget)
    return 10 * size + size * size // 4 if size <= budget else size


_FILTER_ANSWERS = (
    "abs attr count d default filesizeformat first float int last length max min random round "
    "wordcount map select reject selectattr rejectattr"
)

# Rule 3: every filter jinja has, with the rule bounding its result (`tojson` is the
# sandbox's own, bounded as it writes; `sum` steps as it adds)
FILTERS: dict[str, Rule] = {
    **_each(_FILTER_ANSWERS, _answer),
    **_each("capitalize lower upper title", _CASED),
    **_each("trim striptags string safe items reverse sort unique", _SAME),
    **_each("dictsort list", _SPLIT),
    **_each("e escape forceescape", _scaled(ESCAPED)),
    "urlencode": _scaled(12),  # %XX for each of up to 4 UTF-8 bytes
    "xmlattr": _scaled(2 * ESCAPED),
    "center": _center_filter,
    "indent": _indent,
    "join": _join_filter,
    "format": _format_filter,
    "replace": _replace,
    "wordwrap": _wordwrap,
    "batch": _batch,
    "slice": _slice,
    "truncate": _truncate,
    "urlize": _urlize,
    "groupby": _groupby,
    "pprint": _pprint,
    "sum": _SAME,
    "tojson": _answer,
}


# The filters and methods that take all of an iterable's items: an iterator handed to one
# is made a list first, so that its rule can count them (the lazy ones stay lazy)
CONSUMING = frozenset(
    {"join", "list", "batch", "slice", "sort", "unique", "reverse", "dictsort", "groupby"}
    | {"sum", "fromkeys"}
)


def lipsum_bound(n: object, top: object) -> int:
    """`lipsum(n, html, min, max)`: n paragraphs of up to `max` words (a word is at most
    12 letters and a mark), each paragraph's HTML tags 8 more."""
    return _count(5 if n is None else n) * (_count(100 if top is None else top) * 14 + 8)
