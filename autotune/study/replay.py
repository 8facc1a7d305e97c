"""Replay a recorded run: a trials table answers for the trial process.

The search strategies are compared on what real hardware measured, with no GPU: each
"trial" returns the recorded row of its configuration. A memory cap below the recorded run's
turns a recorded success whose device-level peak exceeds it into ``oom``, costing what the
recorded trial spent before its first step ended (an out-of-memory trial dies there).

The recorded trials measured the whole window. Other fidelities (trial/fidelity.py) are
simulated from them: a probe costs the recorded start-up and build, its short first step
(the recorded first step less the micro-steps after its ``FIRST_MICRO_STEPS``, at the recorded
step time's share per micro-step: the first step's extra start-up cost is kept whole) plus
``probe_steps`` recorded step times, and reports the recorded speed moved by a draw within
the recorded spread (uniform in [-spread, +spread], seeded by the configuration, so every
replay is the same), with that spread (``ONE_STEP_SPREAD`` where it times one step); its peak
is the recorded one (the probe's peak is the full measurement's: tests/trial/test_fidelity.py,
tests/test_gpu.py). A raced measurement
whose recorded interval lies outside its race range stops after ``RACE_MIN_STEPS`` steps
(recorded ``raced``); otherwise it costs the recorded wall time.
"""
from __future__ import annotations

import json
import math
import random
import zlib
from pathlib import Path

import pandas as pd

from autotune.store.table import fill_defaults
from autotune.train.dimensions import searched, value_in
from autotune.trial.fidelity import FIRST_MICRO_STEPS, ONE_STEP_SPREAD, RACE_MIN_STEPS, probe_steps

_KEEP = ("status", "cause", "peak_memory_gib", "device_peak_gib", "cuda_context_gib", "peak_allocated_gib",
         "peak_reserved_gib", "samples_per_s", "time_spread", "step_time_s", "static_gib", "pruned_by",
         "saved_gib", "saved_per_sample_gib", "host_link_gib_s")


def _key(row: dict) -> tuple:
    """A configuration's values in every searched dimension (a recorded table's columns, or a
    spec's strategy), each its default where the row has none."""
    return tuple(value_in(row, d.name) for d in searched())


FORK_STARTUP_S = 0.2  # a forked trial's start-up on the H100 (benchmarks/front-h100-2026-12-05: 0.15-0.25 s)


class Replay:
    """A ``runner`` for ``driver.run_study`` that answers from a recorded trials table.

    ``window``: (warm-up steps, timed steps, minimum seconds) of a full measurement to cost
    every trial with, from its recorded build, first step and step time and a forked
    start-up (``FORK_STARTUP_S``), instead of its recorded wall time: the recorded runs
    started a fresh interpreter per trial (about 11 s on the H200) and timed 5 steps, which
    today's defaults (fork isolation, 2 + 10 steps and 5 s) do not."""

    def __init__(self, table: pd.DataFrame, window: tuple | None = None):
        self.window = window
        t = table.copy()
        fill_defaults(t)
        self.rows = {}
        for row in t.to_dict("records"):
            if row.get("status") in ("pruned", "skipped"):
                continue  # never ran: nothing recorded to replay
            self.rows[_key(row)] = row
        self.trials = 0
        self.wall_s = 0.0

    def _modeled(self, row: dict) -> float:
        """A full measurement's wall time under ``window``, from the recorded parts."""
        assert self.window is not None  # called only with a window (_run)
        warmup, measure, min_s = self.window
        step = float(row.get("step_time_s") or 0.0)
        steps = min(200, max(measure, math.ceil(min_s / step))) if step > 0 else measure
        return FORK_STARTUP_S + sum(float(row.get(k) or 0.0) for k in ("build_s", "first_step_s")) + (
            warmup + steps) * step

    def _fidelity(self, spec: dict, row: dict, result: dict, wall: float) -> float:
        """Simulate a probe or a raced measurement from the recorded full one; returns its wall time."""
        step = float(row.get("step_time_s") or 0.0)
        startup = FORK_STARTUP_S if self.window is not None else float(row.get("startup_s") or 0.0)
        fixed = startup + sum(float(row.get(k) or 0.0) for k in ("build_s", "first_step_s"))
        spread = float(row.get("time_spread") or 0.0)
        if spec.get("fidelity") == "probe" and step > 0 and fixed > 0:
            seed = zlib.crc32(json.dumps(spec["strategy"], sort_keys=True).encode())
            draw = random.Random(seed).uniform(-spread, spread)
            timed = probe_steps(step)
            result.update(samples_per_s=float(row["samples_per_s"]) * (1 + draw), fidelity="probe",
                          time_spread=ONE_STEP_SPREAD if timed == 1 else spread)
            acc = int(row.get("accumulation") or 1)
            skipped_micro_steps = step * (1 - min(acc, FIRST_MICRO_STEPS) / acc)
            return max(0.0, fixed - skipped_micro_steps) + timed * step
        result["fidelity"] = "full"
        race = spec.get("race_speed")
        if race and step > 0 and fixed > 0:
            sps = float(row["samples_per_s"])
            lo, hi = sps * (1 - spread), sps * (1 + spread)
            if hi < min(race) or lo > max(race):
                result.update(fidelity="raced", race="below" if hi < min(race) else "above")
                return fixed + (2 + RACE_MIN_STEPS) * step  # 2 warm-up steps, then the race's steps
            result["race"] = "open"
        return wall

    @classmethod
    def from_csv(cls, path: Path) -> Replay:
        return cls(pd.read_csv(path))

    def __call__(self, spec: dict, trial_dir: Path, timeout_s: float, env: dict | None = None) -> dict:
        s = spec["strategy"]
        row = self.rows.get(_key(s))
        if row is None:
            return {"status": "error", "cause": "not in the recorded table", "wall_s": 0.0}
        result = {k: row[k] for k in _KEEP if k in row and not (isinstance(row[k], float) and math.isnan(row[k]))}
        wall = float(row.get("wall_s") or 0.0)
        cap: float | None = spec.get("memory_cap_gib")
        peak = row.get("device_peak_gib", row.get("peak_memory_gib"))
        if row["status"] == "ok" and cap is not None and peak is not None and peak > cap:
            result = {"status": "oom", "cause": f"replayed: device peak {peak:.2f} GiB is above the {cap:g} GiB cap"}
            wall = sum(float(row.get(k) or 0.0) for k in ("startup_s", "build_s", "first_step_s")) or wall
            if self.window is not None:
                wall = FORK_STARTUP_S + sum(float(row.get(k) or 0.0) for k in ("build_s", "first_step_s"))
        elif row["status"] == "ok":
            wall = self._fidelity(spec, row, result, self._modeled(row) if self.window is not None else wall)
        result["wall_s"] = wall
        result["clean_start"] = True  # the recorded runs: a fresh process per trial
        self.trials += 1
        self.wall_s += wall
        return result
