"""Write a run's tables and tuned config, and the summary printed at the end."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd
import yaml

from autotune.scoring.budgets import BudgetResult, budget_label
from autotune.scoring.score import Baseline
from autotune.study.plan import Plan
from autotune.system.safe_write import replacing, write_text
from autotune.train.best_schema import BestConfig, Measured, TunedDevice, TunedModel, TunedOptimizer, TunedStrategy
from autotune.train.dimensions import ALWAYS_KEYED, DIMENSIONS, family, tags
from autotune.train.optimizer import changes_numerics
from autotune.train.strategy import Strategy
from autotune.train.trust import record_tuned

SUMMARY_COLUMNS = [*DIMENSIONS, "peak_memory_gib", "samples_per_s", "roi", "fidelity", "loss_parity"]


def pareto_table(scored: pd.DataFrame) -> pd.DataFrame:
    return scored[scored["on_pareto"]].sort_values("peak_memory_gib")


def best_config(plan: Plan, row: pd.Series, baseline: Baseline, command: str, budget_gib: float) -> dict:
    """The content of best.yaml, built through its schema (``train/best_schema.py``)."""
    def num(v):
        return None if pd.isna(v) else float(v)

    chosen = Strategy.of(row)
    strategy = TunedStrategy(**chosen.as_dict())
    best = BestConfig(
        strategy=strategy,
        global_batch=plan.global_batch, objective=plan.objective, budget_gib=round(budget_gib, 3),
        memory_cap_gib=plan.memory_cap_gib,
        device=TunedDevice(kind=plan.device.kind, name=plan.device.name),
        model=TunedModel(name=plan.model_name, target=plan.model_target, config=dict(plan.model_config),
                         seq_len=plan.seq_len),
        measured=Measured(trial=int(row["number"]), peak_memory_gib=num(row["peak_memory_gib"]),
                          device_peak_gib=num(row.get("device_peak_gib")),
                          cuda_context_gib=num(row.get("cuda_context_gib")), samples_per_s=num(row["samples_per_s"]),
                          time_spread=num(row.get("time_spread")), roi=num(row.get("roi")),
                          fidelity=row.get("fidelity") if row.get("fidelity") in ("probe", "raced", "full") else None),
        baseline=baseline.as_dict(), command=command,
        optimizer=TunedOptimizer(target=plan.optimizer.target, kwargs=dict(plan.optimizer.kwargs), lr=plan.lr),
        numerics=", ".join(changes_numerics(chosen)), loss_parity=num(row.get("loss_parity")))
    return asdict(best)


def write_outputs(run_dir: Path, plan: Plan, results: list[BudgetResult], command: str) -> list[str]:
    """trials.csv and pareto.csv (primary budget), best.yaml for the primary budget and,
    with several budgets, best-<budget>GiB.yaml for each; returns the tuned files written."""
    primary = results[0]
    with replacing(run_dir / "trials.csv") as tmp:
        primary.scored.to_csv(tmp, index=False)
    with replacing(run_dir / "pareto.csv") as tmp:
        pareto_table(primary.scored).to_csv(tmp, index=False)
    header = ("# Tuned by autotune; load it with: from autotune import load_tuned; "
              "tuned = load_tuned('{name}')\n")
    written = []
    targets = [("best.yaml", primary)] + ([(f"best-{budget_label(r.budget_gib)}.yaml", r) for r in results]
                                         if len(results) > 1 else [])
    if any(r.best is not None for _, r in targets):  # a tuned file names this code: trust it on this machine
        record_tuned([plan.model_target, plan.optimizer.target])
    for name, r in targets:
        if r.best is not None:
            body = yaml.safe_dump(best_config(plan, r.scored.loc[r.best], r.baseline, command, r.budget_gib),
                                  sort_keys=False)
            write_text(run_dir / name, header.format(name=name) + body)
            written.append(name)
    return written


def fixed_cost_s(trials: pd.DataFrame) -> pd.Series:
    """Per ok trial, the seconds no design that measures this configuration can avoid less
    than its own: the process's start (for a forked trial: the fork and its CUDA context),
    the model's build, and what the first step took beyond a timed step (kernel loading,
    first allocations). The first step's own compute is a warm-up step, not overhead."""
    t = trials[["startup_s", "build_s", "first_step_s", "step_time_s"]].apply(pd.to_numeric, errors="coerce")
    return t["startup_s"] + t["build_s"] + (t["first_step_s"] - t["step_time_s"]).clip(lower=0)


def trial_cost(scored: pd.DataFrame) -> str | None:
    """Where an ok trial's wall time goes (medians): the fixed cost (``fixed_cost_s``)
    against the timed steps."""
    cols = ["wall_s", "startup_s", "build_s", "first_step_s", "step_time_s", "measured_s"]
    ok = scored[scored["status"] == "ok"]
    if ok.empty or any(c not in ok for c in cols):
        return None
    med = ok[cols].apply(pd.to_numeric, errors="coerce").median()
    share = (fixed_cost_s(ok) / pd.to_numeric(ok["wall_s"], errors="coerce")).median()
    return (f"trial cost (median of {len(ok)} ok): {med['wall_s']:.1f} s wall, of which fixed "
            f"{fixed_cost_s(ok).median():.2f} s ({100 * share:.0f} %: start-up {med['startup_s']:.2f}, build "
            f"{med['build_s']:.2f}, first step {med['first_step_s']:.2f} against {med['step_time_s']:.2f} a timed "
            f"step) and timed steps {med['measured_s']:.1f} s")


def contention_summary(scored: pd.DataFrame) -> tuple[str, list[str]] | None:
    """The trials that ran while other processes competed for the device: one short sentence
    (how many, how much slower where a quiet run shows it, what was done about it) and the
    per-trial detail, or None where nothing competed."""
    if "contended" not in scored:
        return None
    ok = scored["status"] == "ok"
    busy_now = scored["contended"].fillna(False).astype(bool)
    runs = pd.to_numeric(scored.get("contended_runs", pd.Series(0, index=scored.index)), errors="coerce").fillna(0)
    still, quiet_again = scored[ok & busy_now], scored[ok & (runs > 0) & ~busy_now]
    if still.empty and quiet_again.empty:
        return None
    n = len(still) + len(quiet_again)
    text = f"{n} of {int(ok.sum())} configurations ran while other processes competed for the device"
    busy_sps = pd.to_numeric(quiet_again.get("contended_samples_per_s", pd.Series(dtype=float)), errors="coerce")
    slower = (quiet_again["samples_per_s"] / busy_sps)[busy_sps > 0]
    if len(slower):
        text += f" ({slower.median():.1f}x slower then than on a quiet machine, median of {len(slower)})"
    done = []
    if len(quiet_again):
        done.append(f"{len(quiet_again)} re-measured on a quiet machine, their quiet speed used")
    if len(still):
        done.append(f"{len(still)} measured only under load: flagged noisy, a stable rival wins a tie")
    detail = [
        f"trial {int(r.number)}: {r.contention}" for r in quiet_again.itertuples() if isinstance(r.contention, str)
    ]
    detail += [f"trial {int(r.number)} (under load only): {r.contention}" for r in still.itertuples()]
    return text + "; " + "; ".join(done), detail


def contention_note(scored: pd.DataFrame) -> str | None:
    """The terminal's one line on contention (the per-trial detail is in trials.csv)."""
    found = contention_summary(scored)
    return None if found is None else f"contention: {found[0]} (per trial: trials.csv, column contention)"


def unavailable(scored: pd.DataFrame) -> list[str]:
    """Values of a dimension the device could not run at all ("precision bf16, fp16: <cause>"):
    every configuration with that value was skipped, for one reason."""
    out = []
    for dim in (d.name for d in family()):
        if dim not in scored.columns:
            continue
        gone: dict[str, list[str]] = {}
        for value, rows in scored.groupby(scored[dim].astype(str), sort=False):
            causes = set(rows["cause"].dropna())
            if (rows["status"] == "skipped").all() and len(causes) == 1:
                gone.setdefault(causes.pop(), []).append(value)
        out += [f"{dim} {', '.join(values)}: {cause}" for cause, values in gone.items()]
    return out


def no_best(scored: pd.DataFrame, most: int = 5) -> tuple[str, list[str]]:
    """Why no configuration won: a headline and the commonest causes, most frequent first
    ("3 x oom: CUDA out of memory ..."), so a run where nothing worked leads with what broke."""
    ok = scored[scored["status"] == "ok"]
    if len(ok):
        fits = ok["fits_budget"] if "fits_budget" in ok.columns else pd.Series(True, index=ok.index)
        smallest = ok.loc[ok["peak_memory_gib"].idxmin()]
        headline = (f"no configuration fits the budget: {len(ok)} ran ok, the smallest peaked at "
                    f"{smallest['peak_memory_gib']:.3f} GiB (trial {int(smallest['number'])})"
                    if not fits.fillna(False).astype(bool).any() else "no configuration could be scored")
    else:
        headline = f"nothing ran ok: all {len(scored)} trial(s) ended " + ", ".join(
            f"{n} {s}" for s, n in scored["status"].value_counts().items())
    bad = scored[scored["status"] != "ok"]
    counted = (bad.assign(cause=bad["cause"].fillna("(no cause recorded)").astype(str).str.strip())
               .groupby(["status", "cause"]).size().sort_values(ascending=False))
    causes = [f"{n} x {s}: {c}" for (s, c), n in counted.head(most).items()]
    if len(counted) > most:
        causes.append(f"... and {len(counted) - most} other cause(s) (trials.csv, column cause)")
    return headline, causes


def with_interval(value, lo, hi, digits: int = 1) -> str:
    """``value [lo, hi]``: a figure with the interval its measured spread allows."""
    if pd.isna(value):
        return "-"
    lo, hi = (float("nan") if pd.isna(x) or abs(float(x)) == float("inf") else x for x in (lo, hi))
    if pd.isna(lo) and pd.isna(hi):
        return f"{value:.{digits}f}"
    # a bound left open: ROI at a speed of zero (the spread reaches it) has no lower end
    if pd.isna(lo):
        return f"{value:.{digits}f} [up to {hi:.{digits}f}]"
    if pd.isna(hi):
        return f"{value:.{digits}f} [from {lo:.{digits}f}]"
    return f"{value:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def front_text(front: pd.DataFrame) -> str:
    """The Pareto front as the terminal shows it: samples/s and ROI with their intervals."""
    hidden = {d.name for d in DIMENSIONS.values()  # a group not always keyed: only where the front varies it
              if d.group not in ALWAYS_KEYED and not (d.name in front and (front[d.name] != d.default).any())}
    shown = front[[c for c in SUMMARY_COLUMNS if c in front and c not in hidden
                   and (c != "loss_parity" or front[c].notna().any())]].copy()
    if "loss_parity" in shown:
        shown["loss_parity"] = front["loss_parity"].map(lambda v: "-" if pd.isna(v) else f"{v:.2%}")
    shown["peak_memory_gib"] = front["peak_memory_gib"].map(lambda v: f"{v:.3f}")
    for col in ("samples_per_s", "roi"):
        if col in front:
            lo, hi = front.get(f"{col}_lo", pd.Series(float("nan"), index=front.index)), \
                front.get(f"{col}_hi", pd.Series(float("nan"), index=front.index))
            shown[col] = [with_interval(v, a, b) for v, a, b in zip(front[col], lo, hi, strict=False)]
    return shown.rename(columns={"samples_per_s": "samples_per_s [interval]", "roi": "roi [interval]"}) \
        .to_string(index=False)


def summary(scored: pd.DataFrame, best: int | None, objective: str, why: str | None = None) -> str:
    lines = []
    counts = scored["status"].value_counts()
    lines.append("trials: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    lines += [f"unavailable on this device, skipped: {u}" for u in unavailable(scored)]
    cost = trial_cost(scored)
    if cost:
        lines.append(cost)
    contention = contention_note(scored)
    if contention:
        lines.append(contention)
    if best is None:
        headline, causes = no_best(scored)
        lines.append(headline + ("; causes:" if causes else ""))
        lines += [f"  {c}" for c in causes]
        return "\n".join(lines)
    b = scored.loc[best]
    lines.append(f"best by {objective}: {' '.join(tags(Strategy.of(b).as_dict(), 'key'))} "
                 f"({b['peak_memory_gib']:.3f} GiB, {b['samples_per_s']:.1f} samples/s)")
    if why:
        lines.append(f"why: {why}")
    if isinstance(b.get("numerics"), str) and b.get("numerics"):
        parity = b.get("loss_parity")
        lines.append(f"changes training numerics: {b['numerics']}; loss parity: "
                     + ("not measured" if pd.isna(parity) else
                        f"losses within {parity:.2%} of the plain optimizer's over the same steps, seed and batch"))
    lines.append("Pareto front (peak memory vs samples/s):")
    lines.append(front_text(pareto_table(scored)))
    return "\n".join(lines)
