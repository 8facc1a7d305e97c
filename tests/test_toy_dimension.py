"""A dimension declared in one place reaches everything: a user's module declares it, and a
real CPU study searches it, applies it in its trials, records it in trials.csv, names it in
best.yaml, the summary, ``show`` and the report, and ``load_tuned`` reads and applies it."""
import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT, cli_command, trial_env

pytestmark = pytest.mark.e2e

# "slow", the default, sleeps 20 ms in each forward: the study must find "fast". Each
# application leaves a file (pid, value), so the test sees where it ran.
TOY = '''
import functools, os, time
from pathlib import Path

from autotune.train.dimensions import Dimension, declare


def apply(model, value):
    Path(os.environ["TOY_MARKS"], f"{os.getpid()}-{value}").touch()
    if value == "slow":
        forward = model.forward

        @functools.wraps(forward)
        def slowed(*args, **kwargs):
            time.sleep(0.02)
            return forward(*args, **kwargs)

        model.forward = slowed


declare(Dimension("toy_pace", "slow", ("slow", "fast"), group="toy", tag="pace={}",
                  help="a toy: slow sleeps 20 ms a forward", apply=apply))
'''

SPACE = ["model=tiny", "device=cpu", "global_batch=8", "seq_len=16", "trial.warmup_steps=1", "trial.measure_steps=3",
         "search_space.checkpointing=[none]", "search_space.precision=[fp32]", "search_space.micro_batch.min=4"]


@pytest.fixture
def toy_env(tmp_path):
    (tmp_path / "toy_dims.py").write_text(TOY)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = trial_env()
    env.update(AUTOTUNE_DIMENSIONS="toy_dims", TOY_MARKS=str(marks),
               PYTHONPATH=os.pathsep.join([str(tmp_path), env["PYTHONPATH"]]))
    return env, marks


def run(env, *args, **kw):
    return subprocess.run(list(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, **kw)


def test_a_dimension_declared_once_is_searched_applied_recorded_exported_and_shown(tmp_path, toy_env):
    env, marks = toy_env
    run_dir = tmp_path / "run"
    out = run(env, *cli_command(run_dir, *SPACE, "search_space.toy_pace=[slow,fast]"))
    assert out.returncode == 0, out.stdout + out.stderr

    trials = pd.read_csv(run_dir / "trials.csv")  # the space: 2 micro-batches x 2 values
    assert sorted(trials["toy_pace"]) == ["fast", "fast", "slow", "slow"]
    applied = {m.name.split("-")[1] for m in marks.iterdir() if int(m.name.split("-")[0]) != os.getpid()}
    assert applied == {"slow", "fast"}  # in the trial processes, both values
    ok = trials[trials["status"] == "ok"]
    speed = ok.groupby("toy_pace")["samples_per_s"].max()
    assert speed["fast"] > speed["slow"]  # its application is what was measured

    best = yaml.safe_load((run_dir / "best.yaml").read_text())
    assert best["strategy"]["toy_pace"] == "fast"
    assert "toy_pace=fast" in out.stdout  # the summary's best line
    assert "+ toy_pace fast" in out.stdout  # the headline
    report = (run_dir / "report.html").read_text()
    assert "<th>toy_<wbr>pace</th>" in report and "toy_pace <b>fast</b>" in report  # the table, the best line
    shown = run(env, sys.executable, "-m", "autotune.show", str(run_dir))
    assert shown.returncode == 0 and "toy_pace=fast" in shown.stdout, shown.stdout + shown.stderr

    for mark in marks.iterdir():
        mark.unlink()
    loaded = run(env, sys.executable, "-c", (
        "import json, sys, torch\n"
        "from autotune import load_tuned\n"
        f"t = load_tuned({str(run_dir / 'best.yaml')!r})\n"
        "t.apply(torch.nn.Linear(2, 2))\n"
        "print(json.dumps({'pace': t.strategy.toy_pace, 'label': t.strategy.label()}))"))
    assert loaded.returncode == 0, loaded.stderr
    said = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert said == {"pace": "fast", "label": "ckpt=none prec=fp32 mb=" + str(best["strategy"]["micro_batch"])
                    + f" acc={best['strategy']['accumulation']} pace=fast"}
    assert [m.name.split("-")[1] for m in marks.iterdir()] == ["fast"]  # load_tuned(...).apply applied it


def test_a_bad_value_of_a_declared_dimension_is_refused_before_any_trial(tmp_path, toy_env):
    env, marks = toy_env
    out = run(env, *cli_command(tmp_path / "run", *SPACE, "search_space.toy_pace=[medium]"))
    assert out.returncode != 0
    assert "toy_pace has unknown value(s) ['medium']; use values from ['slow', 'fast']" in out.stdout + out.stderr
    assert list(marks.iterdir()) == [] and not (tmp_path / "run" / "trials.csv").exists()
