"""Static and peak memory of one small Llama's trial per model-state dimension, against the
bytes per parameter each should save (what tests/test_gpu_model_state.py asserts), on CUDA:
    python bench/state_bytes.py [NAME ...]     # plain is always run; prints one JSON line each
"""
import json
import sys
import tempfile
from pathlib import Path

from autotune.trial.runner import ForkServer
from tests.conftest import trial_env
from tests.test_gpu_model_state import SAVED_BYTES, llama_spec
from tests.test_gpu_model_state import STATE_RUNS as RUNS

names = ["plain"] + [n for n in (sys.argv[1:] or list(SAVED_BYTES)) if n != "plain"]
forks = ForkServer("autotune.models.llama:build")
tmp = Path(tempfile.mkdtemp())
try:
    out = {n: forks(llama_spec(**RUNS[n]), tmp / n, 600, env=trial_env()) for n in names}
finally:
    forks.close()
plain = out["plain"]
params = plain["static_gib"] / 16 * 4
for n, r in out.items():
    keys = ("status", "static_gib", "peak_allocated_gib", "peak_reserved_gib", "optimizer", "numerics")
    row = {k: r.get(k) for k in keys}
    if n in SAVED_BYTES and r["status"] == "ok":
        predicted = params / 4 * SAVED_BYTES[n]
        row.update(predicted_saved_gib=predicted, static_saved_gib=plain["static_gib"] - r["static_gib"],
                   peak_saved_gib=plain["peak_allocated_gib"] - r["peak_allocated_gib"])
    print(json.dumps({n: row}))
