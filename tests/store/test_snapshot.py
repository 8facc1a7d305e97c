"""The run directory's study.db: the study alone, readable by Optuna, whichever way it was copied."""
import optuna
import pytest

from autotune.store.storage import open_study, snapshot


def _study_with_trials(url, name, n):
    study = open_study(name, url)
    for k in range(n):
        study.add_trial(optuna.trial.create_trial(
            params={"micro_batch": 2 ** k}, distributions={"micro_batch": optuna.distributions.CategoricalDistribution(
                [1, 2, 4])}, user_attrs={"status": "ok", "peak_memory_gib": 0.1 * k}, values=[float(k), 0.1 * k]))
    return study


@pytest.mark.parametrize("others", [0, 1])  # alone in its file: SQLite's backup; with another: Optuna's copy
def test_the_snapshot_holds_the_study_alone_and_whole(tmp_path, others):
    url = f"sqlite:///{tmp_path / 'source.db'}"
    for k in range(others):
        _study_with_trials(url, f"other-{k}", 1)
    study = _study_with_trials(url, "mine", 3)
    snapshot(study, tmp_path / "study.db")
    copy = f"sqlite:///{tmp_path / 'study.db'}"
    assert optuna.get_all_study_names(copy) == ["mine"]
    trials = optuna.load_study(study_name="mine", storage=copy).get_trials()
    assert [(t.params, t.user_attrs, t.values) for t in trials] == \
        [(t.params, t.user_attrs, t.values) for t in study.get_trials()]
