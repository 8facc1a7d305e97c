"""Train with the configuration autotune tuned, through autotune's public API.

    python -m autotune model=bert-large              # writes outputs/.../best.yaml
    python examples/train.py outputs/.../best.yaml --steps 50

It builds the model that best.yaml names with the builder the trials used (transformers,
random weights, BERT when best.yaml names none), applies the tuned checkpointing,
precision, offload, allocator, weights, optimizer, micro-batch and accumulation (and the
memory cap of a budget run), trains on synthetic batches and prints peak memory and
samples/s measured the way the trial measured them, so the two can be compared.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from autotune import Workload, load_tuned
from autotune.system.quiet import quiet_third_party


def build_workload(tuned, device: torch.device) -> Workload:
    """The model best.yaml names, from the builder the trials used, with the same seed (the
    builder is imported only from a package this machine tuned or --trust names)."""
    builder = tuned.model_builder()
    torch.manual_seed(0)
    return builder(device=str(device), seq_len=tuned.model.get("seq_len") or 128, **tuned.model.get("config", {}))


def train(tuned, workload: Workload, device: torch.device, steps: int, warmup: int = 2) -> dict:
    cuda = device.type == "cuda"
    model = workload.model
    model.train()
    tuned.apply(model)  # activation checkpointing on the model's layers (and bf16 weights), as tuned
    optimizer = tuned.optimizer(model.parameters())  # the trials' optimizer, its state as tuned
    scaler = tuned.scaler(device.type)  # enabled for fp16 only
    batch = workload.make_batch(tuned.micro_batch, device)
    step_times, losses = [], []
    for step in range(steps):
        if step == warmup and cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        total = torch.zeros((), device=device)
        for _ in range(tuned.accumulation):  # micro_batch x accumulation = the global batch
            with tuned.forward_context(device.type):  # autocast, and activation offload if tuned
                loss = workload.loss(model, batch) / tuned.accumulation
            scaler.scale(loss).backward()
            total += loss.detach().float()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        if step >= warmup:
            step_times.append(time.perf_counter() - start)
        losses.append(float(total))  # one synchronisation per optimizer step
    median = statistics.median(step_times) if step_times else float("nan")
    out = {"steps": steps, "final_loss": losses[-1], "step_time_s": median,
           "samples_per_s": tuned.global_batch / median if step_times else None}
    if cuda:
        out["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 1024**3
        out["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 1024**3
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("best_yaml", help="a best.yaml written by python -m autotune")
    parser.add_argument("--steps", type=int, default=50, help="optimizer steps (default 50)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--trust", action="append", default=[], metavar="PACKAGE",
                        help="import the model builder or optimizer best.yaml names from PACKAGE too (a tuned file "
                             "names code; torch, torchao, autotune and the packages this machine tuned are trusted)")
    args = parser.parse_args()
    quiet_third_party()  # optional: torchao's known-harmless import lines (autotune/system/quiet.py)
    try:
        tuned = load_tuned(args.best_yaml, trust=args.trust)
        tuned.check_trust()  # the builder and optimizer it names, before anything is imported
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    tuned.set_allocator()  # before CUDA starts
    device = torch.device(args.device)
    if device.type == "cuda" and tuned.limit_memory(device.index or 0) is not None:
        print(f"memory capped to the tuned budget: {tuned.budget_gib:g} GiB less the CUDA context")
    print(f"tuned: {tuned.strategy.label()} (trial measured {tuned.measured.get('samples_per_s')} samples/s, "
          f"{tuned.measured.get('peak_memory_gib')} GiB)")
    result = train(tuned, build_workload(tuned, device), device, args.steps)
    result["trial"] = tuned.measured
    print(json.dumps(result))


if __name__ == "__main__":
    main()
