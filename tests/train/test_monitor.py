"""Monitoring helpers for users' own training: the leak check (CPU) and track_memory on CPU.
track_memory against torch.cuda.max_memory_allocated is a GPU test (test_gpu.py)."""
import re
import subprocess
import sys

import pytest

from autotune.train.monitor import LeakCheck

LEAK_RUN = """
import sys, warnings
import torch
from autotune.train.monitor import LeakCheck, MemoryGrowthWarning
keep = sys.argv[1] == "keep"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 2048))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(2048, 256)
# The leak keeps each step's output: 16 MiB a step (backward has freed the graph's saved
# activations), 160 MiB over the window, against a 48 MiB threshold. The steady run's RSS
# wanders by 100 MiB and more here, which is why the check reads malloc's own count.
kept, check = [], LeakCheck(window=10, min_growth_mib=48)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", MemoryGrowthWarning)
    for _ in range(40):
        out = model(x)
        out.pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if keep:
            kept.append(out)
        check.step()
print(check.fired, len(check.readings), len(caught), caught[0].message if caught else "")
"""


def leak_run(mode: str) -> list:
    # Each run in a fresh interpreter: RSS is the CPU reading, and in a long test process
    # the C heap's state from earlier tests (freed pages given back, then taken again)
    # makes RSS climb for reasons unrelated to the code under test.
    out = subprocess.run([sys.executable, "-c", LEAK_RUN, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split(maxsplit=3)


def test_the_leak_check_fires_on_kept_references_and_stays_quiet_without():
    fired, steps, warned, message = leak_run("keep")
    assert (fired, steps, warned) == ("True", "40", "1")
    assert re.match(r"memory in use rose by [\d.]+ MiB over the last 10 steps", message), message
    assert leak_run("free")[:3] == ["False", "40", "0"]


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


HEAP_COUNT = """
import torch
from autotune.system.linux import heap_in_use_bytes
before = heap_in_use_bytes()
block = torch.ones(16, 2**20)  # 64 MiB
held = heap_in_use_bytes()
del block
print(before, held, heap_in_use_bytes())
"""


def test_the_cpu_reading_is_what_malloc_holds_so_a_freed_block_leaves_it():
    out = subprocess.run([sys.executable, "-c", HEAP_COUNT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    before, held, after = map(int, out.stdout.split())  # int("None") fails: glibc >= 2.33 here
    assert held - before >= 64 * 2**20 and abs(after - before) < 2**20
