"""loopd.toml into a typed `LoopdConfig`. Reads the file and the environment once.

Every key has a default; an unknown key, a wrong type or an unknown `BOXMAKER_*`
variable is a `ConfigError` naming it. `home` defaults to `BOXMAKER_HOME`, then
`/var/lib/boxmaker`. An absent or empty socket path means its default under home.

    [paths]   home
    [model]   backend ("in-process", the default; "llama-server": the forward passes
              on the llama-server at `server`, http:// or https://, driven by token
              ids, each read waiting server_timeout_ms at most, 600,000; or
              "openai-completions": likewise on a server with the OpenAI
              completions API (vLLM, SGLang, llama-server's /v1):
              `boxmaker.loopd.server_model`; the other keys of where it runs are
              then the server's own), path ("" = the embedded default model),
              adapter (a llama.cpp LoRA adapter GGUF applied to the model:
              "auto", the default, is the adapter boxmaker ships for the
              embedded model, and none for any other; "none" or "" is none;
              else the adapter file's path: `boxmaker.loopd.adapter`), template ("auto": the model
              file's own chat template, else the hand-written format its markers
              name; or one of "gemma", "chatml", "llama3", "phi3", "mistral",
              "deepseek_r1", "gemma4":
              `boxmaker.core.model.chat_format`), context (0: the model's trained
              context, at most 1,048,576, bounded by memory_mib; else at least
              256, and at most the trained context and 1,048,576), memory_mib
              (what the context (its KV cache and llama.cpp's other per-token
              state) and saved sessions may take, in MiB, 4,096:
              `boxmaker.core.model.context_fit`),
              threads, max_tokens (one reply; 0, the default: sized to the model,
              16,384 for one that reasons and 1,024 for one that does not:
              `boxmaker.loopd.main.turn_limits`), reasoning_tokens (of a
              reply's reasoning, 8,192: past it loopd closes the block), thinking
              (true: the template's `enable_thinking`), temperature, top_p, top_k, repeat_penalty
              (unset: the model family's defaults, `boxmaker.core.model.sampling`), seed,
              gpu_layers ("auto": all on the GPU when the build and machine have
              one, else 0; "all"; or a count), flash_attn (auto/on/off), kv_type
              (f16, q8_0, q4_0), batch, ubatch (`boxmaker.core.model.offload`)
    [broker]  socket ("" = the default; "none" = no tool broker), timeout_ms
    [memory]  socket ("" = the default, run/loop-memory/memory.sock; "none" = no
              memory block), timeout_ms (each request to memoryd, at least 1),
              block_tokens (a new session's memory block in the prompt: 0 = an
              eighth of the context, at most a quarter; past it, whole entries
              are left out and logged)
    [sockets] loop, group_access, owner_user (a root install's owner's user, written by
              `bxctl install`: the one peer that may send `sessions`,
              `session_show` and `compact`, by its uid; not read in dev mode,
              where every peer is the owner: `boxmaker.ipc.peers`)
    [turn]    max_tool_calls, max_tokens (all replies of a turn, 65,536), result_tokens
              (a tool result's budget in the prompt: 0 = an eighth of the context,
              at most a quarter; past it, its head and tail with a marker),
              compact_at (0.85: a next prompt longer than this share of the
              context compacts the session first), summary_tokens (a compaction's
              summary: 0 = an eighth of the context, at most a quarter),
              keep_turns (the owner's last turns kept verbatim, 2)

Reply and turn budgets never pass the context: loopd caps them at the context it
resolved at start (`[model] context`, or what `context = 0` chose).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from boxmaker.core.home.layout import HOME_VARIABLE, client_socket, socket_path
from boxmaker.core.home.links import LOOP, LOOP_BROKER, LOOP_MEMORY
from boxmaker.core.home.settings_check import RoleSettingsBase, Section
from boxmaker.core.model.context_fit import CONTEXT_STEP
from boxmaker.core.model.offload import GpuLayers, KvType, SplitMode, Switch
from boxmaker.ipc.config_file import read_config

KNOWN_VARIABLES = (HOME_VARIABLE,)


class PathsSection(Section):
    home: str = ""


def _context(value: int) -> int:
    """`[model] context`: 0 (what fits, `boxmaker.core.model.context_fit`) or at least 256."""
    if value == 0 or value >= CONTEXT_STEP:
        return value
    raise ValueError(
        f"give 0 (the model's trained context, bounded by memory_mib) or at least {CONTEXT_STEP}"
    )


def _gpu_layers(value: object) -> object:
    """`[model] gpu_layers`: a count of 0 or more, "all" or "auto" (one message for all)."""
    if value in ("auto", "all") or (type(value) is int and value >= 0):
        return value
    raise ValueError('give a count of layers (0 or more), "all" or "auto"')


class ModelSection(Section):
    # where the forward passes run: in this process (llama-cpp-python), or on a
    # llama-server, or a server with the OpenAI completions API, at `server`, driven by
    # token ids (`boxmaker.loopd.server_model`)
    backend: Literal["in-process", "llama-server", "openai-completions"] = "in-process"
    server: str = ""  # the server's address, http:// or https:// (a served backend)
    server_timeout_ms: int = Field(default=600_000, ge=1)  # each read from the server
    # in-process, the layers on llama.cpp rpc-servers, each loopback or inside a tunnel
    # named in rpc_tunnels (`boxmaker.core.model.rpc_endpoints`)
    rpc_servers: list[str] = Field(default_factory=list)
    rpc_tunnels: list[str] = Field(default_factory=list)
    path: str = ""
    # "auto": the shipped adapter for the embedded model, none for another; "none" (or
    # ""): none; else an adapter GGUF file's path (`boxmaker.loopd.adapter`)
    adapter: str = "auto"
    template: Literal[
        "auto", "gemma", "chatml", "llama3", "phi3", "mistral", "deepseek_r1", "gemma4"
    ] = "auto"
    # 0: the trained context, bounded by what fits memory_mib (`core.model.context_fit`)
    context: Annotated[int, AfterValidator(_context)] = 0
    memory_mib: int = Field(default=4096, ge=1)  # the context's memory and saved sessions
    threads: int = Field(default_factory=lambda: max(1, os.cpu_count() or 1), ge=1)
    # one reply: 0 = sized to the model (`boxmaker.loopd.main.turn_limits`)
    max_tokens: int = Field(default=0, ge=0)
    reasoning_tokens: int = Field(default=8_192, ge=1)
    thinking: bool = True
    # unset: the model family's own defaults (`boxmaker.core.model.sampling`)
    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    repeat_penalty: float | None = Field(default=None, gt=0.0)
    seed: int = Field(default=-1)
    # where it runs (`boxmaker.core.model.offload`): "auto" = every layer on the GPU when
    # the build has a GPU backend and a device is present, else none
    gpu_layers: Annotated[GpuLayers, BeforeValidator(_gpu_layers)] = "auto"
    flash_attn: Switch = "auto"
    kv_type: KvType = "f16"
    batch: int = Field(default=512, ge=1)
    ubatch: int = Field(default=512, ge=1)
    # several GPUs (or rpc-servers): how the layers are split (`core.model.offload` rule 5)
    split_mode: SplitMode = "layer"
    main_gpu: int = Field(default=0, ge=0)
    tensor_split: list[float] = Field(default_factory=list)

    @model_validator(mode="after")
    def _server_named(self) -> ModelSection:
        if self.backend != "in-process" and not self.server:
            raise ValueError(
                f'backend "{self.backend}" needs the server\'s address: server = "http://..."'
            )
        return self


class BrokerSection(Section):
    socket: str = ""
    timeout_ms: int = Field(default=120_000, ge=0)


class MemorySection(Section):
    socket: str = ""
    timeout_ms: int = Field(default=10_000, ge=1)
    # a new session's memory block, in tokens: 0 = an eighth of the context; never
    # more than a quarter of it (`boxmaker.loopd.memory_fit`)
    block_tokens: int = Field(default=0, ge=0)


class SocketsSection(Section):
    loop: str = ""
    # true in a root install, false in dev mode: each link's modes (`core.home.links`)
    group_access: bool = False
    # a root install: the owner's user, the one peer of the owner's kinds (`ipc.peers`)
    owner_user: str = ""


class TurnSection(Section):
    max_tool_calls: int = Field(default=8, ge=0)
    max_tokens: int = Field(default=65_536, ge=1)
    # a tool result's share of the prompt, in tokens: 0 = an eighth of the context;
    # never more than a quarter of it (`boxmaker.core.model.result_cut`)
    result_tokens: int = Field(default=0, ge=0)
    # compaction: a next prompt past compact_at of the context is summarised first, in
    # summary_tokens at most (0 = an eighth of the context; never past a quarter), the
    # owner's last keep_turns turns kept as they were
    compact_at: float = Field(default=0.85, gt=0.0, le=1.0)
    summary_tokens: int = Field(default=0, ge=0)
    keep_turns: int = Field(default=2, ge=1)


class LoopdConfig(RoleSettingsBase):
    paths: PathsSection = PathsSection()
    model: ModelSection = ModelSection()
    broker: BrokerSection = BrokerSection()
    memory: MemorySection = MemorySection()
    sockets: SocketsSection = SocketsSection()
    turn: TurnSection = TurnSection()

    @property
    def home(self) -> Path:
        return Path(self.paths.home)

    @property
    def loop_socket(self) -> Path:
        return socket_path(self.home, LOOP, self.sockets.loop)

    @property
    def broker_socket(self) -> Path | None:
        """broker.sock, or None when `[broker] socket = "none"`."""
        return client_socket(self.home, LOOP_BROKER, self.broker.socket)

    @property
    def memory_socket(self) -> Path | None:
        """memoryd's loop-memory socket, or None when `[memory] socket = "none"`."""
        return client_socket(self.home, LOOP_MEMORY, self.memory.socket)


def load_config(path: Path | None, environ: Mapping[str, str]) -> LoopdConfig:
    """loopd.toml at `path` (None: every default), with `environ` for BOXMAKER_HOME."""
    return read_config(LoopdConfig, path, environ, "loopd", KNOWN_VARIABLES)
