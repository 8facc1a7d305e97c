"""Time the CPU default run and check what issue "end to end" asks of it.

    python bench/cpu_default.py              # runs: python -m autotune model=bert
    python bench/cpu_default.py search=grid  # the same with extra overrides
    python bench/cpu_default.py --no-native-half  # as on a CPU without native bf16/fp16
    python bench/cpu_default.py --runs 3     # three runs in a row: the median's summary, every run's time
    python bench/cpu_default.py --load 2     # beside 2 busy processes (bench/load.py), against the quiet result

Runs the command as a user would (from the project root, into a fresh run directory under
outputs/bench/), then checks: exit code 0 within 60 s (search=grid: 180 s; --load N: 3x the
quiet result in bench/results/cpu_default.json), every output file written, and
micro_batch x accumulation = global_batch on every row. With the default search (auto) it
also checks that the search ended by itself; with search=grid, that trials.csv covers
every checkpointing value of the default space (none, half the blocks, full) x every
precision the device runs x >= 3 micro-batches, and that at the largest micro-batch peak
memory falls from none to half to full checkpointing. With the default search it also
reports the Pareto front and checks it has >= 4 points, one of them checkpointed; with
``--no-native-half``, that bf16/fp16 were skipped for lack of hardware support and the
report's headline says so (bench/no_native_half: only the detection is changed). Prints a
JSON summary; exits 1 when a check fails.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 60  # the default search (issue 29: an answer in a minute on the 2-core machine)
GRID_LIMIT_S = 180  # search=grid measures every configuration
LOAD_FACTOR = 3.0  # --load: at most this many times the quiet run's time (bench/results/cpu_default.json)
FILES = ["best.yaml", "trials.csv", "pareto.csv", "report.html", "pareto.png", "study.db", ".hydra/config.yaml",
         "autotune.log"]


def _machine() -> str:
    name = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return f"{name}, {os.cpu_count()} cores, {mem:.0f} GiB, no GPU"


def main() -> int:
    """``--runs N``: the command N times in a row; the summary is the run of median time's,
    with every run's time, load and verdict beside it (one quiet moment decides nothing)."""
    args = sys.argv[1:]
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 1
    if "--runs" in args:
        del args[args.index("--runs"):args.index("--runs") + 2]
    results = [measure(list(args)) for _ in range(runs)]
    results.sort(key=lambda r: r["elapsed_s"])
    summary = dict(results[len(results) // 2])
    if runs > 1:
        summary["runs"] = [{"elapsed_s": r["elapsed_s"], "load_average": r["load_average"], "best": r.get("best"),
                            "front_points": len(r.get("front", [])), "cost": r.get("cost"),
                            "checks_passed": all(r["checks"].values())} for r in results]
    print(json.dumps(summary, indent=1))
    return 0 if all(summary["checks"].values()) else 1


def measure(args: list) -> dict:
    """One run of the command: its summary and checks."""
    run_dir = ROOT / "outputs" / "bench" / time.strftime("cpu-default-%Y%m%d-%H%M%S")
    # A study storage of its own, so the run starts afresh as on a new machine (the default
    # storage, outputs/autotune.db, would resume an earlier benchmark's study).
    load = int(args[args.index("--load") + 1]) if "--load" in args else 0
    if load:
        del args[args.index("--load"):args.index("--load") + 2]
    extra = [a for a in args if a != "--no-native-half"]
    no_half = "--no-native-half" in args
    env = dict(os.environ)
    if no_half:
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "bench" / "no_native_half"), env.get("PYTHONPATH", "")])
        run_dir = run_dir.with_name(run_dir.name.replace("cpu-default", "cpu-default-no-half"))
    grid = "search=grid" in extra
    cmd = [sys.executable, "-m", "autotune", "model=bert", *extra, f"hydra.run.dir={run_dir}",
           f"storage=sqlite:///{run_dir / 'bench-study.db'}"]
    if load:
        run_dir = run_dir.with_name(run_dir.name.replace("cpu-default", f"cpu-default-load{load}"))
        cmd[-2:] = [f"hydra.run.dir={run_dir}", f"storage=sqlite:///{run_dir / 'bench-study.db'}"]
    sys.path.insert(0, str(ROOT / "bench"))
    from load import Busy

    load_before = os.getloadavg()[0]
    with Busy(load):
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
        elapsed = time.perf_counter() - start
        load_after = os.getloadavg()[0]
    limit = GRID_LIMIT_S if "search=grid" in extra else LIMIT_S
    checks = {"exit_code_0": proc.returncode == 0}
    if load:
        quiet = json.loads((ROOT / "bench" / "results" / "cpu_default.json").read_text())
        checks[f"within_{LOAD_FACTOR:g}x_the_quiet_run"] = elapsed <= LOAD_FACTOR * quiet["elapsed_s"]
    else:
        checks[f"within_{limit}_s"] = elapsed <= limit
    checks["files_written"] = all((run_dir / f).is_file() for f in FILES)
    summary = {"command": " ".join(["python -m autotune model=bert", *extra]) + (
        "  (bf16/fp16 detection off: bench/no_native_half)" if no_half else ""), "elapsed_s": round(elapsed, 1),
               "date": time.strftime("%Y-%m-%d"), "machine": _machine(),
               "load_average": {"before": round(load_before, 2), "at_the_end": round(load_after, 2)},
               "busy_processes": load, "run_dir": str(run_dir.relative_to(ROOT))}
    summary["cost"] = next((line for line in proc.stdout.splitlines() if line.startswith("measured: ")), None)
    if (run_dir / "trials.csv").is_file():
        t = pd.read_csv(run_dir / "trials.csv")
        ok = t[t["status"] == "ok"]
        global_batch = yaml.safe_load((run_dir / "best.yaml").read_text())["global_batch"]
        summary["global_batch"] = global_batch
        checks["micro_batch_x_accumulation_is_global"] = bool(
            (t["micro_batch"] * t["accumulation"] == global_batch).all()
        )
        summary["trials"] = t["status"].value_counts().to_dict()
        if not grid:
            checks["search_ended_by_itself"] = "search 'auto' ended" in proc.stdout
            summary["search"] = next((line for line in proc.stdout.splitlines() if line.startswith("search '")), None)
            summary["best"] = next((line for line in proc.stdout.splitlines() if line.startswith("best by")), None)
            summary["why"] = next((line for line in proc.stdout.splitlines() if line.startswith("why: ")), None)
            summary["limits"] = next((line for line in proc.stdout.splitlines() if line.startswith("limits: ")), None)
            front = ok[ok["on_pareto"].astype(bool)].sort_values("peak_memory_gib")
            summary["front"] = [f"{r.checkpointing}/{r.precision}/mb{r.micro_batch} {r.peak_memory_gib:.3f} GiB "
                                f"{r.samples_per_s:.1f} samples/s" for r in front.itertuples()]
            checks["front_of_4_with_a_checkpointed_point"] = bool(
                len(front) >= 4 and (front["checkpointing"].astype(str) != "none").any())
            if load:  # the quiet run's best, or a verdict that says the top is tied under load
                quiet_best = json.loads((ROOT / "bench" / "results" / "cpu_default.json").read_text())["best"]
                same = (summary["best"] or "").split(" (")[0] == (quiet_best or "").split(" (")[0]
                checks["quiet_best_or_tied_under_load"] = bool(same or "under load" in (summary["why"] or ""))
            if no_half:
                page = (run_dir / "report.html").read_text()
                checks["bf16_fp16_skipped_and_said"] = bool(
                    "skipped: precision bf16: this CPU has no native bf16" in proc.stdout
                    and "Unavailable on this device" in page and "<b>Search</b>" in page)
    if grid and (run_dir / "trials.csv").is_file():
        checks["every_checkpointing_x_precisions_x_3_micro_batches"] = bool(
            len(ok) and all(len(set(g["micro_batch"])) >= 3 for _, g in ok.groupby(["checkpointing", "precision"]))
            and set(ok["checkpointing"].astype(str)) == {"none", "0.5", "full"})
        biggest = ok["micro_batch"].max()
        lower = []
        for prec, g in ok[ok["micro_batch"] == biggest].groupby("precision"):
            peak = g.set_index(g["checkpointing"].astype(str))["peak_memory_gib"]
            lower.append(peak["full"] < peak["0.5"] < peak["none"])
            summary[f"peak_gib_mb{biggest}_{prec}"] = {k: round(peak[k], 4) for k in ("none", "0.5", "full")}
        checks["checkpointing_lowers_peak_at_largest_micro_batch"] = bool(lower) and all(lower)
    summary["checks"] = checks
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
    time.sleep(1.0)  # a new second: the next run's directory
    return summary


if __name__ == "__main__":
    sys.exit(main())
