"""Replay benchmark: how many trials and how much GPU time each search strategy needs.

Each recorded run (a trials table measured on real hardware, committed under benchmarks/)
is replayed with no GPU: a "trial" returns the recorded row of its configuration, and a
memory budget below the recorded run's cap turns a config whose recorded device peak
exceeds it into an out-of-memory trial that costs what the recorded one spent before its
first step ended. For every table and budget, each strategy runs through the real driver:

* grid: every configuration (the reference; its best is the best that fits the budget);
* auto: until it ends by itself;
* random, tpe, nsga2: with search.n_trials = 30 % of the grid's trials (median over seeds).

Target (issue 5): auto's best >= 98 % of the grid's best throughput, with <= 30 % of the
grid's trials and <= 30 % of its GPU time. That is auto settling the objective alone
(``search.front_resolution=0``). With the default resolution (0.1) auto also settles the
Pareto front; its row says how many trials that took and how much of the grid's front
(within the budget) it reached: a grid front point counts as reached when auto measured a
point using at most 10 % more memory at >= 95 % of its samples/s.

    python bench/search_replay.py [--out bench/results/search_replay.json]
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.scoring.budgets import per_budget  # noqa: E402
from autotune.scoring.settings import Scoring  # noqa: E402
from autotune.search.space import SearchSpace  # noqa: E402
from autotune.store.table import trials_table  # noqa: E402
from autotune.study.driver import run_study  # noqa: E402
from autotune.study.plan import Plan  # noqa: E402
from autotune.study.replay import Replay  # noqa: E402
from autotune.train.device import DeviceInfo  # noqa: E402
from autotune.train.strategy import checkpoint_label  # noqa: E402

RECORDED = {
    # name: (trials.csv, what it is)
    "bert-large-h200-budgets": ("benchmarks/bert-large-budgets-h200-2026-12-03/trials.csv",
                                "BERT-large, seq 512, global batch 64, bf16; ckpt none/0.5/full x offload x mb 16-64"),
    "bert-large-h200-budgets-2026-12-07": ("benchmarks/budgets-h200-2026-12-07/budgets-grid/trials.csv",
                                           "the same space recorded again with the code of commit 81438d8 "
                                           "(fork isolation, 2 + 10 timed steps)"),
    "bert-large-h200": ("benchmarks/bert-large-h200-2026-12-02/trials.csv",
                        "BERT-large, seq 512, global batch 64; ckpt none/full x fp32/bf16/fp16 x mb 4-64"),
}
BUDGETS = [16.0, 24.0, 40.0]
SEEDS = [0, 1, 2, 3, 4]
ROI = {"memory_price_per_gib_hour": 0.025, "compute_price_per_hour": 3.5, "workload_samples": 1e7}


FRONT_RESOLUTION = 0.1


def make_plan(table: pd.DataFrame, budget: float, search: str, seed: int, n_trials, study: str,
              front_resolution: float = 0.0, fidelity: str = "full") -> Plan:
    ckpt = tuple(dict.fromkeys(checkpoint_label(v) for v in table["checkpointing"]))
    col = lambda c, d: tuple(dict.fromkeys(table[c].fillna(d))) if c in table else (d,)  # noqa: E731
    mbs = sorted(int(m) for m in table["micro_batch"].unique())
    gb = int(table["micro_batch"].iloc[0] * table["accumulation"].iloc[0])
    space = SearchSpace({"checkpointing": ckpt, "precision": col("precision", "fp32"),
                         "offload": tuple(bool(v) for v in col("offload", False)),
                         "allocator": col("allocator", "default")}, min(mbs), max(mbs))
    device = DeviceInfo("cuda", 0, "replay", 141.0, ("fp32", "bf16", "fp16"), {})
    return Plan(model_name="replay", model_target="replay", model_config={}, seq_len=512, global_batch=gb,
                device=device, budget_gib=budget, budget_is_device_memory=False, budgets=[budget],
                memory_cap_gib=budget, space=space, space_name="replay", micro_batches=mbs, objective="throughput",
                roi=ROI, warmup_steps=2, measure_steps=5, timeout_s=600, repeats=1 if fidelity == "auto" else 0,
                lr=1e-4, seed=seed, study_name=study, storage=None, search=search, n_trials=n_trials,
                front_resolution=front_resolution, fidelity=fidelity)


WINDOW = (2, 10, 5.0)  # today's full measurement: warm-up, timed steps, minimum seconds (trial.* defaults)


def run(table: pd.DataFrame, budget: float, search: str, seed: int = 0, n_trials=None, front_resolution=0.0,
        fidelity: str = "full", window=None) -> dict:
    replay = Replay(table, window)
    with tempfile.TemporaryDirectory() as tmp:
        plan = make_plan(table, budget, search, seed, n_trials, f"{search}-{seed}", front_resolution, fidelity)
        study = run_study(plan, Path(tmp) / "run", f"journal:{tmp}/study.log", on_trial=lambda _: None, runner=replay)
        result = per_budget(trials_table(study), Scoring(plan.global_batch, [budget], ROI, "throughput"))[0]
    best = None if result.best is None else result.scored.loc[result.best]
    ok = result.scored[result.scored["fits_budget"]]
    return {
        "trials": replay.trials,
        "wall_s": replay.wall_s,
        "points": ok[["peak_memory_gib", "samples_per_s"]],
        "front": ok[ok["on_pareto"]][["peak_memory_gib", "samples_per_s"]],
        "best_samples_per_s": None if best is None else float(best["samples_per_s"]),
        "best": None
        if best is None
        else f"{best['checkpointing']}/{best['precision']}/mb{int(best['micro_batch'])}"
        + ("/offload" if best.get("offload") else ""),
    }


def _reached(front: pd.DataFrame, points: pd.DataFrame) -> str:
    """How many of ``front``'s points a measured point comes within the resolution of."""
    hit = sum(any(m <= g_m * (1 + FRONT_RESOLUTION) and s >= 0.95 * g_s
                  for m, s in zip(points["peak_memory_gib"], points["samples_per_s"], strict=False))
              for g_m, g_s in zip(front["peak_memory_gib"], front["samples_per_s"], strict=False))
    return f"{hit}/{len(front)}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "search_replay.json"))
    args = ap.parse_args(argv)
    logging.disable(logging.INFO)
    rows = []
    for name, (path, _what) in RECORDED.items():
        table = pd.read_csv(ROOT / path)
        for budget in BUDGETS:
            grid = run(table, budget, "grid")
            if grid["best_samples_per_s"] is None:
                continue
            ref, budget_trials = grid["best_samples_per_s"], max(1, math.floor(0.3 * grid["trials"]))
            row = {
                "table": name,
                "budget_gib": budget,
                "grid_trials": grid["trials"],
                "grid_wall_s": round(grid["wall_s"], 1),
                "grid_best": grid["best"],
                "grid_best_samples_per_s": round(ref, 1),
            }
            auto = run(table, budget, "auto")
            row.update(auto_trials=auto["trials"], auto_wall_s=round(auto["wall_s"], 1), auto_best=auto["best"],
                       auto_best_samples_per_s=round(auto["best_samples_per_s"] or 0, 1),
                       auto_vs_grid=round((auto["best_samples_per_s"] or 0) / ref, 4),
                       auto_trial_share=round(auto["trials"] / grid["trials"], 3),
                       auto_time_share=round(auto["wall_s"] / grid["wall_s"], 3))
            row["auto_meets_target"] = (row["auto_vs_grid"] >= 0.98 and row["auto_trial_share"] <= 0.30
                                        and row["auto_time_share"] <= 0.30)
            front = run(table, budget, "auto", front_resolution=FRONT_RESOLUTION)
            row.update(front_trials=front["trials"], front_trial_share=round(front["trials"] / grid["trials"], 3),
                       front_points=len(front["front"]), grid_front_points=len(grid["front"]),
                       grid_front_reached=_reached(grid["front"], front["points"]))
            # The default since issue 29: the front settled with probes, the contenders in full;
            # every trial costed as today's defaults would run it (Replay's window), the grid too.
            today = run(table, budget, "grid", window=WINDOW)
            fid = run(table, budget, "auto", front_resolution=FRONT_RESOLUTION, fidelity="auto", window=WINDOW)
            row.update(grid_wall_today_s=round(today["wall_s"], 1), fidelity_measurements=fid["trials"],
                       fidelity_wall_s=round(fid["wall_s"], 1),
                       fidelity_time_share=round(fid["wall_s"] / today["wall_s"], 3), fidelity_best=fid["best"],
                       fidelity_vs_grid=round((fid["best_samples_per_s"] or 0) / ref, 4),
                       fidelity_front_points=len(fid["front"]),
                       fidelity_grid_front_reached=_reached(grid["front"], fid["points"]))
            row["fidelity_meets_target"] = (row["fidelity_time_share"] <= 0.25 and row["fidelity_vs_grid"] >= 0.98)
            for sampler in ("random", "tpe", "nsga2"):
                found = [run(table, budget, sampler, seed, budget_trials)["best_samples_per_s"] or 0 for seed in SEEDS]
                row[f"{sampler}_vs_grid_at_{budget_trials}_trials"] = round(statistics.median(found) / ref, 4)
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"command": "python bench/search_replay.py", "recorded": RECORDED, "rows": rows}, indent=1)
    )
    df = pd.DataFrame(rows)
    cols = ["table", "budget_gib", "grid_trials", "grid_best_samples_per_s", "auto_trials", "auto_vs_grid",
            "auto_trial_share", "auto_time_share", "auto_meets_target", "front_trials", "front_points",
            "grid_front_reached", "fidelity_measurements", "fidelity_time_share", "fidelity_vs_grid",
            "fidelity_grid_front_reached", "fidelity_meets_target"]
    print(df[cols].to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
