"""Replay a recorded run: a trials table answers for the trial process.

The search strategies are compared on what real hardware measured, with no GPU: each
"trial" returns the recorded row of its configuration. A memory cap below the recorded run's
turns a recorded success whose device-level peak exceeds it into ``oom``, costing what the
recorded trial spent before its first step ended (an out-of-memory trial dies there).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import pandas as pd

from autotune.train.strategy import checkpoint_label

_KEEP = ("status", "cause", "peak_memory_gib", "device_peak_gib", "cuda_context_gib", "peak_allocated_gib",
         "peak_reserved_gib", "samples_per_s", "time_spread", "step_time_s", "static_gib", "pruned_by",
         "saved_gib", "saved_per_sample_gib", "host_link_gib_s")


def _key(checkpointing, precision, micro_batch, offload, allocator) -> tuple:
    return checkpoint_label(checkpointing), precision, int(micro_batch), bool(offload), allocator


class Replay:
    """A ``runner`` for ``driver.run_study`` that answers from a recorded trials table."""

    def __init__(self, table: pd.DataFrame):
        t = table.copy()
        t["offload"] = t["offload"].fillna(False).astype(bool) if "offload" in t else False
        t["allocator"] = t["allocator"].fillna("default") if "allocator" in t else "default"
        self.rows = {}
        for row in t.to_dict("records"):
            if row.get("status") in ("pruned", "skipped"):
                continue  # never ran: nothing recorded to replay
            self.rows[_key(row["checkpointing"], row["precision"], row["micro_batch"], row["offload"],
                           row["allocator"])] = row
        self.trials = 0
        self.wall_s = 0.0

    @classmethod
    def from_csv(cls, path: Path) -> "Replay":
        return cls(pd.read_csv(path))

    def __call__(self, spec: dict, trial_dir: Path, timeout_s: float, env: Optional[dict] = None) -> dict:
        s = spec["strategy"]
        row = self.rows.get(_key(s["checkpointing"], s["precision"], s["micro_batch"], s["offload"], s["allocator"]))
        if row is None:
            return {"status": "error", "cause": "not in the recorded table", "wall_s": 0.0}
        result = {k: row[k] for k in _KEEP if k in row and not (isinstance(row[k], float) and math.isnan(row[k]))}
        wall = float(row.get("wall_s") or 0.0)
        cap: Optional[float] = spec.get("memory_cap_gib")
        peak = row.get("device_peak_gib", row.get("peak_memory_gib"))
        if row["status"] == "ok" and cap is not None and peak is not None and peak > cap:
            result = {"status": "oom", "cause": f"replayed: device peak {peak:.2f} GiB is above the {cap:g} GiB cap"}
            wall = sum(float(row.get(k) or 0.0) for k in ("startup_s", "build_s", "first_step_s")) or wall
        result["wall_s"] = wall
        result["clean_start"] = True  # the recorded runs: a fresh process per trial
        self.trials += 1
        self.wall_s += wall
        return result
