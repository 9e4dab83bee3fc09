"""scripts/build-llama-cpp's arguments: the CMake flags and wheel directory it would use.

Only `--print-args` and `--print-dir` are run (each as a subprocess), which build
nothing. The environment is controlled: no CMAKE_ARGS, SKBUILD_* or BOXMAKER_*
variable unless a test sets one, $XDG_CACHE_HOME in a temporary directory, and a
PATH of links to the few tools the script uses, so a real `nvidia-smi` on the
machine running the tests is never seen. A GPU is a fake `nvidia-smi` (a shell
script that prints compute capabilities) and the CUDA toolkit a fake `nvcc` in
$CUDA_HOME. I/O: runs the script; writes the fakes and links under tmp_path.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from support.skips import skip_or_fail

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "build-llama-cpp"
# what the script runs besides bash's builtins (not nvidia-smi, not nvcc)
TOOLS = ("dirname", "sed", "wc", "sha256sum", "cut", "tr", "grep", "sort", "paste")
CPU_FLAGS = [
    "-DGGML_NATIVE=OFF",
    "-DGGML_SSE42=ON",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_BMI2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_AVX512=OFF",
    "-DGGML_AVX512_VBMI=OFF",
    "-DGGML_AVX512_VNNI=OFF",
    "-DGGML_AVX512_BF16=OFF",
    "-DGGML_AVX_VNNI=OFF",
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
    "-DGGML_RPC=ON",
]
QUERY = "--query-gpu=compute_cap --format=csv,noheader"

Run = Callable[..., subprocess.CompletedProcess[str]]


def _cuda_flags(arch: str) -> list[str]:
    return [*CPU_FLAGS, "-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={arch}"]


def _version() -> str:
    pins: list[str] = re.findall(
        r"^\s*llama-cpp-python==(\S+)\s*$", (REPO / "setup.cfg").read_text(), re.M
    )
    assert len(pins) == 1, pins
    return pins[0]


def _tools(where: Path) -> Path:
    """A directory of links to the tools the script runs, and nothing else."""
    where.mkdir()
    for name in TOOLS:
        found = shutil.which(name)
        if found is None:
            skip_or_fail(f"{name} is missing: the build-llama-cpp tests did NOT run")
        (where / name).symlink_to(found)
    return where


def _fake_nvidia_smi(where: Path, output: str, status: int = 0) -> Path:
    """A directory holding an `nvidia-smi` that answers the compute-capability query."""
    where.mkdir()
    script = where / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'[ "$*" = "{QUERY}" ] || {{ echo "unexpected arguments: $*" >&2; exit 64; }}\n'
        f"printf '%s' '{output}'\n"
        f"exit {status}\n"
    )
    script.chmod(0o755)
    return where


def _fake_toolkit(where: Path) -> Path:
    """A $CUDA_HOME whose bin/nvcc is an executable (never run by --print-*)."""
    (where / "bin").mkdir(parents=True)
    nvcc = where / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\nexit 1\n")
    nvcc.chmod(0o755)
    return where


@pytest.fixture
def run(tmp_path: Path) -> Run:
    """Run the script with `args`; `gpu` is a fake nvidia-smi's output (None: no nvidia-smi)."""
    tools = _tools(tmp_path / "tools")
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BOXMAKER_", "SKBUILD_")) and k not in ("CMAKE_ARGS", "CUDA_HOME")
    }
    base["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    bash = shutil.which("bash")
    assert bash is not None
    count = 0

    def _run(
        *args: str,
        gpu: str | None = None,
        gpu_status: int = 0,
        nvcc: bool = False,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        nonlocal count
        count += 1
        path = [str(tools)]
        if gpu is not None:
            path.insert(0, str(_fake_nvidia_smi(tmp_path / f"gpu{count}", gpu, gpu_status)))
        full = {**base, "PATH": os.pathsep.join(path), **(env or {})}
        if nvcc:
            full["CUDA_HOME"] = str(_fake_toolkit(tmp_path / f"cuda{count}"))
        return subprocess.run(
            [bash, str(SCRIPT), *args],
            capture_output=True,
            text=True,
            env=full,
            timeout=60,
            check=False,
        )

    return _run


def _flags(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    return lines[0].split(" ")


def _one_error_line(done: subprocess.CompletedProcess[str], status: int) -> str:
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("build-llama-cpp: "), lines[0]
    return lines[0]


def test_without_gpu_arguments_a_machine_without_nvidia_smi_gets_the_portable_cpu_flags(
    run: Run,
) -> None:
    assert _flags(run("--print-args")) == CPU_FLAGS


def test_without_gpu_arguments_a_machine_whose_nvidia_smi_finds_no_gpu_gets_the_cpu_flags(
    run: Run,
) -> None:
    done = run("--print-args", gpu="No devices were found\n", gpu_status=6, nvcc=True)
    assert _flags(done) == CPU_FLAGS


@pytest.mark.parametrize(
    ("arch", "expected"),
    [("90", "90"), ("80;90", "80;90"), ("90a", "90a")],
    ids=["h100-h200", "a100-and-h100", "arch-specific-90a"],
)
def test_gpu_cuda_with_a_cuda_arch_adds_exactly_the_cuda_flags(
    run: Run, arch: str, expected: str
) -> None:
    assert _flags(run("--gpu", "cuda", "--cuda-arch", arch, "--print-args")) == _cuda_flags(
        expected
    )


def test_gpu_cuda_on_a_machine_without_a_gpu_asks_for_cuda_arch(run: Run) -> None:
    line = _one_error_line(run("--gpu", "cuda", "--print-args"), 2)
    assert "--cuda-arch" in line


def test_gpu_cuda_without_cuda_arch_reads_the_gpus_compute_capability(run: Run) -> None:
    assert _flags(run("--gpu", "cuda", "--print-args", gpu="9.0\n")) == _cuda_flags("90")


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [("9.0\n", "90"), ("9.0\n8.0\n", "80;90"), ("8.0\n9.0\n", "80;90"), ("9.0\n9.0\n", "90")],
    ids=["one-h200", "h200-and-a100", "a100-and-h200", "two-h200"],
)
def test_gpu_auto_with_nvcc_and_a_gpu_builds_for_the_gpus_it_finds(
    run: Run, gpus: str, expected: str
) -> None:
    assert _flags(run("--gpu", "auto", "--print-args", gpu=gpus, nvcc=True)) == _cuda_flags(
        expected
    )


def test_gpu_auto_is_the_default(run: Run) -> None:
    assert _flags(run("--print-args", gpu="9.0\n", nvcc=True)) == _cuda_flags("90")


def test_gpu_auto_without_nvidia_smi_is_the_cpu_build(run: Run) -> None:
    assert _flags(run("--gpu", "auto", "--print-args", nvcc=True)) == CPU_FLAGS


def test_an_explicit_cuda_arch_wins_over_the_gpus_own(run: Run) -> None:
    done = run("--gpu", "auto", "--cuda-arch", "89", "--print-args", gpu="9.0\n", nvcc=True)
    assert _flags(done) == _cuda_flags("89")


def test_gpu_none_is_the_cpu_build_even_with_a_gpu_and_nvcc(run: Run) -> None:
    assert _flags(run("--gpu", "none", "--print-args", gpu="9.0\n", nvcc=True)) == CPU_FLAGS


def test_boxmaker_llama_gpu_none_is_the_cpu_build_even_with_a_gpu(run: Run) -> None:
    done = run("--print-args", gpu="9.0\n", nvcc=True, env={"BOXMAKER_LLAMA_GPU": "none"})
    assert _flags(done) == CPU_FLAGS


def test_boxmaker_cuda_arch_gives_the_architecture(run: Run) -> None:
    done = run("--gpu", "cuda", "--print-args", env={"BOXMAKER_CUDA_ARCH": "89"})
    assert _flags(done) == _cuda_flags("89")


def test_boxmaker_llama_cmake_args_are_appended_to_the_set(run: Run) -> None:
    extra = "-DGGML_CUDA_FA_ALL_QUANTS=ON"
    done = run("--print-args", env={"BOXMAKER_LLAMA_CMAKE_ARGS": extra})
    assert _flags(done) == [*CPU_FLAGS, extra]


def _directory(run: Run, *args: str, **kwargs: object) -> str:
    done = run(*args, "--print-dir", **kwargs)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    return lines[0]


def test_print_dir_is_keyed_by_the_version_and_the_flags_and_builds_nothing(
    run: Run, tmp_path: Path
) -> None:
    wheels = tmp_path / "cache" / "boxmaker" / "wheels"
    cases = {
        "cpu": (),
        "cuda-90": ("--gpu", "cuda", "--cuda-arch", "90"),
        "cuda-80-90": ("--gpu", "cuda", "--cuda-arch", "80;90"),
    }
    directories = {}
    for name, args in cases.items():
        flags = " ".join(_flags(run(*args, "--print-args")))
        digest = hashlib.sha256(f"{_version()}\n{flags}\n".encode()).hexdigest()[:8]
        directory = _directory(run, *args)
        assert directory == f"{wheels}/llama-cpp-python-{_version()}-{digest}", name
        assert _directory(run, *args) == directory, name  # the same flags, the same place
        directories[name] = directory
    assert len(set(directories.values())) == len(cases), directories
    assert not wheels.exists()  # --print-dir makes nothing


def test_the_same_flags_however_chosen_share_one_directory(run: Run) -> None:
    by_argument = _directory(run, "--gpu", "cuda", "--cuda-arch", "90")
    by_gpu = _directory(run, "--gpu", "auto", gpu="9.0\n", nvcc=True)
    by_variable = _directory(run, "--gpu", "cuda", env={"BOXMAKER_CUDA_ARCH": "90"})
    assert by_argument == by_gpu == by_variable
    assert _directory(run, "--gpu", "none", gpu="9.0\n", nvcc=True) == _directory(run)


def test_extra_cmake_args_get_a_directory_of_their_own(run: Run) -> None:
    extra = {"BOXMAKER_LLAMA_CMAKE_ARGS": "-DGGML_CUDA_FA_ALL_QUANTS=ON"}
    assert _directory(run, env=extra) != _directory(run)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--gpu", "metal", "--print-args"), "--gpu metal"),
        (("--gpu", "cuda", "--cuda-arch", "sm_90", "--print-args"), "--cuda-arch sm_90"),
        (("--gpu", "cuda", "--cuda-arch", "9.0", "--print-args"), "--cuda-arch 9.0"),
        (("--gpu", "cuda", "--cuda-arch", "80,90", "--print-args"), "--cuda-arch 80,90"),
        (("--print-args", "--native"), "unknown argument --native"),
        (("--print-args", "--gpu"), "--gpu needs"),
        (("--print-args", "--cuda-arch"), "--cuda-arch needs"),
        (("--install",), "--install needs"),
    ],
    ids=[
        "gpu-metal",
        "arch-sm_90",
        "arch-dotted",
        "arch-comma",
        "unknown-argument",
        "gpu-without-value",
        "arch-without-value",
        "install-without-python",
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(run: Run, args: tuple[str, ...], words: str) -> None:
    assert words in _one_error_line(run(*args), 2)


@pytest.mark.parametrize("variable", ["CMAKE_ARGS", "SKBUILD_CMAKE_ARGS", "SKBUILD_CMAKE_DEFINE"])
def test_cmake_args_of_its_own_are_refused_in_one_line(run: Run, variable: str) -> None:
    for mode in ("--print-args", "--print-dir"):
        line = _one_error_line(run(mode, env={variable: "-DGGML_NATIVE=ON"}), 1)
        assert variable in line
        assert "BOXMAKER_LLAMA_CMAKE_ARGS" in line
