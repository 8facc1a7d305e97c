"""The configuration queue in the study storage: claims, duplicates, orphans (no trial runs)."""
import os
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from autotune.store.claims import MAX_CUTS, ORPHANED, claim, duplicate_of, enqueue_missing, given_up, owner, recover
from autotune.store.storage import StorageError, open_study
from tests.conftest import ROOT

CONFIGS = [{"checkpointing": c, "micro_batch": m} for c in ("none", "full") for m in (1, 2)]


@pytest.fixture(params=["sqlite", "journal"])
def study(request, tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}" if request.param == "sqlite" else f"journal:{tmp_path / 's.log'}"
    return open_study("s", url)


def _run(study, trial, value=1.0):
    for k, choices in (("checkpointing", ["none", "full"]), ("micro_batch", [1, 2])):
        trial.suggest_categorical(k, choices)
    study.tell(trial, [value, 1.0])


def test_each_configuration_is_enqueued_once_and_claimed_once(study):
    assert enqueue_missing(study, CONFIGS) == 4
    assert enqueue_missing(study, CONFIGS) == 0  # a second driver adds nothing
    claimed = []
    while (t := claim(study)) is not None:
        assert duplicate_of(study, t) is None
        claimed.append(t.number)
        _run(study, t)
    assert sorted(claimed) == [0, 1, 2, 3]
    assert {tuple(sorted(t.params.items())) for t in study.trials} == {tuple(sorted(c.items())) for c in CONFIGS}


def test_a_configuration_enqueued_twice_runs_once(study):
    # Two drivers enqueue at the same moment: the same configuration lands twice.
    study.enqueue_trial(CONFIGS[0])
    study.enqueue_trial(CONFIGS[0])
    first, second = claim(study), claim(study)
    assert duplicate_of(study, first) is None
    assert duplicate_of(study, second) == first.number
    # Whichever is claimed first, the earlier trial is the one that runs.
    study.enqueue_trial(CONFIGS[1])
    study.enqueue_trial(CONFIGS[1])
    waiting = study.get_trials(states=(TrialState.WAITING,))
    study._storage.set_trial_state_values(waiting[1]._trial_id, TrialState.RUNNING)  # the later one claimed
    later = optuna.Trial(study, waiting[1]._trial_id)
    assert duplicate_of(study, later) == waiting[0].number


def test_a_claim_is_atomic_across_processes(tmp_path):
    url = f"journal:{tmp_path / 's.log'}"
    study = open_study("s", url)
    enqueue_missing(study, [{"checkpointing": "none", "micro_batch": m} for m in range(1, 41)])
    code = ("import sys; from autotune.store.storage import open_study; from autotune.store.claims import claim\n"
            "s = open_study('s', sys.argv[1]); n = []\n"
            "while (t := claim(s)) is not None: n.append(t.number)\n"
            "print(' '.join(map(str, n)))")
    procs = [subprocess.Popen([sys.executable, "-c", code, url], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT) for _ in range(4)]
    got = [int(n) for p in procs for n in p.communicate(timeout=120)[0].split()]
    assert sorted(got) == list(range(40))  # every trial claimed, none twice


def test_a_live_drivers_trial_is_left_alone_a_dead_ones_is_retried_until_three_cuts(study):
    enqueue_missing(study, CONFIGS[:2])
    mine = claim(study)  # owned by this (live) process
    dead = claim(study)
    study._storage.set_trial_user_attr(dead._trial_id, "owner", {**owner(), "pid": 999999999, "start": "0"})
    retried = recover(study)
    assert [r["params"] for r in retried] == [CONFIGS[1]]
    trials = study.get_trials()
    assert trials[mine.number].state == TrialState.RUNNING
    assert trials[dead.number].state == TrialState.FAIL and trials[dead.number].user_attrs["cause"] == ORPHANED
    assert trials[-1].state == TrialState.WAITING and trials[-1].user_attrs["retry_of"] == dead.number
    # The retry dies too: retried again; after the third cut, given up (and said so).
    again = claim(study)
    study._storage.set_trial_user_attr(again._trial_id, "owner", {**owner(), "pid": 999999999, "start": "0"})
    assert [r["user_attrs"]["retry_of"] for r in recover(study)] == [again.number]
    assert given_up(study) == []
    third = claim(study)
    study._storage.set_trial_user_attr(third._trial_id, "owner", {**owner(), "pid": 999999999, "start": "0"})
    assert recover(study) == []
    assert [t.number for t in given_up(study)] == [third.number]


def test_a_configuration_the_user_interrupts_again_and_again_is_retried_every_time(study):
    """A stop the driver recorded (Ctrl-C) is the user's: the grid's first configuration, the one
    every restart begins with, is never given up however often it is interrupted."""
    enqueue_missing(study, CONFIGS[:1])
    for k in range(MAX_CUTS + 2):
        t = claim(study)
        study._storage.set_trial_user_attr(t._trial_id, "status", "interrupted")
        study.tell(t, state=TrialState.FAIL)
        assert [r["params"] for r in recover(study)] == [CONFIGS[0]], k
        assert given_up(study) == []


def test_a_corrupt_journal_is_a_clear_error_and_stays_untouched(tmp_path):
    path = tmp_path / "s.log"
    path.write_text('{"op_code": 0, "worker_id": "x", "study_name": "s", "directions": [1]}\n{not json\n')
    before = path.read_bytes()
    with pytest.raises(StorageError, match=f"journal file {path} is unreadable"):
        open_study("s", f"journal:{path}")
    assert path.read_bytes() == before


def test_a_password_in_a_storage_url_is_kept_out_of_messages():
    from autotune.store.storage import redact

    url = "postgresql://tuner:s3cr%40t@db.example:5432/studies"
    assert redact(url) == "postgresql://tuner:***@db.example:5432/studies"
    assert redact(f"could not connect to {url}", url) == "could not connect to postgresql://tuner:***@db.example:5432/studies"
    assert redact("sqlite:////tmp/a.db") == "sqlite:////tmp/a.db"


def test_a_trial_claimed_a_moment_ago_without_its_owner_yet_is_not_orphaned(study, monkeypatch):
    # claim() moves the trial to RUNNING, then records the owner: another driver's recover()
    # running in between must leave it alone (CI once lost both drivers to this race).
    enqueue_missing(study, CONFIGS[:1])
    waiting = study.get_trials(states=(TrialState.WAITING,))[0]
    study._storage.set_trial_state_values(waiting._trial_id, TrialState.RUNNING)  # claimed, no owner yet
    assert recover(study) == []
    assert study.get_trials()[0].state == TrialState.RUNNING
    # An owner that never appears: orphaned once STALE_S has passed, and retried once.
    monkeypatch.setattr("autotune.store.claims.STALE_S", 0.0)
    assert [r["params"] for r in recover(study)] == [CONFIGS[0]]
    assert study.get_trials()[0].user_attrs["cause"] == ORPHANED


def test_a_dead_unreaped_process_counts_as_gone():
    import time

    from autotune.system.linux import process_start as _process_start

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    for _ in range(100):  # it exits at once, and stays a zombie until waited for
        time.sleep(0.05)
        with open(f"/proc/{child.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
    assert _process_start(child.pid) is None
    child.wait()
    assert _process_start(os.getpid()) is not None


def test_the_optuna_internals_autotune_relies_on_are_there():
    """store/optuna_access.py is the only place that reaches into Optuna; an Optuna release
    that renames what it uses fails here, by name, not somewhere in the queue."""
    import optuna
    from optuna.trial import TrialState

    from autotune.store.optuna_access import fixed_params, storage_of, study_id, trial_handle, trial_id

    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    study.enqueue_trial({"micro_batch": 8})
    frozen = study.get_trials(deepcopy=False)[0]
    assert frozen.state == TrialState.WAITING and fixed_params(frozen) == {"micro_batch": 8}
    storage = storage_of(study)
    assert isinstance(storage, optuna.storages.BaseStorage)
    assert [t.number for t in storage.get_all_trials(study_id(study), states=(TrialState.WAITING,))] == [0]
    assert storage.set_trial_state_values(trial_id(frozen), state=TrialState.RUNNING)
    live = trial_handle(study, trial_id(frozen))
    assert live.number == 0 and trial_id(live) == trial_id(frozen)
    assert live.suggest_categorical("micro_batch", [4, 8]) == 8  # the enqueued value, as the driver relies on


def test_no_module_but_optuna_access_touches_optuna_private_attributes():
    import re

    root = ROOT / "autotune"
    private = re.compile(r"\bstudy\._storage\b|\._study_id\b|\._trial_id\b|\.system_attrs\b|optuna\.Trial\(")
    offenders = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py") if p.name != "optuna_access.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if private.search(line.replace("self._trial_id", ""))]
    assert not offenders, offenders
