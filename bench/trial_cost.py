"""Where a search's GPU time goes: the fixed cost of each trial against its wall time.

    python bench/trial_cost.py RUN_DIR [RUN_DIR ...] [--out FILE.json]

Per run directory (its trials.csv and trials/NNN/result.json): for every trial that ran,
ok or out of memory, its wall time and its fixed cost, i.e. what is not measuring: for an
ok trial the process start (fork and CUDA context), the model build and the first step's
time beyond a timed step (``autotune.results.outputs.fixed_cost_s``); for a trial that ran out of
memory, all of its wall time. Reported: the largest and the median share of an ok trial,
the share over all trials of the run (out-of-memory ones included), and the fork server's
own start (once per run, in the first trial's start-up). Exit 1 if an ok trial's share is
over --limit (default 0.15).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.results.outputs import fixed_cost_s  # noqa: E402


def cost(run_dir: Path) -> dict:
    t = pd.read_csv(run_dir / "trials.csv")
    ran = t[t["status"].isin(["ok", "oom"]) & pd.to_numeric(t["wall_s"], errors="coerce").notna()].copy()
    ok = ran["status"] == "ok"
    ran["fixed_s"] = fixed_cost_s(ran).where(ok, pd.to_numeric(ran["wall_s"]))
    ran["share"] = ran["fixed_s"] / pd.to_numeric(ran["wall_s"])
    first = ran.sort_values("number").iloc[0] if len(ran) else None
    return {"run": run_dir.name, "trials": int(len(ran)), "ok": int(ok.sum()), "oom": int((~ok).sum()),
            "ok_share_max": float(ran.loc[ok, "share"].max()), "ok_share_median": float(ran.loc[ok, "share"].median()),
            "all_share": float(ran["fixed_s"].sum() / pd.to_numeric(ran["wall_s"]).sum()),
            "oom_wall_s": [round(float(w), 2) for w in ran.loc[~ok, "wall_s"]],
            "gpu_time_s": float(pd.to_numeric(ran["wall_s"]).sum()),
            "first_trial_startup_s": None if first is None else float(first.get("startup_s", float("nan"))),
            "per_trial": ran[["number", "status", "checkpointing", "precision", "micro_batch", "wall_s", "fixed_s",
                              "share"]].round(3).to_dict("records")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dirs", type=Path, nargs="+")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--limit", type=float, default=0.15)
    args = ap.parse_args(argv)
    rows = [cost(d) for d in args.run_dirs]
    print("| run | trials (ok / oom) | fixed share of an ok trial: max, median | share over all trials | "
          "OOM trials' wall (s) | GPU time (s) | first trial's start-up (s) |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['run']} | {r['trials']} ({r['ok']} / {r['oom']}) | {100 * r['ok_share_max']:.0f} %, "
              f"{100 * r['ok_share_median']:.0f} % | {100 * r['all_share']:.0f} % | {r['oom_wall_s'] or '-'} | "
              f"{r['gpu_time_s']:.0f} | {r['first_trial_startup_s']:.1f} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["ok_share_max"] <= args.limit for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
