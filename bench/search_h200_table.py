"""search=auto on the H200 against the exhaustive grid: the per-budget table issue 5 asks for.

    python bench/search_h200_table.py [RUNS_DIR] [--out bench/results/search_h200.json]

RUNS_DIR (default benchmarks/bert-large-search-h200-2026-12-03/) holds the run directories that
bench/h200_search.sh made on the H200: auto-<budget>GiB (fresh trial processes, as the grid
ran) and auto-<budget>GiB-<tag> (other settings, e.g. the warm worker). The grid is the
committed H200 grid run benchmarks/bert-large-budgets-h200-2026-12-03/ (same model, space, steps
and objective; every configuration measured once in a fresh process); its trials and GPU
time at each budget are what a grid run under that budget alone costs, as
bench/search_replay.py counts them (a config above the budget costs its out-of-memory
start). GPU time: the sum of the trials' wall times, start-up included.

Two auto figures: "chosen" is the config auto names best (between configs within each
other's measured spread it prefers the smaller memory, so it may pick a slightly slower,
steadier one); "found" is the fastest config auto measured within the budget. Both are set
against the grid's best throughput from the grid's own measurement. Between sessions the
same config measured 0-3 % apart, so ratios a little below or above 1 are measurement
noise, not a different config.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import search_replay  # noqa: E402

GRID = ROOT / "docs" / "examples" / "bert-large-h200-budgets" / "trials.csv"


def label(row) -> str:
    return f"{row['checkpointing']}/{row['precision']}/mb{int(row['micro_batch'])}" + (
        "/offload" if str(row.get("offload")).lower() == "true" else "")


def auto_row(run: Path, budget: float) -> dict:
    trials = pd.read_csv(run / "trials.csv")
    ran = trials[~trials["status"].isin(["pruned", "skipped"])]
    ok = ran[(ran["status"] == "ok") & (ran["device_peak_gib"] <= budget)]
    log = (run / "tune.log").read_text()
    wall = re.search(r"^exit (\d+) wall_s ([\d.]+)", log, re.M)
    cost = re.search(r"^trial cost .*$", log, re.M)
    best = yaml_best(run)
    chosen = ok[(ok["checkpointing"].astype(str) == best["checkpointing"]) & (ok["micro_batch"] == best["micro_batch"])
                & (ok["offload"].astype(str).str.lower() == str(best["offload"]).lower())]
    found = ok.loc[ok["samples_per_s"].idxmax()]
    return {"trials": len(ran), "gpu_s": round(float(ran["wall_s"].sum()), 1),
            "driver_wall_s": float(wall.group(2)) if wall else None,
            "chosen": label(chosen.iloc[0]), "chosen_samples_per_s": round(float(chosen["samples_per_s"].iloc[0]), 1),
            "found": label(found), "found_samples_per_s": round(float(found["samples_per_s"]), 1),
            "trial_cost": cost.group(0) if cost else None}


def offload_bound_check(run: Path, grid: pd.DataFrame) -> list:
    """Fact 6 against the H200: the bound the run's saved-byte counts and link give each
    offload configuration of the grid, beside what the grid measured for it."""
    from autotune.search.auto import AutoSearch, family_of

    if not (run / "trials.csv").is_file():
        return []
    measured = {(family_of(r), int(r["micro_batch"])): r for r in pd.read_csv(run / "trials.csv").to_dict("records")}
    rows = []
    for r in grid[grid["offload"].astype(str).str.lower() == "true"].to_dict("records"):
        bound = AutoSearch._transfer_bound(family_of(r), int(r["micro_batch"]), measured)
        rows.append({"config": label(r), "measured_samples_per_s": round(float(r["samples_per_s"]), 1),
                     "bound_samples_per_s": round(bound, 1), "sound": bool(r["samples_per_s"] <= bound)})
    return rows


def yaml_best(run: Path) -> dict:
    import yaml

    strategy = yaml.safe_load((run / "best.yaml").read_text())["strategy"]
    return {"checkpointing": str(strategy["checkpointing"]), "micro_batch": int(strategy["micro_batch"]),
            "offload": bool(strategy.get("offload", False))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="?", default=str(ROOT / "docs" / "examples" / "bert-large-h200-search"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "search_h200.json"))
    args = ap.parse_args(argv)
    import logging

    logging.disable(logging.INFO)
    grid_table = pd.read_csv(GRID)
    rows = []
    for run in sorted(Path(args.runs).glob("auto-*GiB*"), key=lambda p: (p.name.count("-"), p.name)):
        m = re.fullmatch(r"auto-(\d+)GiB(?:-(.+))?", run.name)
        budget, tag = float(m.group(1)), m.group(2) or "fresh"
        grid = search_replay.run(grid_table, budget, "grid")
        auto = auto_row(run, budget)
        ref = grid["best_samples_per_s"]
        rows.append({"budget_gib": budget, "auto_run": tag, "grid_trials": grid["trials"],
                     "grid_gpu_s": round(grid["wall_s"], 1), "grid_best": grid["best"],
                     "grid_best_samples_per_s": round(ref, 1), **{f"auto_{k}": v for k, v in auto.items()},
                     "chosen_vs_grid": round(auto["chosen_samples_per_s"] / ref, 3),
                     "found_vs_grid": round(auto["found_samples_per_s"] / ref, 3),
                     "trial_share": round(auto["trials"] / grid["trials"], 3),
                     "gpu_time_share": round(auto["gpu_s"] / grid["wall_s"], 3)})
    checks = offload_bound_check(Path(args.runs) / "auto-16GiB-offload-bound", grid_table)
    out = Path(args.out)
    out.write_text(
        json.dumps(
            {
                "command": "python bench/search_h200_table.py",
                "runs": str(Path(args.runs)),
                "made_by": "bash bench/h200_search.sh OUT 40 24 16 (and TAG=... EXTRA=... for tagged runs)",
                "rows": rows,
                "offload_bound_check": checks,
            },
            indent=1,
        )
    )
    df = pd.DataFrame(rows)
    cols = ["budget_gib", "auto_run", "grid_trials", "grid_gpu_s", "grid_best", "grid_best_samples_per_s",
            "auto_trials", "auto_gpu_s", "auto_driver_wall_s", "auto_chosen", "auto_chosen_samples_per_s",
            "auto_found", "auto_found_samples_per_s", "chosen_vs_grid", "found_vs_grid", "trial_share",
            "gpu_time_share"]
    print(df[cols].to_markdown(index=False) if _has_tabulate() else df[cols].to_string(index=False))
    if checks:
        print("\nfact 6 (offload bound) against the grid's offload trials:")
        print(pd.DataFrame(checks).to_string(index=False))
    return 0


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
