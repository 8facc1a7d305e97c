"""Pinned host memory: what offload's first step pays, under each way torch can pin it.

``save_on_cpu(pin_memory=True)`` allocates a pinned host tensor for every tensor autograd
saves and copies the activation into it. The first step pays for pinning all of them (the
host caching allocator keeps them for later steps), which made offload's first step 7-20 s
on the H200 of benchmarks/bert-large-budgets-h200-2026-12-03. This times that pattern, in a fresh
process per allocator setting (the setting is read when CUDA starts):

* cold: the first pass, every block new, as offload's first step;
* warm: the same pass again, every block from the cache, as every later step;
* d2h_gib_s: the copy rate into the pinned blocks on the warm pass (offload's steady cost).

    python bench/pinned_alloc.py [--gib 16] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

# Sizes of BERT-large's saved activations at micro-batch 32, seq 512 (MiB): hidden states,
# the feed-forward's inner activation, attention probabilities; cycled up to the total.
CHUNKS_MIB = (32, 128, 32, 32, 128, 256)
SETTINGS = {
    "cudaHostAlloc (default)": "",
    "cudaHostRegister, 8 threads": "pinned_use_cuda_host_register:True,pinned_num_register_threads:8",
    "cudaHostRegister, 16 threads": "pinned_use_cuda_host_register:True,pinned_num_register_threads:16",
}


def one_pass(total_mib: int):
    import torch

    src = {mib: torch.ones(mib << 20, dtype=torch.uint8, device="cuda") for mib in set(CHUNKS_MIB)}
    kept, done, i = [], 0, 0
    torch.cuda.synchronize()
    t = time.perf_counter()
    while done < total_mib:
        mib = CHUNKS_MIB[i % len(CHUNKS_MIB)]
        packed = torch.empty(mib << 20, dtype=torch.uint8, pin_memory=True)  # as save_on_cpu
        packed.copy_(src[mib], non_blocking=True)
        kept.append(packed)
        done, i = done + mib, i + 1
    torch.cuda.synchronize()
    return time.perf_counter() - t, done


def child(total_mib: int) -> None:
    import torch

    torch.cuda.init()
    cold, moved = one_pass(total_mib)
    warm, _ = one_pass(total_mib)
    print(json.dumps({"cold_s": round(cold, 3), "warm_s": round(warm, 3), "gib": moved / 1024,
                      "d2h_gib_s": round(moved / 1024 / warm, 2), "torch": torch.__version__}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=16.0)
    ap.add_argument("--out")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    total_mib = int(args.gib * 1024)
    if args.child:
        child(total_mib)
        return 0
    rows = []
    for name, conf in SETTINGS.items():
        env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": conf}
        done = subprocess.run([sys.executable, __file__, "--child", "--gib", str(args.gib)], env=env,
                              capture_output=True, text=True, timeout=300)
        row = {"setting": name, "PYTORCH_CUDA_ALLOC_CONF": conf, "load": os.getloadavg()}
        if done.returncode == 0:
            row.update(json.loads(done.stdout.strip().splitlines()[-1]))
        else:
            row["error"] = done.stderr.strip().splitlines()[-1:]
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": f"python bench/pinned_alloc.py --gib {args.gib:g}", "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
