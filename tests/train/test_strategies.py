"""Each dimension of the strategy space changes what it should (CPU, tiny real models)."""
import os

import pytest
import torch

from autotune import load_tuned
from autotune.train.strategy import PINNED_FAST, Strategy, apply_checkpointing, blocks_to_checkpoint, forward_context
from autotune.train.workload import find_blocks
from tests.train.test_example import best_yaml, load_example
from tests.trial.test_trial import run, spec

FRACTIONS = ["none", "0.25", "0.5", "0.75", "full"]


@pytest.mark.e2e
def test_selective_fractions_give_monotone_peak_memory(tmp_path):
    # 8 blocks whose saved activations (16 x 512 x 256 fp32, two per block) outweigh the
    # weights: each quarter of the blocks checkpointed takes about 15 MiB off the peak.
    cfg = {"width": 256, "depth": 8}
    results = [run(tmp_path, spec(f, mb=16, acc=1, config=cfg, seq_len=512), name=f.replace(".", "_"))
               for f in FRACTIONS]
    assert [r["status"] for r in results] == ["ok"] * 5
    assert [r["n_checkpointed"] for r in results] == [0, 2, 4, 6, 8]
    peaks = [r["peak_memory_gib"] for r in results]
    assert all(later < earlier for earlier, later in zip(peaks, peaks[1:], strict=False)), peaks


def test_the_selection_rule_is_the_first_round_f_times_n_blocks():
    blocks = [torch.nn.Linear(2, 2) for _ in range(24)]
    assert blocks_to_checkpoint(blocks, 0.5) == blocks[:12]
    assert blocks_to_checkpoint(blocks, 0.25) == blocks[:6]
    assert blocks_to_checkpoint(blocks, 0.01) == blocks[:1]  # above 0: at least one block
    assert blocks_to_checkpoint(blocks, 1.0) == blocks and blocks_to_checkpoint(blocks, 0.0) == []
    assert blocks_to_checkpoint(blocks[:3], 0.5) == blocks[:2]  # 1.5 rounds half up


def saved_by_autograd(context) -> int:
    """How many tensors autograd saved through the default hooks while ``context`` was active.

    An outer hook sees every saved tensor unless an inner one (save_on_cpu's) takes them."""
    seen = []
    w = torch.randn(8, 8, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t) or t, lambda t: t):
        with context:
            y = (torch.randn(4, 8) @ w).relu()
    y.sum().backward()
    assert w.grad is not None
    return len(seen)


def test_offload_routes_saved_tensors_through_save_on_cpu():
    # On CUDA save_on_cpu moves every saved activation to pinned CPU memory (the GPU test
    # measures the lower peak); here the check is that its hooks, not autograd's default
    # storage, receive the saved tensors.
    assert saved_by_autograd(forward_context(Strategy("none", "fp32", 4, 1, offload=False), "cpu")) > 0
    assert saved_by_autograd(forward_context(Strategy("none", "fp32", 4, 1, offload=True), "cpu")) == 0


def test_load_tuned_apply_checkpoints_the_same_blocks_the_trial_did(tmp_path):
    example = load_example()
    tuned = load_tuned(best_yaml(tmp_path, checkpointing="0.5", precision="fp32"))
    workload = example.build_workload(tuned, torch.device("cpu"))  # a fresh model
    model = tuned.apply(workload.model)
    layers = model.bert.encoder.layer
    assert [getattr(b, "_autotune_checkpointed", False) for b in layers] == [True, False]
    # The trial's path on another fresh model marks the same blocks.
    other = example.build_workload(load_tuned(best_yaml(tmp_path, checkpointing="none", precision="fp32")),
                                   torch.device("cpu")).model
    assert apply_checkpointing(find_blocks(other), "0.5") == 1
    assert [getattr(b, "_autotune_checkpointed", False) for b in other.bert.encoder.layer] == [True, False]
    # And it trains: block 0 runs its forward again in backward, block 1 does not.
    calls = {0: 0, 1: 0}
    for i in (0, 1):
        layers[i].attention.register_forward_hook(lambda m, a, o, i=i: calls.__setitem__(i, calls[i] + 1))
    example.train(tuned, workload, torch.device("cpu"), steps=2, warmup=0)
    micro_steps = 2 * tuned.accumulation
    assert calls == {0: 2 * micro_steps, 1: micro_steps}


def test_tuned_offload_and_allocator_round_trip_through_best_yaml(tmp_path, monkeypatch):
    tuned = load_tuned(best_yaml(tmp_path, checkpointing="0.25", precision="fp32", offload=True,
                                 allocator="expandable"))
    assert (tuned.checkpointing, tuned.offload, tuned.allocator) == ("0.25", True, "expandable")
    environ = {}
    monkeypatch.setattr(os, "environ", environ)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    tuned.set_allocator()
    assert environ == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True," + PINNED_FAST}  # offload: faster pinning
    assert saved_by_autograd(tuned.forward_context("cpu")) == 0  # saved tensors go through save_on_cpu
    # apply() carries offload on the model itself, and the allocator setting.
    tuned = load_tuned(best_yaml(tmp_path, checkpointing="none", precision="fp32", offload=True,
                                 allocator="expandable"))
    environ.clear()
    model = tuned.apply(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()))
    assert environ == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True," + PINNED_FAST}  # offload: faster pinning

    seen = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t) or t, lambda t: t):
        model(torch.randn(4, 8)).sum().backward()
    assert seen == []  # every saved tensor went through the model's own save_on_cpu
    plain = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t) or t, lambda t: t):
        plain(torch.randn(4, 8)).sum().backward()
    assert len(seen) > 0


def test_a_model_without_blocks_is_refused_checkpointing_with_the_fix(tmp_path):
    r = run(tmp_path, spec("0.5", target="tests.workloads:no_blocks", config={}))
    assert r["status"] == "skipped"
    assert "checkpointing=0.5 was asked for, but the model exposes no blocks" in r["cause"]
    assert "Workload(blocks=[...])" in r["cause"]
    assert run(tmp_path, spec("none", target="tests.workloads:no_blocks", config={}), name="n")["status"] == "ok"
    with pytest.raises(ValueError, match=r"checkpointing=full needs the model's blocks.*blocks=\[\.\.\.\]"):
        apply_checkpointing([], "full")


@pytest.mark.e2e
def test_a_trial_counts_the_bytes_offload_would_copy_as_a_line_in_micro_batch(tmp_path):
    cfg = {"width": 256, "depth": 8}
    r = {(c, m): run(tmp_path, spec(c, mb=m, acc=2, config=cfg, seq_len=512), name=f"{c}{m}")
         for c in ("none", "full") for m in (4, 8)}
    assert all(x["status"] == "ok" for x in r.values())
    for c in ("none", "full"):
        four, eight = r[(c, 4)], r[(c, 8)]
        # Each block saves fp32 tensors of (m, 512, 256): 0.5 MiB per sample each.
        assert four["saved_per_sample_gib"] * 2**20 % 512 == 0 and four["saved_per_sample_gib"] > 0
        # The one-sample forward's line predicts the count at another micro-batch exactly.
        assert eight["saved_gib"] == pytest.approx(four["saved_gib"] + 4 * four["saved_per_sample_gib"])
        assert eight["saved_per_sample_gib"] == pytest.approx(four["saved_per_sample_gib"])
    # A checkpointed block keeps only its input: full checkpointing saves less per sample.
    assert r[("full", 4)]["saved_per_sample_gib"] < r[("none", 4)]["saved_per_sample_gib"]
    with_offload = spec("none", mb=4, acc=2, config=cfg, seq_len=512)
    with_offload["strategy"]["offload"] = True
    offload = run(tmp_path, with_offload, name="off")
    assert offload["status"] == "ok" and "saved_gib" not in offload  # its copies are measured, not predicted
    # A space without offload has nothing to bound: the count is not made (study/driver.py:trial_spec).
    unbounded = run(tmp_path, {**spec("none", mb=4, acc=2, config=cfg, seq_len=512), "offload_bound": False},
                    name="no-bound")
    assert unbounded["status"] == "ok" and "saved_gib" not in unbounded and "saved_per_sample_gib" not in unbounded


def test_offload_trials_pin_host_memory_by_registering_it_and_nothing_else_changes():
    """Offload's first step pins every saved tensor: the trials (and load_tuned's
    set_allocator) register malloc'd memory on several threads instead of cudaHostAlloc."""
    from autotune.train.strategy import PINNED_FAST, allocator_env

    assert allocator_env("default") == {}
    assert allocator_env("default", offload=True) == {"PYTORCH_CUDA_ALLOC_CONF": PINNED_FAST}
    assert allocator_env("expandable", offload=True) == {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True," + PINNED_FAST}
    assert "pinned_use_cuda_host_register:True" in PINNED_FAST
