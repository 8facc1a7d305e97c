"""autotune.tune(...): a real CPU study from Python returns what the command line writes."""
import subprocess
import sys

import pandas as pd
import pytest
import yaml

import autotune
from autotune import ConfigError, TuneResult
from tests.conftest import ROOT, TEST_CONF, trial_env

pytestmark = pytest.mark.e2e

SMALL = dict(
    device="cpu",
    search="grid",  # every configuration: a count the test can hold (auto's depends on the timings)
    global_batch=8,
    seq_len=16,
    trial={"warmup_steps": 1, "measure_steps": 3, "min_measure_s": 0},
    search_space={"checkpointing": ["none", "full"], "precision": ["fp32"], "micro_batch": {"min": 4}},
    overrides=[f"hydra.searchpath=[file://{TEST_CONF}]"],
)


def test_tune_runs_a_study_and_returns_what_it_wrote(tmp_path, capsys):
    result = autotune.tune("tiny", budget_gib=[2, 4], run_dir=tmp_path / "run",
                           storage=f"sqlite:///{tmp_path / 'studies.db'}", **SMALL)
    assert isinstance(result, TuneResult) and result.exit_code == 0
    run_dir = tmp_path / "run"
    pd.testing.assert_frame_equal(result.trials, pd.read_csv(run_dir / "trials.csv"))
    pd.testing.assert_frame_equal(result.front, pd.read_csv(run_dir / "pareto.csv"))
    assert len(result.trials) == 4 and set(result.trials["checkpointing"]) == {"none", "full"}  # the grid: 2 x 2
    best = yaml.safe_load((run_dir / "best.yaml").read_text())
    assert result.best.strategy.as_dict() == best["strategy"] and result.paths["best"] == run_dir / "best.yaml"
    assert set(result.per_budget) == {2, 4}
    for budget, tuned in result.per_budget.items():
        assert tuned.budget_gib == budget and tuned.source == str(run_dir / f"best-{budget:g}GiB.yaml")
    assert {"trials", "front", "report", "plot", "study", "log"} <= set(result.paths)
    assert all(p.is_file() for p in result.paths.values())
    printed = capsys.readouterr().out  # the run's lines, as the command line prints them, and its log
    assert result.headline and result.headline[0].startswith("Use ") and result.headline[0] in printed
    assert result.headline[0] in (run_dir / "autotune.log").read_text()
    assert result.headline[0] in repr(result) and result.headline[0] in result._repr_html_()
    assert "report.html" in result._repr_html_()
    # the command it records makes the same run from a shell
    assert result.command.startswith("python -m autotune model=tiny 'budget_gib=[2,4]' storage=sqlite:///")
    assert best["command"] == result.command


def test_bad_input_raises_before_any_trial_with_every_problem(tmp_path):
    with pytest.raises(ConfigError, match=r"budget=4: unknown key 'budget'; did you mean budget_gib=4"):
        autotune.tune("tiny", budget=4, run_dir=tmp_path / "a", **SMALL)
    with pytest.raises(ConfigError, match=r"precision has unknown value\(s\) \['fp8'\]"):
        autotune.tune("tiny", run_dir=tmp_path / "b", **{**SMALL, "search_space": {"checkpointing": ["none"],
                                                                               "precision": ["fp8"]}})
    assert not (tmp_path / "b" / "trials.csv").exists()
    with pytest.raises(TypeError, match="pass a str, number"):
        autotune.tune("tiny", run_dir=tmp_path / "c", seed=object())


def test_the_notebook_style_example_runs_and_trains_with_the_result(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "python_api.py"), str(tmp_path / "run")],
                         cwd=tmp_path, env=trial_env(), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "TuneResult(exit_code=0" in out.stdout and "\nUse " in out.stdout
    assert (tmp_path / "run" / "best.yaml").is_file()
    assert out.stdout.count("step ") >= 3 and "with ckpt=" in out.stdout
