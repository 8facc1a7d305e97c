"""GPU path: real CUDA trials, the CLI on CUDA, the example with fp16. Run with -m gpu."""

import re

import pandas as pd
import pytest
import torch
import yaml

from autotune.train.optimizer import MODEL_STATE_DEFAULTS
from autotune.trial.runner import run_trial
from tests.conftest import run_cli, trial_env
from tests.train.test_example import best_yaml, load_example

pytestmark = pytest.mark.gpu
PLAIN_STATE = tuple(MODEL_STATE_DEFAULTS.values())  # the model-state part of a family


def cuda_spec(ckpt, prec, mb, acc=1, config=None, seq_len=256, offload=False, memory_cap_gib=None):
    return {"model": {"name": "t", "target": "tests.workloads:mlp", "config": config or {"width": 1024, "depth": 8}},
            "seq_len": seq_len, "device": "cuda:0",
            "strategy": {"checkpointing": ckpt, "precision": prec, "micro_batch": mb, "accumulation": acc,
                         "offload": offload},
            "warmup_steps": 2, "measure_steps": 5, "lr": 1e-4, "seed": 0, "memory_cap_gib": memory_cap_gib}


def test_cuda_trial_measures_allocator_and_nvml(tmp_path):
    r = run_trial(cuda_spec("none", "bf16", 32), tmp_path / "t", 300, env=trial_env())
    assert r["status"] == "ok", r
    assert r["device"] == "cuda"
    assert 0 < r["peak_allocated_gib"] <= r["peak_reserved_gib"] == r["peak_memory_gib"]
    assert r["num_alloc_retries"] == 0
    # NVML sees this process's context on top of what the allocator reserved.
    assert r["cuda_context_gib"] > 0
    assert r["device_peak_gib"] == pytest.approx(r["peak_reserved_gib"] + r["cuda_context_gib"])
    assert r["nvml_used_gib"] >= r["peak_reserved_gib"] * 0.99


def test_cuda_checkpointing_and_offload_lower_peak_allocated(tmp_path):
    plain = run_trial(cuda_spec("none", "fp32", 64), tmp_path / "a", 300, env=trial_env())
    half = run_trial(cuda_spec("0.5", "fp32", 64), tmp_path / "h", 300, env=trial_env())
    ckpt = run_trial(cuda_spec("full", "fp32", 64), tmp_path / "b", 300, env=trial_env())
    offload = run_trial(cuda_spec("none", "fp32", 64, offload=True), tmp_path / "o", 300, env=trial_env())
    assert [r["status"] for r in (plain, half, ckpt, offload)] == ["ok"] * 4, (plain, half, ckpt, offload)
    assert (plain["n_checkpointed"], half["n_checkpointed"], ckpt["n_checkpointed"]) == (0, 4, 8)
    assert ckpt["peak_allocated_gib"] < half["peak_allocated_gib"] < plain["peak_allocated_gib"]
    assert ckpt["peak_allocated_gib"] < 0.7 * plain["peak_allocated_gib"]
    # save_on_cpu keeps the saved activations in pinned host memory instead.
    assert offload["peak_allocated_gib"] < 0.7 * plain["peak_allocated_gib"]
    # search=auto's fact 6 on real hardware: the copies of the bytes the plain trial counted,
    # over the link it measured, bound the offload twin's speed.
    from autotune.search.auto import AutoSearch

    assert plain["host_link_gib_s"] > 1 and plain["saved_gib"] > plain["saved_per_sample_gib"] * 64 > 0
    measured = {((0.0, "fp32", False, "default", *PLAIN_STATE), 64): plain}
    bound = AutoSearch._transfer_bound((0.0, "fp32", True, "default", *PLAIN_STATE), 64, measured)
    assert offload["samples_per_s"] <= bound, (offload["samples_per_s"], bound)


def test_a_budget_caps_the_trial_like_a_smaller_card(tmp_path):
    free = run_trial(cuda_spec("none", "bf16", 64), tmp_path / "free", 300, env=trial_env())
    assert free["status"] == "ok", free
    need = free["device_peak_gib"]
    # Under a cap of half what it needs it runs out of memory; under 1.5x it fits.
    small = run_trial(cuda_spec("none", "bf16", 64, memory_cap_gib=need / 2), tmp_path / "small", 300, env=trial_env())
    assert small["status"] == "oom", small
    roomy = run_trial(cuda_spec("none", "bf16", 64, memory_cap_gib=need * 1.5), tmp_path / "roomy", 300,
                      env=trial_env())
    assert roomy["status"] == "ok", roomy
    assert roomy["device_peak_gib"] <= need * 1.5
    assert roomy["memory_cap_gib"] == pytest.approx(need * 1.5 - roomy["cuda_context_gib"], rel=1e-3)


def test_fp16_trial_uses_the_scaler_and_stays_finite(tmp_path):
    r = run_trial(cuda_spec("full", "fp16", 16, acc=2), tmp_path / "t", 300, env=trial_env())
    assert r["status"] == "ok", r
    assert all(abs(x) < 1e4 for x in r["losses"])


def test_real_cuda_oom_is_recorded_as_oom(tmp_path):
    free = torch.cuda.mem_get_info()[0]
    # Activations of (mb, seq, width) fp32 per layer far beyond the card's free memory.
    width = 8192
    mb = int(free / (4 * 512 * width) / 2) + 1
    r = run_trial(cuda_spec("none", "fp32", mb, config={"width": width, "depth": 8}, seq_len=512),
                  tmp_path / "t", 300, env=trial_env())
    assert r["status"] == "oom", r
    assert "out of memory" in r["cause"].lower()


def test_cli_on_cuda_end_to_end_with_offload_and_allocator(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("checkpointing: [0.5]\nprecision: [fp32, bf16, fp16]\nmicro_batch: {min: 8, max: 8}\n"
                     "offload: [false, true]\nallocator: [expandable]\n")
    run_dir = tmp_path / "run"
    out = run_cli(
        run_dir,
        "model=tiny",
        "device=cuda",
        "search=grid",
        "global_batch=8",
        "seq_len=32",
        "trial.warmup_steps=1",
        "trial.measure_steps=3",
        "trial.repeats=0",
        f"search_space.path={space}",
        "budget_gib=8",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    trials = pd.read_csv(run_dir / "trials.csv")
    assert (trials["status"] == "ok").all(), trials[["status", "cause"]]
    assert set(trials["precision"]) == {"fp32", "bf16", "fp16"} and set(trials["offload"]) == {True, False}
    assert (trials["allocator_conf"] == "expandable_segments:True").all()  # set before CUDA started
    assert (trials["n_checkpointed"] == 1).all()  # half of the tiny model's 2 layers
    assert trials["nvml_used_gib"].notna().all() and (trials["memory_cap_gib"] < 8).all()
    best = yaml.safe_load((run_dir / "best.yaml").read_text())
    assert best["strategy"]["allocator"] == "expandable" and best["memory_cap_gib"] == 8
    html = (run_dir / "report.html").read_text()
    assert "offload" in html and "expandable" in html and "budget 8.0 GiB" in html


@pytest.mark.parametrize("model", ["bert", "gpt2", "llama", "vit"])
def test_each_built_in_model_tunes_on_cuda_at_full_size(tmp_path, model):
    space = tmp_path / "space.yaml"
    space.write_text("checkpointing: [0.5]\nprecision: [bf16]\nmicro_batch: {min: 8, max: 8}\n")
    run_dir = tmp_path / "run"
    out = run_cli(
        run_dir,
        f"model={model}",
        "device=cuda",
        "search=grid",
        "global_batch=8",
        "seq_len=128",
        "trial.warmup_steps=1",
        "trial.measure_steps=2",
        "trial.repeats=0",
        f"search_space.path={space}",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    row = pd.read_csv(run_dir / "trials.csv").iloc[0]
    assert row["status"] == "ok" and row["n_checkpointed"] == 6 and row["n_blocks"] == 12  # all four: 12 layers
    assert row["peak_memory_gib"] > 0.5 and row["samples_per_s"] > 0


def test_example_on_cuda_with_fp16(tmp_path):
    example = load_example()
    from autotune import load_tuned

    tuned = load_tuned(best_yaml(tmp_path, checkpointing="full", precision="fp16", kind="cuda"))
    device = torch.device("cuda")
    workload = example.build_workload(tuned, device)
    model = workload.model
    dtypes = []
    model.bert.encoder.layer[0].intermediate.dense.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    out = example.train(tuned, workload, device, steps=4, warmup=1)
    assert set(dtypes) == {torch.float16}
    assert out["peak_reserved_gib"] > 0
    assert torch.isfinite(torch.tensor(out["final_loss"]))


def test_sticky_cuda_error_is_crash_and_the_next_trial_runs_clean(tmp_path):
    bad = run_trial(cuda_spec("none", "fp32", 4, config={"width": 64, "depth": 2, "fault": "cuda_assert"}),
                    tmp_path / "bad", 300, env=trial_env())
    assert bad["status"] == "crash", bad
    assert "device-side assert" in bad["cause"] or "CUDA error" in bad["cause"]
    good = run_trial(cuda_spec("none", "bf16", 32), tmp_path / "good", 300, env=trial_env())
    assert good["status"] == "ok", good


def test_after_a_real_oom_the_next_trial_measures_like_a_fresh_one(tmp_path):
    clean = cuda_spec("none", "bf16", 32)
    first = run_trial(clean, tmp_path / "a", 300, env=trial_env())
    free = torch.cuda.mem_get_info()[0]
    huge = cuda_spec("none", "fp32", int(free / (4 * 512 * 8192) / 2) + 1, config={"width": 8192, "depth": 8},
                     seq_len=512)
    assert run_trial(huge, tmp_path / "oom", 300, env=trial_env())["status"] == "oom"
    after = run_trial(clean, tmp_path / "b", 300, env=trial_env())
    assert first["status"] == after["status"] == "ok"
    assert after["peak_allocated_gib"] == pytest.approx(first["peak_allocated_gib"], rel=0.01)
    assert after["peak_reserved_gib"] == pytest.approx(first["peak_reserved_gib"], rel=0.05)


def test_the_default_mechanism_measures_a_sequence_as_fresh_processes_do(tmp_path):
    """Consecutive configurations through one fork server (the default), a real CUDA
    out-of-memory error and a sticky CUDA error among them, each against the same spec in a
    new interpreter under the same cap."""
    from autotune.trial.runner import ForkServer

    config = {"width": 4096, "depth": 8}
    capped = lambda *a, **k: cuda_spec(*a, config=config, memory_cap_gib=k.pop("cap", 12.0), **k)  # noqa: E731
    sequence = [capped("none", "fp32", 64), capped("0.5", "bf16", 32), capped("full", "fp16", 16, acc=2),
                capped("none", "fp32", 64, cap=2.0),  # a real OOM: it needs about 6 GiB
                capped("none", "bf16", 64), capped("full", "fp32", 32, acc=2), capped("0.5", "fp32", 64)]
    sticky = cuda_spec("none", "fp32", 4, config={"width": 64, "depth": 2, "fault": "cuda_assert"})
    forks = ForkServer("tests.workloads:mlp")
    try:
        forked = []
        for i, s in enumerate(sequence):
            forked.append(forks(s, tmp_path / f"fork{i}", 300, env=trial_env()))
            if i == 4:
                bad = forks(sticky, tmp_path / "sticky", 300, env=trial_env())
                assert bad["status"] == "crash", bad
    finally:
        forks.close()
    fresh = [run_trial(s, tmp_path / f"fresh{i}", 300, env=trial_env()) for i, s in enumerate(sequence)]
    assert [r["status"] for r in forked] == [r["status"] for r in fresh] == ["ok"] * 3 + ["oom"] + ["ok"] * 3
    assert len({r["pid"] for r in forked if "pid" in r}) == len(sequence)  # a process each
    for s, f, n in zip(sequence, forked, fresh, strict=False):
        if f["status"] != "ok":
            continue
        label = s["strategy"]
        assert f["clean_start"] is True and f["isolation"] == "fork"
        assert f["peak_allocated_gib"] == pytest.approx(n["peak_allocated_gib"], rel=0.01), label
        assert f["peak_reserved_gib"] == pytest.approx(n["peak_reserved_gib"], rel=0.03), label
        assert f["device_peak_gib"] == pytest.approx(n["device_peak_gib"], rel=0.03), label
        assert f["num_alloc_retries"] == n["num_alloc_retries"], label
        assert f["memory_cap_gib"] == pytest.approx(n["memory_cap_gib"], rel=0.01), label


def test_consecutive_cuda_trials_in_one_process_leave_nothing_alive(tmp_path):
    """The leak probe on CUDA (never how autotune runs trials): after each checkpointed or
    plain trial in one process, none of its parameters live on and the allocator holds
    nothing (a reused process's peaks grew trial after trial before the leaks were fixed)."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT
    from tests.trial.test_clean_start import _write_specs

    bert = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 1024,
            "max_position_embeddings": 128, "vocab_size": 1024}
    configs = [("full", "bf16", 8), ("0.5", "bf16", 4), ("full", "fp32", 8), ("none", "bf16", 8), ("full", "fp16", 2)]
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "tests.inprocess", str(out),
                           *_write_specs(tmp_path, configs, device="cuda:0", config=bert)],
                          cwd=ROOT, env=trial_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert [r["status"] for r in report] == ["ok"] * len(configs), report
    assert [(r["alive_parameters"], r["allocated"]) for r in report] == [(0, 0)] * len(configs), report


TRACK = """
import json, torch
from autotune.train.monitor import track_memory
x = torch.randn(4096, 4096, device="cuda")
def block():
    y = x @ x          # 64 MiB
    z = y.relu() * 2   # two more 64 MiB tensors, one freed at once
    del y
    return z.sum()
block()  # the first matmul also allocates cuBLAS's workspace: out of the comparison
torch.cuda.synchronize()
with track_memory("block", report=lambda *_: None) as mem:
    block()
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
block()
torch.cuda.synchronize()
print(json.dumps({"stats": vars(mem.stats), "max_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
                  "before_gib": torch.cuda.memory_allocated() / 2**30}))
"""


def test_track_memory_agrees_with_the_allocators_peak_for_the_block():
    import json
    import subprocess
    import sys

    # In a process of its own: the pytest process stays without a CUDA context.
    out = subprocess.run([sys.executable, "-c", TRACK], capture_output=True, text=True, env=trial_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    stats = r["stats"]
    assert stats["device"] == "cuda"
    assert stats["peak_allocated_gib"] == pytest.approx(r["max_allocated_gib"], rel=0.01)
    # The block's own tensors on top of x: at least two 64 MiB tensors alive at once.
    assert stats["peak_allocated_gib"] >= r["before_gib"] + 2 * 64 / 1024
    assert stats["peak_reserved_gib"] >= stats["peak_allocated_gib"]
    assert stats["nvml_used_gib"] >= stats["peak_reserved_gib"]  # the device sees the context too


GPU_SPIN = """
import os, sys, time
import torch
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
open(sys.argv[2], "w").close()  # computing from here on
end, stop = time.monotonic() + 300, sys.argv[1]
while not os.path.exists(stop) and time.monotonic() < end:
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
"""


def test_a_trial_that_shares_the_gpu_with_a_busy_process_is_flagged_and_re_measured(tmp_path):
    import subprocess
    import sys
    import time

    run_dir, ready = tmp_path / "run", tmp_path / "spinner-ready"
    first = run_dir / "trials" / "000" / "result.json"  # the spinner stops once trial 0 is measured
    spinner = subprocess.Popen([sys.executable, "-c", GPU_SPIN, str(first), str(ready)])
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and spinner.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready.exists(), "the competing GPU process did not start"
        space = tmp_path / "space.yaml"
        space.write_text("checkpointing: [none]\nprecision: [bf16]\nmicro_batch: {min: 8, max: 8}\n")
        out = run_cli(run_dir, "model=tiny", "device=cuda", "search=auto", "search.n_trials=1", "global_batch=8",
                      "seq_len=32", "trial.warmup_steps=1", "trial.measure_steps=20", "trial.repeats=1",
                      "objective=throughput", f"search_space.path={space}")
    finally:
        spinner.kill()
        spinner.wait()
    print(out.stdout)  # pytest -s shows the terminal a user sees
    assert out.returncode == 0, out.stdout + out.stderr
    first_line = next(line for line in out.stdout.splitlines() if line.startswith("[  1/"))
    # the spinner, and this test process too once an earlier test has initialised CUDA in it.
    # The SM share is there only where NVML samples it and can tell the trial's own PID from
    # the others' (not in the H100 container of 2026-12-06: host PIDs): contention.gpu_others.
    assert re.search(r"CONTENDED: \d other process\(es\) on the GPU \(\d+\.\d GiB(, up to \d+% of its SMs)?\)",
                     first_line), out.stdout
    assert "[repeat 1 of trial 0]" in out.stdout and "contention: 1 of 1 configurations ran while" in out.stdout
    row = pd.read_csv(run_dir / "trials.csv").iloc[0]
    assert row["contended_runs"] >= 1 and isinstance(row["contention"], str)
    assert "<b>Contention</b>" in (run_dir / "report.html").read_text()


def test_a_probe_measures_the_full_measurements_peak_on_the_gpu(tmp_path):
    """trial/fidelity.py: the peak is settled by the first whole step after a short first one
    (at most two micro-steps, repeated while fp16's scaler skips it). Six configurations,
    accumulation among them, one out of memory under its cap, each probed and measured in
    full in fresh processes."""
    configs = [("none", "fp32", 16, 1, None), ("none", "bf16", 64, 1, None), ("full", "bf16", 16, 4, None),
               ("0.5", "fp16", 8, 4, None), ("none", "fp16", 32, 2, None),
               ("none", "fp32", 256, 1, 0.5)]  # the last: over a 0.5 GiB cap
    for ckpt, prec, mb, acc, cap in configs:
        name = f"{ckpt}-{prec}-{mb}x{acc}"
        probe = run_trial({**cuda_spec(ckpt, prec, mb, acc, memory_cap_gib=cap), "fidelity": "probe"},
                          tmp_path / f"p-{name}", 300, env=trial_env())
        full = run_trial(cuda_spec(ckpt, prec, mb, acc, memory_cap_gib=cap), tmp_path / f"f-{name}", 300,
                         env=trial_env())
        assert probe["status"] == full["status"], (probe, full)
        if cap is not None:
            assert probe["status"] == "oom", probe
            continue
        assert probe["status"] == "ok" and probe["fidelity"] == "probe", probe
        print(name, "first steps", probe["timings"]["first_steps"], "timed", len(probe["step_times_s"]))
        for key in ("peak_memory_gib", "peak_reserved_gib", "device_peak_gib"):
            assert probe[key] == pytest.approx(full[key], rel=0.005), (name, key, probe[key], full[key])
        assert full["flops_per_sample"] > 0
