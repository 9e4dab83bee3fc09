"""A model on a server, driven by token ids (issue 41, `[model] backend`): llama-server's
own `/completion` (`core.model.served`), or the OpenAI completions API of vLLM, SGLang
or llama-server (`core.model.served_openai`).

I/O: loads the model file's vocabulary here (llama-cpp-python, `vocab_only`: no
weights), and talks to the server over `ServerLink`. Everything of a turn but the
forward passes stays in loopd: the template, the dialect, the markers, neutralising,
tokenizing and the session log. A prompt crosses the link as token ids only
(`core.model.served`), so the guarantee of docs/markers.md holds as in-process: what a
tool result spells is tokenized here as plain text. The reply comes back as ids, each
turned into text here as `LlamaModel` does it, so the log holds the same ids and text
whichever backend made them.

At start the server is held to the model file's vocabulary, and an OpenAI server to
ids as sent and ids back (`server_check`); a server of another model is refused
(runbook.md#loopd-backend-mismatch).

A streaming llama-server holds back an id whose text ends inside a character and
sends its text with the next; its count says so, and the id is found again from this
file's vocabulary (`core.model.withheld`), so a reply with rare characters is kept as
the ids the model made. Ids held back at a reply's very end (a reply cut inside a
character) cannot be, and are left out with their unfinished character.

One generation at a time, as in-process: the turn loop's callers wait on one lock.
Each session keeps to one of the server's slots where it has several (`id_slot`), the
least recently used slot given to a new one, so a session's next turn finds its own
prefix in the slot's cache. On vLLM each session salts its prefix cache with a secret
of this process (`cache_salt`), so one session cannot probe another's.
"""

from __future__ import annotations

import base64
import codecs
import ctypes
import hashlib
import hmac
import secrets
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from boxmaker.core.model.sampling import Sampling
from boxmaker.core.model.served import (
    ServedEvent,
    ServedReplyError,
    completion_body,
    read_event,
)
from boxmaker.core.model.served_openai import PATH as OPENAI_PATH
from boxmaker.core.model.served_openai import openai_body, read_openai_event
from boxmaker.core.model.withheld import withheld_ids
from boxmaker.core.runbook import Runbook
from boxmaker.loopd.adapter import Adapter
from boxmaker.loopd.llama_load import load_llama
from boxmaker.loopd.model import (
    ContextFullError,
    Generation,
    Interrupted,
    ModelFile,
    ModelUnavailableError,
    never,
)
from boxmaker.loopd.server_check import check_openai, check_server
from boxmaker.loopd.server_link import ServerLink, ServerUnreachableError

Api = Literal["llama-server", "openai-completions"]


class ServerModel(ModelFile):
    """A GGUF model's vocabulary here, its forward passes on a llama-server."""

    def __init__(
        self,
        path: Path,
        *,
        link: ServerLink,
        seed: int,
        sampling: Sampling,
        api: Api = "llama-server",
    ) -> None:
        import llama_cpp

        super().__init__(load_llama(path, vocab_only=True), sampling)
        self.path = path
        self._llama_cpp = llama_cpp
        self._link = link
        self.api: Api = api
        self._salt_key = secrets.token_bytes(32)  # this process's, never sent
        self._pieces: dict[bytes, list[int]] | None = None
        self._seed = seed
        self._vocab = llama_cpp.llama_model_get_vocab(self._llm.model)
        self.adapter: Adapter | None = None  # a LoRA adapter is the server's (its --lora)
        self.offloaded: tuple[int, int] | None = None
        self._eos: int = self._llm.token_eos()
        served = check_server(link, self) if api == "llama-server" else check_openai(link, self)
        self.context = served.context
        self.served_file = served.file.how  # `file=` of the start line (`served_file`)
        self._slots: OrderedDict[str, int] = OrderedDict()  # session -> slot, least recent first
        self._slot_count = served.slots

    def n_vocab(self) -> int:
        count: int = self._llama_cpp.llama_vocab_n_tokens(self._vocab)
        return count

    def file_figures(self) -> tuple[int, int]:
        """The model file's parameters and tensor bytes, as llama.cpp counts them from
        its header (the vocabulary-only load counts every tensor without reading it)."""
        params: int = self._llama_cpp.llama_model_n_params(self._llm.model)
        size: int = self._llama_cpp.llama_model_size(self._llm.model)
        return params, size

    def generate(
        self,
        session: str,
        prompt: list[int],
        *,
        max_tokens: int,
        stop: set[int],
        on_text: Callable[[str], None],
        interrupted: Interrupted = never,
    ) -> Generation:
        with self._lock:
            room = self.context - len(prompt)
            if room <= 0:
                raise ContextFullError(f"the prompt ({len(prompt)} tokens) fills the context")
            limit = min(max_tokens, room)
            path, body, read = self._request(session, prompt, limit, stop)
            out: list[int] = []
            pieces: list[str] = []
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            finished = ended = cut = False
            evaluated = len(prompt)
            received = 0  # ids the server made and this side has, held-back ones included
            sent = b""  # the end of the text the server sent (for held-back ids)
            try:
                lines = self._link.stream(path, body)
            except ServerUnreachableError as exc:
                raise self._unavailable(exc) from exc
            try:
                for line in lines:
                    event = read(line)
                    if event is None:
                        continue
                    if event.evaluated is not None:
                        evaluated = event.evaluated
                    tokens = self._with_held_back(event, received, sent)
                    received += len(tokens)
                    sent = (sent + event.text.encode("utf-8"))[-4:]
                    for token in tokens:
                        if token in stop or token == self._eos or self._is_eog(token):
                            finished = True
                            break
                        out.append(token)
                        piece = self._llm.detokenize(
                            [token], prev_tokens=out[:-1], special=token in self._shown
                        )
                        pieces.append(decoder.decode(piece))
                        if pieces[-1]:
                            on_text(pieces[-1])
                    if event.finished and event.eos:
                        finished = True  # its end-of-generation id held back with a cut character
                    if event.last or finished or len(out) >= limit:
                        ended = True
                        break
                    if interrupted():  # closing the stream ends the server's work too
                        ended = cut = True
                        break
            except (ServerUnreachableError, ServedReplyError) as exc:
                raise self._unavailable(exc) from exc
            finally:
                lines.close()  # the server stops a completion whose client left
            if not ended:
                raise self._unavailable(
                    ServerUnreachableError(
                        f"the server at {self._link.address} ended a completion without "
                        "its last event"
                    )
                )
            pieces.append(decoder.decode(b"", final=True))
            if pieces[-1]:
                on_text(pieces[-1])
            return Generation(tuple(out), "".join(pieces), len(prompt), evaluated, finished, cut)

    def _request(
        self, session: str, prompt: list[int], limit: int, stop: set[int]
    ) -> tuple[str, dict[str, Any], Callable[[str], ServedEvent | None]]:
        """The path, body and event reader of a completion on this server's API."""
        slot = self._slot_of(session)
        if self.api == "llama-server":
            body = completion_body(
                prompt, max_tokens=limit, sampling=self._sampling, seed=self._seed, slot=slot
            )
            return "/completion", body, read_event
        body = openai_body(
            prompt,
            max_tokens=limit,
            sampling=self._sampling,
            seed=self._seed,
            stop=sorted(stop | {self._eos}),
            salt=self._salt(session),
            slot=slot,
        )
        return OPENAI_PATH, body, read_openai_event

    def _salt(self, session: str) -> str:
        """The session's cache salt: secret, stable in this process, 43 characters."""
        digest = hmac.new(self._salt_key, session.encode("utf-8"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def _with_held_back(self, event: ServedEvent, received: int, sent: bytes) -> tuple[int, ...]:
        """The event's ids, after those the server held back before them (its count
        says how many; their text leads the event's), found again from the vocabulary."""
        if event.made is None or not event.tokens:
            return event.tokens
        held = event.made - received - len(event.tokens)
        if held <= 0:
            return event.tokens
        text = event.text.encode("utf-8")
        own = b"".join(self.piece(token) for token in event.tokens)
        if not text.endswith(own):
            raise ServedReplyError(
                f"the server held back {held} token id(s) and its text does not end "
                "with the ids it sent"
            )
        found = withheld_ids(
            text[: len(text) - len(own)], held, before=sent, pieces=self._ids_of_piece
        )
        return (*found, *event.tokens)

    def piece(self, token: int) -> bytes:
        """The token's text as the server makes it (special tokens as nothing)."""
        buffer = (ctypes.c_char * 256)()
        size = self._llama_cpp.llama_token_to_piece(self._vocab, token, buffer, 256, 0, False)
        return buffer.raw[: max(size, 0)]

    def _ids_of_piece(self, data: bytes) -> list[int]:
        """The ids whose text is `data`: the vocabulary read once, when first needed."""
        if self._pieces is None:
            index: dict[bytes, list[int]] = {}
            for token in range(self.n_vocab()):
                piece = self.piece(token)
                if piece:
                    index.setdefault(piece, []).append(token)
            self._pieces = index
        return self._pieces.get(data, [])

    @staticmethod
    def _unavailable(exc: Exception) -> ModelUnavailableError:
        return ModelUnavailableError(f"{exc}; {Runbook.LOOPD_BACKEND_UNREACHABLE.pointer}")

    def _is_eog(self, token: int) -> bool:
        return bool(self._llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def _slot_of(self, session: str) -> int | None:
        """The slot `session` keeps to (None: the server has one, or does not say)."""
        if self._slot_count <= 1:
            return None
        if session in self._slots:
            self._slots.move_to_end(session)
            return self._slots[session]
        used = set(self._slots.values())
        free = [slot for slot in range(self._slot_count) if slot not in used]
        if free:
            slot = free[0]
        else:
            _, slot = self._slots.popitem(last=False)
        self._slots[session] = slot
        return slot


__all__ = ["Api", "ServedReplyError", "ServerModel"]
