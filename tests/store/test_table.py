"""The trials table folds repeats into their configuration's row: every run's peak kept,
runs more than 2 % apart flagged, and the report says so."""
import optuna
from optuna.distributions import CategoricalDistribution

from autotune.scoring.budgets import per_budget
from autotune.results.page import write_report
from autotune.results.review import scored_for_report
from autotune.store.table import trials_table
from autotune.scoring.settings import Scoring

DIST = {"checkpointing": CategoricalDistribution(["none", "full"]), "precision": CategoricalDistribution(["fp32"]),
        "micro_batch": CategoricalDistribution([2, 4])}
ROI = {"memory_price_per_gib_hour": 0.05, "compute_price_per_hour": 2.0, "workload_samples": 1e6}


def _study(peaks: dict) -> optuna.Study:
    """Trial 0 (none, mb 4) and its repeats with the given peaks; trial 1 (full, mb 2)."""
    study = optuna.create_study(directions=["maximize", "minimize"])

    def add(ckpt, mb, peak, **attrs):
        study.add_trial(optuna.trial.create_trial(
            params={"checkpointing": ckpt, "precision": "fp32", "micro_batch": mb}, distributions=DIST,
            user_attrs={"status": "ok", "accumulation": 4 // mb, "peak_memory_gib": peak, "samples_per_s": 100.0,
                        "time_spread": 0.01, "clean_start": True, **attrs},
            state=optuna.trial.TrialState.COMPLETE, values=[100.0, peak]))

    first, *again = peaks["none"]
    add("none", 4, first)
    for k, peak in enumerate(again, start=1):
        add("none", 4, peak, repeat=k, repeat_of=0)
    add("full", 2, 0.5)
    return study


def test_every_run_s_peak_is_kept_and_runs_more_than_2_percent_apart_are_flagged(tmp_path):
    agree = trials_table(_study({"none": [1.00, 1.01]})).set_index("number")
    assert agree.loc[0, "peak_memory_gib_runs"] == "1;1.01" and not agree.loc[0, "memory_disagrees"]
    assert agree.loc[0, "peak_memory_gib"] == 1.01  # the largest: the fit test errs on the safe side

    table = trials_table(_study({"none": [1.00, 1.10]}))
    row = table.set_index("number").loc[0]
    assert row["peak_memory_gib_runs"] == "1;1.1" and row["memory_disagrees"]
    assert abs(row["memory_runs_apart"] - 0.10) < 1e-9

    results = per_budget(table, Scoring(4, [8.0], ROI, "roi"))
    page = write_report(tmp_path, scored_for_report(results), results[0].best, results[0].baseline,
                        {"model": "t", "budget_gib": 8.0, "budgets": [8.0], "global_batch": 4, "objective": "roi",
                         "device_name": "cpu", "command": "python -m autotune", "seq_len": 8}).read_text()
    assert "1 configuration(s) whose runs' peak memory differs by more than 2 %" in page
