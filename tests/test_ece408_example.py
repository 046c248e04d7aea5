"""The CUDA convolution example: the CPU path checked against an independent NumPy network, the
CUDA sources compiled with the machine's nvcc, and GPU runs where a GPU exists (skipped otherwise)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from raiprotocol.spec import load_spec

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ece408-conv"
DATA = Path(os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
needs_data = pytest.mark.skipif(
    not (DATA / "t10k-images-idx3-ubyte.gz").exists(), reason="Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
)
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
has_gpu = shutil.which("nvidia-smi") is not None and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
needs_gpu = pytest.mark.skipif(not has_gpu, reason="no GPU on this machine")


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ece408")
    shutil.copytree(EXAMPLE, d, dirs_exist_ok=True, ignore=shutil.ignore_patterns("m1", "m2", "opt", "obj"))
    return d


def run(build: Path, prog: str, batch: int) -> str:
    res = subprocess.run(
        [f"./{prog}", str(batch)],
        cwd=build,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "FASHION_MNIST_DIR": str(DATA)},
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def correctness(out: str) -> float:
    m = re.search(r"^Correctness: ([0-9.]+) Model: ece408$", out, re.M)
    assert m, out
    return float(m.group(1))


def test_build_file_is_valid_and_asks_for_a_gpu():
    spec = load_spec(EXAMPLE)
    assert spec.gpu_count == 1
    assert "/usr/bin/time ./m2 10000" in spec.commands.build


@needs_data
def test_cpu_path_matches_an_independent_numpy_network(build):
    subprocess.run(["make", "-s", "m1"], cwd=build, check=True, capture_output=True)
    out = run(build, "m1", 100)
    op_times = re.findall(r"^Op Time: ([0-9.]+)$", out, re.M)
    assert len(op_times) == 2, "one Op Time per convolution layer"
    sys.path.insert(0, str(EXAMPLE))
    try:
        import reference  # noqa: PLC0415

        expected = reference.correctness(100)
    finally:
        sys.path.remove(str(EXAMPLE))
    assert correctness(out) == pytest.approx(expected, abs=1e-9)
    assert expected >= 0.85  # the committed weights really classify


@needs_nvcc
def test_cuda_sources_compile(build):
    res = subprocess.run(["make", "-s", "m2", "opt"], cwd=build, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert (build / "m2").exists() and (build / "opt").exists()


@needs_gpu
@needs_data
@pytest.mark.parametrize("batch", [100, 1000])
def test_gpu_kernels_classify_exactly_like_the_cpu(build, batch):
    subprocess.run(["make", "-s", "m1", "m2", "opt"], cwd=build, check=True, capture_output=True)
    cpu = correctness(run(build, "m1", batch))
    assert correctness(run(build, "m2", batch)) == cpu
    assert correctness(run(build, "opt", batch)) == cpu
