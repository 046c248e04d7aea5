"""The network, its weights file and Fashion-MNIST's IDX files, shared by train.py and reference.py.

Weights file: b"RAIW", uint32 tensor count, then per tensor uint32 ndim, uint32 dims, float32 data
(little-endian), in the order conv1.w conv1.b conv2.w conv2.b fc1.w fc1.b fc2.w fc2.b.
"""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WEIGHTS = HERE / "weights" / "ece408.bin"
SHAPES = [(16, 1, 5, 5), (16,), (32, 16, 5, 5), (32,), (128, 512), (128,), (10, 128), (10,)]


def data_dir() -> Path:
    return Path(os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))


def load_idx(split: str = "t10k", directory: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    d = directory or data_dir()
    with gzip.open(d / f"{split}-images-idx3-ubyte.gz") as fh:
        magic, n, rows, cols = struct.unpack(">IIII", fh.read(16))
        assert magic == 2051
        images = np.frombuffer(fh.read(), dtype=np.uint8).reshape(n, 1, rows, cols)
    with gzip.open(d / f"{split}-labels-idx1-ubyte.gz") as fh:
        magic, n = struct.unpack(">II", fh.read(8))
        assert magic == 2049
        labels = np.frombuffer(fh.read(), dtype=np.uint8)
    return (images.astype(np.float32) / np.float32(255.0)), labels.astype(np.int64)


def save_weights(tensors: list[np.ndarray], path: Path = WEIGHTS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.write(b"RAIW" + struct.pack("<I", len(tensors)))
        for t in tensors:
            t = np.ascontiguousarray(t, dtype="<f4")
            fh.write(struct.pack("<I", t.ndim) + struct.pack(f"<{t.ndim}I", *t.shape))
            fh.write(t.tobytes())


def load_weights(path: Path = WEIGHTS) -> list[np.ndarray]:
    raw = path.read_bytes()
    assert raw[:4] == b"RAIW", f"{path} is not a weights file"
    (count,), off = struct.unpack_from("<I", raw, 4), 8
    out = []
    for _ in range(count):
        (ndim,) = struct.unpack_from("<I", raw, off)
        dims = struct.unpack_from(f"<{ndim}I", raw, off + 4)
        off += 4 + 4 * ndim
        n = int(np.prod(dims))
        out.append(np.frombuffer(raw, dtype="<f4", count=n, offset=off).reshape(dims).copy())
        off += 4 * n
    return out
