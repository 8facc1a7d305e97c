import numpy as np

from autotune.scoring.pareto import pareto_mask


def test_dominated_points_are_off_the_front():
    mem = [1.0, 2.0, 3.0, 2.5]
    thr = [10.0, 20.0, 30.0, 15.0]  # (2.5, 15) is dominated by (2.0, 20)
    assert pareto_mask(mem, thr).tolist() == [True, True, True, False]


def test_exact_ties_both_stay_and_equal_memory_keeps_only_the_faster():
    assert pareto_mask([1.0, 1.0], [5.0, 5.0]).tolist() == [True, True]
    assert pareto_mask([1.0, 1.0], [5.0, 6.0]).tolist() == [False, True]
    assert pareto_mask([1.0, 2.0], [5.0, 5.0]).tolist() == [True, False]


def test_nan_and_inf_rows_are_never_on_the_front_and_do_not_dominate():
    mem = [np.nan, 1.0, np.inf, 0.5, 2.0]
    thr = [100.0, 10.0, 50.0, np.nan, 20.0]
    assert pareto_mask(mem, thr).tolist() == [False, True, False, False, True]


def test_empty_input():
    assert pareto_mask([], []).tolist() == []
