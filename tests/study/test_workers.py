"""workers=N: several drivers started by one command on one study (CPU, real processes)."""
import os
import signal
import subprocess
import time

import optuna
import pandas as pd
import pytest

from autotune.store.claims import ORPHANED
from autotune.store.storage import make_storage
from autotune.system.linux import usable_cores, usable_cpus
from tests.conftest import ROOT, cli_command, trial_env
from tests.test_reliability import faulty, space_file, study_trials

pytestmark = pytest.mark.e2e  # several drivers on one study, end to end

CONFIGS = sorted((c, m) for c in ("none", "full") for m in (1, 2, 4))


def storages(tmp_path):
    urls = {"journal": f"journal:{tmp_path / 'studies.log'}"}
    if os.environ.get("AUTOTUNE_TEST_POSTGRES"):  # .ci/run starts a PostgreSQL server and sets it
        urls["postgresql"] = os.environ["AUTOTUNE_TEST_POSTGRES"]
    return urls


def measured(trials):
    """Trials measured for the search: not duplicates, not re-measurements (a contended trial
    is re-measured on purpose)."""
    return [t for t in trials if "duplicate_of" not in t.user_attrs and not t.user_attrs.get("repeat")]


def check_once_each(trials, configs=None):
    assert len({t.number for t in trials}) == len(trials)  # trial numbers unique
    assert not [t for t in trials if not t.state.is_finished()]  # nothing left running or queued
    done = [t for t in measured(trials) if t.user_attrs.get("status") == "ok"]
    want = CONFIGS if configs is None else configs
    assert sorted((t.params["checkpointing"], t.params["micro_batch"]) for t in done) == want  # once each
    return done


@pytest.mark.parametrize("backend", ["journal", "postgresql"])
def test_n_workers_measure_each_configuration_once_and_match_one_worker(tmp_path, backend):
    url = storages(tmp_path).get(backend)
    if url is None:
        if os.environ.get("CI"):
            pytest.fail("AUTOTUNE_TEST_POSTGRES is not set: .ci/run starts PostgreSQL and sets it")
        pytest.skip("no PostgreSQL here (set AUTOTUNE_TEST_POSTGRES=postgresql://...; CI does)")
    space = space_file(tmp_path, lo=1, hi=4)
    one = subprocess.run(cli_command(tmp_path / "one", *faulty(tmp_path, "global_batch=8", space=space)),
                         cwd=ROOT, env=trial_env(), capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stdout + one.stderr
    for n in (2, 4):
        name = f"workers{n}-{os.getpid()}"  # a study of its own (a PostgreSQL server outlives the test)
        args = faulty(tmp_path, "model.config.step_sleep=0.5", "global_batch=8", f"storage={url}",
                      f"study_name={name}", f"workers={n}", space=space)
        out = subprocess.run(cli_command(tmp_path / f"run{n}", *args), cwd=ROOT, env=trial_env(),
                             capture_output=True, text=True, timeout=900)
        if n > usable_cores():  # CPU workers share the cores: more than there are is refused up front
            assert out.returncode == 2 and f"workers={n}: this process may use {usable_cores()} CPU core(s)" in \
                out.stdout + out.stderr, out.stdout + out.stderr
            continue
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"{n} workers on the study" in out.stdout and f"worker {n - 1} started" in out.stdout
        st = optuna.load_study(study_name=name, storage=make_storage(url))
        done = check_once_each(st.get_trials(deepcopy=False))
        assert len({t.user_attrs["owner"]["pid"] for t in done}) >= 2  # the work was shared
        # Each CPU worker ran on a share of the cores of its own, so no worker timed another's load.
        cores = [line for line in out.stdout.splitlines() if "each CPU worker has its own share" in line]
        first = usable_cpus()[0]
        assert len(cores) == 1 and f"this worker runs on core(s) {first}" in cores[0], out.stdout
        for k in range(1, n):
            log = (tmp_path / f"run{n}" / "workers" / str(k) / "worker.log").read_text()
            assert "each CPU worker has its own share" in log and f"core(s) {first}:" not in log
        # The outputs cover the whole study, with the same content as a one-worker run's
        # (up to timing): the same configurations, all ok, the same memory figures.
        cols = ["checkpointing", "micro_batch", "status", "peak_memory_gib"]
        mine = pd.read_csv(tmp_path / f"run{n}" / "trials.csv")[cols].sort_values(cols[:2]).reset_index(drop=True)
        ref = pd.read_csv(tmp_path / "one" / "trials.csv")[cols].sort_values(cols[:2]).reset_index(drop=True)
        pd.testing.assert_frame_equal(mine[cols[:3]], ref[cols[:3]])
        assert (mine["peak_memory_gib"] - ref["peak_memory_gib"]).abs().max() < 0.01
        leftover = subprocess.run(["pgrep", "-f", str(tmp_path / f"run{n}")], capture_output=True, text=True)
        assert leftover.stdout.strip() == ""  # no worker or trial process outlived the run
        password = _password(url)
        if password:  # kept out of what the run prints and writes for people to read and share
            assert password not in out.stdout + out.stderr
            for f in ["autotune.log", "report.html", "best.yaml", *(f"workers/{k}/worker.log" for k in range(1, n))]:
                assert password not in (tmp_path / f"run{n}" / f).read_text(), f


def _password(url):
    from urllib.parse import urlsplit

    return urlsplit(url).password


def test_a_worker_killed_mid_trial_leaves_its_trial_retried_once(tmp_path):
    url = f"journal:{tmp_path / 'studies.log'}"
    # 0.3 s a micro-step, 2-4 of them a step: each trial runs 3 s or more, long enough to be killed in
    args = faulty(tmp_path, "model.config.step_sleep=0.3", "global_batch=8", f"storage={url}", "workers=2",
                  space=space_file(tmp_path, lo=2, hi=4))
    proc = subprocess.Popen(cli_command(tmp_path / "run", *args), cwd=ROOT, env=trial_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    victim, deadline = None, time.time() + 240
    while victim is None and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
        try:
            running = [t for t in study_trials(url) if t.state == optuna.trial.TrialState.RUNNING]
        except (ValueError, RuntimeError):  # the study is not there yet
            continue
        others = [t for t in running if t.user_attrs.get("owner", {}).get("pid") not in (None, proc.pid)]
        if others:
            time.sleep(1.0)  # into its measured steps
            victim = others[0]
            os.kill(victim.user_attrs["owner"]["pid"], signal.SIGKILL)
    assert victim is not None, "worker 1 never ran a trial"
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert "worker 1 (pid" in out and "ended with exit code -9" in out
    trials = study_trials(url)
    check_once_each(trials, [c for c in CONFIGS if c[1] >= 2])
    cut = [t for t in trials if t.user_attrs.get("status") == "crash"]
    assert [t.number for t in cut] == [victim.number] and cut[0].user_attrs["cause"] == ORPHANED
    retried = [t for t in trials if t.user_attrs.get("retry_of") is not None]
    assert [t.user_attrs["retry_of"] for t in retried] == [victim.number]
    assert retried[0].user_attrs["status"] == "ok" and retried[0].user_attrs["owner"]["pid"] == proc.pid


def test_bad_workers_values_are_refused_before_anything_runs(tmp_path):
    from omegaconf import OmegaConf

    from autotune.study.plan import ConfigError, make_plan
    from tests.conftest import compose

    for value, fix in (("0", "must be a whole number >= 1 or auto"), ("two", "must be a whole number >= 1 or auto")):
        with pytest.raises(ConfigError, match=fix):
            make_plan(OmegaConf.to_object(compose("model=tiny", "device=cpu", "seq_len=16", f"workers={value}")))
    plan = make_plan(OmegaConf.to_object(compose("model=tiny", "device=cpu", "seq_len=16", "workers=auto")))
    assert plan.workers == 1  # auto: one per visible GPU; on CPU one
