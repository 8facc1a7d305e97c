"""Does the default trial mechanism measure what a new interpreter measures?

    python bench/isolation_check.py RUN_DIR [--out FILE.json]

For every trial a tuning run measured (RUN_DIR/trials/NNN/, repeats included), runs the
same spec again in a new interpreter (``python -m autotune.trial``, one at a time, under the
same memory cap and allocator setting) and compares: the status; peak allocated memory
(within 1 %) and peak reserved memory (within 3 %); samples/s (within the larger of 5 % and
the two runs' timing spreads). Prints a markdown table, writes the rows as JSON (default
RUN_DIR/isolation_check.json, rewritten after every trial so that a check cut short keeps
what it compared), and exits 1 if any comparison fails.

    python bench/isolation_check.py --table FILE.json   # the table again, from saved rows
    python bench/isolation_check.py RUN_DIR --resume    # finish a check that was cut short
    python bench/isolation_check.py RUN_DIR --control --only 005,047
        # the control: each trial in two new interpreters, compared with each other
        # (RUN_DIR/isolation_control.json): how far two fresh processes of one
        # configuration are apart when the mechanism is not in question
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.study.plan import default_timeout  # noqa: E402
from autotune.train.strategy import Strategy, allocator_env  # noqa: E402
from autotune.trial.runner import run_trial  # noqa: E402

LIMITS = {"peak_allocated_gib": 0.01, "peak_reserved_gib": 0.03}
SPEED = 0.05


def _apart(a, b) -> float:
    return abs(a - b) / b if b else (0.0 if a == b else float("inf"))


def compare(run: dict, fresh: dict) -> dict:
    row = {"status": run["status"], "fresh_status": fresh["status"], "same_status": run["status"] == fresh["status"]}
    checks = [row["same_status"]]
    if run["status"] == fresh["status"] == "ok":
        for key, limit in LIMITS.items():
            if run.get(key) is None or fresh.get(key) is None:
                continue  # a CPU trial has no allocator figures (its peak is peak_memory_gib)
            apart = _apart(run[key], fresh[key])
            row.update({key: run[key], f"fresh_{key}": fresh[key], f"{key}_apart": apart})
            checks.append(apart <= limit)
        spread = max(SPEED, run.get("time_spread") or 0.0, fresh.get("time_spread") or 0.0)
        apart = _apart(run["samples_per_s"], fresh["samples_per_s"])
        row.update(samples_per_s=run["samples_per_s"], fresh_samples_per_s=fresh["samples_per_s"],
                   samples_per_s_apart=apart, samples_per_s_limit=spread)
        checks.append(apart <= spread)
    row["agrees"] = all(checks)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, nargs="?")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--table", type=Path, help="print the table of rows saved by an earlier check; run nothing")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows already in --out and check only the trials they lack (a check cut short)")
    ap.add_argument("--control", action="store_true",
                    help="compare two new interpreters with each other instead of the run with one")
    ap.add_argument("--only", help="comma-separated trial numbers (the trials/ folder names) to check")
    args = ap.parse_args(argv)
    if args.table:
        return print_table(json.loads(args.table.read_text()))
    if args.run_dir is None:
        ap.error("RUN_DIR is needed unless --table is given")
    out = args.out or args.run_dir / ("isolation_control.json" if args.control else "isolation_check.json")
    only = set(args.only.split(",")) if args.only else None
    rows = json.loads(out.read_text()) if args.resume and out.is_file() else []
    done = {r["trial"] for r in rows}
    for trial_dir in sorted((args.run_dir / "trials").iterdir()):
        spec_path, result_path = trial_dir / "spec.json", trial_dir / "result.json"
        if trial_dir.name in done or not (spec_path.is_file() and result_path.is_file()):
            continue  # never ran (pruned, skipped) or left no result
        if only is not None and trial_dir.name not in only:
            continue
        spec, run = json.loads(spec_path.read_text()), json.loads(result_path.read_text())
        spec.pop("result", None)
        strategy = Strategy(**spec["strategy"])
        timeout = default_timeout(spec["warmup_steps"], spec["measure_steps"], spec.get("min_measure_s", 0.0))
        env = allocator_env(strategy.allocator)
        if args.control:  # the reference is a new interpreter as well
            run = run_trial(spec, args.run_dir / "control-a" / trial_dir.name, timeout, env=env)
        fresh = run_trial(spec, args.run_dir / ("control-b" if args.control else "fresh") / trial_dir.name, timeout,
                          env=env)
        row = {"trial": trial_dir.name, "config": strategy.label(), **compare(run, fresh)}
        rows.append(row)
        print(json.dumps(row), flush=True)
        out.write_text(json.dumps(rows, indent=1))
    return print_table(rows)


def print_table(rows: list) -> int:
    print("\n| trial | config | status (run / fresh) | peak allocated GiB (run / fresh) | peak reserved GiB "
          "(run / fresh) | samples/s (run / fresh, limit) | agrees |\n|---|---|---|---|---|---|---|")
    for r in rows:
        mem = lambda k, r=r: (f"{r[k]:.3f} / {r['fresh_' + k]:.3f} ({100 * r[k + '_apart']:.1f} %)"  # noqa: E731
                         if k in r else "-")
        speed = (f"{r['samples_per_s']:.1f} / {r['fresh_samples_per_s']:.1f} ({100 * r['samples_per_s_apart']:.1f} %, "
                 f"{100 * r['samples_per_s_limit']:.0f} %)" if "samples_per_s" in r else "-")
        print(f"| {r['trial']} | {r['config']} | {r['status']} / {r['fresh_status']} | {mem('peak_allocated_gib')} | "
              f"{mem('peak_reserved_gib')} | {speed} | {'yes' if r['agrees'] else '**no**'} |")
    bad = [r["trial"] for r in rows if not r["agrees"]]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} trials agree" + (f"; not: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
