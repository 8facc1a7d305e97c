"""Search strategies: the auto search's structure on replayed workloads of known memory and
speed (no trial process), then every strategy end to end, and resumed, on a tiny model."""
import dataclasses
import itertools
import math
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from autotune.results.outputs import unavailable
from autotune.scoring.budgets import per_budget
from autotune.scoring.pareto import pareto_mask
from autotune.scoring.settings import Scoring
from autotune.search.auto import AutoSearch, Family, family_of
from autotune.search.memory_model import fit_families, fit_line
from autotune.search.space import SearchSpace
from autotune.store.table import trials_table
from autotune.study.driver import run_study
from autotune.study.plan import Plan
from autotune.study.replay import Replay
from autotune.train.device import DeviceInfo
from autotune.train.optimizer import MODEL_STATE_DEFAULTS
from tests.conftest import run_cli
from tests.test_reliability import study_trials

ROI = {"memory_price_per_gib_hour": 0.025, "compute_price_per_hour": 3.5, "workload_samples": 1e7}
CKPT = {"none": 0.0, "0.5": 0.5, "full": 1.0}

PLAIN_STATE = tuple(MODEL_STATE_DEFAULTS.values())  # the model-state part of a family


def known_workload(intercept=6.0, act=0.5, launch=0.02, per_sample=0.003, recompute=0.3, offload_cost=3.0,
                   link_gib_s=None, weights_saved=0.3):
    """A trials table of known figures for every configuration: peak = intercept + slope x
    micro-batch (checkpointing and offload shrink the slope), and a step time of launch
    overhead plus per-sample compute (checkpointing recomputes, offload copies).

    With ``link_gib_s``, offload follows the copy physics instead: each micro-step copies the
    saved bytes (the weights plus 0.9 of the activation slope per sample) to the host and
    back over that link, after its compute; runs without offload report those bytes
    (``saved_gib``) and the link (``host_link_gib_s``), as CUDA trials do."""
    rows = []
    for n, (ckpt, off, mb) in enumerate(itertools.product(CKPT, (False, True), (4, 8, 16, 32, 64))):
        f = CKPT[ckpt]
        slope = act * (1 - 0.8 * f) * (0.1 if off else 1.0)
        compute = launch + mb * per_sample * (1 + recompute * f)
        saved = weights_saved + 0.9 * act * (1 - 0.8 * f) * mb
        if link_gib_s is None:
            micro_step = launch + mb * per_sample * (1 + recompute * f) * (offload_cost * (1 - 0.5 * f) if off else 1.0)
        else:
            micro_step = compute + (2 * saved / link_gib_s if off else 0.0)
        sps = 64 / ((64 // mb) * micro_step)
        rows.append({"number": n, "status": "ok", "checkpointing": ckpt, "precision": "bf16", "micro_batch": mb,
                     "accumulation": 64 // mb, "offload": off, "allocator": "default",
                     "peak_memory_gib": intercept + slope * mb, "device_peak_gib": intercept + slope * mb,
                     "samples_per_s": sps, "time_spread": 0.01, "static_gib": intercept - 1.0, "wall_s": 10.0,
                     "startup_s": 1.0, "build_s": 0.5, "first_step_s": 0.5})
        if link_gib_s is not None:
            rows[-1]["host_link_gib_s"] = link_gib_s
            if not off:
                rows[-1].update(saved_gib=saved, saved_per_sample_gib=0.9 * act * (1 - 0.8 * f))
    return pd.DataFrame(rows)


def replay_plan(table: pd.DataFrame, budgets, search: str, objective="throughput", n_trials=None,
                front_resolution=0.0) -> Plan:
    space = SearchSpace({"checkpointing": tuple(CKPT), "precision": ("bf16",), "offload": (False, True)}, 4, 64)
    device = DeviceInfo("cuda", 0, "replay", 141.0, ("fp32", "bf16", "fp16"), {})
    return Plan(model_name="known", model_target="replay", model_config={}, seq_len=1, global_batch=64, device=device,
                budget_gib=budgets[0], budget_is_device_memory=False, budgets=list(budgets),
                memory_cap_gib=max(budgets), space=space, space_name="known", micro_batches=[4, 8, 16, 32, 64],
                objective=objective, roi=ROI, warmup_steps=1, measure_steps=1, timeout_s=60, repeats=0, lr=1e-4,
                seed=0, study_name=search, storage=None, search=search, n_trials=n_trials,
                front_resolution=front_resolution)


def replayed(table, budgets, search, **kw):
    replay = Replay(table)
    with tempfile.TemporaryDirectory() as tmp:
        plan = replay_plan(table, budgets, search, **kw)
        study = run_study(plan, Path(tmp) / "run", f"journal:{tmp}/s.log", on_trial=lambda _: None, runner=replay)
        return trials_table(study), replay, plan


def fits(table, budget):
    return table[table["device_peak_gib"] <= budget]


@pytest.mark.parametrize("budget", [8.0, 12.0, 20.0, 40.0])
def test_monotone_pruning_never_prunes_a_configuration_that_would_fit(budget):
    truth = known_workload()
    table, _, _ = replayed(truth, [budget], "grid")
    peak = truth.set_index(["checkpointing", "offload", "micro_batch"])["device_peak_gib"]
    pruned = table[table["status"] == "pruned"]
    assert len(pruned) > 0 or budget == 40.0
    for row in pruned.itertuples():
        assert peak[(row.checkpointing, row.offload, row.micro_batch)] > budget  # it would not have fit
    # Everything that fits was measured ok; only what does not fit ended oom or pruned.
    ok = table[table["status"] == "ok"]
    assert len(ok) == len(fits(truth, budget))


@pytest.mark.parametrize("budgets", [[8.0], [12.0], [20.0], [40.0], [8.0, 20.0]])
def test_auto_finds_the_grids_best_with_a_fraction_of_its_trials(budgets):
    truth = known_workload()
    grid, grid_replay, plan = replayed(truth, budgets, "grid")
    auto, auto_replay, _ = replayed(truth, budgets, "auto")
    for b in budgets:
        want = per_budget(grid, Scoring(64, [b], ROI, "throughput"))[0]
        got = per_budget(auto, Scoring(64, [b], ROI, "throughput"))[0]
        assert got.best is not None
        assert got.scored.loc[got.best, "samples_per_s"] >= 0.98 * want.scored.loc[want.best, "samples_per_s"]
    assert auto_replay.trials <= 0.5 * grid_replay.trials, auto_replay.trials
    # Nothing auto skipped could have beaten its best by more than the noise it allows.
    best = max(fits(auto[auto["status"] == "ok"], min(budgets))["samples_per_s"])
    measured = set(zip(auto["checkpointing"], auto["offload"], auto["micro_batch"], strict=False))
    unmeasured = truth[
        [k not in measured for k in zip(truth["checkpointing"], truth["offload"], truth["micro_batch"], strict=False)]
    ]
    assert (fits(unmeasured, min(budgets))["samples_per_s"] <= best * 1.02).all()


def test_a_limit_reached_as_the_search_runs_out_is_an_end_not_a_stop():
    truth = known_workload()
    said = []

    def search(n_trials):
        said.clear()
        with tempfile.TemporaryDirectory() as tmp:
            plan = replay_plan(truth, [12.0], "auto", n_trials=n_trials)
            study = run_study(plan, Path(tmp) / "run", f"journal:{tmp}/s.log", on_trial=said.append,
                              runner=Replay(truth))
            return len(trials_table(study))

    n = search(None)
    assert any(m.startswith("search 'auto' ended") for m in said)
    assert search(n) == n  # the limit is reached by the last trial auto wanted: it ended
    assert any(m.startswith("search 'auto' ended") for m in said) and not any("search stopped" in m for m in said)
    assert search(n - 1) == n - 1 and any(m.startswith(f"search stopped: search.n_trials={n - 1}") for m in said)


@pytest.mark.parametrize("budget", [12.0, 40.0])
def test_auto_with_a_front_resolution_measures_the_whole_front_to_that_resolution(budget):
    truth = known_workload()
    fitting = fits(truth, budget)
    front = fitting[pareto_mask(fitting["peak_memory_gib"], fitting["samples_per_s"])]
    objective_only, few, _ = replayed(truth, [budget], "auto")
    settled, many, _ = replayed(truth, [budget], "auto", front_resolution=0.1)

    def reached(table):  # front points with a measured one <= 10 % more memory, as fast within the noise
        ok = table[table["status"] == "ok"]
        return sum(any((ok["device_peak_gib"] <= m * 1.1) & (ok["samples_per_s"] >= s * 0.98))
                   for m, s in zip(front["device_peak_gib"], front["samples_per_s"], strict=False))

    assert len(front) >= 4
    assert reached(settled) == len(front)
    assert reached(objective_only) < len(front)  # the objective alone leaves the curve unmeasured
    assert few.trials < many.trials < len(truth)  # ...and the front still skips what cannot join it
    # The objective's answer is the same either way.
    assert per_budget(settled, Scoring(64, [budget], ROI, "throughput"))[0].scored["samples_per_s"].max() == \
        per_budget(objective_only, Scoring(64, [budget], ROI, "throughput"))[0].scored["samples_per_s"].max()


def test_auto_records_what_the_device_cannot_run_as_skipped_and_the_summary_says_so():
    """fp16 in the space on a device without it: auto never runs it, as before, but records
    every fp16 configuration skipped with the device's reason, as the grid does."""
    truth = known_workload()
    plain, plain_replay, _ = replayed(truth, [12.0], "auto")
    replay = Replay(truth)
    with tempfile.TemporaryDirectory() as tmp:
        plan = replay_plan(truth, [12.0], "auto")
        plan = dataclasses.replace(
            plan, space=dataclasses.replace(plan.space, choices={**plan.space.choices, "precision": ("bf16", "fp16")}),
            device=DeviceInfo("cuda", 0, "replay", 141.0, ("fp32", "bf16"), {"fp16": "no fp16 on this card"}))
        table = trials_table(run_study(plan, Path(tmp) / "run", f"journal:{tmp}/s.log", on_trial=lambda _: None,
                                       runner=replay))
    fp16 = table[table["precision"] == "fp16"]
    assert len(fp16) == 3 * 2 * 5 and set(fp16["status"]) == {"skipped"}
    assert set(fp16["cause"]) == {"no fp16 on this card"}
    assert replay.trials == plain_replay.trials  # nothing more was run
    assert unavailable(table) == ["precision fp16: no fp16 on this card"]
    assert unavailable(plain) == []


@pytest.mark.parametrize("budget", [8.0, 12.0, 20.0])  # budgets where the blind search measures offload
def test_offload_configs_the_copies_rule_out_are_never_measured(budget):
    truth = known_workload(link_gib_s=50.0)
    blind, blind_replay, _ = replayed(truth.drop(columns=["saved_gib", "saved_per_sample_gib", "host_link_gib_s"]),
                                      [budget], "auto")
    auto, auto_replay, _ = replayed(truth, [budget], "auto")
    want = per_budget(replayed(truth, [budget], "grid")[0], Scoring(64, [budget], ROI, "throughput"))[0]
    got = per_budget(auto, Scoring(64, [budget], ROI, "throughput"))[0]
    best = want.scored.loc[want.best, "samples_per_s"]
    assert got.scored.loc[got.best, "samples_per_s"] >= 0.98 * best
    offload = lambda t: int((t["offload"] & (t["status"] == "ok")).sum())  # noqa: E731
    assert offload(auto) < offload(blind) and auto_replay.trials < blind_replay.trials
    # Every offload config left unmeasured was slower than the best: the bound was sound.
    measured = set(zip(auto["checkpointing"], auto["offload"], auto["micro_batch"], strict=False))
    unmeasured = pd.Series([k not in measured for k in zip(truth["checkpointing"], truth["offload"],
                                                           truth["micro_batch"], strict=False)], index=truth.index)
    skipped = truth[truth["offload"] & unmeasured]
    assert len(skipped) > 0 and (skipped["samples_per_s"] <= best * 1.02).all()


def test_the_copies_bound_an_offload_family_from_its_twin_without_offload():
    measured = {
        (Family(0.0, "bf16", False, "default", *PLAIN_STATE), 16): {
            "status": "ok",
            "saved_gib": 8.0,
            "host_link_gib_s": 40.0,
        }
    }
    fam = Family(0.0, "bf16", True, "default", *PLAIN_STATE)
    # At m=32 at least the 8 GiB counted at 16 cross the link twice per micro-step.
    assert AutoSearch._transfer_bound(fam, 32, measured) == pytest.approx(32 * 40.0 * 1.25 / (2 * 8.0))
    # Below 16, only the per-sample share is sure (the weights' share may be all of it).
    assert AutoSearch._transfer_bound(fam, 8, measured) == pytest.approx(8 * 40.0 * 1.25 / (2 * 4.0))
    # With the per-sample share known, the line gives the bytes at any micro-batch.
    measured[(Family(0.0, "bf16", False, "default", *PLAIN_STATE), 16)]["saved_per_sample_gib"] = 0.45
    weights = 8.0 - 0.45 * 16
    assert AutoSearch._transfer_bound(fam, 8, measured) == pytest.approx(8 * 50.0 / (2 * (weights + 0.45 * 8)))
    assert AutoSearch._transfer_bound(fam, 64, measured) == pytest.approx(64 * 50.0 / (2 * (weights + 0.45 * 64)))
    # Another precision's bytes, or no link figure: no bound.
    assert AutoSearch._transfer_bound(Family(0.0, "fp32", True, "default", *PLAIN_STATE), 32, measured) == math.inf
    measured[(Family(0.0, "bf16", False, "default", *PLAIN_STATE), 16)].pop("host_link_gib_s")
    assert AutoSearch._transfer_bound(fam, 32, measured) == math.inf


def test_the_memory_line_is_fitted_and_predicts_the_micro_batch_auto_measures_next():
    line = fit_line([(4, 8.0), (8, 10.0), (16, 14.0)])
    assert line.intercept == pytest.approx(6.0) and line.slope == pytest.approx(0.5) and line.certain
    assert line.largest_fitting([4, 8, 16, 32, 64], 22.0) == 32
    # One point of another family and the group's fitted intercept: certain, its own slope.
    lines = fit_families({"a": [(4, 8.0), (8, 10.0)], "b": [(16, 8.0)]}, group_of=lambda f: 0, static_gib=None)
    assert (
        lines["b"].intercept == pytest.approx(6.0) and lines["b"].slope == pytest.approx(0.125) and lines["b"].certain
    )
    # Static memory alone is a lower bound of the intercept: that line orders, never rules out.
    lines = fit_families({"b": [(16, 8.0)]}, group_of=lambda f: 0, static_gib=5.0)
    assert not lines["b"].certain

    truth = known_workload()
    configs = [{"checkpointing": c, "precision": "bf16", "micro_batch": m, "offload": o, "allocator": "default"}
               for c, o, m in itertools.product(CKPT, (False, True), (4, 8, 16, 32, 64))]
    auto = AutoSearch(configs, Scoring(64, [20.0], ROI, "throughput"))
    seen = truth[(truth["checkpointing"] == "none") & ~truth["offload"] & truth["micro_batch"].isin([4, 8])]
    table = seen.assign(number=range(len(seen)))
    nxt = auto.propose(table, set())
    # none: 6 + 0.5 m fits 20 GiB up to m = 28, so the largest micro-batch predicted to fit is 16.
    assert family_of(nxt) == (0.0, "bf16", False, "default", *PLAIN_STATE) and nxt["micro_batch"] == 16
    # Above it the certain line rules micro-batches out: 32 and 64 are never proposed for none.
    table = truth[(truth["checkpointing"] == "none") & ~truth["offload"] & truth["micro_batch"].isin([4, 8, 16])]
    for _ in range(20):
        nxt = auto.propose(table, set())
        if nxt is None:
            break
        assert not (family_of(nxt)[0] == 0.0 and not nxt["offload"] and nxt["micro_batch"] > 16)
        row = truth[(truth["checkpointing"] == nxt["checkpointing"]) & (truth["offload"] == nxt["offload"])
                    & (truth["micro_batch"] == nxt["micro_batch"])]
        table = pd.concat([table, row])
    assert nxt is None  # auto ends by itself


def test_once_a_precision_measures_faster_its_families_are_probed_before_the_slower_ones():
    """The space lists fp32 first; fp32 is twice as slow and heavier. Once bf16 has measured
    faster, no fp32 configuration is proposed while a bf16 one is left, and the bf16 points
    settle most fp32 ones by their bounds."""
    bf16 = known_workload()
    fp32 = bf16.assign(precision="fp32", samples_per_s=bf16["samples_per_s"] / 2,
                       peak_memory_gib=bf16["peak_memory_gib"] + 1.0, device_peak_gib=bf16["device_peak_gib"] + 1.0)
    truth = pd.concat([fp32, bf16], ignore_index=True)
    truth = truth[~truth["offload"]]
    configs = [{"checkpointing": c, "precision": p, "micro_batch": m, "offload": False, "allocator": "default"}
               for c, p, m in itertools.product(CKPT, ("fp32", "bf16"), (4, 8, 16, 32, 64))]
    auto = AutoSearch(configs, Scoring(64, [20.0], ROI, "throughput"), front_resolution=0.1)
    table, order = pd.DataFrame(), []
    while (nxt := auto.propose(table, set())) is not None:
        order.append(nxt["precision"])
        row = truth[(truth["checkpointing"] == nxt["checkpointing"]) & (truth["precision"] == nxt["precision"])
                    & (truth["micro_batch"] == nxt["micro_batch"])]
        table = pd.concat([table, row.assign(number=len(table))], ignore_index=True)
    first_bf16 = order.index("bf16")
    after = order[first_bf16:]
    assert after == sorted(after, key=lambda p: p != "bf16"), order  # bf16 ..., then fp32 ...
    assert order.count("fp32") <= 4, order  # of 15, left to their bounds (the space's order probed 5)
    assert order.count("bf16") >= 5, order  # the front's checkpointed points measured


def test_auto_with_the_roi_objective_measures_the_baseline_first():
    configs = [{"checkpointing": c, "precision": p, "micro_batch": m, "offload": False, "allocator": "default"}
               for c, p, m in itertools.product(("none", "full"), ("bf16", "fp32"), (8, 16))]
    auto = AutoSearch(configs, Scoring(16, [20.0], ROI, "roi"))
    first = auto.propose(pd.DataFrame(), set())
    assert (first["checkpointing"], first["precision"], first["micro_batch"]) == ("none", "fp32", 16)


SPACE = "checkpointing: [none, full]\nprecision: [fp32]\nmicro_batch: {min: 1, max: 8}\n"
TINY = ["model=tiny", "device=cpu", "global_batch=8", "seq_len=8", "trial.warmup_steps=1", "trial.measure_steps=2",
        "trial.repeats=0", "objective=throughput"]


@pytest.mark.e2e
@pytest.mark.parametrize("search", ["grid", "random", "tpe", "nsga2", "auto"])
def test_every_strategy_runs_end_to_end_and_resumes(tmp_path, search):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)  # 2 checkpointing x micro-batches 1, 2, 4, 8: 8 configurations
    args = [*TINY, f"search={search}", f"search_space.path={space}"]
    first = run_cli(tmp_path / "run1", *args, "search.n_trials=2")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "search stopped: search.n_trials=2 reached" in first.stdout
    assert len(pd.read_csv(tmp_path / "run1" / "trials.csv")) == 2
    # The same command with a larger limit resumes the study: nothing measured twice.
    # auto gets room for every configuration: it must end by itself before measuring them all.
    again = run_cli(tmp_path / "run2", *args, f"search.n_trials={8 if search == 'auto' else 5}")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming study" in again.stdout
    trials = [t for t in study_trials(tmp_path / "studies.db") if "duplicate_of" not in t.user_attrs
              and not t.user_attrs.get("repeat")  # a contended trial is re-measured on purpose
              and t.state.is_finished()]  # grid's queue keeps what the limit left unrun, WAITING
    keys = [(t.params["checkpointing"], t.params["micro_batch"]) for t in trials]
    assert len(keys) == len(set(keys))  # each configuration measured at most once
    final = pd.read_csv(tmp_path / "run2" / "trials.csv")
    assert len(final) == len(trials) and set(final["status"]) == {"ok"}
    if search == "auto":  # it ends once nothing left could win or add a front point
        assert "search 'auto' ended" in again.stdout and len(final) < 8
    else:
        assert len(final) == 5
    assert (tmp_path / "run2" / "best.yaml").is_file() and (tmp_path / "run2" / "report.html").is_file()
    assert all(math.isfinite(v) for v in final["samples_per_s"])


@pytest.mark.parametrize("budget", [16.0, 40.0])
def test_offload_families_are_probed_most_checkpointed_first_and_the_front_still_settles(budget, monkeypatch):
    """With offload on, checkpointing more blocks leaves less to copy and to pin (fact 3): on
    the budgets table recorded on an H200 (benchmarks/budgets-h200-2026-12-07), full/offload
    ran 94-161 samples/s with first steps of 1.8-2.7 s, none/offload 33-39 samples/s with
    first steps of 8-26 s. Probing the most checkpointed offload family first settles the
    low-memory end of the front, and the slow, costly ones need no probe at all."""
    import sys

    from tests.conftest import ROOT

    sys.path.insert(0, str(ROOT / "bench"))
    import search_replay

    table = pd.read_csv(ROOT / "benchmarks/budgets-h200-2026-12-07/budgets-grid/trials.csv")
    seen = []
    replay_call = Replay.__call__

    def recording(self, spec, trial_dir, timeout_s, env=None):
        s = spec["strategy"]
        seen.append((s["checkpointing"], s["offload"]))
        return replay_call(self, spec, trial_dir, timeout_s, env)

    monkeypatch.setattr(Replay, "__call__", recording)
    fid = search_replay.run(table, budget, "auto", front_resolution=0.1, fidelity="auto", window=search_replay.WINDOW)
    monkeypatch.undo()
    offload = [ckpt for ckpt, off in seen if off]
    assert offload and offload[0] == "full" and "none" not in offload, seen
    grid = search_replay.run(table, budget, "grid")
    assert fid["best"] == grid["best"]
    assert search_replay._reached(grid["front"], fid["points"]) == f"{len(grid['front'])}/{len(grid['front'])}"
