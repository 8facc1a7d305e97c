"""The whole loop through the CLI, as a user runs it, on a tiny model."""
import re

import pandas as pd
import pytest
import yaml

from autotune import load_tuned
from autotune.train.device import resolve_device
from tests.conftest import run_cli

pytestmark = pytest.mark.e2e  # python -m autotune end to end

FAST = [
    "model=tiny",
    "device=cpu",
    "search=grid",
    "global_batch=8",
    "seq_len=16",
    "trial.warmup_steps=1",
    "trial.measure_steps=3",
]


def test_tune_writes_every_output(tmp_path):
    run_dir = tmp_path / "run"
    out = run_cli(run_dir, *FAST)
    assert out.returncode == 0, out.stdout + out.stderr
    for name in ["best.yaml", "trials.csv", "pareto.csv", "report.html", "pareto.png", "study.db",
                 ".hydra/config.yaml", "autotune.log", "trials/forkserver.log"]:  # the server's log kept: it served
        assert (run_dir / name).is_file(), name

    # After each trial that ran, the time left (the queue times the median trial), in the
    # search and in the re-measurement; none after the last of either.
    ran_lines = [line for line in out.stdout.splitlines() if re.match(r"\[ *\d+/\d+\] .* ok ", line)]
    for line in ran_lines:
        i, n = map(int, re.match(r"\[ *(\d+)/(\d+)\]", line).groups())
        eta = re.search(r"\| about [\d.]+ (s|min) left \((\d+) more (?:probe|trial)\(s\) at \d+ s each"
                        r"(?:, then about 2 full measurements at \d+ s)?\)$", line)
        assert (eta is not None and int(eta.group(2)) == n - i) if i < n else eta is None, line
    trials = pd.read_csv(run_dir / "trials.csv")
    for col in ["status", "checkpointing", "precision", "micro_batch", "accumulation", "peak_memory_gib",
                "samples_per_s", "roi", "cause"]:
        assert col in trials.columns
    # 3 checkpointing (none, half the blocks, full) x 3 precisions x micro-batches {4, 8}:
    # every configuration once.
    assert len(trials) == 18
    assert len(trials.drop_duplicates(["checkpointing", "precision", "micro_batch"])) == 18
    assert (trials["micro_batch"] * trials["accumulation"] == 8).all()
    # Precisions this CPU has no native support for are skipped with the reason, never run.
    native = set(resolve_device("cpu").precisions)
    ran = trials[trials["status"] == "ok"]
    assert set(ran["precision"]) == native and len(ran) == 6 * len(native)
    skipped = trials[trials["status"] == "skipped"]
    assert len(skipped) == 6 * (3 - len(native)) and skipped["cause"].astype(str).str.contains("no native").all()

    # One progress line per configuration (a probe: trial.fidelity=auto), then the top two
    # (and any other within the probes' spread of the top, at most three) measured in full
    # in fresh processes, the best over the whole window; then the summary with the front.
    # A line per trial run, and a skip reason once, not once per configuration it applies to
    assert len(re.findall(r"^\[\s*\d+/18\]", out.stdout, flags=re.M)) == len(ran) + skipped["cause"].nunique()
    assert all("probe," in line for line in ran_lines), ran_lines
    # The measurements after the search say [confirm], not a count whose total would change.
    repeats = re.findall(r"^\[confirm\].*\[repeat \d+ of trial (\d+)\]", out.stdout, flags=re.M)
    said = re.search(r"measuring (\d+) contender\(s\) in full", out.stdout)
    assert said and 2 <= int(said.group(1)) <= 3, out.stdout
    assert len(repeats) >= int(said.group(1))
    folded = trials[trials["samples_per_s_runs"].notna()]
    assert sorted(folded["number"]) == sorted({int(n) for n in repeats})
    assert (folded["samples_per_s_runs"].str.count(";") >= 1).all()  # the probe and a full measurement at least
    assert (folded["peak_memory_gib_runs"].str.count(";") >= 1).all()  # and each one's peak kept
    assert set(folded["fidelity"]) <= {"raced", "full"} and set(trials.loc[
        (trials["status"] == "ok") & trials["samples_per_s_runs"].isna(), "fidelity"]) <= {"probe"}
    assert "best by roi:" in out.stdout and "Pareto front" in out.stdout
    # The terminal starts with autotune's own line (no third-party noise from the trial
    # processes either) and ends with the headline: what to use, against the baseline, how sure.
    assert out.stdout.splitlines()[0].startswith("device: ") and out.stderr == "", (out.stdout[:300], out.stderr)
    last = out.stdout.rstrip("\n").split("\n\n")[-1].splitlines()
    assert last[0].startswith("Use ") and "samples/s" in last[0] and last[2].startswith("Certainty: "), last
    assert last[1].startswith(("Against the baseline none/fp32/mb8", "This is the baseline")), last

    tuned = load_tuned(run_dir / "best.yaml")
    best = yaml.safe_load((run_dir / "best.yaml").read_text())
    row = trials[trials["number"] == best["measured"]["trial"]].iloc[0]
    assert (tuned.checkpointing, tuned.precision, tuned.micro_batch) == (
        row["checkpointing"],
        row["precision"],
        row["micro_batch"],
    )
    assert tuned.micro_batch * tuned.accumulation == 8
    # The winner is the top ROI, or tied with it within the measured timing spread (a spread
    # of 100 % or more, as on a loaded machine, leaves its bound undefined: it bounds nothing).
    top = trials.loc[trials["roi"].idxmax()]
    assert row["number"] == top["number"] or not row["roi_hi"] < top["roi_lo"]

    pareto = pd.read_csv(run_dir / "pareto.csv")
    assert len(pareto) >= 1 and set(pareto["number"]) <= set(ran["number"])

    html = (run_dir / "report.html").read_text()
    assert "<svg" in html and "Strategy effects" in html and "-60 to -70 % memory" in html
    # Self-contained: nothing to fetch (SVG namespace URIs are identifiers, not requests).
    refs = re.findall(r'(?:src|href)\s*=\s*["\'](https?:[^"\']+)', html)
    assert refs == []


def test_bad_input_is_rejected_before_any_trial_or_storage(tmp_path):
    run_dir = tmp_path / "run"
    out = run_cli(run_dir, "model=tiny", "device=cpu", "global_batch=0", "objective=fastest")
    assert out.returncode == 2
    assert "global_batch=0: must be a positive integer" in out.stdout + out.stderr
    assert "objective=fastest: unknown objective" in out.stdout + out.stderr
    assert not (run_dir / "study.db").exists() and not (run_dir / "trials").exists()


def test_unknown_key_and_unknown_model_fail_at_compose(tmp_path):
    out = run_cli(tmp_path / "a", "model=tiny", "budget=3")
    assert out.returncode == 2 and "unknown key 'budget'; did you mean budget_gib=3?" in out.stderr, out.stderr
    out = run_cli(tmp_path / "b", "model=gpt5")
    assert out.returncode != 0 and "gpt5" in out.stderr and "bert" in out.stderr


def test_a_dry_run_builds_the_model_on_the_meta_device_and_refuses_a_builder_that_returns_a_module(tmp_path):
    out = run_cli(tmp_path / "ok", "model=tiny", "device=cpu", "seq_len=16", "dry_run=true")
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"builder check: \S+ returns a Workload on the meta device \(\d+\.\dM parameters, \d+ blocks",
                     out.stdout + out.stderr), out.stdout + out.stderr
    out = run_cli(tmp_path / "module", "model=faulty", "model.config.fault=module", "device=cpu", "dry_run=true")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "returned tests.workloads.Blocks, not an autotune Workload" in out.stdout + out.stderr
    assert not (tmp_path / "module" / "trials").exists()  # nothing ran


def test_several_budgets_get_a_best_config_each_from_the_same_trials(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("checkpointing: [none, full]\nprecision: [fp32]\nmicro_batch: {min: 8, max: 8}\n")
    run_dir = tmp_path / "run"
    out = run_cli(
        run_dir,
        "model=tiny",
        "device=cpu",
        "search=grid",
        "global_batch=8",
        "seq_len=16",
        "trial.warmup_steps=1",
        "trial.measure_steps=2",
        "trial.repeats=0",
        f"search_space.path={space}",
        "budget_gib=[1,0.0001]",
        "search.escalate=false",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    trials = pd.read_csv(run_dir / "trials.csv")
    assert len(trials) == 2  # measured once, judged against both budgets
    assert trials["fits_1GiB"].all() and not trials["fits_0.0001GiB"].any()
    assert "best per budget:\n  1 GiB: " in out.stdout and "  0.0001 GiB: none fits" in out.stdout
    assert (run_dir / "best.yaml").is_file() and (run_dir / "best-1GiB.yaml").is_file()
    assert not (run_dir / "best-0.0001GiB.yaml").exists()
    assert yaml.safe_load((run_dir / "best-1GiB.yaml").read_text())["budget_gib"] == 1
    assert "Best per budget" in (run_dir / "report.html").read_text()


def test_dry_run_prints_the_plan_as_it_will_run_and_runs_nothing(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("checkpointing: [none, full]\nprecision: [fp32]\nmicro_batch: {min: 2, max: 4}\n"
                     "offload: [false, true]\n")
    run_dir = tmp_path / "run"
    out = run_cli(run_dir, "model=bert", "dry_run=true", f"search_space.path={space}", "device=cpu")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "dry run: nothing is measured" in text
    # The sizes that will run: the CPU reduction applied, not the model group's full size.
    assert "as it will run: hidden_size=256, num_hidden_layers=4" in text and "global batch 16" in text
    lines = [line for line in text.splitlines() if line.startswith("  ckpt=")]
    assert len(lines) == 2 * 2 * 2  # checkpointing x micro_batch (2, 4 divide 16) x offload
    offloaded = [line for line in lines if "offload" in line]
    assert len(offloaded) == 4 and all("skipped: offload moves saved activations" in line for line in offloaded)
    assert all(line.endswith("may run") for line in lines if line not in offloaded)
    assert "8 configurations (4 runnable" in text
    assert not (tmp_path / "studies.db").exists() and not (run_dir / "trials").exists()
    # A quiet start: autotune's own line comes first, and nothing third-party before it.
    assert text.splitlines()[0].startswith("device: ") and out.stderr == "", (text[:300], out.stderr)


def test_auto_records_what_the_device_cannot_run_and_the_headline_says_so(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(
        "checkpointing: [none]\nprecision: [fp32]\nmicro_batch: {min: 4, max: 8}\noffload: [false, true]\n"
    )
    run_dir = tmp_path / "run"
    out = run_cli(run_dir, "model=tiny", "device=cpu", "global_batch=8", "seq_len=16", "trial.warmup_steps=1",
                  "trial.measure_steps=2", "trial.repeats=0", f"search_space.path={space}")  # search=auto, the default
    assert out.returncode == 0, out.stdout + out.stderr
    trials = pd.read_csv(run_dir / "trials.csv")
    offloaded = trials[trials["offload"]]
    assert len(offloaded) == 2 and set(offloaded["status"]) == {"skipped"}  # recorded, as the grid does
    assert offloaded["cause"].str.startswith("offload moves saved activations").all()
    assert set(trials[~trials["offload"]]["status"]) == {"ok"}
    assert "unavailable on this device, skipped: offload True: offload moves saved activations" in out.stdout
    # One terminal line for the reason, not one per configuration it applies to.
    skip_lines = [ln for ln in out.stdout.splitlines() if ln.startswith("[") and " skipped " in ln]
    assert len(skip_lines) == 1 and "skipped without a line; the summary counts them" in skip_lines[0], skip_lines
    page = (run_dir / "report.html").read_text()
    assert page.index("<b>Unavailable on this device</b> (skipped, never run): offload True: offload moves") \
        < page.index("<h2>")
    # Why the search ended, in the terminal and the report's headline.
    assert "search 'auto' ended: 2 of 4 configurations run; by their bounds, none left could" in out.stdout
    assert "Pareto-front point 10% apart in memory" in out.stdout
    assert page.index("<b>Search</b>: search &#x27;auto&#x27; ended: 2 of 4") < page.index("<h2>")
