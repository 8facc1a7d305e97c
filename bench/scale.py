"""Time the readers on a large study: ``show`` and ``report`` on a study of 5,000 trials.

    python bench/scale.py                  # builds the study, times both, checks the targets
    python bench/scale.py --trials 20000   # another size (the targets are for 5,000)

A user's study grows past a grid when it is resumed, judged at several budgets, or shared
by several drivers. This builds one: every trial a copy of a real one (the H100 BERT-large
run in benchmarks/front-h100-2026-12-05, all of its ~50 recorded attributes), its
configuration and figures varied by a seeded random generator, ok and failed trials in
the real run's proportions. Then it runs, as a user types them, in fresh processes:

    python -m autotune.show STUDY.db
    python -m autotune.report STUDY.db --out DIR

and checks the targets of issue 28: show under 5 s, report under 15 s, report.html under
3 MB. Prints and writes (bench/results/scale.json) the figures with the machine, the load
average before and after each command, and the date; exits 1 when a target is missed.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "benchmarks" / "front-h100-2026-12-05" / "bert-large-24" / "study.db"
TARGETS = {"show_s": 5.0, "report_s": 15.0, "report_html_mb": 3.0}


def build_study(path: Path, n: int, seed: int = 0) -> str:
    """A copy of the template study grown to ``n`` trials; returns its name.

    The copies are written with SQL into the copied file, as Optuna's own schema holds them
    (``Study.add_trials`` commits once per trial: 340 s for 5,000 on 2 cores, 2 s this way).
    """
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    shutil.copyfile(TEMPLATE, path)
    conn = sqlite3.connect(path)
    (study_id, name), = conn.execute("SELECT study_id, study_name FROM studies").fetchall()
    trials = conn.execute("SELECT trial_id, number, state, datetime_start, datetime_complete FROM trials "
                          "WHERE study_id = ? ORDER BY number", (study_id,)).fetchall()
    attrs = {tid: dict(conn.execute("SELECT key, value_json FROM trial_user_attributes WHERE trial_id = ?",
                                    (tid,)).fetchall()) for tid, *_ in trials}
    params = {tid: conn.execute("SELECT param_name, param_value, distribution_json FROM trial_params "
                                "WHERE trial_id = ?", (tid,)).fetchall() for tid, *_ in trials}
    real = [t for t in trials if t[2] in ("COMPLETE", "FAIL", "PRUNED") and "repeat" not in attrs[t[0]]]
    rng = random.Random(seed)
    next_id = conn.execute("SELECT MAX(trial_id) FROM trials").fetchone()[0] + 1
    number = len(trials)
    rows = {"trials": [], "params": [], "values": [], "attrs": []}
    for _ in range(n - len(trials)):
        tid, _, state, start, end = rng.choice(real)
        new = next_id
        next_id += 1
        rows["trials"].append((new, number, study_id, state, start, end))
        number += 1
        for pname, _, dist in params[tid]:  # another of the study's own choices, as a long study has
            choices = json.loads(dist)["attributes"]["choices"]
            rows["params"].append((new, pname, float(rng.randrange(len(choices))), dist))
        a = {k: json.loads(v) for k, v in attrs[tid].items() if k not in ("repeat", "repeat_of", "retry_of")}
        if state == "COMPLETE":
            a["samples_per_s"] *= rng.uniform(0.6, 1.4)
            for key in ("peak_memory_gib", "device_peak_gib", "peak_reserved_gib"):
                if isinstance(a.get(key), float):
                    a[key] *= rng.uniform(0.7, 1.3)
            rows["values"] += [(new, 0, a["samples_per_s"], "FINITE"),
                               (new, 1, a.get("device_peak_gib", a["peak_memory_gib"]), "FINITE")]
        rows["attrs"] += [(new, k, json.dumps(v)) for k, v in a.items()]
    with conn:
        conn.executemany("INSERT INTO trials VALUES (?, ?, ?, ?, ?, ?)", rows["trials"])
        conn.executemany("INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) "
                         "VALUES (?, ?, ?, ?)", rows["params"])
        conn.executemany("INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (?, ?, ?, ?)",
                         rows["values"])
        conn.executemany("INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (?, ?, ?)",
                         rows["attrs"])
    conn.close()
    check = optuna.load_study(study_name=name, storage=f"sqlite:///{path}")
    if len(check.get_trials(deepcopy=False)) != n:
        raise SystemExit(f"built {len(check.trials)} trials, not {n}")
    return name


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def timed(cmd, repeats: int = 3) -> dict:
    """``cmd`` run ``repeats`` times in fresh processes: every wall time, the median judged, the
    load average around each (a figure measured under load is not a figure)."""
    runs = []
    for _ in range(repeats):
        before = _load()
        start = time.perf_counter()
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise SystemExit(f"{' '.join(map(str, cmd))} failed ({out.returncode}):\n{out.stdout}{out.stderr}")
        runs.append({"wall_s": round(wall, 2), "load_1_5_15_before": before, "load_1_5_15_after": _load()})
    return {"wall_s": statistics.median(r["wall_s"] for r in runs), "runs": runs}


def main() -> int:
    sys.path.insert(0, str(ROOT / "bench"))
    from cpu_default import _machine

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5000)
    ap.add_argument("--keep", action="store_true", help="keep the study and the report (printed)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="autotune-scale-"))
    try:
        db = work / "study.db"
        start = time.perf_counter()
        build_study(db, args.trials)
        built_s = time.perf_counter() - start
        show = timed([sys.executable, "-m", "autotune.show", str(db)])
        report = timed([sys.executable, "-m", "autotune.report", str(db), "--out", str(work / "report")])
        html_mb = (work / "report" / "report.html").stat().st_size / 1e6
        figures = {"trials": args.trials, "show_s": show["wall_s"], "report_s": report["wall_s"],
                   "report_html_mb": round(html_mb, 2)}
        checks = {k: figures[k] < limit for k, limit in TARGETS.items()} if args.trials == 5000 else {}
        result = {"what": f"python -m autotune.show / autotune.report on a study of {args.trials} trials "
                          "(bench/scale.py: copies of the H100 BERT-large run's trials, varied)",
                  "command": f"python bench/scale.py --trials {args.trials}", "machine": _machine(),
                  "date": time.strftime("%Y-%m-%d"), "build_s": round(built_s, 1), **figures,
                  "targets": TARGETS, "checks": checks, "judged": "the median of 3 fresh-process runs each",
                  "show": show, "report": report}
        print(json.dumps(result, indent=1))
        if args.trials == 5000:
            (ROOT / "bench" / "results" / "scale.json").write_text(json.dumps(result, indent=1) + "\n")
        if args.keep:
            print(f"kept: {work}")
        return 0 if all(checks.values()) else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
