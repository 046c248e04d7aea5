"""Train the example's network on Fashion-MNIST's 60,000 training images (PyTorch, CPU) and write
weights/ece408.bin. The weights are committed, so students never need to run this.

    pip install torch==2.13.0 numpy && python train.py --epochs 4
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn

from model import WEIGHTS, load_idx, save_weights


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc1 = nn.Linear(512, 128)
        self.fc2 = nn.Linear(128, 10)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=408)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    xtr, ytr = load_idx("train")
    xte, yte = load_idx("t10k")
    xtr_t, ytr_t = torch.from_numpy(xtr), torch.from_numpy(ytr)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=args.epochs * (len(xtr) // 128 + 1))
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        t0 = time.time()
        net.train()
        perm = torch.randperm(len(xtr))
        for i in range(0, len(xtr), 128):
            idx = perm[i:i + 128]
            opt.zero_grad()
            loss = loss_fn(net(xtr_t[idx]), ytr_t[idx])
            loss.backward()
            opt.step()
            sched.step()
        net.eval()
        with torch.no_grad():
            acc = (net(torch.from_numpy(xte)).argmax(1).numpy() == yte).mean()
        print(f"epoch {epoch + 1}: loss {loss.item():.3f}, test accuracy {acc:.4f} ({time.time() - t0:.0f} s)", flush=True)
    tensors = [p.detach().numpy() for p in (net.conv1.weight, net.conv1.bias, net.conv2.weight, net.conv2.bias,
                                             net.fc1.weight, net.fc1.bias, net.fc2.weight, net.fc2.bias)]
    save_weights(tensors)
    print(f"wrote {WEIGHTS} ({WEIGHTS.stat().st_size} bytes); test accuracy on 10,000 images: {acc:.4f}")


if __name__ == "__main__":
    main()
