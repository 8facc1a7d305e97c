"""The trials table folds repeats into their configuration's row: every run's peak kept,
runs more than 2 % apart flagged, and the report says so."""
import optuna
from optuna.distributions import CategoricalDistribution

from autotune.results.page import write_report
from autotune.results.record import RunRecord
from autotune.results.review import scored_for_report
from autotune.scoring.budgets import per_budget
from autotune.scoring.settings import Scoring
from autotune.store.table import trials_table

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
                        RunRecord(model="t", budget_gib=8.0, budgets=[8.0], global_batch=4, objective="roi",
                                  device_name="cpu", command="python -m autotune", seq_len=8)).read_text()
    assert "1 configuration(s) whose runs' peak memory differs by more than 2 %" in page


def test_a_contended_probe_is_recorded_but_its_speed_yields_to_the_quiet_full_measurement():
    study = optuna.create_study(directions=["maximize", "minimize"])
    for attrs in ({"fidelity": "probe", "samples_per_s": 40.0, "contended": True, "contention": "2 busy processes"},
                  {"fidelity": "full", "samples_per_s": 90.0, "repeat": 1, "repeat_of": 0}):
        study.add_trial(optuna.trial.create_trial(
            params={"checkpointing": "none", "precision": "fp32", "micro_batch": 4}, distributions=DIST,
            user_attrs={"status": "ok", "accumulation": 1, "peak_memory_gib": 1.0, "time_spread": 0.01,
                        "clean_start": True, **attrs},
            state=optuna.trial.TrialState.COMPLETE, values=[attrs["samples_per_s"], 1.0]))
    row = trials_table(study).set_index("number").loc[0]
    assert row["samples_per_s"] == 90.0 and row["fidelity"] == "full"  # the quiet full run's figure
    assert row["contended_runs"] == 1 and not row["contended"]  # the probe's contention recorded, not the row's
    assert row["contention"].startswith("contended in trial(s) 0 (2 busy processes); speed from the quiet run(s) "
                                        "only") and "covering" not in row["contention"]
    assert row["samples_per_s_runs"] == "40;90"


def test_the_plain_read_of_a_database_study_equals_optunas_own(tmp_path):
    """optuna_access.read_trials reads Optuna's tables with plain queries (the ORM was 6.5 s of
    a 5,000-trial show); it must give the trials get_trials gives, whatever their state and
    content: infinite values, queued trials' fixed parameters, intermediate values, nested
    and unicode attributes, a float and a bool parameter."""
    from optuna.distributions import FloatDistribution

    from autotune.store.optuna_access import read_trials

    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(storage=url, directions=["maximize", "minimize"])
    dist = {**DIST, "offload": CategoricalDistribution([False, True]), "x": FloatDistribution(0.0, 1.0)}
    params = {"checkpointing": "full", "precision": "fp32", "micro_batch": 2, "offload": True, "x": 0.25}
    study.add_trial(optuna.trial.create_trial(params=params, distributions=dist, values=[float("inf"), 1.5],
                                              user_attrs={"status": "ok", "owner": {"pid": 1, "host": "h"},
                                                          "cause": "ünïcode ✓", "losses": [1.0, None]},
                                              intermediate_values={0: 0.5, 3: float("-inf")}))
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, state=optuna.trial.TrialState.FAIL,
                                              user_attrs={"status": "crash"}))
    study.enqueue_trial({"checkpointing": "none", "precision": "fp32", "micro_batch": 4}, user_attrs={"repeat": 1})
    running = study.ask()
    running.set_user_attr("heartbeat", 1.5)
    study.add_trial(optuna.trial.create_trial(params=params, distributions=dist, state=optuna.trial.TrialState.PRUNED))
    again = optuna.load_study(study_name=study.study_name, storage=url)
    fast, orm = read_trials(again), again.get_trials(deepcopy=False)
    assert [t.number for t in fast] == [0, 1, 2, 3] and fast == orm
    for a, b in zip(fast, orm, strict=False):
        assert (a._trial_id, a.system_attrs, a.distributions, a.datetime_start, a.datetime_complete,
                a.intermediate_values) == (b._trial_id, b.system_attrs, b.distributions, b.datetime_start,
                                           b.datetime_complete, b.intermediate_values)
