"""How loopd makes a llama-cpp-python `Llama`: nothing of the model file runs, no log is lost.

I/O: llama.cpp reads the model file, in this process, and logs; its log goes to the
logger `llama.cpp`. Every `Llama` of boxmaker is made by `load_llama` (a model whole,
or its vocabulary alone: the probe child, `loopd check`, the marker self-test, loopd).
The rules, for llama-cpp-python 0.3.36 (setup.cfg pins it; `tests/loopd/test_llama_load.py`
holds each rule to the pinned build):

1. **No chat template reaches llama-cpp-python's jinja2.** `Llama.__init__` reads the
   file's metadata (llama.py, `self.metadata = self._model.metadata()`) and then, for
   every `tokenizer.chat_template` and `tokenizer.chat_template.<name>` in it, compiles
   the template with jinja2 and no bound at all (`template_choices`, each made a
   `llama_chat_format.Jinja2ChatFormatter`, whose `__init__` runs
   `environment.from_string(template)`), whatever chat format or handler it is given.
   A template is a hostile program that loopd runs only in its own sandbox
   (`core.model.template_sandbox`), so here it is withheld: `Llama.__init__` reads the
   metadata from the model it has just loaded, `self._model`, and `_TemplateFree` (a
   subclass) hands it that model with a `metadata()` that leaves the template keys out,
   for that one read. After the load `metadata` is the file's whole metadata,
   templates included, as before. A `Llama` that holds a chat handler after the load
   all the same (another llama-cpp-python, which compiled them some other way) or never
   set `_model` is refused, in one line naming the version to install.
2. **No file descriptor is swapped.** Where `verbose` is false, llama-cpp-python runs
   llama.cpp's backend init and the model load inside `suppress_stdout_stderr`
   (_utils.py; llama.py `Llama.__init__`, _internals.py `LlamaModel.__init__`), which
   dup2s /dev/null over fds 1 and 2 and afterwards dup2s back what it saved: every other
   thread's output goes to /dev/null meanwhile, and two loads at once (loopd loads the
   model while a thread reads the vocabulary for the marker self-test) can leave fd 2 on
   /dev/null for good, and loopd's log with it. So `Llama` is made with `verbose=True`,
   which swaps nothing; the prints that `verbose` turns on (the system info, the
   metadata, the templates: llama.py's `if self.verbose:` lines, each after the model
   is loaded) are turned off as the loaded model is handed over (`verbose` False from
   there on, for the `Llama`'s whole life).
3. **llama.cpp's log is loopd's log.** `llama_log_set` (which sets ggml's logger too)
   routes llama.cpp's log to the logger `llama.cpp`, never to a stream of its own: one
   record per line, `event=llama_cpp` and the line escaped as model text is
   (`core.display.escape.escape_arguments`: the loader logs the file's metadata values), at
   DEBUG for llama.cpp's info and debug lines, INFO for its warnings (remarks on the
   file, such as a token whose type it corrects, which the owner cannot act on) and
   ERROR for its errors. A line
   is put together per thread, so two loads at once cannot mix their pieces.
   `LoadLog` also keeps the lines its own thread logs while it is open, such as
   `offloaded N/M layers to GPU`, which `loopd.model` reads.
4. **A LoRA adapter llama.cpp refused is refused here.** With `lora_path`, llama.py calls
   `llama_adapter_lora_init` and tests its answer with `is None`; but its ctypes return
   type is `POINTER(c_void_p)`, whose NULL is an object, never None, so an adapter
   llama.cpp refused (another architecture, a tensor the model lacks, a wrong shape: it
   logs why) goes on as a NULL adapter set on the context, and the first evaluation
   dereferences it. So a `Llama` made with `lora_path` whose `_lora_adapter` is NULL is
   closed before anything is evaluated, and refused with llama.cpp's own error line.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.errors import StartupError
from boxmaker.core.model.named_templates import DEFAULT_KEY, NAMED_PREFIX

__all__ = ["LoadLog", "is_template_key", "load_llama", "route_log"]

log = logging.getLogger("llama.cpp")

PINNED = "0.3.36"  # setup.cfg's llama-cpp-python== pin, for the refusal's words
# enum ggml_log_level, as the pinned build's include/ggml.h has it: NONE 0, DEBUG 1,
# INFO 2, WARN 3, ERROR 4, CONT 5 (the line before goes on). (llama-cpp-python's own
# _logger.py still spells an older order, in which 3 was ERROR.)
_LOG_ERROR = 4
_LOG_CONTINUE = 5
# its warnings are mostly about the file (a token's type, a vocabulary-only context) and
# are logged as information, its errors as errors; the rest at DEBUG
_LEVELS = {3: logging.INFO, 4: logging.ERROR}
_MODEL = "_boxmaker_model"  # where `_TemplateFree` keeps the model Llama.__init__ loaded
_WHOLE = "_boxmaker_metadata"  # the whole metadata, as the one read of rule 1 found it


def is_template_key(key: str) -> bool:
    """Whether a metadata key holds a chat template (`core.model.named_templates`' keys)."""
    return key == DEFAULT_KEY or key.startswith(NAMED_PREFIX)


class _Lines(threading.local):
    """One thread's part of llama.cpp's log: the line being put together, its level,
    and the `LoadLog`s open in this thread."""

    def __init__(self) -> None:
        self.pending = ""
        self.level = 1
        self.captures: list[LoadLog] = []


_lines = _Lines()


def _record(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    """llama.cpp's log callback (any thread): rule 3. Never raises into C."""
    try:
        piece = text.decode("utf-8", errors="replace")
        state = _lines
        if level != _LOG_CONTINUE:
            state.level = level
        for capture in state.captures:
            capture.add(piece, state.level)
        state.pending += piece
        while "\n" in state.pending:
            line, state.pending = state.pending.split("\n", 1)
            at = _LEVELS.get(state.level, logging.DEBUG)
            if line.strip() and log.isEnabledFor(at):
                log.log(at, "event=llama_cpp %s", escape_arguments(line))
    except Exception:  # noqa: S110  # a log line lost beats an exception inside llama.cpp
        pass


@functools.cache
def _callback() -> Any:
    """The C callback, made once and kept for the process's life (llama.cpp holds it)."""
    import llama_cpp

    return llama_cpp.llama_log_callback(_record)


def route_log() -> None:
    """Send llama.cpp's (and ggml's) log to the logger (rule 3). Idempotent; every load
    calls it, so a logger llama-cpp-python put back in between does not stay."""
    import llama_cpp

    llama_cpp.llama_log_set(_callback(), ctypes.c_void_p(0))


class LoadLog:
    """While open, what llama.cpp logs on this thread is also kept in `text` (and its
    error lines, escaped, in `errors`). Nests: each open one keeps everything."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._error = ""

    def add(self, piece: str, level: int) -> None:
        self._parts.append(piece)
        if level == _LOG_ERROR:
            self._error += piece

    @property
    def text(self) -> str:
        return "".join(self._parts)

    @property
    def errors(self) -> list[str]:
        """llama.cpp's error lines while open, each escaped (the file's text may be in them)."""
        return [escape_arguments(line) for line in self._error.splitlines() if line.strip()]

    def __enter__(self) -> LoadLog:
        route_log()
        _lines.captures.append(self)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _lines.captures.remove(self)


def _withhold_templates(llm: Any, model: Any) -> None:
    """Rule 1: the model's next `metadata()` (Llama.__init__'s one read) leaves the
    template keys out; the whole of it is kept on `llm` for after the load."""
    read = getattr(model, "metadata", None)
    if read is None:  # a stand-in llama_cpp's model (boxmaker.testing.llama_stand_in)
        return

    def without_templates() -> dict[str, str]:
        vars(model).pop("metadata", None)  # one read: the model's own method from here on
        whole: dict[str, str] = read()
        llm.__dict__[_WHOLE] = whole
        return {key: value for key, value in whole.items() if not is_template_key(key)}

    model.metadata = without_templates


@functools.cache
def _template_free() -> type[Any]:
    """`llama_cpp.Llama` with rules 1 and 2 (made once, when llama_cpp is first needed)."""
    import llama_cpp

    class _TemplateFree(llama_cpp.Llama):  # type: ignore[misc]  # llama_cpp is Any
        @property
        def _model(self) -> Any:
            try:
                return self.__dict__[_MODEL]
            except KeyError:
                raise AttributeError("_model") from None

        @_model.setter
        def _model(self, model: Any) -> None:
            # Llama.__init__ sets it once llama.cpp has loaded the file (the one step
            # verbose=True keeps from swapping fds), before it reads the metadata or prints
            self.__dict__[_MODEL] = model
            self.verbose = False  # rule 2: none of llama-cpp-python's prints
            _withhold_templates(self, model)

    return _TemplateFree


def load_llama(path: Path, **params: Any) -> Any:
    """A llama-cpp-python `Llama` of the GGUF file at `path` with `params` (`vocab_only`,
    `n_ctx`, `lora_path`, ...), made by the rules above. ValueError, its text ending with
    llama.cpp's own last error line (escaped), when llama.cpp cannot load the file, or
    the LoRA adapter `lora_path` names (llama-cpp-python raises RuntimeError for that);
    StartupError when this llama-cpp-python compiled the file's templates all the same."""
    import llama_cpp

    with LoadLog() as load:
        try:
            llm = _template_free()(model_path=str(path), verbose=True, **params)
        except (ValueError, RuntimeError) as exc:
            if isinstance(exc, RuntimeError) and not params.get("lora_path"):
                raise
            said = load.errors
            detail = f": {said[-1]}" if said else ""
            raise ValueError(f"{escape_arguments(str(exc))}{detail}") from exc
    if params.get("lora_path") and not getattr(llm, "_lora_adapter", None):  # rule 4
        llm.close()
        said = load.errors
        detail = f": {said[-1]}" if said else ""
        shown = escape_arguments(str(params["lora_path"]))
        raise ValueError(f"llama.cpp could not load the LoRA adapter {shown}{detail}")
    handlers: Mapping[str, Any] = getattr(llm, "_chat_handlers", None) or {}
    if _MODEL not in llm.__dict__ or handlers:
        version = getattr(llama_cpp, "__version__", "unknown")
        raise StartupError(
            f"llama-cpp-python {version} loads a model in a way loopd cannot keep from "
            f"compiling the file's chat templates outside loopd's sandbox; install "
            f"llama-cpp-python=={PINNED}, the version setup.cfg pins"
        )
    whole = llm.__dict__.pop(_WHOLE, None)
    if whole is not None:
        llm.metadata = whole
    return llm
