"""Time the example's two convolutions in cuDNN (through PyTorch) on this GPU, at the batch sizes
the course uses, with CUDA events around the convolution only (after warm-up), like the program.

    python bench/cudnn_compare.py           → one JSON line: {"batch": {"conv1": s, "conv2": s}, ...}
"""

from __future__ import annotations

import json

import torch


def time_conv(x: torch.Tensor, w: torch.Tensor, repeats: int = 20) -> float:
    for _ in range(3):
        torch.nn.functional.conv2d(x, w)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.nn.functional.conv2d(x, w)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1000)
    times.sort()
    return times[len(times) // 2]


def main() -> None:
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False  # fp32 like the students' kernels
    dev = torch.device("cuda")
    out = {"gpu": torch.cuda.get_device_name(0), "cudnn": torch.backends.cudnn.version()}
    for batch in (100, 1000, 10000):
        x1 = torch.rand(batch, 1, 28, 28, device=dev)
        w1 = torch.rand(16, 1, 5, 5, device=dev)
        x2 = torch.rand(batch, 16, 12, 12, device=dev)
        w2 = torch.rand(32, 16, 5, 5, device=dev)
        out[str(batch)] = {"conv1": time_conv(x1, w1), "conv2": time_conv(x2, w2)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
