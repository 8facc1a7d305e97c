"""The terminal summary's Pareto table: each throughput and ROI with its interval."""
import re

import pandas as pd

from autotune.results.outputs import summary
from autotune.scoring.score import score

ROI = {"memory_price_per_gib_hour": 0.025, "compute_price_per_hour": 3.5, "workload_samples": 1e7}


def test_the_terminal_front_shows_each_figure_with_its_interval_and_no_negative_speed_bound():
    rows = [("none", "fp32", 16, 1, 2.0, 50.0, 0.02), ("none", "bf16", 16, 1, 1.5, 80.0, 0.30),
            ("full", "bf16", 4, 4, 0.6, 20.0, 1.50)]  # a spread above 100 % would give a negative bound
    trials = pd.DataFrame([dict(number=i, status="ok", checkpointing=c, precision=p, micro_batch=m, accumulation=a,
                                offload=False, allocator="default", cause=None, peak_memory_gib=mem, samples_per_s=sps,
                                time_spread=spread) for i, (c, p, m, a, mem, sps, spread) in enumerate(rows)])
    scored, _ = score(trials, 16, 4.0, ROI)
    text = summary(scored, 1, "roi")
    table = text[text.index("Pareto front"):].splitlines()[2:]
    assert len(table) == 2  # full/bf16/4 and none/bf16/16; none/fp32 is slower and larger
    for line in table:
        speeds = re.search(r"(\d+\.\d) \[(-?\d+\.\d), (\d+\.\d)\]", line)
        assert speeds, line
        value, lo, hi = map(float, speeds.groups())
        assert 0 <= lo <= value <= hi
    noisy = next(line for line in table if line.lstrip().startswith("full"))
    assert "20.0 [0.0, " in noisy  # the interval is clamped at zero, not negative
    assert re.search(r"-286\.8 \[up to -?\d+\.\d\]$", noisy.rstrip()), (
        noisy
    )  # ROI: no lower end at a speed of 0 ("up to", not "-inf")
