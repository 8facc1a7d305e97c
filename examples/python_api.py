"""autotune from Python, as in a notebook: tune, read the result, train with it.

    python examples/python_api.py [RUN_DIR]     # a small BERT space: about a minute on 2 CPU cores

The run is the one ``python -m autotune model=bert global_batch=16 ...`` makes (result.command
says which), with the same files in result.run_dir.
"""
import sys

import torch

import autotune

device = "cuda" if torch.cuda.is_available() else "cpu"
result = autotune.tune(model="bert", device=device, global_batch=16,
                       search_space={"checkpointing": ["none", "full"], "micro_batch": {"min": 8}},
                       trial={"measure_steps": 3, "min_measure_s": 0},
                       run_dir=sys.argv[1] if len(sys.argv) > 1 else None)
print(result)  # in a notebook the cell shows this: the headline and a link to the report
print(result.front[["checkpointing", "precision", "micro_batch", "peak_memory_gib", "samples_per_s"]])

tuned = result.best  # an autotune.Tuned, as load_tuned("best.yaml") reads it
if tuned is None:
    sys.exit("nothing fit the budget")
torch.manual_seed(0)
workload = tuned.model_builder()(device=device, seq_len=tuned.model["seq_len"], **tuned.model["config"])
model = tuned.apply(workload.model)  # checkpointing, offload, allocator, weights: as measured
optimizer = tuned.optimizer(model.parameters())
scaler = tuned.scaler(device)
batch = workload.make_batch(tuned.micro_batch, torch.device(device))
for step in range(3):  # micro_batch x accumulation = the global batch the study held fixed
    for _ in range(tuned.accumulation):
        with tuned.forward_context(device):
            loss = workload.loss(model, batch) / tuned.accumulation
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step}: loss {loss.item() * tuned.accumulation:.4f} with {tuned.strategy.label()}")
