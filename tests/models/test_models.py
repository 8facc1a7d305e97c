"""Every built-in model tunes end to end (reduced for the CPU), and so does a user's own."""
import os
import re
import subprocess

import pandas as pd
import pytest
import yaml

from autotune import load_tuned
from tests.conftest import ROOT, cli_command, run_cli

pytestmark = pytest.mark.e2e  # python -m autotune on each model of the zoo and custom ones

CONF_MODELS = sorted(p.stem for p in (ROOT / "autotune" / "conf" / "model").glob("*.yaml") if p.stem != "custom")
QUICK = ["device=cpu", "search=grid", "trial.warmup_steps=1", "trial.measure_steps=2", "trial.repeats=0"]


def space(tmp_path, checkpointing="[none, full]", lo=16, hi=16):
    path = tmp_path / "space.yaml"
    path.write_text(f"checkpointing: {checkpointing}\nprecision: [fp32]\nmicro_batch: {{min: {lo}, max: {hi}}}\n")
    return f"search_space.path={path}"


def test_every_model_config_is_tested():
    assert CONF_MODELS == ["bert", "bert-large", "gpt2", "llama", "vit"]


@pytest.mark.parametrize("model", CONF_MODELS)
def test_each_built_in_model_tunes_on_cpu_reduced(tmp_path, model):
    run_dir = tmp_path / "run"
    out = run_cli(run_dir, f"model={model}", *QUICK, space(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "CPU run: reduced" in out.stdout
    trials = pd.read_csv(run_dir / "trials.csv")
    assert list(trials["status"]) == ["ok", "ok"], trials[["status", "cause"]]
    assert list(trials["n_checkpointed"]) == [0, 4]  # every reduced model has 4 blocks
    assert (trials["micro_batch"] * trials["accumulation"] == 16).all()
    assert load_tuned(run_dir / "best.yaml").micro_batch == 16


def readme_custom_example() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- example: examples/custom_model.py -->\n```python\n(.*?)```", text, flags=re.S)
    assert m, "README.md shows no custom-model example"
    return m.group(1)


def test_readme_custom_model_example_is_the_tested_file_and_short():
    code = readme_custom_example()
    assert code == (ROOT / "examples" / "custom_model.py").read_text()
    assert len(code.strip().splitlines()) <= 20


def test_custom_model_from_the_readme_tunes_as_a_user_runs_it(tmp_path):
    # As a user runs it from the project root: no PYTHONPATH, the example importable from there.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run_dir = tmp_path / "run"
    out = subprocess.run(cli_command(run_dir, "model=custom", "model.target=examples.custom_model.build", *QUICK,
                                     "global_batch=8", "seq_len=32", space(tmp_path, "[none, 0.5, full]", 8, 8)),
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    trials = pd.read_csv(run_dir / "trials.csv")
    assert list(trials["status"]) == ["ok"] * 3
    assert sorted(trials["n_checkpointed"]) == [0, 3, 6]  # 6 encoder layers: none, the first half, all
    best = yaml.safe_load((run_dir / "best.yaml").read_text())
    assert best["model"]["target"] == "examples.custom_model.build"


def test_a_plain_sequential_model_with_given_blocks_tunes(tmp_path):
    run_dir = tmp_path / "run"
    out = run_cli(run_dir, "model=custom", "model.target=tests.workloads:sequential", *QUICK, "global_batch=8",
                  "seq_len=16", space(tmp_path, "[none, 0.5, full]", 4, 8))
    assert out.returncode == 0, out.stdout + out.stderr
    trials = pd.read_csv(run_dir / "trials.csv")
    assert (trials["status"] == "ok").all() and len(trials) == 6
    assert sorted(set(trials["n_checkpointed"])) == [0, 2, 4]


def test_custom_without_a_target_says_how_to_give_one(tmp_path):
    out = run_cli(tmp_path / "run", "model=custom", *QUICK)
    assert out.returncode == 2
    assert "model.target=package.module.build" in out.stdout + out.stderr
    assert not (tmp_path / "run" / "trials").exists()


def test_a_custom_target_that_does_not_import_is_one_error_before_the_study(tmp_path):
    db = tmp_path / "s.db"
    out = run_cli(tmp_path / "run", "model=custom", "model.target=nowhere.module:build", *QUICK,
                  f"storage=sqlite:///{db}")
    assert out.returncode == 2
    assert "model.target=nowhere.module:build: cannot be imported (ModuleNotFoundError" in out.stdout + out.stderr
    assert not db.exists()
