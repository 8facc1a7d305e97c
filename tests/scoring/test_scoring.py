import math
import re

import numpy as np
import pandas as pd
import pytest

from autotune.scoring.effects import strategy_effects
from autotune.scoring.score import choose_best, find_baseline, score

ROI = {"memory_price_per_gib_hour": 0.5, "compute_price_per_hour": 2.0, "workload_samples": 36000.0}


def table(rows):
    cols = ["status", "checkpointing", "precision", "micro_batch", "peak_memory_gib", "samples_per_s"]
    df = pd.DataFrame(rows, columns=cols)
    df["number"] = range(len(df))
    df["accumulation"] = 8 // df["micro_batch"]
    df["time_spread"] = 0.01
    df["cause"] = None
    return df


def test_roi_matches_the_formula_by_hand():
    df = table([
        ["ok", "none", "fp32", 8, 10.0, 10.0],  # baseline: 36000 samples at 10/s = 1 h
        ["ok", "full", "fp32", 8, 4.0, 5.0],  # 2 h, saves 6 GiB
        ["ok", "none", "bf16", 8, 7.0, 20.0],  # 0.5 h, saves 3 GiB
    ])
    scored, baseline = score(df, global_batch=8, budget_gib=80, roi=ROI)
    assert baseline.measured and baseline.peak_memory_gib == 10.0
    # ROI = saved * 0.5 * hours - (hours - 1) * 2
    assert scored.loc[0, "roi"] == pytest.approx(0.0)
    assert scored.loc[1, "roi"] == pytest.approx(6 * 0.5 * 2 - (2 - 1) * 2)  # 4.0
    assert scored.loc[2, "roi"] == pytest.approx(3 * 0.5 * 0.5 - (0.5 - 1) * 2)  # 1.75
    assert choose_best(scored, "roi") == 1
    assert choose_best(scored, "throughput") == 2


def test_trials_over_budget_have_no_roi_and_never_win():
    df = table([["ok", "none", "fp32", 8, 10.0, 10.0], ["ok", "none", "bf16", 8, 30.0, 100.0]])
    scored, _ = score(df, 8, budget_gib=20, roi=ROI)
    assert scored["fits_budget"].tolist() == [True, False]
    assert math.isnan(scored.loc[1, "roi"])
    assert choose_best(scored, "throughput") == 0


def test_nan_inf_and_failed_rows_never_win_nor_join_the_front():
    df = table([
        ["ok", "none", "fp32", 8, 10.0, 10.0],
        ["nan", "none", "fp16", 8, 5.0, 50.0],  # measured, but its loss was not finite
        ["oom", "none", "fp32", 4, np.nan, np.nan],
        ["ok", "full", "fp32", 4, np.inf, 12.0],
        ["ok", "full", "bf16", 4, 3.0, np.nan],
    ])
    scored, _ = score(df, 8, 80, ROI)
    assert scored["fits_budget"].tolist() == [True, False, False, False, False]
    assert scored["on_pareto"].tolist() == [True, False, False, False, False]
    assert choose_best(scored, "throughput") == 0
    assert choose_best(scored, "roi") == 0


def test_ties_go_to_less_memory_then_less_spread():
    df = table([["ok", "none", "fp32", 8, 10.0, 10.0], ["ok", "full", "fp32", 8, 6.0, 10.0],
                ["ok", "full", "fp32", 4, 6.0, 10.0]])
    df.loc[1, "time_spread"] = 0.2
    scored, _ = score(df, 8, 80, ROI)
    assert scored["on_pareto"].tolist() == [False, True, True]  # exact tie: both on the front
    assert choose_best(scored, "throughput") == 2


def test_no_fitting_trial_means_no_best():
    df = table([["oom", "none", "fp32", 8, np.nan, np.nan]])
    scored, baseline = score(df, 8, 80, ROI)
    assert choose_best(scored, "roi") is None
    assert not baseline.measured


def test_baseline_that_did_not_run_uses_the_budget_as_a_stated_lower_bound():
    df = table([["oom", "none", "fp32", 8, np.nan, np.nan], ["ok", "none", "fp32", 4, 12.0, 9.0],
                ["ok", "full", "fp32", 2, 5.0, 6.0]])
    baseline = find_baseline(df, global_batch=8, budget_gib=16)
    assert not baseline.measured
    assert baseline.peak_memory_gib == 16 and baseline.samples_per_s == 9.0
    assert "lower bound" in baseline.note and "micro_batch=4" in baseline.note
    scored, _ = score(df, 8, 16, ROI)
    assert scored.loc[2, "memory_saved_gib"] == pytest.approx(11.0)


def test_unknown_objective_is_rejected():
    with pytest.raises(ValueError, match="objective='speed'"):
        choose_best(table([["ok", "none", "fp32", 8, 1.0, 1.0]]).assign(fits_budget=True, roi=0.0), "speed")


def test_strategy_effects_compare_at_the_baseline_micro_batch():
    df = table([["ok", "none", "fp32", 8, 10.0, 10.0], ["ok", "full", "fp32", 8, 4.0, 8.0],
                ["oom", "none", "bf16", 8, np.nan, np.nan]])
    eff = strategy_effects(df, 8).set_index("strategy")
    assert eff.loc["activation checkpointing (full)", "memory_change"] == pytest.approx(-0.6)
    assert eff.loc["activation checkpointing (full)", "time_change"] == pytest.approx(0.25)
    assert eff.loc["AMP bf16", "measured"] == "trial ended 'oom'"
    assert eff.loc["checkpointing + bf16", "measured"].startswith("not measured at micro_batch 8")
    # 1 % spreads: a 25 % slowdown is outside them, a fact with its interval.
    assert eff.loc["activation checkpointing (full)", "measured"] == "memory -60 %, time +25 % (+23 % to +28 %)"


def test_an_effect_whose_interval_includes_no_change_is_never_stated_as_a_fact():
    """Overlapping intervals: checkpointing 10 % slower with 15 % spreads on both sides."""
    df = table([["ok", "none", "fp32", 8, 10.0, 10.0], ["ok", "full", "fp32", 8, 4.0, 9.0],
                ["ok", "none", "bf16", 8, 9.9, 30.0], ["ok", "full", "bf16", 8, 4.0, 9.5]])
    df["time_spread"] = [0.15, 0.15, 0.01, 0.99]
    eff = strategy_effects(df, 8).set_index("strategy")
    ckpt = eff.loc["activation checkpointing (full)"]
    assert ckpt["time_change_lo"] < 0 < ckpt["time_change_hi"]
    assert "time within noise" in ckpt["measured"] and "time +" not in ckpt["measured"]
    assert ckpt["measured"].startswith("memory -60 %")  # memory moved far more than runs differ
    amp = eff.loc["AMP bf16"]
    assert amp["measured"].startswith("memory within noise (-1.0 %")  # 1 % is inside what runs differ by
    assert amp["time_change_hi"] < 0 and "time -67 %" in amp["measured"]  # 3x faster, outside both spreads
    both = eff.loc["checkpointing + bf16"]  # a 99 % spread: its speed is bounded below by almost nothing
    assert "time within noise" in both["measured"]
    # No bound is negative where a bound must not be: every time interval is ordered, speeds >= 0.
    ran = eff.dropna(subset=["time_change"])
    assert (ran["time_change_lo"] <= ran["time_change"]).all() and (ran["time_change"] <= ran["time_change_hi"]).all()
    assert (ran["time_change_lo"] >= -1).all()  # a time can shrink by at most 100 %


def test_the_effects_memory_noise_is_the_repeat_check_threshold():
    from autotune.scoring.effects import MEMORY_NOISE
    from autotune.store.table import MEMORY_AGREEMENT
    assert MEMORY_NOISE == MEMORY_AGREEMENT


def test_a_difference_inside_the_spread_decides_nothing_and_the_stable_config_wins():
    df = table([["ok", "none", "fp32", 8, 10.0, 10.0], ["ok", "none", "bf16", 8, 7.0, 105.0],
                ["ok", "none", "bf16", 4, 8.0, 100.0]])
    df.loc[1, "time_spread"] = 0.15  # the faster one is noisy; 5 % apart is inside its spread
    df.loc[2, "time_spread"] = 0.02
    scored, _ = score(df, 8, 80, ROI)
    assert scored["noisy"].tolist() == [False, True, False]
    assert choose_best(scored, "throughput") == 2
    # Outside the spread, the faster one wins however noisy.
    df.loc[1, "samples_per_s"] = 200.0
    assert choose_best(score(df, 8, 80, ROI)[0], "throughput") == 1


def test_within_noise_prefers_less_memory_between_two_stable_configs():
    df = table([["ok", "none", "fp32", 8, 10.0, 10.0], ["ok", "full", "bf16", 8, 5.0, 99.5],
                ["ok", "none", "bf16", 8, 7.0, 100.0]])  # 0.5 % apart, both spreads 1 %
    scored, _ = score(df, 8, 80, ROI)
    assert choose_best(scored, "throughput") == 1
    df.loc[1, "samples_per_s"] = 90.0  # 10 % apart: a real difference
    assert choose_best(score(df, 8, 80, ROI)[0], "throughput") == 2


@pytest.mark.parametrize("objective", ["roi", "throughput"])
def test_a_spread_of_100_percent_or_more_still_names_a_best(objective):
    # Timing that noisy (seen with CPU workers fighting over two cores) leaves the lower
    # bound undefined; the top one is still tied with itself, and the stable one wins.
    df = table([["ok", "none", "fp32", 8, 10.0, 10.0], ["ok", "none", "bf16", 8, 7.0, 105.0],
                ["ok", "full", "bf16", 8, 5.0, 30.0]])
    df.loc[1, "time_spread"] = 1.8
    scored, _ = score(df, 8, 80, ROI)
    best = choose_best(scored, objective)
    assert best is not None
    assert not scored.loc[best, "noisy"]  # the noisy top is tied with everything; a stable one wins


def test_the_scoring_settings_travel_as_one_value_and_are_read_back_strictly():
    from autotune.scoring.settings import Scoring, ScoringError

    roi = {"memory_price_per_gib_hour": 0.025, "compute_price_per_hour": 3.5, "workload_samples": 1e7}
    s = Scoring(64, [16, 24.0], roi, "throughput")
    assert s.budgets == (16.0, 24.0) and s.primary_budget == 16.0
    assert Scoring.from_dict(s.to_dict()) == s
    assert s.but(budgets=[40]).budgets == (40.0,) and s.but(objective="roi").objective == "roi"
    assert s.but().budgets == s.budgets  # show without --budget: the run's own
    for key, value, words in (("global_batch", True, "global_batch=True"), ("budgets", [], "budgets=[]"),
                              ("roi", {**roi, "workload_samples": 0}, "roi.workload_samples=0: must be"),
                              ("objective", "speed", "objective='speed': one of")):
        with pytest.raises(ScoringError, match=re.escape(words)):
            Scoring.from_dict({**s.to_dict(), key: value})


def test_why_the_best_won_names_the_rule_and_the_rivals():
    from autotune.scoring.budgets import why_best
    df = table([["ok", "none", "fp32", 8, 10.0, 10.0], ["ok", "full", "bf16", 8, 5.0, 99.5],
                ["ok", "none", "bf16", 8, 7.0, 100.0]])  # 0.5 % apart, both spreads 1 %: tied
    scored, _ = score(df, 8, 80, ROI)
    best = choose_best(scored, "throughput")
    why = why_best(scored, best, "throughput", 80)
    assert best == 1 and "tied within noise on throughput with 1 other(s)" in why
    assert "trial 2: 100.0 [99.0, 101.0]" in why and "chosen as the one using least memory" in why
    # Far apart: the lead decides, and the runner-up is named with its interval.
    df.loc[1, "samples_per_s"] = 200.0
    scored, _ = score(df, 8, 80, ROI)
    why = why_best(scored, choose_best(scored, "throughput"), "throughput", 80)
    assert "ahead of the runner-up by more than both spreads (trial 2: 100.0 [99.0, 101.0])" in why
    # A noisy rival tied with a stable one: stability decides.
    df.loc[1, "samples_per_s"], df.loc[1, "time_spread"] = 101.0, 0.2
    scored, _ = score(df, 8, 80, ROI)
    best = choose_best(scored, "throughput")
    assert best == 2 and "chosen as the only stable one" in why_best(scored, best, "throughput", 80)


def test_a_stable_config_slower_than_what_the_tied_ones_guarantee_is_not_chosen():
    """The 1.1B Llama at 16 GiB on an H100: the noisy top's wide interval tied it with a stable
    config slower than the lower bound of another tied one; "stable first" picked the slow one."""
    from autotune.scoring.budgets import why_best
    df = table([["ok", "none", "fp32", 8, 15.0, 10.0], ["ok", "none", "bf16", 8, 13.7, 36.4],
                ["ok", "none", "bf16", 4, 13.1, 32.0], ["ok", "full", "bf16", 4, 13.9, 21.9],
                ["ok", "full", "bf16", 8, 10.4, 29.8]])
    df["time_spread"] = [0.01, 0.41, 0.06, 0.02, 0.32]
    scored, _ = score(df, 8, 16, ROI)
    assert scored.loc[3, "samples_per_s_hi"] >= scored.loc[1, "samples_per_s_lo"]  # tied with the top...
    assert scored.loc[3, "samples_per_s"] < scored.loc[2, "samples_per_s_lo"]  # ...yet slower than 2 guarantees
    best = choose_best(scored, "throughput")
    assert best == 2  # stable, and its figure reaches the best lower bound (its own, 30.1)
    why = why_best(scored, best, "throughput", 16)
    assert "chosen as the only stable one" in why and "set aside" in why and "trial 3: 21.9" in why
    # Without it, no tied config guarantees more than 21.5 (the top's lower bound): the slow
    # stable one reaches that, so stability decides again. The gate is conservative, not greedy.
    rest = score(df.drop(index=2), 8, 16, ROI)[0]
    assert choose_best(rest, "throughput") == 3


def test_the_limits_line_states_the_floor_ratio_and_the_mfu_or_why_there_is_none():
    import pandas as pd

    from autotune.scoring.limits import limits_line

    table = pd.DataFrame({"status": ["ok", "ok"], "static_gib": [2.0, 1.0], "peak_memory_gib": [10.0, 4.0],
                          "flops_per_sample": [1e12, float("nan")], "samples_per_s": [300.0, 100.0]})
    best = table.iloc[0]
    line = limits_line(table, best, "NVIDIA H100 80GB HBM3")
    # floor: the smallest model state (1) plus the smallest activation footprint (4 - 1 = 3)
    assert "best uses 10 GiB, 2.5x the memory floor of this space (4 GiB" in line
    assert "300 TFLOP/s of model work (1e+03 GFLOP per sample), 30% of the device's dense 16-bit peak" in line
    assert "the peak throughput of 'AMD EPYC' is not known here" in limits_line(table, best, "AMD EPYC")
    failed = table.assign(flops_per_sample=float("nan"), flops_error=["OutOfMemoryError: CUDA out of memory", None])
    assert "no MFU: torch's flop counter failed (OutOfMemoryError: CUDA out of memory)" in limits_line(
        failed, failed.iloc[0], "NVIDIA H100 80GB HBM3")
