"""Stand-in `llama_cpp` packages, for tests of what happens when the model misbehaves.

Put first on a child process's PYTHONPATH (`install`), one of these replaces
llama-cpp-python in that process only: `CRASHING` kills its process with
SIGILL inside `Llama(...)`, as a build compiled for another CPU dies; `SILENT`
loads and produces no token; `ANSWERING` produces four; `COMPILING` loads as a
llama-cpp-python that compiles the file's chat templates all the same would.
I/O: `install` writes the package under a directory.
"""

from __future__ import annotations

from pathlib import Path

# what loopd asks of llama_cpp before it loads a model: a CPU build's answers
_BUILD = """
LLAMA_DEFAULT_SEED = 0xFFFFFFFF
GGML_TYPE_F16, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0 = 1, 2, 8
def llama_supports_gpu_offload():
    return False
def llama_log_callback(function):
    return function
def llama_log_set(callback, user_data):
    pass
"""

CRASHING = (
    _BUILD
    + """
import os, signal
class Llama:
    def __init__(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGILL)
"""
)

_LOADS = (
    _BUILD
    + """
def llama_model_get_vocab(model):
    return model
def llama_vocab_n_tokens(vocab):
    return 0  # no token of its own: an empty marker list
def llama_model_n_swa(model):
    return 0  # no sliding window
class _Model:
    model = None
class Llama:
    def __init__(self, *args, **kwargs):
        self.metadata = {}
        self.model = object()
        self._model = _Model()
        self._input_ids = []
        self.n_batch = 512
        self.n_tokens = 0
    def eval(self, tokens):
        self.n_tokens += len(tokens)
    def tokenize(self, text, add_bos=False, special=False):
        return [5, 6, 7]
    def n_ctx(self):
        return 256
    def token_eos(self):
        return 1
    def token_bos(self):
        return -1
    def detokenize(self, ids, prev_tokens=None, special=False):
        return b"x" * len(ids)
"""
)

SILENT = (
    _LOADS
    + """
    def generate(self, prompt, **kwargs):
        yield 1  # the end of the text, at once
"""
)

ANSWERING = (
    _LOADS
    + """
    def generate(self, prompt, **kwargs):
        yield from (8, 9, 10, 11, 12, 13)
"""
)


# another llama-cpp-python (a version loopd was not made for) that compiles the file's
# chat templates as its `Llama` loads it, however loopd hands it the metadata
COMPILING = _LOADS.replace("class Llama:", "__version__ = '9.9.9'\nclass Llama:", 1).replace(
    "        self._input_ids = []\n",
    "        self._input_ids = []\n        self._chat_handlers = {'chat_template.default': 0}\n",
    1,
)


def install(directory: Path, source: str) -> Path:
    """Write `source` as the package `llama_cpp` under `directory`; return `directory`."""
    package = directory / "llama_cpp"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(source)
    return directory
