"""Real trial processes on CPU: what they measure and how each ending is recorded."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from autotune.trial.runner import run_trial
from tests.conftest import ROOT, trial_env


def spec(ckpt="none", prec="fp32", mb=4, acc=2, target="tests.workloads:mlp", config=None, seq_len=16,
         warmup=1, measure=3):
    return {"model": {"name": "t", "target": target, "config": config or {}}, "seq_len": seq_len,
            "device": "cpu", "strategy": {"checkpointing": ckpt, "precision": prec, "micro_batch": mb,
                                          "accumulation": acc},
            "warmup_steps": warmup, "measure_steps": measure, "lr": 1e-3, "seed": 0}


def run(tmp_path, s, timeout=120, name="t"):
    return run_trial(s, tmp_path / name, timeout, env=trial_env())


def test_ok_trial_reports_memory_time_and_losses(tmp_path):
    r = run(tmp_path, spec())
    assert r["status"] == "ok", r
    assert r["device"] == "cpu"
    assert r["peak_memory_gib"] > 0
    assert r["samples_per_s"] > 0 and r["step_time_s"] > 0
    assert len(r["losses"]) == 3 and len(r["step_times_s"]) == 3
    assert r["samples_per_s"] == pytest.approx(8 / r["step_time_s"])  # global batch = 4 x 2
    assert "nvml_used_gib" not in r  # no NVML on CPU, and no noise about it
    assert (tmp_path / "t" / "spec.json").is_file() and (tmp_path / "t" / "result.json").is_file()


def test_timed_steps_go_on_until_they_add_up_to_min_measure_s(tmp_path):
    s = dict(spec(config={"step_sleep": 0.02}, acc=1, measure=2), min_measure_s=0.5)
    r = run(tmp_path, s)
    assert r["status"] == "ok", r
    assert sum(r["step_times_s"]) >= 0.5  # each step sleeps 0.02 s: they went on past the 2 asked for...
    # ...and no step more than needed (on a loaded machine 2 steps may take 0.5 s already)
    assert len(r["step_times_s"]) == 2 or sum(r["step_times_s"][:-1]) < 0.5
    assert len(r["losses"]) == len(r["step_times_s"])


def test_full_checkpointing_lowers_cpu_peak_memory(tmp_path):
    # Activations (two 16 x 512 x 256 fp32 tensors saved per layer, 8 layers) outweigh the
    # 2 MB of parameters; measured: checkpointing takes about 22 % off the peak.
    cfg = {"width": 256, "depth": 8}
    plain = run(tmp_path, spec("none", mb=16, acc=1, config=cfg, seq_len=512), name="plain")
    ckpt = run(tmp_path, spec("full", mb=16, acc=1, config=cfg, seq_len=512), name="ckpt")
    assert plain["status"] == ckpt["status"] == "ok"
    assert ckpt["n_checkpointed"] == 8 and plain["n_checkpointed"] == 0
    assert ckpt["peak_memory_gib"] < 0.85 * plain["peak_memory_gib"], (
        plain["peak_memory_gib"],
        ckpt["peak_memory_gib"],
    )


def test_process_that_dies_without_result_is_crash(tmp_path):
    r = run(tmp_path, spec(config={"fault": "crash"}))
    assert r["status"] == "crash"
    assert "exited with code 3 without a result" in r["cause"]


@pytest.mark.e2e
def test_hung_trial_is_killed_at_its_limit(tmp_path):
    r = run(tmp_path, spec(config={"fault": "hang"}), timeout=15)
    assert r["status"] == "timeout"
    assert "15 s limit" in r["cause"]
    assert r["wall_s"] < 60
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path / "t" / "spec.json")], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""


def test_exception_is_error_with_its_message(tmp_path):
    r = run(tmp_path, spec(config={"fault": "raise_in_step"}))
    assert r["status"] == "error" and "phase" not in r
    assert r["cause"] == "RuntimeError: planted failure in the training step"


def test_a_failing_builder_is_an_error_of_the_build_phase(tmp_path):
    r = run(tmp_path, spec(config={"fault": "raise"}))
    assert r["status"] == "error" and r["phase"] == "build"
    assert r["cause"] == "the model builder failed: RuntimeError: planted failure in the builder"


def test_a_builder_that_returns_a_module_not_a_workload_is_a_build_error_naming_both(tmp_path):
    r = run(tmp_path, spec(config={"fault": "module"}))
    assert r["status"] == "error" and r["phase"] == "build", r
    assert "tests.workloads:mlp returned tests.workloads.Blocks, not an autotune Workload" in r["cause"]
    assert "return Workload(model=..., make_batch=..., loss=..., blocks=[...])" in r["cause"]


def test_out_of_memory_in_backward_is_oom(tmp_path):
    # Forward OOM is tested with a planted allocation failure (test_reliability) and a real
    # one on CUDA (test_gpu); here the error comes out of autograd's backward engine.
    r = run(tmp_path, spec(config={"fault": "oom_in_backward"}))
    assert r["status"] == "oom", r
    assert r["cause"] == "planted: out of memory in backward"


def test_non_finite_loss_is_nan_never_ok(tmp_path):
    r = run(tmp_path, spec(config={"fault": "nan", "nan_at": 4}))  # warm-up is 2 micro-steps
    assert r["status"] == "nan"
    assert "non-finite loss" in r["cause"]


def test_trial_runs_by_hand(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec()))
    out = subprocess.run([sys.executable, "-m", "autotune.trial", str(path)], cwd=ROOT, env=trial_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "ok"
    assert json.loads(out.stdout.strip().splitlines()[-1])["status"] == "ok"


def test_the_two_seams_are_protocols_that_what_exists_implements():
    """Runner and Search: every implementation has the protocol's methods with its parameters."""
    import inspect

    from autotune.search import QueueSearch, Search
    from autotune.search.sampled import SampledSearch
    from autotune.study.replay import Replay
    from autotune.trial.runner import ForkServer, Runner, run_trial

    def params(f):
        return [p for p in inspect.signature(f).parameters if p != "self"]

    expected = params(Runner.__call__)
    assert expected == ["spec", "trial_dir", "timeout_s", "env"]
    for impl in (run_trial, ForkServer.__call__, Replay.__call__):
        assert params(impl) == expected, impl
    assert isinstance(run_trial, Runner) and isinstance(Replay(pd.DataFrame({"checkpointing": []})), Runner)
    for cls in (QueueSearch, SampledSearch):
        for method in ("start", "next_trial"):
            assert params(getattr(cls, method)) == params(getattr(Search, method)), (cls, method)


def test_a_spec_with_a_key_one_side_does_not_know_is_refused_naming_it(tmp_path):
    from autotune.trial.contract import TrialSpec

    spec = {"model": {"name": "tiny", "target": "tests.workloads:tiny", "config": {}}, "seq_len": 8, "device": "cpu",
            "strategy": {"checkpointing": "none", "precision": "fp32", "micro_batch": 2, "accumulation": 1},
            "warmup_steps": 1, "measure_steps": 1}
    assert TrialSpec.from_dict(spec).to_dict()["min_measure_s"] == 0.0
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['warmup'\]"):
        TrialSpec.from_dict({**spec, "warmup": 3})
    with pytest.raises(ValueError, match="seq_len"):
        TrialSpec.from_dict({k: v for k, v in spec.items() if k != "seq_len"})
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({**spec, "warmup": 3}))
    from autotune.trial.run import run_spec_file

    result = run_spec_file(path)
    assert result["status"] == "error" and "unknown key(s) ['warmup']" in result["cause"]


def test_the_flop_count_includes_grouped_query_attention():
    """A Llama with grouped-query attention: every linear layer's matmul plus the two attention
    matmuls per layer, times three (forward and backward). torch's counter counted no attention
    on the CPU's fused kernel and refused the CUDA kernels' grouped-query shapes (trial/run.py)."""
    import torch

    from autotune.models.llama import build
    from autotune.train.strategy import Strategy
    from autotune.trial.run import flops_per_sample

    layers, heads, head_dim, seq = 2, 4, 16, 32
    workload = build(device="cpu", seq_len=seq, hidden_size=heads * head_dim, intermediate_size=128,
                     num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=2, vocab_size=100)
    strategy = Strategy(checkpointing="none", precision="fp32", micro_batch=2, accumulation=1)
    linear = sum(m.weight.numel() for m in workload.model.modules() if isinstance(m, torch.nn.Linear))
    attention = layers * 2 * (2 * heads * seq * seq * head_dim)  # q @ k^T and p @ v, on every key
    assert flops_per_sample(workload, strategy, torch.device("cpu"), "cpu") == 3 * (2 * seq * linear + attention)
