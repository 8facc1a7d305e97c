"""examples/train.py trains with a best.yaml, and the tuned strategy is really applied."""
import importlib.util
import json
import re
import subprocess
import sys

import pytest
import torch
import yaml

from autotune import load_tuned
from tests.conftest import ROOT

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 64, "vocab_size": 128}


def best_yaml(tmp_path, checkpointing="full", precision="bf16", micro_batch=2, accumulation=2, kind="cpu",
              **strategy):
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump({
        "strategy": {"checkpointing": checkpointing, "precision": precision, "micro_batch": micro_batch,
                     "accumulation": accumulation, **strategy},
        "device": {"kind": kind}, "model": {"name": "tiny", "config": TINY, "seq_len": 16},
        "measured": {"samples_per_s": 1.0, "peak_memory_gib": 0.1}}))
    return path


def load_example():
    spec = importlib.util.spec_from_file_location("example_train", ROOT / "examples" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("checkpointing, forwards_per_micro_step", [("full", 2), ("none", 1)])
def test_tuned_checkpointing_and_precision_are_applied(tmp_path, checkpointing, forwards_per_micro_step):
    example = load_example()
    tuned = load_tuned(best_yaml(tmp_path, checkpointing=checkpointing))
    device = torch.device("cpu")
    workload = example.build_workload(tuned, device)
    model = workload.model
    attention_calls, linear_dtypes = [], []
    # Inside block 0: its forward runs again in backward when the block is checkpointed.
    model.bert.encoder.layer[0].attention.register_forward_hook(lambda m, i, o: attention_calls.append(1))
    model.bert.encoder.layer[0].intermediate.dense.register_forward_hook(lambda m, i, o: linear_dtypes.append(o.dtype))
    steps = 3
    out = example.train(tuned, workload, device, steps=steps, warmup=1)
    micro_steps = steps * tuned.accumulation
    assert len(attention_calls) == forwards_per_micro_step * micro_steps
    assert set(linear_dtypes) == {torch.bfloat16}  # the tuned autocast dtype
    assert out["steps"] == steps and out["samples_per_s"] > 0


def test_fp32_runs_without_autocast_and_scaler_only_for_fp16(tmp_path):
    tuned = load_tuned(best_yaml(tmp_path, precision="fp32"))
    assert not tuned.scaler("cpu").is_enabled()
    with tuned.autocast("cpu"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    fp16 = load_tuned(best_yaml(tmp_path, precision="fp16"))
    assert fp16.scaler("cpu").is_enabled()


def test_load_tuned_rejects_a_file_that_is_not_a_best_yaml(tmp_path):
    bad = tmp_path / "x.yaml"
    bad.write_text("hello: world\n")
    with pytest.raises(ValueError, match=r"x.yaml: not a readable autotune best.yaml"):
        load_tuned(bad)


def test_best_yaml_carries_its_format_and_is_read_through_the_schema(tmp_path):
    path = best_yaml(tmp_path)
    data = yaml.safe_load(path.read_text())
    assert load_tuned(path).micro_batch == 2  # a best.yaml from before the format key reads the same
    for fmt, message in ((99, "format=99: this autotune reads best.yaml format 1"), ("one", "format='one'")):
        path.write_text(yaml.safe_dump({**data, "format": fmt}))
        with pytest.raises(ValueError, match=re.escape(message)):
            load_tuned(path)
    path.write_text(yaml.safe_dump({**data, "format": 1, "budget": 24}))  # a key the schema does not know
    with pytest.raises(ValueError, match=r"best.yaml: budget: Key 'budget' not in 'BestConfig'"):
        load_tuned(path)
    path.write_text(yaml.safe_dump({**data, "measured": {"samples_per_s": "fast"}}))
    with pytest.raises(ValueError, match=r"measured.samples_per_s: Value 'fast' of type 'str' could not be converted"):
        load_tuned(path)


@pytest.mark.e2e
def test_example_runs_as_a_script(tmp_path):
    out = subprocess.run([sys.executable, "examples/train.py", str(best_yaml(tmp_path, precision="fp32")),
                          "--steps", "3", "--device", "cpu"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["steps"] == 3 and result["samples_per_s"] > 0


@pytest.mark.e2e
def test_best_yaml_composes_into_a_hydra_app_as_a_config_group(tmp_path):
    import shutil

    from tests.conftest import trial_env

    app = ROOT / "examples" / "hydra_app" / "train.py"
    # A user's own best.yaml, dropped into a `tuned` group directory on the search path.
    group = tmp_path / "conf" / "tuned"
    group.mkdir(parents=True)
    shutil.copy(best_yaml(tmp_path, checkpointing="full", precision="fp32", micro_batch=2, accumulation=4),
                group / "mine.yaml")
    runs = {}
    for choice, extra in (("example", []), ("mine", [f"hydra.searchpath=[file://{tmp_path / 'conf'}]"])):
        out = subprocess.run([sys.executable, str(app), f"tuned={choice}", "steps=3", "device=cpu",
                              f"hydra.run.dir={tmp_path / choice}", *extra], cwd=tmp_path, env=trial_env(),
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        runs[choice] = json.loads(out.stdout.strip().splitlines()[-1])
    # The schema types the group: a copied best.yaml with a wrong type fails as the app composes it.
    bad = yaml.safe_load((group / "mine.yaml").read_text())
    bad["strategy"]["micro_batch"] = "four"
    (group / "bad.yaml").write_text(yaml.safe_dump(bad))
    out = subprocess.run([sys.executable, str(app), "tuned=bad", "steps=3", "device=cpu",
                          f"hydra.run.dir={tmp_path / 'bad'}", f"hydra.searchpath=[file://{tmp_path / 'conf'}]"],
                         cwd=tmp_path, env=trial_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and "tuned.strategy.micro_batch" in out.stderr and "four" in out.stderr, out.stderr
    assert runs["example"]["strategy"] == "ckpt=0.5 prec=fp32 mb=4 acc=2"
    assert runs["mine"]["strategy"] == "ckpt=full prec=fp32 mb=2 acc=4"
    assert all(r["steps"] == 3 and r["final_loss"] > 0 for r in runs.values())
