"""The configuration as a user types it: search spaces and experiments as Hydra groups, one
source for every default (the schema), and the two places that show the keys (``--help``,
the README's table) made from it."""
import re
import subprocess
import sys

import pytest
import yaml

from autotune.search.space import SHIPPED_DIR
from autotune.study.config import config_keys, markdown_table
from tests.conftest import ROOT, compose
from tests.study.test_plan import plan_for


@pytest.mark.parametrize("name", ["default", "full", "budgets"])
def test_each_shipped_space_is_a_group_choice(name):
    plan = plan_for("device=cpu", "cpu_reduce=false", "global_batch=64", f"search_space={name}")
    shipped = yaml.safe_load((SHIPPED_DIR / f"{name}.yaml").read_text())
    assert plan.space_name == name and plan.study_name.startswith(f"bert-{name}-")
    assert list(plan.space["precision"]) == shipped["precision"]
    assert (plan.space.micro_batch_min, plan.space.micro_batch_max) == (shipped["micro_batch"]["min"],
                                                                        shipped["micro_batch"]["max"])
    assert list(plan.space["offload"]) == shipped["offload"]


def test_an_experiment_applies_its_overrides_and_the_command_line_still_wins():
    cfg = compose("experiment=bert_large_budgets")
    assert cfg.model.name == "bert-large" and cfg.search_space.name == "budgets"
    assert list(cfg.budget_gib) == [16, 24, 40] and cfg.objective == "throughput" and cfg.trial.repeats == 0
    plan = plan_for("device=cpu", "experiment=bert_large_budgets", "budget_gib=[1,2]")  # a CPU has no 40 GiB
    assert plan.model_name == "bert-large" and plan.space_name == "budgets" and plan.budgets == [1.0, 2.0]
    plan = plan_for(
        "device=cpu", "experiment=bert_large_budgets", "budget_gib=2", "objective=roi", "search_space=default"
    )
    assert plan.objective == "roi" and plan.space_name == "default"


def test_a_space_of_ones_own_through_the_search_path(tmp_path):
    (tmp_path / "search_space").mkdir()
    (tmp_path / "search_space" / "mine.yaml").write_text(
        "name: mine\ncheckpointing: [none, 0.25]\nprecision: [fp32]\nmicro_batch: {min: 2, max: 8}\n")
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from autotune.study.config import CONF_DIR
    from autotune.study.plan import make_plan

    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = hydra_compose(config_name="config", overrides=[f"hydra.searchpath=[file://{tmp_path}]", "device=cpu",
                                                             "search_space=mine"])

    plan = make_plan(OmegaConf.to_object(cfg), frozenset({"device"}))
    assert plan.space_name == "mine" and plan.space["checkpointing"] == ("none", "0.25")
    assert plan.space["offload"] == (False,)  # left out: the schema's default
    assert plan.micro_batches == [2, 4, 8]


def test_a_wrong_type_in_a_space_fails_when_the_config_is_composed_naming_the_key():
    with pytest.raises(Exception, match=r"search_space.offload"):
        compose("search_space.offload=[maybe]")


def test_the_readme_configuration_table_is_the_schema():
    readme = (ROOT / "README.md").read_text()
    table = markdown_table()
    assert table in readme, ("the README's configuration table differs from the schema; paste the output of "
                             "python -c 'from autotune.study.config import markdown_table; print(markdown_table())'")
    # and the schema is what a run gets: every default in the table is the composed config's
    cfg = compose()
    for key, default, _ in config_keys():
        if key in ("model", "optimizer", "search", "search_space", "experiment"):
            continue
        node = cfg
        for part in key.split("."):
            node = node[part]
        shown = "null" if node is None else str(node).lower() if isinstance(node, bool) else str(node)
        assert shown == default or float(shown) == float(default), key


def test_help_says_what_the_tool_does_and_lists_every_key(tmp_path):
    out = subprocess.run([sys.executable, "-m", "autotune", "--help"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("autotune: measure memory strategies for PyTorch training")
    for key, default, meaning in config_keys():
        assert re.search(rf"^  {re.escape(key)}={re.escape(default)} +{re.escape(meaning)}$", out.stdout, re.M), key
    assert not (tmp_path / "outputs").exists()  # asking for help makes no run directory


def test_an_unknown_key_is_refused_before_hydra_with_the_nearest_known_one(tmp_path):
    from autotune.study.config import unknown_key_problems

    assert unknown_key_problems(["budget=4", "trial.fidelty=full", "fidelity=full", "zzz=1"]) == [
        "budget=4: unknown key 'budget'; did you mean budget_gib=4?",
        "trial.fidelty=full: unknown key 'trial.fidelty'; did you mean trial.fidelity=full?",
        "fidelity=full: unknown key 'fidelity'; did you mean trial.fidelity=full?",  # the same name, one level down
        "zzz=1: unknown key 'zzz'; python -m autotune --help lists every key"]
    # Known keys, groups, Hydra's own, the builder's and optimizer's open keys, flags and +/~ pass here.
    assert unknown_key_problems(["budget_gib=4", "model=llama", "search=grid", "search_space.micro_batch.min=4",
                                 "hydra.run.dir=x", "model.config.num_hidden_layers=2", "optimizer.momentum=0.9",
                                 "--help", "+roi.x=1", "~optimizer.weight_decay"]) == []
    out = subprocess.run([sys.executable, "-m", "autotune", "budget=4", "trial.fidelty=full"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == "", out
    assert out.stderr.splitlines() == ["error: budget=4: unknown key 'budget'; did you mean budget_gib=4?",
                                       "error: trial.fidelty=full: unknown key 'trial.fidelty'; did you mean "
                                       "trial.fidelity=full?"]
    assert not (tmp_path / "outputs").exists()  # refused before Hydra makes a run directory
