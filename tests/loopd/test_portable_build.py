"""The installed llama-cpp-python is the portable build (scripts/build-llama-cpp).

A build with `-march=native` on a host whose CPU lists AMX or AVX-512 holds those
instructions, and loopd dies with SIGILL at the first matrix multiply on a host
without them, or in a virtual machine that traps AMX (`tilezero`). This disassembles
every shared library of the installed `llama_cpp` package with `objdump -d` and
finds no AMX instruction and no register only AVX-512 has (`zmm`, `ymm16`-`31`, `k0`-`7`), whatever the CPU of
the host that runs the test. It reads the files without importing `llama_cpp`.

Without llama-cpp-python or objdump (binutils) the test is skipped, loudly; with
CI set it fails. I/O: reads the package's libraries, runs objdump.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.skips import skip_or_fail

AMX = (
    "tilezero",
    "tileloadd",
    "tileloaddt1",
    "tilestored",
    "tilerelease",
    "ldtilecfg",
    "sttilecfg",
    "tdpbssd",
    "tdpbsud",
    "tdpbusd",
    "tdpbuud",
    "tdpbf16ps",
    "tdpfp16ps",
)
# an instruction line of `objdump -d --no-show-raw-insn`: "  1f2c0:\ttdpbusd %tmm2,..."
_AMX_LINE = re.compile(r"^\s*[0-9a-f]+:\s+(" + "|".join(AMX) + r")\b", re.MULTILINE)
# registers only AVX-512 has: zmm, xmm16-31 and ymm16-31 (AVX-512VL), the masks k0-7
_AVX512 = re.compile(r"%(?:zmm\d+|[xy]mm(?:1[6-9]|2\d|3[01])\b|k[0-7]\b)")
_SHOWN = 3


def _libraries() -> list[Path]:
    """The package's shared libraries, one per distinct content (a wheel holds copies)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return []
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    seen: set[str] = set()
    found = []
    for path in sorted(lib.glob("lib*.so*")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest not in seen:
            seen.add(digest)
            found.append(path)
    return found


def _findings(disassembly: str) -> list[str]:
    """What in `disassembly` a portable build must not hold, one line each."""
    problems = []
    amx = _AMX_LINE.findall(disassembly)
    if amx:
        problems.append(f"{len(amx)} AMX instructions ({', '.join(sorted(set(amx)))})")
    lines = [line.strip() for line in disassembly.splitlines() if _AVX512.search(line)]
    if lines:
        problems.append(f"{len(lines)} instructions on AVX-512 registers: {lines[:_SHOWN]}")
    return problems


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("   1f2c0:\ttdpbusd %tmm2,%tmm1,%tmm0\n", ["1 AMX instructions (tdpbusd)"]),
        ("   10:\ttilezero %tmm0\n   14:\tldtilecfg (%rax)\n", ["2 AMX instructions"]),
        ("   20:\tvpaddd %zmm1,%zmm2,%zmm3\n", ["1 instructions on AVX-512 registers"]),
        ("   24:\tvpaddd %ymm17,%ymm2,%ymm3{%k1}\n", ["1 instructions on AVX-512 registers"]),
        ("   30:\tvpaddd %ymm1,%ymm2,%ymm3\n   34:\tcall 40 <tilezero_helper@plt>\n", []),
    ],
    ids=["amx", "amx-two", "avx512", "avx512vl", "avx2-and-a-symbol-name"],
)
def test_findings_name_amx_and_avx512(text: str, expected: list[str]) -> None:
    found = _findings(text)
    assert len(found) == len(expected)
    for line, prefix in zip(found, expected, strict=True):
        assert line.startswith(prefix)


def test_installed_build_holds_no_amx_and_no_avx512() -> None:
    libraries = _libraries()
    if not libraries:
        skip_or_fail(
            "llama-cpp-python is not installed: the portable-build check did NOT run; "
            "install it with scripts/build-llama-cpp --install <python>"
        )
    objdump = shutil.which("objdump")
    if objdump is None:
        skip_or_fail(
            "objdump is missing: the portable-build check did NOT run; "
            "install binutils (scripts/install-host-packages)"
        )
    names = [path.name for path in libraries]
    assert any(name.startswith("libggml-cpu.so") for name in names), names
    problems = []
    for path in libraries:
        disassembly = subprocess.run(
            [objdump, "-d", "--no-show-raw-insn", str(path)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        problems += [f"{path.name}: {problem}" for problem in _findings(disassembly)]
    assert not problems, (
        "llama-cpp-python was not built portably (native flags?); rebuild it with "
        "scripts/build-llama-cpp --install <python>:\n" + "\n".join(problems)
    )
