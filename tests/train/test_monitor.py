"""Monitoring helpers for users' own training: the leak check (CPU) and track_memory on CPU.
track_memory against torch.cuda.max_memory_allocated is a GPU test (test_gpu.py)."""
import subprocess
import sys
import warnings

import pytest
import torch

from autotune.train.monitor import LeakCheck, MemoryGrowthWarning


def train(steps: int, keep: bool) -> LeakCheck:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(2048, 256)
    kept, check = [], LeakCheck(window=10, min_growth_mib=8)
    for _ in range(steps):
        out = model(x)
        loss = out.pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if keep:
            kept.append(out)  # the classic leak: an output kept with its graph (its activations too)
        check.step()
    return check


def test_the_leak_check_fires_on_kept_references_and_stays_quiet_without():
    with pytest.warns(MemoryGrowthWarning, match=r"rose by [\d.]+ MiB over the last 10 steps"):
        leaky = train(40, keep=True)
    assert leaky.fired
    with warnings.catch_warnings():
        warnings.simplefilter("error", MemoryGrowthWarning)
        steady = train(40, keep=False)
    assert not steady.fired and len(steady.readings) == 40


def test_the_leak_check_refuses_a_window_too_short_to_mean_anything():
    with pytest.raises(ValueError, match="window=2"):
        LeakCheck(window=2)


TRACK_BLOCK = """
import torch
from autotune.train.monitor import track_memory
seen = []
with track_memory("big", device="cpu", report=lambda name, stats: seen.append((name, stats))) as mem:
    block = torch.ones(64, 2**20)  # 256 MiB, touched
    del block
assert seen == [("big", mem.stats)] and mem.stats.device == "cpu"
@track_memory("small", device="cpu", report=lambda name, stats: seen.append((name, stats)))
def small():
    return torch.ones(1024).sum()
small()
assert seen[-1][0] == "small"
print(mem.stats.peak_rss_gib, seen[-1][1].peak_rss_gib)
"""


def test_track_memory_on_cpu_sees_a_block_that_holds_memory_and_reports_it():
    # A fresh interpreter: in this one, pages that earlier tests freed may still be resident
    # in the C heap, and a new block reusing them adds nothing to the process's RSS.
    out = subprocess.run([sys.executable, "-c", TRACK_BLOCK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    big, small = map(float, out.stdout.split())
    assert big >= 0.24 and small < 0.1
