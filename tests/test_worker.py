"""The warm worker (trial.reuse_worker): consecutive trials in one process, a fresh one after
any failure, nothing left running. Real processes on CPU; that its measurements equal a
fresh process's is checked on the GPU (tests/test_gpu.py), the only place it is offered."""
import os

import pytest

from autotune.runner import WarmWorker
from tests.conftest import compose, trial_env
from tests.test_trial import spec


@pytest.fixture
def worker():
    w = WarmWorker()
    yield w
    w.close()


def test_consecutive_trials_share_one_worker_and_each_failure_gets_a_fresh_one(tmp_path, worker):
    env = trial_env()
    run = lambda name, s, timeout=120: worker(s, tmp_path / name, timeout, env=env)  # noqa: E731
    first, second = run("a", spec(mb=2, acc=4)), run("b", spec(mb=4, acc=2))
    assert first["status"] == second["status"] == "ok", (first, second)
    assert first["pid"] == second["pid"] and (first["worker_trial"], second["worker_trial"]) == (0, 1)
    assert (tmp_path / "b" / "log.txt").read_text().count('"status": "ok"') == 1  # each trial its own log

    failed = run("c", spec(config={"fault": "raise_in_step"}))
    assert failed["status"] == "error" and "planted failure" in failed["cause"]
    after_error = run("d", spec())
    assert after_error["status"] == "ok" and after_error["pid"] != first["pid"] and after_error["worker_trial"] == 0

    hung = run("e", spec(config={"fault": "hang_with_child"}), timeout=15)
    assert hung["status"] == "timeout"
    crashed = run("f", spec(config={"fault": "crash"}))
    assert crashed["status"] == "crash" and "exited with code 3" in crashed["cause"]
    last = run("g", spec())
    assert last["status"] == "ok" and last["pid"] not in (first["pid"], after_error["pid"])

    pid = last["pid"]
    worker.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # no worker left behind


def test_another_allocator_setting_starts_another_worker(tmp_path, worker):
    a = worker(spec(), tmp_path / "a", 120, env=trial_env())
    b = worker(spec(), tmp_path / "b", 120, env={**trial_env(), "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert a["status"] == b["status"] == "ok" and a["pid"] != b["pid"]


def test_reuse_worker_is_refused_on_a_cpu_run():
    from omegaconf import OmegaConf

    from autotune.plan import ConfigError, make_plan

    with pytest.raises(ConfigError, match="trial.reuse_worker=true: only for CUDA runs"):
        make_plan(OmegaConf.to_object(compose("device=cpu", "trial.reuse_worker=true")))
