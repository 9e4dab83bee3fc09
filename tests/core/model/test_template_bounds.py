"""The sandbox's bounds (core.model.template_sandbox, core.model.template_bounds) against issue 38's shapes.

Each shape (`boxmaker.testing.template_attempts.SHAPES`, but the floor's, which only the
worker bounds) runs in a process of its own under an address-space cap, with a time
bound of MAX_SECONDS: it is refused in one line naming the bound (or, for the shapes that
must, rendered), at compile or at render as the shape says, in at most 1.5 times the
time bound, its peak resident memory under 256 MiB over the baseline. The tables are
held to jinja2's own (every filter has a rule, every method of a string is listed or
refused), and the real templates render exactly as Hugging Face's own environment
renders them.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from support.template_families import BOS, EOS, FAMILIES, history, prompt_for, source

from boxmaker.core.model.template_bounds import FILTERS, METHODS, weight
from boxmaker.core.model.template_sandbox import MAX_SOURCE, ChatTemplate, TemplateError
from boxmaker.loopd.tools import TOOL_SCHEMAS
from boxmaker.testing.template_attempts import (
    NOW,
    SHAPES,
    Shape,
    attempt,
    conversation,
    judge,
)

MAX_SECONDS = 2.0
RSS_MIB = 256
SANDBOXED = [shape for shape in SHAPES if not shape.floor]


@pytest.mark.parametrize("shape", SANDBOXED, ids=[shape.name for shape in SANDBOXED])
def test_each_shape_is_refused_or_bounded_by_the_sandbox(shape: Shape) -> None:
    result = attempt(
        "sandbox",
        shape.source,
        stage=shape.stage,
        messages=shape.messages,
        max_seconds=MAX_SECONDS,
        timeout=60,
    )
    judge(shape, result, MAX_SECONDS, RSS_MIB)


def _render(template: ChatTemplate, messages: Sequence[Mapping[str, Any]]) -> str:
    return template.render(
        messages, tools=None, add_generation_prompt=True, bos_token="", eos_token="", now=NOW
    )


# ---- the tables against jinja2's own ------------------------------------------------


def test_every_filter_jinja_has_has_a_rule() -> None:
    assert set(jinja2.filters.FILTERS) <= set(FILTERS)


def test_every_public_method_of_a_string_is_listed_or_refused_by_name() -> None:
    for kind in (str, bytes):
        public = {name for name in dir(kind) if not name.startswith("_")}
        # format and format_map go through the sandbox's own format (rule 4 of
        # core.model.template_bounds); maketrans is a static method, refused as no value's
        assert public - set(METHODS[kind]) <= {"format", "format_map", "maketrans"}, kind


def test_a_method_the_table_does_not_list_is_refused_in_one_line() -> None:
    template = ChatTemplate("{{ messages[0].content.maketrans('a', 'b') }}", clock=time.monotonic)
    with pytest.raises(TemplateError, match="does not run"):
        _render(template, conversation(1))
    generator = "{{ (messages|map(attribute='role')).send(None) }}"
    with pytest.raises(TemplateError, match=re.escape("called send, which loopd does not run")):
        _render(ChatTemplate(generator, clock=time.monotonic), conversation(1))


def test_weighing_stops_at_the_budget_however_the_value_shares_its_parts() -> None:
    value: object = "x"
    for _ in range(60):  # 2**60 leaves, 60 lists
        value = [value, value]
    start = time.monotonic()
    assert weight(value, 1000) > 1000
    assert time.monotonic() - start < 0.5


# ---- the rules one by one ---------------------------------------------------------


def test_a_loop_over_the_conversation_takes_a_step_an_item() -> None:
    """Rule 3: a loop over `messages` is no longer free."""
    loop = "{% for m in messages %}{% endfor %}"
    assert _render(ChatTemplate(loop, clock=time.monotonic, max_steps=100), conversation(50)) == ""
    with pytest.raises(TemplateError, match="more than 100 steps"):
        _render(ChatTemplate(loop, clock=time.monotonic, max_steps=100), conversation(200))


def test_every_step_reads_the_clock() -> None:
    """Rule 3: a clock that jumps a second each read stops the render at the first step."""
    ticks = itertools.count()
    template = ChatTemplate(
        "{% for m in messages %}{{ m.role }}{% endfor %}",
        clock=lambda: float(next(ticks)),
        max_seconds=2.5,
    )
    with pytest.raises(TemplateError, match=re.escape("ran for more than 2.5 s")):
        _render(template, conversation(10))


def test_a_recursive_loops_next_level_takes_steps_too() -> None:
    tree = "{% for m in messages recursive %}[{{ loop(m.children) }}]{% endfor %}"
    deep = [{"role": "user", "children": [{"children": []}] * 40}] * 40
    with pytest.raises(TemplateError, match="more than 500 steps"):
        _render(ChatTemplate(tree, clock=time.monotonic, max_steps=500), deep)


def test_a_template_over_the_size_cap_is_refused_before_it_compiles() -> None:
    with pytest.raises(TemplateError, match=f"over the {MAX_SOURCE} loopd compiles"):
        ChatTemplate("x" * (MAX_SOURCE + 1), clock=time.monotonic)
    ChatTemplate("x" * MAX_SOURCE, clock=time.monotonic)


def test_nothing_is_folded_at_compile() -> None:
    """Rule 2: a filter over constants runs at render, with the render's bounds."""
    template = ChatTemplate("{{ 'abc'|upper }}{{ '%s' % 'x' }}", clock=time.monotonic)
    source_code = template._environment.compile(  # the code jinja2 generates
        "{{ 'abc'|upper }}{{ '%s' % 'x' }}", raw=True
    )
    assert "'ABC'" not in source_code
    assert _render(template, []) == "ABCx"


def test_the_values_a_template_may_make_stay_usable() -> None:
    """The bounds refuse sizes, not uses: what real templates do still works."""
    text = (
        "{{ ('a' * 10) ~ 'b' }}|{{ [1, 2] + [3] }}|{{ '%05d' % 42 }}|{{ '{:>4}'.format('x') }}|"
        "{{ 'a,b'.split(',')|join('+') }}|{{ 'x'|center(5) }}|{{ range(3)|sum }}|"
        "{{ {'b': 1, 'a': 2}|tojson(indent=2, sort_keys=true) }}|{{ 2 ** 10 }}|"
        "{{ (messages|map(attribute='role')|list)[0] }}"
    )
    assert _render(ChatTemplate(text, clock=time.monotonic), conversation(2)) == (
        'aaaaaaaaaab|[1, 2, 3]|00042|   x|a+b|  x  |3|{\n  "a": 2,\n  "b": 1\n}|1024|user'
    )


# ---- the real templates render as Hugging Face renders them -------------------------


def _hugging_face(text: str) -> jinja2.Template:
    """The environment transformers' apply_chat_template renders a template in."""

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def tojson(
        value: object,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            value,
            ensure_ascii=False,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = NOW.strftime
    return environment.from_string(text)


@pytest.mark.parametrize("name", [family[0] for family in FAMILIES])
def test_each_real_template_renders_as_hugging_faces_environment_does(name: str) -> None:
    prompt = prompt_for(name)
    messages = [*history(prompt), {"role": "assistant", "content": "Done."}]
    messages += [{"role": "user", "content": "And now?"}]
    for tools in (TOOL_SCHEMAS, None):
        ours = ChatTemplate(source(name), clock=time.monotonic).render(
            messages,
            tools=tools,
            add_generation_prompt=True,
            bos_token=BOS,
            eos_token=EOS,
            now=NOW,
            extra={"enable_thinking": True},
        )
        variables: dict[str, object] = {
            "messages": messages,
            "add_generation_prompt": True,
            "bos_token": BOS,
            "eos_token": EOS,
            "enable_thinking": True,
            **({"tools": tools} if tools is not None else {}),
        }
        assert ours == _hugging_face(source(name)).render(**variables)
