"""docs/backends.md's example configurations are loopd.toml files loopd reads: each
```toml block, loaded by loopd's own reader, names a served backend and its server, or
rpc-servers that are each an address and a port."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from boxmaker.core.model.rpc_endpoints import parse_endpoint
from boxmaker.loopd.config import load_config

DOC = Path(__file__).resolve().parents[2] / "docs" / "backends.md"
BLOCK = re.compile(r"```toml\n(.*?)\s*```", re.DOTALL)


def test_every_example_configuration_loads(tmp_path: Path) -> None:
    blocks = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 2, "docs/backends.md shows an example for each served backend"
    seen = set()
    for n, block in enumerate(blocks):
        path = tmp_path / f"example-{n}.toml"
        path.write_text(f'[paths]\nhome = "{tmp_path}"\n\n{block}', encoding="utf-8")
        config = load_config(path, {})
        written = tomllib.loads(block)["model"]
        assert config.model.backend == written.get("backend", "in-process")
        assert config.model.server == written.get("server", "")
        assert config.model.rpc_servers == written.get("rpc_servers", [])
        for endpoint in config.model.rpc_servers:
            assert str(parse_endpoint(endpoint)) == endpoint
        assert config.model.tensor_split == written.get("tensor_split", [])
        if config.model.rpc_servers:
            seen.add("rpc")
        elif config.model.tensor_split:
            seen.add("split")
        else:
            seen.add(config.model.backend)
    assert seen == {"llama-server", "openai-completions", "rpc", "split"}
