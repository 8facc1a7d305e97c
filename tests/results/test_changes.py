"""A rerun whose best differs from the last run's says what changed and why."""
import optuna
import pandas as pd

from autotune.results.changes import best_change, last_best, remember_best
from autotune.scoring.budgets import per_budget
from autotune.scoring.settings import Scoring

ROI = {"memory_price_per_gib_hour": 0.025, "compute_price_per_hour": 3.5, "workload_samples": 1e7}
SCORING = Scoring(8, [80.0], ROI, "throughput")


def _table(rows):
    cols = ["number", "checkpointing", "precision", "micro_batch", "peak_memory_gib", "samples_per_s", "time_spread"]
    df = pd.DataFrame(rows, columns=cols)
    return df.assign(status="ok", accumulation=8 // df["micro_batch"], cause=None, offload=False, allocator="default")


def _pick(table, scoring=SCORING):
    r = per_budget(table, scoring)[0]
    return r.scored, r.best


def _remembered(table):
    """A study whose last run picked from ``table``, and that pick's trial number."""
    study = optuna.create_study()
    scored, best = _pick(table)
    remember_best(study, scored, best, SCORING)
    return study, int(scored.loc[best, "number"])


def test_a_new_trial_that_wins_is_named_as_the_cause():
    first = _table([[0, "none", "fp32", 8, 10.0, 10.0, 0.01], [1, "full", "fp32", 8, 4.0, 8.0, 0.01]])
    scored, best = _pick(first)
    assert best_change(last_best(optuna.create_study()), scored, best, SCORING) is None  # no earlier run
    study, _ = _remembered(first)
    again = pd.concat([first, _table([[2, "none", "bf16", 8, 7.0, 30.0, 0.01]])], ignore_index=True)
    scored, best = _pick(again)
    text = best_change(last_best(study), scored, best, SCORING)
    assert "picked trial 0 (none/fp32/mb8x1, 10.0 samples/s); this one picks trial 2 (none/bf16/mb8x1" in text
    assert "Why: trial 2 was measured after the last run." in text


def test_a_re_measurement_that_moves_the_old_best_is_named_with_its_figures():
    first = _table([[0, "none", "fp32", 4, 5.0, 10.2, 0.01], [1, "none", "fp32", 8, 6.0, 10.0, 0.01]])
    study, picked = _remembered(first)
    assert picked == 0
    moved = first.copy()
    moved.loc[0, "samples_per_s"], moved.loc[0, "samples_per_s_runs"] = 8.0, "10.2;5.8"
    scored, best = _pick(moved)
    text = best_change(last_best(study), scored, best, SCORING)
    assert "this one picks trial 1" in text
    assert (
        "Why: trial 0's samples_per_s moved from 10.2 samples/s to 8.0 samples/s after 1 more measurement(s)." in text
    )


def test_other_settings_are_named_and_the_same_pick_says_nothing():
    t = _table([[0, "none", "fp32", 8, 10.0, 10.0, 0.01], [1, "full", "fp32", 8, 4.0, 8.0, 0.01]])
    study, _ = _remembered(t)
    scored, best = _pick(t)
    assert best_change(last_best(study), scored, best, SCORING) is None
    small = Scoring(8, [5.0], ROI, "throughput")
    scored, best = _pick(t, small)
    text = best_change(last_best(study), scored, best, small)
    assert "The settings differ: then 80 GiB by throughput, now 5 GiB by throughput." in text
