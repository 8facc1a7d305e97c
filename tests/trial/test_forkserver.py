"""The default trial mechanism (trial.isolation=fork): every trial a child forked from a
pre-imported server, each a fresh process. Real processes on CPU; the same against fresh
processes on CUDA is in tests/test_gpu.py."""
import os
import subprocess
import sys

import pytest

from autotune.trial.runner import ForkServer, run_trial
from tests.conftest import trial_env
from tests.trial.test_trial import spec

pytestmark = pytest.mark.e2e  # fork servers and their trial processes

# Small, but with activations of MBs: the small-object heap's noise (about 100 KiB between
# runs of one configuration, in any process) stays far below 1 % of the peak.
SMALL_BERT = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 1024,
              "max_position_embeddings": 128, "vocab_size": 1024}


@pytest.fixture
def forks():
    f = ForkServer("tests.workloads:mlp")
    yield f
    f.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_each_trial_is_a_fresh_child_and_every_failure_is_recorded(tmp_path, forks):
    env = trial_env()
    run = lambda name, s, timeout=120: forks(s, tmp_path / name, timeout, env=env)  # noqa: E731
    first, second = run("a", spec(mb=2, acc=4)), run("b", spec(mb=4, acc=2))
    assert first["status"] == second["status"] == "ok", (first, second)
    assert first["pid"] != second["pid"] and first["isolation"] == second["isolation"] == "fork"
    assert first["clean_start"] is True and second["clean_start"] is True
    assert (tmp_path / "b" / "log.txt").read_text().count('"status": "ok"') == 1  # each trial its own log
    server = next(iter(forks.servers.values())).pid

    failed = run("c", spec(config={"fault": "raise_in_step"}))
    assert failed["status"] == "error" and "planted failure" in failed["cause"]
    hung = run("e", spec(config={"fault": "hang_with_child"}), timeout=15)
    assert hung["status"] == "timeout" and "15 s limit" in hung["cause"]
    leftover = subprocess.run(["pgrep", "-f", "sleep 3600"], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""  # the hung trial's own child died with it
    crashed = run("f", spec(config={"fault": "crash"}))
    assert crashed["status"] == "crash" and "exited with code 3" in crashed["cause"]
    killed = run("g", spec(config={"fault": "sigkill"}))
    assert killed["status"] == "crash" and "SIGKILL" in killed["cause"]
    oom = run("h", spec(mb=8, acc=1, config={"oom_above": 4}))
    assert oom["status"] == "oom" and oom["clean_start"] is True  # a clean process's OOM: it may prune
    last = run("i", spec())
    assert last["status"] == "ok" and last["pid"] not in (first["pid"], second["pid"])
    assert next(iter(forks.servers.values())).pid == server  # no failure took the server down

    forks.close()
    assert not _alive(server) and not _alive(last["pid"])  # nothing left behind


def test_a_server_that_dies_is_replaced_for_the_next_trial(tmp_path, forks):
    env = trial_env()
    assert forks(spec(), tmp_path / "a", 120, env=env)["status"] == "ok"
    server = next(iter(forks.servers.values()))
    server.kill()
    server.wait()
    after = forks(spec(), tmp_path / "b", 120, env=env)
    assert after["status"] == "ok", after
    assert next(iter(forks.servers.values())).pid != server.pid


def test_another_allocator_setting_gets_its_own_server(tmp_path, forks):
    a = forks(spec(), tmp_path / "a", 120, env=trial_env())
    b = forks(spec(), tmp_path / "b", 120, env={**trial_env(), "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert a["status"] == b["status"] == "ok" and len(forks.servers) == 2


def test_a_sequence_of_trials_measures_what_fresh_processes_measure(tmp_path):
    """Many consecutive configurations through one server, an out-of-memory error among
    them, each against the same spec in a new interpreter (python -m autotune.trial)."""
    configs = [("none", "fp32", 4), ("full", "fp32", 4), ("0.5", "bf16", 2), ("none", "bf16", 8), ("full", "fp32", 8),
               ("none", "fp32", 2)]
    specs = [spec(c, p, mb=mb, acc=8 // mb, target="autotune.models.bert:build", config=SMALL_BERT, seq_len=128)
             for c, p, mb in configs]
    forks = ForkServer("autotune.models.bert:build")
    planted = spec("none", "fp32", mb=8, acc=1, config={"oom_above": 4})
    try:
        forked = []
        for i, s in enumerate(specs):
            forked.append(forks(s, tmp_path / f"fork{i}", 120, env=trial_env()))
            if i == 2:  # an out-of-memory error in the middle of the sequence
                assert forks(planted, tmp_path / "oom", 120, env=trial_env())["status"] == "oom"
    finally:
        forks.close()
    fresh = [run_trial(s, tmp_path / f"fresh{i}", 120, env=trial_env()) for i, s in enumerate(specs)]
    assert [r["status"] for r in forked] == [r["status"] for r in fresh] == ["ok"] * len(specs)
    for (c, p, mb), f, n in zip(configs, forked, fresh, strict=False):
        assert f["pid"] != n["pid"] and f["n_checkpointed"] == n["n_checkpointed"]
        # 1 %, or 1 MiB on these ~40 MiB CPU peaks: resident-set pages and malloc arenas differ
        # by a fraction of a MiB between processes (0.4 MiB seen in CI); carried-over memory
        # was 28-43 %.
        assert f["peak_memory_gib"] == pytest.approx(n["peak_memory_gib"], rel=0.01, abs=2**-10), (
            c, p, mb, f["peak_memory_gib"], n["peak_memory_gib"])
        assert f["static_gib"] == pytest.approx(n["static_gib"])


def test_a_server_that_cannot_start_is_one_clear_error(tmp_path):
    from autotune.trial.runner import ForkServerError

    forks = ForkServer("tests.exits_on_import:build")
    try:
        with pytest.raises(ForkServerError, match="did not start.*forkserver.log"):
            forks(spec(), tmp_path / "a", 60, env=trial_env())
    finally:
        forks.close()
    assert forks.servers == {}



def test_a_builder_whose_import_starts_cuda_runs_each_trial_fresh_instead(tmp_path, capsys):
    # With torchao installed, transformers' import starts CUDA on a GPU machine; the server
    # cannot fork such trials, so each runs in a fresh interpreter, measured all the same.
    forks = ForkServer("tests.starts_cuda_on_import:build")
    try:
        results = [forks(spec(), tmp_path / name, 120, env=trial_env()) for name in ("a", "b")]
    finally:
        forks.close()
    assert forks.fresh_reason and "started CUDA" in forks.fresh_reason
    assert capsys.readouterr().out.count("trial.isolation=fork cannot run here") == 1
    assert [r["status"] for r in results] == ["ok", "ok"] and results[0]["pid"] != results[1]["pid"]
    assert forks.servers == {}


def test_the_server_imports_a_transformers_model_without_torchao_and_a_child_can_import_it():
    # On a GPU machine torchao's import starts CUDA (it probes triton); transformers imports it
    # with any model unless it looks absent. A fresh interpreter: this one may hold torchao.
    code = ("import sys\n"
            "from autotune.trial.forkserver import unimportable\n"
            "from autotune.trial.run import preload\n"
            "with unimportable('torchao'):\n"
            "    preload('autotune.models.llama:build')\n"
            "assert 'transformers.models.llama.modeling_llama' in sys.modules\n"
            "assert 'torchao' not in sys.modules\n"
            "import torchao.optim\n"
            "print('child imports', torchao.optim.AdamW8bit.__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], env=trial_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "child imports AdamW8bit" in out.stdout
