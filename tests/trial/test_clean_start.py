"""What a trial may leave behind (nothing), and the check that refuses to measure when
something is. Real trials in real processes on CPU; the CUDA side is in tests/test_gpu.py."""
import gc
import json
import subprocess
import sys
import weakref

import optuna
import pytest
import torch

from autotune.search import QueueSearch
from autotune.study.driver import IsolationError, measure_queue
from autotune.train.strategy import Strategy, apply_checkpointing, forward_context
from tests.conftest import ROOT, compose, trial_env
from tests.trial.test_forkserver import SMALL_BERT
from tests.trial.test_trial import spec

TINY_BERT = dict(SMALL_BERT, hidden_size=32, num_attention_heads=2, intermediate_size=64)


def _bert():
    from autotune.models.bert import build

    return build("cpu", 16, **TINY_BERT)


@pytest.mark.parametrize("checkpointing", ["none", "full"])
def test_counting_saved_bytes_leaves_no_graph_alive(checkpointing):
    # BERT's softmax saves its own output: a counting hook that handed the tensor back kept
    # a cycle through autograd's graph alive that the garbage collector cannot see (41
    # parameters of every earlier trial survived).
    w = _bert()
    apply_checkpointing(w.blocks, checkpointing)
    strategy = Strategy(checkpointing, "fp32", 2, 1)
    total = [0]
    with forward_context(strategy, "cpu", total):
        loss = w.loss(w.model, w.make_batch(2, torch.device("cpu")))
    assert total[0] > 0
    refs = [weakref.ref(p) for p in w.model.parameters()]
    model = weakref.ref(w.model)
    del w, loss
    gc.collect()
    assert model() is None and sum(r() is not None for r in refs) == 0


def _write_specs(tmp_path, configs, device="cpu", target="autotune.models.bert:build", config=None):
    paths = []
    for i, (ckpt, prec, mb) in enumerate(configs):
        s = spec(ckpt, prec, mb=mb, acc=8 // mb, target=target, config=config or TINY_BERT)
        s["device"] = device
        (tmp_path / f"t{i}").mkdir()
        path = tmp_path / f"t{i}" / "spec.json"
        path.write_text(json.dumps(s))
        paths.append(str(path))
    return paths


def test_consecutive_trials_in_one_process_leave_no_model_alive(tmp_path):
    """Never how autotune runs trials, but the leak probe for both causes found in a reused
    process: after each trial, checkpointed ones included, none of its parameters live on."""
    configs = [("full", "fp32", 2), ("0.5", "bf16", 4), ("full", "bf16", 8), ("none", "fp32", 4), ("full", "fp32", 2)]
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "tests.inprocess", str(out), *_write_specs(tmp_path, configs)],
                          cwd=ROOT, env=trial_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert [r["status"] for r in report] == ["ok"] * len(configs)
    assert [r["alive_parameters"] for r in report] == [0] * len(configs), report


def test_a_process_that_ran_a_trial_refuses_to_measure_another(tmp_path):
    script = ("import sys, json; from pathlib import Path; from autotune.trial.run import run_spec_file\n"
              "print(json.dumps([run_spec_file(Path(p)) for p in sys.argv[1:]]))")
    paths = _write_specs(tmp_path, [("none", "fp32", 2), ("none", "fp32", 2)])
    done = subprocess.run([sys.executable, "-c", script, *paths], cwd=ROOT, env=trial_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    first, second = json.loads(done.stdout.strip().splitlines()[-1])
    assert first["status"] == "ok" and first["clean_start"] is True
    assert second["status"] == "error" and second["phase"] == "isolation" and second["clean_start"] is False
    assert "already ran 1 trial(s)" in second["cause"] and "samples_per_s" not in second


def test_a_model_of_an_earlier_trial_still_alive_is_a_dirty_start():
    from autotune.trial import clean_start

    saved = clean_start._trials_started
    model = torch.nn.Linear(2, 2)
    try:
        clean_start._trials_started = 0
        clean_start.track(model)
        with pytest.raises(clean_start.DirtyStart, match=r"2 parameter\(s\) of an earlier trial's model"):
            clean_start.check_clean_start("cpu")
        assert not clean_start.passed()
    finally:
        clean_start._trials_started = saved
        del model
        gc.collect()
    assert len(clean_start._earlier_parameters) == 0


def test_a_dirty_start_stops_the_study(tmp_path):
    from omegaconf import OmegaConf

    from autotune.study.plan import make_plan

    plan = make_plan(OmegaConf.to_object(compose("model=tiny", "device=cpu", "global_batch=4", "seq_len=16")))
    study = optuna.create_study()
    params = {"checkpointing": "none", "precision": "fp32", "micro_batch": 4, "offload": False, "allocator": "default"}
    search = QueueSearch("queued", [params, dict(params, micro_batch=2)])
    search.start(study)
    dirty = lambda *a, **k: {"status": "error", "phase": "isolation", "cause": "not a clean start: planted"}  # noqa: E731
    with pytest.raises(IsolationError, match="planted"):
        measure_queue(study, plan, tmp_path, search, runner=dirty, on_trial=lambda line: None)
    assert [t.user_attrs.get("status") for t in study.trials if t.state.is_finished()] == ["error"]


def test_only_a_clean_process_s_out_of_memory_prunes_others():
    from optuna.distributions import CategoricalDistribution

    from autotune.study.driver import oom_at_smaller_micro_batch

    study = optuna.create_study()
    dist = {
        "checkpointing": CategoricalDistribution(["none", "full"]),
        "micro_batch": CategoricalDistribution([2, 4, 8]),
    }
    for ckpt, clean in (("none", True), ("full", None)):  # "full" ran out of memory in an unchecked process
        study.add_trial(
            optuna.trial.create_trial(
                params={"checkpointing": ckpt, "micro_batch": 2},
                distributions=dist,
                user_attrs={"status": "oom", **({"clean_start": clean} if clean else {})},
                state=optuna.trial.TrialState.FAIL,
            )
        )
    assert oom_at_smaller_micro_batch(study, {"checkpointing": "none", "micro_batch": 4}) is not None
    assert oom_at_smaller_micro_batch(study, {"checkpointing": "full", "micro_batch": 4}) is None
