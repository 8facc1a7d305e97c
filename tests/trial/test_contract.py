"""The result side of the trial contract: what the driver reads back is checked once, where
it crosses from the trial process (trial/contract.py:check_result, trial/runner.py)."""
import glob
import json

import pytest

from autotune.trial.contract import ResultError, check_result
from autotune.trial.runner import _collect
from tests.conftest import ROOT

OK = {"status": "ok", "peak_memory_gib": 1.5, "samples_per_s": 20.0}


@pytest.mark.parametrize("bad, says", [
    ([], "not a mapping"),
    ({"status": "finished"}, "status='finished'"),
    ({"status": "oom"}, "status='oom' without a cause"),
    ({"status": "ok", "samples_per_s": 20.0}, "peak_memory_gib=None"),
    ({**OK, "samples_per_s": float("nan")}, "samples_per_s=nan"),
    ({**OK, "pid": "123"}, "pid='123' is not int"),
    ({**OK, "contended": 1}, "contended=1 is not bool"),
    ({**OK, "num_alloc_retries": True}, "num_alloc_retries=True is not int"),
    ({**OK, "step_times_s": "0.1;0.2"}, "step_times_s='0.1;0.2' is not list[float]"),
])
def test_a_result_that_breaks_the_contract_is_named(bad, says):
    with pytest.raises(ResultError, match=says.replace("[", r"\[").replace("(", r"\(")):
        check_result(bad)


def test_every_committed_result_file_keeps_the_contract():
    """The GPU and CPU runs under benchmarks/ (several commits, H100 and H200) read back clean."""
    files = glob.glob(str(ROOT / "benchmarks" / "**" / "result.json"), recursive=True)
    assert len(files) >= 50
    for f in files:
        check_result(json.loads(open(f).read()))


def test_the_driver_records_a_result_file_that_breaks_it_as_an_error_naming_the_key(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({**OK, "contended": "no"}))
    got = _collect(path, tmp_path / "log.txt", 60.0, timed_out=False, returncode=0)
    assert got["status"] == "error" and "contended='no' is not bool" in got["cause"]
    path.write_text(json.dumps({**OK, "time_spread": 0.05, "load_average": None}))
    assert _collect(path, tmp_path / "log.txt", 60.0, timed_out=False, returncode=0)["status"] == "ok"


def test_a_spec_whose_strategy_is_not_a_strategy_is_refused_on_either_side():
    from autotune.train.strategy import Strategy
    from autotune.trial.contract import ModelSpec, TrialSpec

    good = TrialSpec(model=ModelSpec("t", "autotune.models.bert.build"), seq_len=8, device="cpu",
                     strategy=Strategy("none", "fp32", 2, 2).as_dict(), warmup_steps=1, measure_steps=2)
    assert TrialSpec.from_dict(good.to_dict()).the_strategy() == Strategy("none", "fp32", 2, 2)
    bad = {**good.to_dict(), "strategy": {**good.strategy, "precision": "fp8"}}
    with pytest.raises(ValueError, match="trial spec: precision='fp8'"):
        TrialSpec.from_dict(bad)
