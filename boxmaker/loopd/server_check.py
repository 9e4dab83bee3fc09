"""A model server held to the model file loopd reads, at start (issue 41).

I/O: asks the server over `ServerLink`. The server must tokenize as this file does:
every marker of the vocabulary and plain text (`PROBE_TEXT`), with special parsing and,
where the server offers it (llama-server), without; its `n_vocab` must be the file's
where it says it, and so must its model's parameters and tensor bytes (llama-server's
`/v1/models` `meta`: another quantization, or another model on the same vocabulary, is
refused; a file edited to the same sizes is not, since no API gives the file's hash; a
server that gives no figures, as vLLM, is held to the vocabulary alone). A server on
loopback that names its file's absolute path is held to the file itself besides
(`served_file`: the same file, or the same sha256). For the OpenAI completions API, a
one-token completion of the probe's ids shows besides that the server counts the prompt
as sent (no BOS or other token added) and returns the ids it makes. Anything else is a
StartupError: runbook.md#loopd-backend-mismatch, or #loopd-backend-unreachable where the
server cannot be asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from boxmaker.core.errors import StartupError
from boxmaker.core.model.sampling import Sampling
from boxmaker.core.model.served import ServedReplyError
from boxmaker.core.model.served_openai import PATH as OPENAI_PATH
from boxmaker.core.model.served_openai import (
    openai_body,
    prompt_ids,
    prompt_tokens,
    read_openai_answer,
)
from boxmaker.core.runbook import Runbook
from boxmaker.loopd.markers import Marker
from boxmaker.loopd.served_file import FileComparison, compare_served_file, is_loopback
from boxmaker.loopd.server_link import ServerLink, ServerUnreachableError

PROBE_TEXT = "Hello, wörld! 12 345\n\t<b>ünïcode</b> 你好 🙂 a  b"


class Vocabulary(Protocol):
    """What of the model file the checks read."""

    markers: tuple[Marker, ...]
    path: Path  # the model file

    @property
    def sampling(self) -> Sampling: ...

    def tokenize(self, text: str, *, special: bool) -> list[int]: ...

    def n_vocab(self) -> int: ...

    def file_figures(self) -> tuple[int, int]: ...


@dataclass(frozen=True)
class Served:
    """What the checks read of the server."""

    context: int
    slots: int
    file: FileComparison  # the server's model file held to loopd's, where it can be


def check_server(link: ServerLink, model: Vocabulary) -> Served:
    """llama-server's `/completion` API: its context and slots, after holding its
    vocabulary to the model file's."""
    probe = _probe(model)
    try:
        props = link.get("/props")
        models = link.get("/v1/models")
        special = link.post(
            "/tokenize", {"content": probe, "add_special": False, "parse_special": True}
        )
        plain = link.post(
            "/tokenize", {"content": probe, "add_special": False, "parse_special": False}
        )
    except ServerUnreachableError as exc:
        raise _unreachable(exc) from exc
    problems = _vocabulary_problems(model, models, probe, special)
    if _tokens(plain) != model.tokenize(probe, special=False):
        problems.append("it tokenizes plain text differently")
    _refuse(link, problems)
    file = _file(link, model, _props_path(props))
    return _served(link, _props_context(props), props, "/props n_ctx", file)


def check_openai(link: ServerLink, model: Vocabulary) -> Served:
    """The OpenAI completions API (vLLM, SGLang, llama-server): its context (vLLM's
    `max_model_len`, else llama-server's `/props`), after holding its vocabulary to
    the model file's and its completions to ids as sent and ids back."""
    probe = _probe(model)
    ids = model.tokenize(PROBE_TEXT, special=False)  # a short completion: plain text
    # the tokenize request as vLLM (`prompt`) and llama-server (`content`) name it
    asked = {
        "prompt": probe,
        "add_special_tokens": False,
        "content": probe,
        "add_special": False,
        "parse_special": True,
    }
    body = openai_body(
        ids,
        max_tokens=1,
        sampling=model.sampling,
        seed=0,
        stop=[],
        salt=None,
        slot=None,
        stream=False,
    )
    try:
        models = link.get("/v1/models")
        special = link.post("/tokenize", asked)
        # ids of another vocabulary may be out of the server's range: asked only after
        _refuse(link, _vocabulary_problems(model, models, probe, special))
        answer = link.post(OPENAI_PATH, body)
    except ServerUnreachableError as exc:
        raise _unreachable(exc) from exc
    problems = []
    try:
        counted = prompt_tokens(answer)
        read = prompt_ids(answer)
        made = read_openai_answer(answer if isinstance(answer, dict) else {}).tokens
    except ServedReplyError as exc:
        problems.append(str(exc))
    else:
        if counted != len(ids) or (read is not None and list(read) != ids):
            problems.append(
                f"it read a prompt of {len(ids)} ids as {counted} (it must add no token)"
            )
        if not made:
            problems.append(
                "it does not return the ids it makes (vLLM 0.10.2 or later returns them "
                "with return_token_ids, llama-server with logprobs)"
            )
    _refuse(link, problems)
    context, named = _max_model_len(models), _root(models)
    props: Any = None
    if context is None or named is None:  # llama-server's: its /props says them
        try:
            props = link.get("/props")
        except ServerUnreachableError:
            props = None
        context = context if context is not None else _props_context(props)
        named = named if named is not None else _props_path(props)
    file = _file(link, model, named)
    where = "/v1/models max_model_len, or /props n_ctx"
    return _served(link, context, props, where, file)


def _file(link: ServerLink, model: Vocabulary, named: str | None) -> FileComparison:
    """The server's model file, where it is this machine's: refused when another."""
    file = compare_served_file(model.path, named, loopback=is_loopback(link.address.host))
    if file.same is False:
        _refuse(link, [f"its model file is another: {file.how}"])
    return file


def _served(
    link: ServerLink, context: int | None, props: Any, asked: str, file: FileComparison
) -> Served:
    if context is None:
        raise StartupError(
            f"the server at {link.address} does not say its context ({asked}); "
            f"{Runbook.LOOPD_BACKEND_MISMATCH.pointer}"
        )
    return Served(context, _props_slots(props), file)


def _probe(model: Vocabulary) -> str:
    return "".join(m.text for m in model.markers) + PROBE_TEXT


def _vocabulary_problems(model: Vocabulary, models: Any, probe: str, special: Any) -> list[str]:
    problems = []
    served_vocab = _n_vocab(models)
    if served_vocab is not None and served_vocab != model.n_vocab():
        problems.append(
            f"its vocabulary has {served_vocab} tokens, the model file's {model.n_vocab()}"
        )
    if _tokens(special) != model.tokenize(probe, special=True):
        problems.append("it tokenizes the markers differently")
    params, size = model.file_figures()
    served_params, served_size = _meta_int(models, "n_params"), _meta_int(models, "size")
    if served_params is not None and served_params != params:
        problems.append(f"its model has {served_params:,} parameters, the file's {params:,}")
    elif served_size is not None and served_size != size:
        problems.append(
            f"its model's tensors take {served_size:,} bytes, the file's {size:,}: another "
            "file of the same model (a different quantization)"
        )
    return problems


def _refuse(link: ServerLink, problems: list[str]) -> None:
    if problems:
        raise StartupError(
            f"the server at {link.address} does not serve the model file loopd reads "
            f"({'; '.join(problems)}): start it with the same GGUF file; "
            f"{Runbook.LOOPD_BACKEND_MISMATCH.pointer}"
        )


def _unreachable(exc: ServerUnreachableError) -> StartupError:
    return StartupError(f"{exc}; {Runbook.LOOPD_BACKEND_UNREACHABLE.pointer}")


def _props_context(props: Any) -> int | None:
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    context = settings.get("n_ctx") if isinstance(settings, dict) else None
    return context if isinstance(context, int) and context > 0 else None


def _props_path(props: Any) -> str | None:
    path = props.get("model_path") if isinstance(props, dict) else None
    return path if isinstance(path, str) and path else None


def _root(models: Any) -> str | None:
    """vLLM's `/v1/models` `root`: the model it was started with (a path, or a hub id)."""
    entry = _model_entry(models)
    root = entry.get("root") if entry else None
    return root if isinstance(root, str) and root else None


def _props_slots(props: Any) -> int:
    slots = props.get("total_slots", 1) if isinstance(props, dict) else 1
    return slots if isinstance(slots, int) and slots > 0 else 1


def _model_entry(models: Any) -> dict[str, Any] | None:
    data = models.get("data") if isinstance(models, dict) else None
    entry = data[0] if isinstance(data, list) and data else None
    return entry if isinstance(entry, dict) else None


def _n_vocab(models: Any) -> int | None:
    return _meta_int(models, "n_vocab")


def _meta_int(models: Any, key: str) -> int | None:
    """llama-server's `/v1/models` `meta` figure `key` (vLLM gives no `meta`: None)."""
    entry = _model_entry(models)
    meta = entry.get("meta") if entry else None
    value = meta.get(key) if isinstance(meta, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _max_model_len(models: Any) -> int | None:
    entry = _model_entry(models)
    value = entry.get("max_model_len") if entry else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _tokens(answer: Any) -> list[int] | None:
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        return None
    return tokens
