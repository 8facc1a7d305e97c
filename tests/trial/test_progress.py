"""Signs of life: the trial's progress file, the driver's ticker and its estimate of the time left."""
import time

from autotune.trial.progress import PROGRESS_FILE, Ticker, TrialProgress
from tests.trial.test_trial import run, spec


def test_a_trial_writes_where_it_is_and_ends_past_its_timed_steps(tmp_path):
    r = run(tmp_path, spec(measure=4))
    assert r["status"] == "ok", r
    # The last phase written: the saved-bytes count that follows the timed steps.
    assert (tmp_path / "t" / PROGRESS_FILE).read_text() == "counting saved bytes (for the offload bound)"


def test_the_ticker_says_the_trials_line_with_the_time_elapsed_until_the_trial_ends(tmp_path):
    said = []
    TrialProgress(tmp_path / PROGRESS_FILE).say("building the model", "build")  # an old line: cleared
    with Ticker(said.append, tmp_path, "trial 3 (ckpt=none)", every=0.05):
        assert not (tmp_path / PROGRESS_FILE).exists()
        progress = TrialProgress(tmp_path / PROGRESS_FILE)
        deadline = time.monotonic() + 30
        while not any("starting" in s for s in said) and time.monotonic() < deadline:
            time.sleep(0.01)
        progress.say("timed step 7 of at least 10", "timed")
        while not any("timed step" in s for s in said) and time.monotonic() < deadline:
            time.sleep(0.01)
    n = len(said)
    time.sleep(0.2)
    assert len(said) == n  # silent once the trial has ended
    assert said[0].startswith("      ... trial 3 (ckpt=none): starting, ")
    assert any(s.startswith("      ... trial 3 (ckpt=none): timed step 7 of at least 10, ") and s.endswith(" s")
               for s in said), said


def test_within_one_phase_the_trial_rewrites_its_line_at_most_once_per_interval(tmp_path):
    progress = TrialProgress(tmp_path / PROGRESS_FILE, every=3600)
    progress.say("timed step 1 of at least 10", "timed")
    progress.say("timed step 2 of at least 10", "timed")  # within the interval: not written
    assert (tmp_path / PROGRESS_FILE).read_text() == "timed step 1 of at least 10"
    progress.say("counting saved bytes", "after")  # a new phase: written at once
    assert (tmp_path / PROGRESS_FILE).read_text() == "counting saved bytes"
