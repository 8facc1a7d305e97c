"""Signs of life while a trial runs: the trial writes where it is, the driver says it.

A trial can take minutes (a large model on a CPU, a re-measurement, a profile), and a
silent terminal reads as a hang. The trial process keeps one line in ``progress.txt``
beside its result ("timed step 7 of at least 20, 5 s of timed steps or more"); while the
driver waits for the trial, a ``Ticker`` thread prints that line with the time elapsed
every ``TICK_S`` seconds. Plain log lines rather than a progress bar library: the output
goes through Hydra's logging into a file as well as the terminal, where carriage-return
bars turn into noise.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

TICK_S = 15.0  # the most a run stays silent while a trial runs
WRITE_EVERY_S = 0.5  # the trial rewrites its line at most this often within one phase

PROGRESS_FILE = "progress.txt"


class TrialProgress:
    """In the trial process: ``say(text)`` records where the trial is (cheaply: a new
    phase is written at once, steps within a phase at most every ``every`` seconds)."""

    def __init__(self, path: Path | None, every: float = WRITE_EVERY_S):
        self.path, self.every, self.last = path, every, 0.0
        self.phase: str | None = None

    def say(self, text: str, phase: str | None = None) -> None:
        if self.path is None:
            return
        now = time.monotonic()
        if phase == self.phase and now - self.last < self.every:
            return
        self.phase, self.last = phase, now
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text(text)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a sign of life lost, nothing measured


def read_progress(trial_dir: Path) -> str | None:
    try:
        return (trial_dir / PROGRESS_FILE).read_text().strip() or None
    except OSError:
        return None


class Ticker:
    """In the driver, around waiting for one trial: every ``every`` seconds, one line with
    the trial's own progress line and the time since it started."""

    def __init__(self, say: Callable[[str], None], trial_dir: Path, label: str, every: float = TICK_S):
        self.say, self.trial_dir, self.label, self.every = say, trial_dir, label, every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="autotune-ticker", daemon=True)

    def __enter__(self) -> Ticker:
        (self.trial_dir / PROGRESS_FILE).unlink(missing_ok=True)  # a rerun's old line says nothing now
        self.start = time.monotonic()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.stop.set()
        self.thread.join()
        return False

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            where = read_progress(self.trial_dir) or "starting"
            self.say(f"      ... {self.label}: {where}, {time.monotonic() - self.start:.0f} s")
