"""trial.cpu_threads=auto: CPU trials run with the cores other processes leave free (study/threads.py)."""
import subprocess
import sys
import time

from autotune.study.threads import OtherCpuUse, free_core_threads
from autotune.trial.runner import run_trial
from tests.conftest import trial_env
from tests.trial.test_fidelity import cpu_spec

SPIN = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end:\n    pass\n"


def test_threads_follow_the_cores_others_leave_free():
    assert free_core_threads(None, 2) is None  # unreadable: torch's default
    assert free_core_threads(0.3, 2) is None  # a quiet machine: torch's default
    assert free_core_threads(1.6, 2) == 1 and free_core_threads(2.0, 2) == 1  # at least one
    assert free_core_threads(1.0, 16) == 15


def test_another_process_counts_and_the_studys_own_do_not():
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.3)
        with_it, without_it = OtherCpuUse(), OtherCpuUse(pids=[spinner.pid])  # the same window
        time.sleep(1.0)
        seen, excluded = with_it.cores(), without_it.cores()
    finally:
        spinner.kill()
        spinner.wait()
    assert seen >= 0.7, seen  # a core's worth, less what the scheduler gave others
    assert seen - excluded >= 0.7, (seen, excluded)  # a process of the study's own is left out


def test_a_cpu_trial_runs_the_threads_it_is_given(tmp_path):
    spec = cpu_spec("none", 2, "probe", {"width": 32, "depth": 2})
    result = run_trial({**spec, "cpu_threads": 1}, tmp_path / "t", 300, env=trial_env())
    assert result["status"] == "ok" and result["cpu_threads"] == 1
