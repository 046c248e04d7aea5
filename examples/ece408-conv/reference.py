"""The same network in NumPy (float32), as an independent check of the C++/CUDA program.

    python reference.py 100      → prints "Correctness: 0.xxxx Model: ece408" for the first 100 images
"""

from __future__ import annotations

import sys

import numpy as np

from model import load_idx, load_weights


def conv(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    b, c, h, w = x.shape
    m, _, kh, kw = k.shape
    cols = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))  # b c ho wo kh kw
    return np.einsum("bchwpq,mcpq->bmhw", cols, k, optimize=True).astype(np.float32)


def pool(x: np.ndarray) -> np.ndarray:
    b, c, h, w = x.shape
    return x[:, :, : h // 2 * 2, : w // 2 * 2].reshape(b, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def predict(x: np.ndarray, t: list[np.ndarray]) -> np.ndarray:
    y = pool(np.maximum(conv(x, t[0]) + t[1][None, :, None, None], 0))
    y = pool(np.maximum(conv(y, t[2]) + t[3][None, :, None, None], 0))
    y = np.maximum(y.reshape(len(y), -1) @ t[4].T + t[5], 0)
    return (y @ t[6].T + t[7]).argmax(axis=1)


def correctness(batch: int) -> float:
    x, labels = load_idx("t10k")
    return float((predict(x[:batch], load_weights()) == labels[:batch]).mean())


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    print(f"Correctness: {correctness(n):.4f} Model: ece408")
