"""Test-only workloads whose faults are chosen by config, run in real trial processes."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import torch

from autotune.train.workload import Workload


class _OutOfMemoryInBackward(torch.autograd.Function):
    """Identity forward; its backward fails as the allocator would when gradients don't fit."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise torch.OutOfMemoryError("planted: out of memory in backward")


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


def mlp(device: str, seq_len: int, width: int = 64, depth: int = 4, fault: str = "none", nan_at: int = 1,
        oom_above: int = 1 << 30, step_sleep: float = 0.0, step_jitter: float = 0.0):
    """An MLP over (n, seq_len, width) inputs; ``fault`` picks how it misbehaves:
    crash (exit without a result), sigkill (killed by a signal), hang, hang_with_child
    (a child process that would outlive a careless kill), raise (in the builder),
    raise_in_step (at the first micro-step), nan (from micro-step nan_at on), oom_in_backward
    (torch.OutOfMemoryError raised by autograd's backward pass), cuda_assert
    (a device-side assert: a sticky CUDA error), module (returns the nn.Module, not a
    Workload: the classic mistake with a builder of one's own). Any fault: a micro-batch above oom_above
    raises a real torch.OutOfMemoryError, as an allocator would. Each micro-step sleeps
    step_sleep plus a random 0..step_jitter seconds (noisy timing, different per process).
    """
    if fault == "crash":
        os._exit(3)  # dies without a result, like a segfault would
    if fault == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "hang_with_child":
        subprocess.Popen(["sleep", "3600"])
        fault = "hang"
    if fault == "hang":
        time.sleep(3600)
    if fault == "raise":
        raise RuntimeError("planted failure in the builder")
    with torch.device(device):
        model = Blocks(width, depth)
    if fault == "module":
        return model
    calls = {"n": 0}
    rng = random.Random(os.getpid() ^ time.time_ns())

    def loss(m, x):
        calls["n"] += 1
        if fault == "raise_in_step":
            raise RuntimeError("planted failure in the training step")
        if step_sleep or step_jitter:
            time.sleep(step_sleep + rng.uniform(0.0, step_jitter))
        if fault == "cuda_assert":
            torch.zeros(2, device=x.device)[torch.tensor([5], device=x.device)].item()
        out = m(x)
        if fault == "oom_in_backward":
            out = _OutOfMemoryInBackward.apply(out)
        if fault == "nan" and calls["n"] > nan_at:
            out = out * float("nan")
        return out

    def make_batch(n, dev):
        if n > oom_above:
            raise torch.OutOfMemoryError(f"planted: out of memory for micro_batch={n} > {oom_above}")
        return torch.randn(n, seq_len, width, device=dev)

    return Workload(model=model, make_batch=make_batch, loss=loss, blocks=list(model.layers))


def sequential(device: str, seq_len: int, width: int = 32, depth: int = 4):
    """A plain nn.Sequential whose blocks are given by hand (every Linear+ReLU pair)."""
    with torch.device(device):
        pairs = [torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU()) for _ in range(depth)]
        model = torch.nn.Sequential(*pairs, torch.nn.Linear(width, 1))
    return Workload(model=model, make_batch=lambda n, dev: torch.randn(n, seq_len, width, device=dev),
                    loss=lambda m, x: m(x).pow(2).mean(), blocks=pairs)


def no_blocks(device: str, seq_len: int, width: int = 32):
    """A model that names no blocks: checkpointing it must be refused clearly."""
    with torch.device(device):
        model = torch.nn.Linear(width, 1)
    return Workload(model=model, make_batch=lambda n, dev: torch.randn(n, seq_len, width, device=dev),
                    loss=lambda m, x: m(x).mean())


class SignMomentum(torch.optim.Optimizer):
    """A user's own optimizer (signSGD with momentum): one state buffer per parameter."""

    def __init__(self, params, lr: float = 1e-3, beta: float = 0.9):
        super().__init__(params, {"lr": lr, "beta": beta})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("momentum", torch.zeros_like(p))
                buf.mul_(group["beta"]).add_(p.grad, alpha=1 - group["beta"])
                p.add_(buf.sign(), alpha=-group["lr"])
