"""The user's optimizer and the model-state dimensions on CPU: real trial processes of the
test MLP (8.4 M parameters) and of a small Llama, their static memory against the bytes
each optimizer keeps, the config's errors, and escalation in a real search."""
import subprocess
import sys

import pandas as pd
import pytest
import torch
import yaml
from omegaconf import OmegaConf

from autotune.study.plan import ConfigError, make_plan
from autotune.train.optimizer import OptimizerSpec, tensor_bytes, unsupported
from autotune.train.strategy import Strategy
from autotune.trial.runner import run_trial
from tests.conftest import ROOT, compose, run_cli, trial_env

MLP = ["model=custom", "model.target=tests.workloads:mlp", "+model.config.width=1024", "+model.config.depth=8",
       "seq_len=4", "global_batch=4", "device=cpu"]


def plan_of(*overrides):
    overrides = (*MLP, *overrides)
    return make_plan(
        OmegaConf.to_object(compose(*overrides)), frozenset(o.split("=")[0].lstrip("+~") for o in overrides)
    )


def run_plan(plan, tmp_path, name, **state):
    strategy = Strategy.of({"checkpointing": "none", "precision": "fp32", "micro_batch": 4, **state}, 4)
    spec = {**plan.trial_spec(strategy), "warmup_steps": 1, "measure_steps": 2, "min_measure_s": 0}
    r = run_trial(spec, tmp_path / name, 600, env=trial_env())
    assert r["status"] == "ok", r
    return r


def test_the_optimizer_group_and_a_users_own_optimizer_change_the_static_memory(tmp_path):
    adamw = run_plan(plan_of(), tmp_path, "adamw")
    sgd = run_plan(plan_of("optimizer=sgd"), tmp_path, "sgd")
    own = run_plan(plan_of("optimizer._target_=tests.workloads.SignMomentum", "~optimizer.weight_decay"),
                   tmp_path, "own")
    n = 8 * (1024 * 1024 + 1024)  # the MLP's parameters (8 Linear layers)
    gib = 2 ** 30
    # fp32 weights and gradients (8 bytes a parameter), plus each optimizer's state:
    assert sgd["static_gib"] == pytest.approx(8 * n / gib, rel=1e-3)  # SGD without momentum: none
    assert own["static_gib"] == pytest.approx(12 * n / gib, rel=1e-3)  # one buffer
    assert adamw["static_gib"] == pytest.approx(16 * n / gib, rel=1e-3)  # two moments (and a step count)
    assert (adamw["optimizer"], sgd["optimizer"], own["optimizer"]) == ("AdamW", "SGD", "SignMomentum")
    # The measured peak follows: SGD holds 4 bytes a parameter less than the one-buffer optimizer.
    assert own["peak_memory_gib"] - sgd["peak_memory_gib"] == pytest.approx(4 * n / gib, rel=0.15)


def test_a_bad_optimizer_is_refused_before_any_trial_naming_the_key():
    with pytest.raises(ConfigError, match=r"optimizer._target_=torch.optim.NoSuch: cannot be imported"):
        plan_of("optimizer._target_=torch.optim.NoSuch")
    with pytest.raises(ConfigError, match=r"optimizer.momentum=-1.*refused these arguments.*Invalid momentum"):
        plan_of("optimizer=sgd", "optimizer.momentum=-1")
    with pytest.raises(ConfigError, match=r"optimizer._target_=math.sqrt: .*refused these arguments"):
        plan_of("optimizer._target_=math.sqrt", "~optimizer.weight_decay")
    with pytest.raises(ConfigError, match=r"optimizer.weight_decay=0.01 optimizer.betas=\[0.9, 2\].*Invalid beta"):
        plan_of("+optimizer.betas=[0.9,2]")
    with pytest.raises(ConfigError, match=r"optimizer.weight_decay=0.01 optimizer.nosuch=1: .*unexpected keyword"):
        plan_of("+optimizer.nosuch=1")


def test_checking_a_torch_optimizer_does_not_import_dynamo():
    """The check builds a class with no parameters (its own argument checks run, the base
    class refuses the empty list): the parameter group, which imports torch._dynamo (1.7 s
    of the driver's start), is never made."""
    code = ("import sys; from tests.train.test_optimizer import plan_of; plan_of(); "
            "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_model_state_values_an_optimizer_cannot_take_are_named():
    sgd = OptimizerSpec("torch.optim.SGD")
    assert "needs AdamW" in unsupported(Strategy("none", "bf16", 4, 1, optimizer_state="8bit"), sgd)
    assert "pairs with precision=bf16" in unsupported(Strategy("none", "fp32", 4, 1, weights="bf16"), OptimizerSpec())
    assert "the workload builds its own optimizer" in unsupported(
        Strategy("none", "bf16", 4, 1, optimizer_state="4bit"), OptimizerSpec(), custom_factory=True)
    assert unsupported(Strategy("none", "bf16", 4, 1, optimizer_impl="fused"), sgd) is None
    with pytest.raises(ValueError, match=r"optimizer_state='2bit': use one of default, 8bit, 4bit"):
        Strategy("none", "bf16", 4, 1, optimizer_state="2bit")


def test_quantised_state_is_counted_by_its_real_bytes():
    from torchao.optim import AdamW8bit

    p = torch.nn.Parameter(torch.zeros(4096))
    opt = AdamW8bit([p])
    p.grad = torch.ones_like(p)
    opt.step()
    moments = [v for k, v in opt.state[p].items() if k.startswith("exp_avg")]
    # 1 byte a value, an fp32 scale per block of 256 and the 256-entry fp32 code map, not the
    # 4 bytes a value its dtype reports.
    assert [tensor_bytes(m) for m in moments] == [4096 + 4096 // 256 * 4 + 256 * 4] * 2


NATIVE_HALF = ROOT / "tests" / "native_half"  # bf16 trials on a CPU without native bf16 (its sitecustomize)


@pytest.mark.e2e
def test_low_bit_state_and_bf16_weights_lower_cpu_memory_and_keep_loss_parity(tmp_path, monkeypatch):
    """A real grid on CPU over the dimensions that run there: static memory as the bytes say,
    the peak lower, each labelled as changing numerics, with its loss parity recorded."""
    monkeypatch.setenv("PYTHONPATH", str(NATIVE_HALF))  # bf16 runs, emulated where the CPU has none
    space = tmp_path / "space.yaml"
    space.write_text("checkpointing: [none]\nprecision: [bf16]\nmicro_batch: {min: 4, max: 4}\n"
                     "optimizer_state: [default, 8bit, 4bit]\nweights: [fp32, bf16]\n")
    out = run_cli(tmp_path / "run", "model=llama", "global_batch=4", "device=cpu", f"search_space.path={space}",
                  "search=grid", "trial.repeats=0", "trial.measure_steps=3", timeout=1200)
    assert out.returncode == 0, out.stdout + out.stderr
    t = pd.read_csv(tmp_path / "run" / "trials.csv").set_index(["optimizer_state", "weights"])
    assert (t["status"] == "ok").all(), t[["status", "cause"]]
    plain = t.loc[("default", "fp32")]
    n = plain["static_gib"] / 16  # GiB per byte-per-parameter
    for key, saved in ((("8bit", "fp32"), 6), (("4bit", "fp32"), 7), (("default", "bf16"), 8),
                       (("8bit", "bf16"), 10), (("4bit", "bf16"), 11)):
        r = t.loc[key]
        assert plain["static_gib"] - r["static_gib"] == pytest.approx(saved * n, rel=0.05), key
        assert r["peak_memory_gib"] < plain["peak_memory_gib"] - 0.5 * saved * n, key
        assert 0 <= r["loss_parity"] < 0.05, key
        assert "bf16 autocast" in r["numerics"] and ("optimizer state" in r["numerics"] or key[1] == "bf16")
    assert pd.isna(plain["loss_parity"])


@pytest.mark.e2e
def test_nothing_fits_on_the_activation_side_so_the_search_escalates(tmp_path):
    space = tmp_path / "space.yaml"
    # fp32: it runs natively on every CPU (bf16, emulated where a CPU has no avx512_bf16/AMX,
    # made this test take 16 minutes); the escalation then finds low-bit state, not bf16 weights.
    space.write_text("checkpointing: [none, full]\nprecision: [fp32]\nmicro_batch: {min: 4, max: 4}\n")
    # AdamW: 16 bytes a parameter, 0.125 GiB for the MLP's 8.4 M before any activation; with
    # 4-bit state it is 9, with 8-bit 10.
    out = run_cli(tmp_path / "run", *MLP[:5], "seq_len=4", f"search_space.path={space}", "budget_gib=0.1",
                  "objective=throughput", "trial.repeats=0", "trial.measure_steps=3", timeout=1500)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout + out.stderr
    assert "nothing fit budget_gib=0.1 on the activation side alone" in text and "Escalating" in text
    t = pd.read_csv(tmp_path / "run" / "trials.csv")
    plain = t[(t["optimizer_state"] == "default") & (t["weights"] == "fp32") & (t["optimizer_impl"] == "default")
              & ~t["optimizer_offload"].astype(bool) & (t["status"] == "ok")]
    assert len(plain) == 2 and (plain["peak_memory_gib"] > 0.1).all()
    best = yaml.safe_load((tmp_path / "run" / "best.yaml").read_text())
    s = best["strategy"]
    assert s["optimizer_state"] != "default" or s["weights"] == "bf16"
    assert best["numerics"] and best["measured"]["peak_memory_gib"] <= 0.1
    assert best["loss_parity"] is not None and best["loss_parity"] < 0.05
    assert "changes training numerics" in text
    report = (tmp_path / "run" / "report.html").read_text()
    assert "<b>Escalated</b>: nothing fit budget_gib=0.1" in report and "<b>Changes training numerics</b>" in report
    # Resumed, the activation-side phase counts its own configurations, not the wider space's.
    again = run_cli(tmp_path / "run2", *MLP[:5], "seq_len=4", f"search_space.path={space}", "budget_gib=0.1",
                    "objective=throughput", "trial.repeats=0", "trial.measure_steps=3", timeout=1500)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "search 'auto' ended: 2 of 2 configurations run" in again.stdout, again.stdout
    assert "resuming the escalated search" in again.stdout
