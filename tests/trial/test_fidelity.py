"""Multi-fidelity trials (autotune/trial/fidelity.py, autotune/study/fidelity.py): a probe's
peak is the full measurement's, a raced measurement stops once its interval decides, and a
configuration named best always has a measurement of the whole window."""
import math

import pandas as pd
import pytest
import torch
import yaml

from autotune.scoring.score import Baseline, objective_value, speed_at_objective
from autotune.train.strategy import Strategy
from autotune.train.workload import Workload
from autotune.trial.fidelity import MAX_FIRST_STEPS, PROBE_STEPS, RACE_MIN_STEPS, probe_done, probe_steps, race_verdict
from autotune.trial.run import first_steps
from autotune.trial.runner import run_trial
from tests.conftest import run_cli, trial_env


def cpu_spec(ckpt, mb, fidelity, config=None, measure_steps=5, race_speed=None, acc=1):
    return {"model": {"name": "t", "target": "tests.workloads:mlp", "config": config or {"width": 256, "depth": 4}},
            "seq_len": 64, "device": "cpu",
            "strategy": {"checkpointing": ckpt, "precision": "fp32", "micro_batch": mb, "accumulation": acc},
            "warmup_steps": 2, "measure_steps": measure_steps, "min_measure_s": 0.0, "lr": 1e-4, "seed": 0,
            "fidelity": fidelity, "race_speed": race_speed}


@pytest.mark.parametrize("ckpt,mb,acc", [("none", 2, 1), ("none", 8, 1), ("full", 8, 1), ("0.5", 4, 1),
                                         ("none", 4, 6), ("full", 2, 3)])
def test_a_probe_measures_the_full_measurements_peak_on_cpu(tmp_path, ckpt, mb, acc):
    config = {"width": 1024, "depth": 4}  # peaks of 20-80 MB
    probe = run_trial(cpu_spec(ckpt, mb, "probe", config, acc=acc), tmp_path / "p", 300, env=trial_env())
    full = run_trial(cpu_spec(ckpt, mb, "full", config, acc=acc), tmp_path / "f", 300, env=trial_env())
    assert probe["status"] == full["status"] == "ok", (probe, full)
    assert (probe["fidelity"], full["fidelity"]) == ("probe", "full")
    # Timed steps until they sum to PROBE_ENOUGH_S, at most PROBE_STEPS (a busy machine's are slow).
    steps = probe["step_times_s"]
    assert probe_done(steps) and not probe_done(steps[:-1]) and len(full["step_times_s"]) == 5
    assert probe["spread_assumed"] if len(steps) == 1 else "spread_assumed" not in probe
    assert probe["timings"]["first_steps"] == 1  # fp32: no loss scaler skips a step
    # The same memory step in both (the probe's after a short first step of at most two
    # micro-steps). Two full measurements of one configuration in two fresh processes differ
    # by up to about 100 KiB of resident memory (0.14 % of a 75 MB peak, measured on a 2-core
    # EPYC); 0.5 % holds that and no real difference.
    assert probe["peak_memory_gib"] == pytest.approx(full["peak_memory_gib"], rel=0.005)
    assert "flops_per_sample" in full and "flops_per_sample" not in probe


def test_a_probes_timed_steps_follow_their_length():
    assert [probe_steps(s) for s in (0.01, 0.4, 0.5, 0.9, 1.0, 7.0)] == [PROBE_STEPS, PROBE_STEPS, 2, 2, 1, 1]
    assert not probe_done([0.3, 0.3]) and probe_done([0.3, 0.3, 0.3]) and probe_done([1.2])


def test_a_probes_first_step_repeats_until_the_scaler_stops_skipping():
    """fp16's loss scaler skips the optimizer step while its scaled gradients overflow, and a
    skipped step creates no optimizer state: the probe's first step repeats until one counts."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    workload = Workload(model=model, make_batch=lambda n, d: torch.ones(n, 8, device=d),
                        loss=lambda m, b: m(b).sum() * 1e30)
    strategy = Strategy(checkpointing="none", precision="fp32", micro_batch=4, accumulation=5)
    optimizer = torch.optim.AdamW(model.parameters())
    # A scale 4-8x too large for float32's range: inf until it has halved three times or so.
    batch = workload.make_batch(4, "cpu")
    loss = workload.loss(model, batch) / strategy.accumulation
    loss.backward()
    largest = max([abs(loss.item())] + [p.grad.abs().max().item() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    init = 2.0 ** math.ceil(math.log2(4 * torch.finfo(torch.float32).max / largest))
    scaler = torch.amp.GradScaler("cpu", init_scale=init, growth_interval=10**6)
    steps = first_steps(workload, batch, strategy, optimizer, scaler, "cpu")
    assert 1 < steps < MAX_FIRST_STEPS and scaler.get_scale() == init / 2 ** (steps - 1), (steps, init)
    assert len(optimizer.state) == 2  # the step that counted created the state
    unscaled = torch.amp.GradScaler("cpu", enabled=False)
    assert first_steps(workload, workload.make_batch(4, "cpu"), strategy, optimizer, unscaled, "cpu") == 1


def test_a_raced_measurement_stops_once_its_interval_decides(tmp_path):
    # Each micro-step sleeps 40 ms: about 2 / 0.04 = 50 samples/s at micro_batch 2.
    config = {"width": 32, "depth": 2, "step_sleep": 0.04}
    far_above = run_trial(cpu_spec("none", 2, "full", config, 30, race_speed=[400.0, 500.0]),
                          tmp_path / "a", 300, env=trial_env())
    far_below = run_trial(cpu_spec("none", 2, "full", config, 30, race_speed=[5.0, 10.0]),
                          tmp_path / "b", 300, env=trial_env())
    unraced = run_trial(cpu_spec("none", 2, "full", config, 12), tmp_path / "c", 300, env=trial_env())
    # A tie (its interval inside a wide open range) runs the whole window: it may be named best.
    tied = run_trial(cpu_spec("none", 2, "full", config, 12, race_speed=[1.0, 1000.0]), tmp_path / "d", 300,
                     env=trial_env())
    assert [r["status"] for r in (far_above, far_below, unraced, tied)] == ["ok"] * 4
    assert (tied["race"], len(tied["step_times_s"]), tied["fidelity"]) == ("tied", 12, "full")
    # Decided at the first step the rule may decide on, not after the 30 asked for.
    assert (far_above["race"], len(far_above["step_times_s"]), far_above["fidelity"]) == (
        "below",
        RACE_MIN_STEPS,
        "raced",
    )
    assert (far_below["race"], len(far_below["step_times_s"]), far_below["fidelity"]) == (
        "above",
        RACE_MIN_STEPS,
        "raced",
    )
    assert "race" not in unraced and len(unraced["step_times_s"]) == 12 and unraced["fidelity"] == "full"


def test_race_verdicts_on_step_times():
    steps = [0.10, 0.10, 0.11, 0.10, 0.10]  # about 10 samples/s at a global batch of 1
    assert race_verdict(steps[:RACE_MIN_STEPS - 1], 1, [20, 30], 10) is None  # too few steps to decide
    assert race_verdict(steps, 1, [20, 30], 10) == "below"
    assert race_verdict(steps, 1, [2, 5], 10) == "above"
    assert race_verdict(steps, 1, [5, 20], 10) is None  # inside, before the window's minimum of steps
    assert race_verdict(steps, 1, [5, 20], 5) == "tied"
    wide = [0.09, 0.10, 0.11, 0.10, 0.12]  # 10 samples/s, interval [9, 11]
    assert race_verdict(wide, 1, [10.5, 20], 5) is None  # straddles an end: more steps may decide
    assert race_verdict(wide, 1, [5, 10.5], 5) is None
    assert race_verdict(steps, 1, None, 5) is None


@pytest.mark.parametrize("peak", [0.5, 2.0, 7.9])
def test_speed_at_objective_inverts_the_roi(peak):
    roi = {"memory_price_per_gib_hour": 0.025, "compute_price_per_hour": 3.5, "workload_samples": 1e7}
    for base in (Baseline(8.0, 40.0, True, "measured"), Baseline(8.0, None, False, "no speed")):
        for speed in (10.0, 35.0, 120.0):
            value = objective_value("roi", peak, speed, base, roi)
            back = speed_at_objective("roi", peak, value, base, roi)
            assert back == pytest.approx(speed, rel=1e-9), (base, speed, back)
    assert speed_at_objective("throughput", peak, 42.0, base, roi) == 42.0


@pytest.mark.e2e
def test_a_search_names_a_best_with_a_full_measurement(tmp_path):
    """The default run (search=auto, trial.fidelity=auto): the search probes, the best of each
    budget has a full measurement (trials.csv, best.yaml), and the last lines count them."""
    run_dir = tmp_path / "run"
    out = run_cli(run_dir, "model=faulty", "device=cpu", "global_batch=8", "seq_len=8", "trial.measure_steps=4",
                  "budget_gib=[1,0.0005]", "search.escalate=false", timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "probe," in out.stdout and "[confirm]" in out.stdout
    table = pd.read_csv(run_dir / "trials.csv")
    assert set(table["fidelity"].dropna()) <= {"probe", "raced", "full"}
    assert table.loc[table["status"] == "skipped", "fidelity"].isna().all()  # no measurement, no fidelity
    # A configuration measured once was measured by the search: a probe (how many the search
    # probes depends on the machine's noise; on a busy one all of them may be confirmed).
    once = table[(table["status"] == "ok") & table["samples_per_s_runs"].isna()]
    assert (once["fidelity"] == "probe").all()
    best = yaml.safe_load((run_dir / "best.yaml").read_text())
    assert best["measured"]["fidelity"] == "full"
    row = table[table["number"] == best["measured"]["trial"]].iloc[0]
    assert row["fidelity"] == "full" and row["full_runs"] >= 1
    effort = [line for line in out.stdout.splitlines() if line.startswith("measured: ")]
    assert effort and "probe(s)" in effort[0] and "full measurement(s)" in effort[0], out.stdout
    assert math.isfinite(float(effort[0].split("ran ")[1].split(" s")[0]))
