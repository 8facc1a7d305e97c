"""Test-only workloads whose faults are chosen by config, run in real trial processes."""
from __future__ import annotations

import os
import time

import torch

from autotune.workload import Workload


class Blocks(torch.nn.Module):
    def __init__(self, width: int, depth: int):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU()) for _ in range(depth))
        self.head = torch.nn.Linear(width, 1)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x).mean()


def mlp(device: str, seq_len: int, width: int = 64, depth: int = 4, fault: str = "none", nan_at: int = 1):
    """An MLP over (n, seq_len, width) inputs; ``fault`` picks how it misbehaves."""
    if fault == "crash":
        os._exit(3)  # dies without a result, like a segfault would
    if fault == "hang":
        time.sleep(3600)
    if fault == "raise":
        raise RuntimeError("planted failure in the builder")
    with torch.device(device):
        model = Blocks(width, depth)
    calls = {"n": 0}

    def loss(m, x):
        calls["n"] += 1
        out = m(x)
        if fault == "nan" and calls["n"] > nan_at:
            out = out * float("nan")
        return out

    return Workload(model=model, make_batch=lambda n, dev: torch.randn(n, seq_len, width, device=dev),
                    loss=loss, blocks=list(model.layers))
