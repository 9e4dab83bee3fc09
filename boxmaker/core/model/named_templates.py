"""Which of a model file's chat templates loopd renders: the default one, or a named one. Pure.

A GGUF holds its default chat template under `tokenizer.chat_template` and may
hold named ones beside it, each under `tokenizer.chat_template.<name>`, their
names listed in the string array `tokenizer.chat_templates` (gguf-py's
`Keys.Tokenizer.CHAT_TEMPLATE`, `CHAT_TEMPLATE_N` and `CHAT_TEMPLATES`).
`GGUFWriter.add_chat_template` writes them so when convert_hf_to_gguf.py hands it
a Hugging Face `chat_template` that is a list of `{name, template}`: the one named
`default` under the plain key, each other one under its own, its name with every
character but ASCII letters and digits made `_`. Hermes 2 Pro and Hermes 3 ship
such a pair: a plain ChatML `default`, and a `tool_use` template that writes the
tools block, the `<tool_call>` form and the `<tool_response>` wrapper of a result.

The rules, in order:

1. **Named templates are read from their keys.** Every metadata key
   `tokenizer.chat_template.<name>` with a non-empty name and a string value is
   the template `<name>`. The names list is not needed, and loopd cannot read it:
   llama.cpp's metadata leaves arrays out (llama-model.cpp, `load_hparams`), so
   llama-cpp-python's `Llama.metadata` never holds it; llama.cpp reads a named
   template by its key alone (`llama_model_chat_template(model, name)`).
2. **Tools given: `tool_use` where the file has it.** Hugging Face renders the
   template named `tool_use` whenever tools are given and the tokenizer holds
   named templates (transformers, src/transformers/tokenization_utils_base.py,
   `PreTrainedTokenizerBase.get_chat_template`, which `apply_chat_template`
   calls with its `tools`: with a dict of templates and none named by the
   caller, `template_dict["tool_use"]` if tools is not None and the dict has it,
   else `template_dict["default"]`), and llama.cpp's server does the same
   (common/chat.cpp, `common_chat_templates_apply_jinja`: `template_tool_use`
   when the request's tools are an array). loopd always gives its tools, so a
   file with a `tool_use` template is always prompted with it.
3. **Otherwise the default** (`tokenizer.chat_template`), or no template at all.
4. **The template chosen is hostile input exactly as the default is**: loopd runs
   whichever it is in `core.model.template_sandbox` with the same bounds; nothing here
   runs a template.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_KEY = "tokenizer.chat_template"
NAMED_PREFIX = DEFAULT_KEY + "."
DEFAULT = "default"
TOOL_USE = "tool_use"


@dataclass(frozen=True)
class ChosenTemplate:
    """The template loopd renders, where it was read, and the file's other templates."""

    name: str  # "default", or the named template's name
    key: str  # the metadata key it was read from
    source: str
    others: tuple[str, ...]  # the names of the file's other templates, sorted

    def describe(self) -> str:
        """`tool_use (tokenizer.chat_template.tool_use)`, `default (tokenizer.chat_template)`."""
        return f"{self.name} ({self.key})"

    def explain(self) -> str:
        """`describe`, why it was chosen over the default, and the file's other templates."""
        why = ", the one Hugging Face renders when tools are given" if self.name == TOOL_USE else ""
        others = f"; the file also holds {', '.join(self.others)}" if self.others else ""
        return f"{self.describe()}{why}{others}"


def named_templates(metadata: Mapping[str, object]) -> dict[str, str]:
    """The file's named templates by name (rule 1), the default not among them."""
    return {
        key.removeprefix(NAMED_PREFIX): value
        for key, value in metadata.items()
        if key.startswith(NAMED_PREFIX) and len(key) > len(NAMED_PREFIX) and isinstance(value, str)
    }


def choose_template(metadata: Mapping[str, object], *, tools: bool) -> ChosenTemplate | None:
    """The template to render a conversation with (`tools`: whether tools are given);
    None when the file has none (rules 2 and 3)."""
    named = named_templates(metadata)
    default = metadata.get(DEFAULT_KEY)
    everything = {**named, **({DEFAULT: default} if isinstance(default, str) else {})}
    if tools and TOOL_USE in named:
        name, key, source = TOOL_USE, NAMED_PREFIX + TOOL_USE, named[TOOL_USE]
    elif isinstance(default, str):
        name, key, source = DEFAULT, DEFAULT_KEY, default
    else:
        return None
    others = tuple(sorted(other for other in everything if other != name))
    return ChosenTemplate(name, key, source, others)
