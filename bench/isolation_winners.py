"""Does search=auto pick what a fresh-process grid picks, per budget?

    python bench/isolation_winners.py GRID_RUN [--fill RUN ...] --auto BUDGET=RUN [--auto ...]

GRID_RUN is a search=grid run directory (its trials.csv; every trial a fresh process).
A grid capped below a budget could not run the configurations that need more than its cap;
``--fill RUN`` takes those configurations' rows from another run directory whose cap was
higher (each of its trials a fresh process too), so the table covers the space at every
budget asked. Each ``--auto BUDGET=RUN`` names a search=auto run at that budget; its
best.yaml is set against the grid's winner at that budget, scored with the auto run's own
settings (objective, ROI prices). A winner agrees when it is the same configuration, or
when the grid's scores put auto's pick within noise of the grid's best (within_noise).
Prints a markdown table; exits 1 when one disagrees.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from autotune.results.review import open_reviewed  # noqa: E402
from autotune.scoring.budgets import per_budget  # noqa: E402
from autotune.scoring.score import within_noise  # noqa: E402
from autotune.train.strategy import checkpoint_label  # noqa: E402

KEY = ["checkpointing", "precision", "micro_batch", "offload", "allocator"]


def config_key(row) -> tuple:
    return (checkpoint_label(row["checkpointing"]), row["precision"], int(row["micro_batch"]),
            str(row.get("offload", False)).lower() == "true", row.get("allocator", "default"))


def label(key: tuple) -> str:
    ckpt, prec, mb, offload, _ = key
    return f"{ckpt} / {prec} / mb {mb}" + (" / offload" if offload else "")


def merged_table(grid: Path, fills: list) -> tuple:
    reviewed = open_reviewed(str(grid))
    table = reviewed.table.copy()
    filled = []
    for run in fills:
        other = open_reviewed(str(run)).table
        ok_keys = {config_key(r) for _, r in table[table["status"] == "ok"].iterrows()}
        for _, row in other[other["status"] == "ok"].iterrows():
            k = config_key(row)
            if k not in ok_keys:
                table = table[[config_key(r) != k for _, r in table.iterrows()]]
                table = pd.concat([table, row.to_frame().T], ignore_index=True)
                ok_keys.add(k)
                filled.append(f"{label(k)} from {run.name} trial {int(row['number'])}")
    table = table.reset_index(drop=True)
    table["number"] = range(len(table))
    for col in ("micro_batch", "accumulation"):
        table[col] = table[col].astype(int)
    for col in ("peak_memory_gib", "device_peak_gib", "samples_per_s", "time_spread"):
        table[col] = pd.to_numeric(table[col], errors="coerce")
    return table, reviewed.scoring, filled


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("grid", type=Path)
    ap.add_argument("--fill", type=Path, action="append", default=[])
    ap.add_argument("--auto", action="append", required=True, help="BUDGET=RUN_DIR")
    args = ap.parse_args()
    table, grid_scoring, filled = merged_table(args.grid, args.fill)
    print(f"grid: {args.grid} ({len(table)} configurations)")
    for f in filled:
        print(f"  filled: {f}")
    print("\n| budget | objective | grid's winner | auto's best | agrees |\n| ---: | --- | --- | --- | --- |")
    failed = False
    for item in args.auto:
        budget, run = item.split("=", 1)
        auto_best = yaml.safe_load((Path(run) / "best.yaml").read_text())
        auto_scoring = open_reviewed(run).scoring
        # The grid's table judged as the auto run judged its own: its budget, objective, prices.
        scoring = replace(grid_scoring.but(budgets=[float(budget)], objective=auto_best["objective"]),
                          roi=auto_scoring.roi)
        result = per_budget(table, scoring)[0]
        s = auto_best["strategy"]
        auto_key = (str(s["checkpointing"]), s["precision"], int(s["micro_batch"]), bool(s["offload"]), s["allocator"])
        if result.best is None:
            print(f"| {budget} | {scoring.objective} | nothing fits | {label(auto_key)} | no |")
            failed = True
            continue
        scored = result.scored
        win = scored.loc[result.best]
        tied = within_noise(scored, scoring.objective)
        same = config_key(win) == auto_key
        auto_rows = [i for i in scored.index if config_key(scored.loc[i]) == auto_key]
        in_noise = bool(auto_rows) and bool(tied[auto_rows[0]])
        metric = "roi" if scoring.objective == "roi" else "samples_per_s"
        auto_fig = f"{float(scored.loc[auto_rows[0], metric]):.1f}" if auto_rows else "not in the grid"
        verdict = "same" if same else ("within noise" if in_noise else "no")
        failed |= verdict == "no"
        print(
            f"| {budget} GiB | {scoring.objective} | {label(config_key(win))} ({metric} {float(win[metric]):.1f}, "
            f"{float(win['peak_memory_gib']):.2f} GiB) | {label(auto_key)} (grid's {metric} {auto_fig}) | {verdict} |"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
