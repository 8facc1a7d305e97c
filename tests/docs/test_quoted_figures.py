"""The figures docs/benchmarks.md quotes from a committed result are that result's: the
replay table against bench/results/search_replay.json, the CPU default against
bench/results/cpu_default.json, the GPU default runs against their trials.csv files."""
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "benchmarks.md").read_text()
TABLES = {"budgets space": "bert-large-h200-budgets", "budgets space, recorded again today":
          "bert-large-h200-budgets-2026-12-07", "default space": "bert-large-h200"}


def _rows(header_start: str) -> list:
    """The cells of each row of the markdown table whose header starts with ``header_start``."""
    rows = []
    for line in DOC[DOC.index(header_start):].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def _first_number(text: str) -> float:
    return float(re.search(r"[\d.]+", text.replace("**", "")).group())


def test_the_replay_table_is_search_replay_json():
    recorded = {(r["table"], r["budget_gib"]): r for r in json.loads(
        (ROOT / "bench" / "results" / "search_replay.json").read_text())["rows"]}
    rows = _rows("| recorded run | budget |")
    assert len(rows) == len(recorded) == 9
    table = None
    for cells in rows:
        name = re.sub(r" \(\d+ configs\)", "", cells[0])
        table = TABLES.get(name, table)
        r = recorded[(table, _first_number(cells[1]))]
        grid_trials, grid_best = (s.strip() for s in cells[2].split(","))
        assert (int(grid_trials), float(grid_best)) == (r["grid_trials"], r["grid_best_samples_per_s"]), cells
        trials, share = (s.strip() for s in cells[3].split(","))
        assert int(trials) == r["auto_trials"] and _first_number(share) == pytest.approx(100 * r["auto_time_share"],
                                                                                          abs=0.5), cells
        front_trials, reached = (s.strip() for s in cells[4].split(","))
        assert int(front_trials) == r["front_trials"] and reached.replace(" of ", "/") == r["grid_front_reached"]
        measurements, share, reached = (s.strip() for s in cells[5].split(","))
        assert int(measurements) == r["fidelity_measurements"], cells
        assert _first_number(share) == pytest.approx(100 * r["fidelity_time_share"], abs=0.5), cells
        assert reached.replace(" of ", "/") == r["fidelity_grid_front_reached"], cells
        assert _first_number(cells[6]) == pytest.approx(100 * r["fidelity_vs_grid"], abs=0.5), cells


def test_the_cpu_default_row_is_cpu_default_json():
    runs = json.loads((ROOT / "bench" / "results" / "cpu_default.json").read_text())["runs"]
    cells = _rows("| command | runs | time (s) |")[0]
    times = [float(t) for t in re.findall(r"[\d.]+", cells[2].split("(")[0])]
    assert times == [r["elapsed_s"] for r in runs]
    assert f"median {sorted(times)[len(times) // 2]}" in cells[2]
    assert [int(n) for n in re.findall(r"\d+", cells[3])] == [r["front_points"] for r in runs]


@pytest.mark.parametrize("run, best_sps", [("machine-c/bert-large-24", 285.8), ("machine-c/llama-16", 297.7),
                                           ("bert-large-24", 283.1), ("llama-16", 314.8)])
def test_the_gpu_default_runs_best_is_their_trials_csv(run, best_sps):
    folder = ROOT / "benchmarks" / "fidelity-h100-2026-12-07" / run
    best = yaml.safe_load((folder / "best.yaml").read_text())
    assert round(best["measured"]["samples_per_s"], 1) == best_sps
    assert f"{best_sps} samples/s" in DOC.split("## The default run on a GPU")[1].split("\n## ")[0]
    trials = pd.read_csv(folder / "trials.csv")
    row = trials[trials["number"] == best["measured"]["trial"]].iloc[0]  # the best is that trial's figure
    assert round(row["samples_per_s"], 1) == best_sps
