"""Looking at results again without running anything: python -m autotune.show / .report."""
import os
import re
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT, run_cli, trial_env

pytestmark = pytest.mark.e2e  # a real run, then python -m autotune.show / .report on it


def cli(module, *args):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, env=trial_env(),
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("review")
    space = tmp / "space.yaml"
    space.write_text("checkpointing: [none, full]\nprecision: [fp32]\nmicro_batch: {min: 4, max: 8}\n")
    run_dir = tmp / "run"
    out = run_cli(run_dir, "model=tiny", "device=cpu", "search=grid", "global_batch=8", "seq_len=16",
                  "trial.warmup_steps=1", "trial.measure_steps=2", "trial.repeats=0", f"search_space.path={space}",
                  "budget_gib=[1,0.0001]", "objective=throughput", "search.escalate=false")
    assert out.returncode == 0, out.stdout + out.stderr
    return run_dir


def copied_study(run, copy):
    """A copy of the run directory, its study and the settings the run recorded in it."""
    import optuna

    from autotune.results.review import SETTINGS_ATTR

    shutil.copytree(run, copy)
    url = f"sqlite:///{copy / 'study.db'}"
    (name,) = optuna.get_all_study_names(url)
    study = optuna.load_study(study_name=name, storage=url)
    return study, study.user_attrs[SETTINGS_ATTR]


def test_show_prints_the_best_per_objective_and_budget_of_a_run(run):
    out = cli("autotune.show", run)
    assert out.returncode == 0, out.stderr
    best = yaml.safe_load((run / "best.yaml").read_text())
    s = best["strategy"]
    line = next(x for x in out.stdout.splitlines() if x.strip().startswith("throughput @ 1 GiB"))
    assert (f"checkpointing={s['checkpointing']} precision={s['precision']} micro_batch={s['micro_batch']} "
            f"accumulation={s['accumulation']}") in line and f"trial {best['measured']['trial']})" in line
    assert "roi @ 1 GiB: checkpointing=" in out.stdout
    assert "throughput @ 0.0001 GiB: nothing fits" in out.stdout
    assert "4 trials (4 ok), global batch 8; the run's objective: throughput" in out.stdout
    # Other budgets, judged on the same trials.
    out = cli("autotune.show", run, "--budget", 5)
    assert "throughput @ 5 GiB: checkpointing=" in out.stdout and "@ 1 GiB" not in out.stdout


def test_show_reads_a_study_storage_and_names_the_studies_when_it_must_choose(run, tmp_path):
    storage = run.parent / "studies.db"
    out = cli("autotune.show", storage)
    assert out.returncode == 0 and "throughput @ 1 GiB: checkpointing=" in out.stdout, out.stderr
    other = tmp_path / "other"  # a second study in the same storage
    done = run_cli(other, "model=tiny", "device=cpu", "search=grid", "global_batch=8", "seq_len=16",
                   "trial.warmup_steps=1", "trial.measure_steps=2", "trial.repeats=0", "study_name=second",
                   f"search_space.path={run.parent / 'space.yaml'}", f"storage=sqlite:///{storage}")
    assert done.returncode == 0, done.stdout + done.stderr
    out = cli("autotune.show", storage)
    assert out.returncode == 2 and "holds 2 studies; pick one with --study NAME" in out.stderr
    # Each study on a line of its own, with what tells them apart.
    listed = [line.strip() for line in out.stderr.splitlines() if line.startswith("  ")]
    assert len(listed) == 2 and listed[1].startswith("second: model tiny, budget ")
    assert all(re.search(r"started \d{4}-\d\d-\d\d \d\d:\d\d, \d+ trials$", line) for line in listed), listed
    out = cli("autotune.show", storage, "--study", "second")
    assert out.returncode == 0 and "roi @ " in out.stdout
    out = cli("autotune.show", storage, "--study", "third")
    assert out.returncode == 2 and "--study third: not in" in out.stderr


def test_report_rebuilds_the_page_and_plot_and_prints_the_summary(run, tmp_path):
    out = cli("autotune.report", run, "--out", tmp_path / "again")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "again" / "report.html").is_file() and (tmp_path / "again" / "pareto.png").is_file()
    assert "best by throughput:" in out.stdout and "best per budget:" in out.stdout
    page = (tmp_path / "again" / "report.html").read_text()
    assert "Best per budget" in page and (run / "report.html").read_text().count("<tr>") == page.count("<tr>")
    # A run directory with only its trials.csv (no study snapshot) is enough.
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("trials.csv", "best.yaml", "best-1GiB.yaml"):
        shutil.copy(run / name, bare / name)
    out = cli("autotune.report", bare)
    assert out.returncode == 0 and (bare / "report.html").is_file(), out.stderr
    assert "best by throughput:" in out.stdout


def test_a_path_that_is_not_a_run_or_a_study_is_one_clear_error(tmp_path):
    out = cli("autotune.show", tmp_path / "missing")
    assert out.returncode == 2 and "no such file or directory" in out.stderr
    out = cli("autotune.report", tmp_path)
    assert out.returncode == 2 and "neither study.db nor trials.csv" in out.stderr


ARTIFACTS = ROOT / "test-artifacts"  # git-ignored; CI keeps the screenshot there


def test_the_report_renders_in_headless_chromium_offline_and_without_errors(run):
    from tests.browser import chromium, visit

    if chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed here (apt-get install chromium); CI installs it")
    trials = pd.read_csv(run / "trials.csv")
    ok = trials[trials["status"] == "ok"]
    probe = """(() => {
      const pts = Array.from(document.querySelectorAll('#pareto-plot .trial-point'));
      const th = document.querySelector('#trials th');
      const before = Array.from(document.querySelectorAll('#trials tbody tr td:first-child')).map(td => td.textContent);
      th.click(); th.click();  // sort by trial number, then reversed
      const after = Array.from(document.querySelectorAll('#trials tbody tr td:first-child')).map(td => td.textContent);
      const box = document.querySelector('#pareto-svg').getBoundingClientRect();
      return {points: pts.length, numbers: pts.map(p => +p.dataset.number).sort((a, b) => a - b),
              titles: pts.map(p => p.querySelector('title').textContent),
              best: document.querySelectorAll('#pareto-plot .best-mark').length,
              budgets: document.querySelectorAll('#pareto-plot .budget-line').length,
              width: box.width, height: box.height, before: before, after: after,
              // 1280 px: nothing wider than the window, so every column shows without scrolling the page
              page_width: document.documentElement.scrollWidth, window_width: window.innerWidth,
              // a wide table scrolls inside its box: the boxes stay within the window
              tables_right: Array.from(document.querySelectorAll('.scroll')).map(t => t.getBoundingClientRect().right),
              intervals: document.querySelectorAll('#pareto-plot .interval').length,
              legend_inside: Array.from(document.querySelectorAll('svg.plot')).every(svg => {
                const frame = svg.getBoundingClientRect();
                return Array.from(svg.querySelectorAll('g text')).every(t => {
                  const r = t.getBoundingClientRect();
                  return r.right <= frame.right + 0.5 && r.bottom <= frame.bottom + 0.5; });
              })};
    })()"""
    seen = visit(run / "report.html", probe, screenshot=ARTIFACTS / "report.png")
    v = seen.value
    assert v["points"] == len(ok) and v["numbers"] == sorted(ok["number"])  # one point per ok trial
    assert all(
        t.startswith(f"trial {n}: checkpointing ") and "samples/s" in t
        for n, t in zip(sorted(ok["number"]), sorted(v["titles"], key=lambda t: int(t.split()[1][:-1])), strict=False)
    )
    # 0.0001 GiB drawn; 1 GiB, far right of every point, only named in the legend (not to squash them).
    assert v["best"] == 1 and v["budgets"] == 1
    assert v["width"] > 400 and v["height"] > 200  # laid out, not collapsed
    assert v["after"] == sorted(v["before"], key=int, reverse=True)  # the trials table sorts
    assert v["page_width"] <= v["window_width"] == 1280, (v["page_width"], v["window_width"])
    assert max(v["tables_right"]) <= v["window_width"], v["tables_right"]
    assert v["legend_inside"]  # no legend entry clipped by the plot's frame
    assert v["intervals"] == len(ok)  # each point's range within its measured spread is drawn
    assert seen.remote == []  # nothing left the machine
    assert seen.errors == [], seen.errors
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000


def test_profile_traces_the_best_configuration_in_a_run_of_its_own(tmp_path):
    import json

    space = tmp_path / "space.yaml"
    space.write_text("checkpointing: [none]\nprecision: [fp32]\nmicro_batch: {min: 4, max: 8}\n")
    run_dir = tmp_path / "run"
    out = run_cli(run_dir, "model=tiny", "device=cpu", "search=grid", "global_batch=8", "seq_len=16",
                  "trial.warmup_steps=1", "trial.measure_steps=2", "trial.repeats=0", f"search_space.path={space}",
                  "profile=true")
    assert out.returncode == 0, out.stdout + out.stderr
    trace = json.loads((run_dir / "profile" / "trace.json").read_text())
    names = {e.get("name", "") for e in trace["traceEvents"]}
    assert any(n.startswith("aten::") for n in names)  # the training step's operators
    assert "aten::" in (run_dir / "profile" / "top_ops.txt").read_text()
    assert "profile/trace.json" in (run_dir / "report.html").read_text()
    # The profile run is not a trial: the study and trials.csv hold the two measured ones.
    assert len(pd.read_csv(run_dir / "trials.csv")) == 2
    best = yaml.safe_load((run_dir / "best.yaml").read_text())["strategy"]
    spec = json.loads((run_dir / "profile" / "trial" / "spec.json").read_text())
    assert spec["strategy"]["micro_batch"] == best["micro_batch"]


HOSTILE = ("</code></p><script>window.__ran=(window.__ran||0)+1</script>"
           "<img src=x onerror=\"window.__ran=(window.__ran||0)+1\"><b onmouseover=alert(1)>")


def test_hostile_values_read_back_never_run_in_the_rebuilt_report(run, tmp_path):
    """Issue 13 item 4: hostile strings through every field the report reads back (the study's
    settings, best.yaml, trials.csv, the model's name) are shown as text in Chromium, never run,
    and the profile link takes no javascript: URL."""
    import optuna

    from autotune.results.review import SETTINGS_ATTR
    from tests.browser import chromium, visit

    if chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed here (apt-get install chromium); CI installs it")
    # 1. A study whose stored settings were tampered with.
    study_copy = tmp_path / "study"
    shutil.copytree(run, study_copy)
    url = f"sqlite:///{study_copy / 'study.db'}"
    (name,) = optuna.get_all_study_names(url)
    study = optuna.load_study(study_name=name, storage=url)
    settings = study.user_attrs[SETTINGS_ATTR]
    meta = settings["meta"]
    for key in ("model", "device_name", "seq_len", "command", "torch", "driver", "python", "budget_gib",
                "memory_cap_gib"):
        meta[key] = HOSTILE
    meta["reductions"] = [HOSTILE]
    meta["profile"] = "javascript:window.__ran=1"
    study.set_user_attr(SETTINGS_ATTR, settings)
    # 2. A run directory without a study: best.yaml and trials.csv are read back.
    files_copy = tmp_path / "files"
    shutil.copytree(run, files_copy)
    (files_copy / "study.db").unlink()
    best = yaml.safe_load((files_copy / "best.yaml").read_text())
    best["model"]["name"], best["model"]["seq_len"], best["device"]["name"] = HOSTILE, HOSTILE, HOSTILE
    best["command"] = HOSTILE
    (files_copy / "best.yaml").write_text(yaml.safe_dump(best))
    trials = pd.read_csv(files_copy / "trials.csv")
    trials["cause"] = trials["cause"].astype(object)
    trials.loc[trials.index[0], "cause"] = HOSTILE
    trials.loc[trials.index[-1], "status"] = "skipped"  # its cause is listed in the notes
    trials.loc[trials.index[-1], "cause"] = HOSTILE
    trials.to_csv(files_copy / "trials.csv", index=False)
    probe = """({ran: window.__ran || 0, text: document.body.textContent,
                 hrefs: Array.from(document.querySelectorAll('a')).map(a => a.getAttribute('href'))})"""
    for source in (study_copy, files_copy):
        out = cli("autotune.report", source, "--out", tmp_path / f"page-{source.name}")
        assert out.returncode == 0, out.stdout + out.stderr
        seen = visit(tmp_path / f"page-{source.name}" / "report.html", probe)
        assert seen.value["ran"] == 0, source
        assert "window.__ran=(window.__ran||0)+1" in seen.value["text"], source  # shown, as text
        assert not [h for h in seen.value["hrefs"] if h and not h.startswith("#") and ":" in h], seen.value["hrefs"]
        assert seen.errors == [], seen.errors


@pytest.mark.parametrize("key,value,message", [
    ("micro_batch", 4.7, "strategy.micro_batch=4.7: must be a whole number >= 1"),
    ("micro_batch", -4, "strategy.micro_batch=-4: must be a whole number >= 1"),
    ("offload", "false", "strategy.offload='false': must be true or false (unquoted)"),
    ("precision", "int8", "strategy.precision='int8': use one of fp32, bf16, fp16"),
    ("checkpointing", 2, "strategy.checkpointing=2: use none, full or a fraction"),
])
def test_load_tuned_refuses_what_it_would_have_bent(tmp_path, key, value, message):
    """Issue 13, lax readers: 4.7 was read as 4, -4 exported, "false" read as true."""
    from autotune import load_tuned

    best = {"strategy": {"checkpointing": "none", "precision": "fp32", "micro_batch": 4, "accumulation": 2,
                         "offload": False, "allocator": "default"}, "device": {"kind": "cpu"}}
    best["strategy"][key] = value
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(best))
    with pytest.raises(ValueError) as e:
        load_tuned(path)
    assert str(path) in str(e.value) and message in str(e.value)


@pytest.mark.parametrize("path,value,message", [
    ("budget_gib", -16, "budget_gib=-16: must be > 0"),
    ("budget_gib", float("nan"), "budget_gib=nan: not a finite number of GiB"),
    ("memory_cap_gib", -1.0, "memory_cap_gib=-1.0: must be > 0"),
    ("optimizer.lr", -1, "optimizer.lr=-1: a learning rate must be a finite number > 0"),
    ("optimizer.kwargs.lr", float("inf"), "optimizer.kwargs.lr=inf: a learning rate must be a finite number > 0"),
    ("strategy.accumulation", 10 ** 30, "strategy.accumulation=1000000000000000000000000000000: at most 4096"),
    ("strategy.accumulation", 1e30, "strategy.accumulation=1e+30: must be a whole number >= 1"),
    ("global_batch", 7, "global_batch=7 is not strategy.micro_batch x strategy.accumulation"),
])
def test_load_tuned_holds_a_file_to_the_command_lines_own_checks(run, tmp_path, path, value, message):
    """Issue 28 item 7: values the command line refuses were loaded and exported
    (learning_rate=-1.0, gradient_accumulation_steps=1e30); the checks are the CLI's own
    functions (train/values.py), so the messages are the CLI's too."""
    from autotune import load_tuned
    from autotune.train.values import gib_problem, lr_problem

    best = yaml.safe_load((run / "best.yaml").read_text())
    node = best
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    copy = tmp_path / "best.yaml"
    copy.write_text(yaml.safe_dump(best))
    with pytest.raises(ValueError) as e:
        load_tuned(copy)
    assert str(copy) in str(e.value) and message in str(e.value), str(e.value)
    if "budget" in path or "cap" in path:
        assert gib_problem(value).split(";")[0] in str(e.value)
    if "lr" in path:
        assert lr_problem(value, path) in str(e.value)


def test_a_best_yaml_that_is_not_text_is_named_and_train_py_says_so_without_a_traceback(run, tmp_path):
    """Issue 28 item 8: a non-UTF-8 best.yaml raised UnicodeDecodeError without the file's name."""
    from autotune import load_tuned

    bad = tmp_path / "best.yaml"
    bad.write_bytes((run / "best.yaml").read_bytes() + b"\nnote: \xff\xfe\n")
    with pytest.raises(ValueError, match="not a readable autotune best.yaml .*UnicodeDecodeError"):
        load_tuned(bad)
    out = subprocess.run([sys.executable, "examples/train.py", str(bad), "--steps", "1"], cwd=ROOT, env=trial_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and str(bad) in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_best_yaml_naming_code_of_an_untrusted_package_runs_nothing(run, tmp_path, monkeypatch):
    """Issue 28 item 4: a tuned file names code (its builder, its optimizer). One passed on by
    someone else, naming a package this machine never tuned, imports and runs nothing, in
    examples/train.py (a real process) or through the API; the caller's trust= allows it."""
    from autotune import load_tuned
    from autotune.train.trust import UntrustedTarget

    pkg, marker, victim = tmp_path / "hostile_pkg", tmp_path / "imported", tmp_path / "victim.txt"
    pkg.mkdir()
    victim.write_text("keep me")
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (pkg / "boom.py").write_text(f"def build(**kwargs):\n    open({str(victim)!r}, 'w').close()\n\n\n"
                                 "class Opt:\n    def __init__(self, *a, **k):\n        build()\n")
    best = yaml.safe_load((run / "best.yaml").read_text())
    env = {**trial_env(), "PYTHONPATH": os.pathsep.join([str(tmp_path), trial_env()["PYTHONPATH"]])}
    for key, target in (("model", "os:truncate"), ("model", "hostile_pkg.boom:build"),
                        ("optimizer", "hostile_pkg.boom.Opt")):
        hostile = {**best, key: {**best[key], "target": target}}
        path = tmp_path / f"best-{key}.yaml"  # the stdlib case is written over by the next
        path.write_text(yaml.safe_dump(hostile))
        out = subprocess.run([sys.executable, "examples/train.py", str(path), "--steps", "1"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
        package = target.replace(":", ".").split(".")[0]
        assert out.returncode == 2 and f"--trust {package}" in out.stderr, out.stdout + out.stderr
        assert f"{key}.target='{target}'" in out.stderr and "Traceback" not in out.stderr
    monkeypatch.syspath_prepend(str(tmp_path))  # importable here: only the refusal stands in the way
    tuned = load_tuned(tmp_path / "best-optimizer.yaml")
    import torch

    with pytest.raises(UntrustedTarget, match="optimizer.target='hostile_pkg.boom.Opt'"):
        tuned.optimizer([torch.nn.Parameter(torch.zeros(1))])
    with pytest.raises(UntrustedTarget, match="model.target='hostile_pkg.boom:build'"):
        load_tuned(tmp_path / "best-model.yaml").model_builder()
    assert not marker.exists() and victim.read_text() == "keep me"  # nothing was imported, nothing ran
    assert load_tuned(tmp_path / "best-model.yaml", trust=["hostile_pkg"]).model_builder() is not None
    assert marker.exists()  # the caller's trust= is what lets it in
    # What this machine tuned is trusted without being named: the run recorded its builder's package.
    assert load_tuned(run / "best.yaml").model_builder() is not None


def test_show_and_report_refuse_a_cut_short_empty_or_garbage_trials_csv(run, tmp_path):
    """Issue 13, lax readers: a truncated row was scored as ok (the best changed); empty,
    garbage and short files raised raw tracebacks."""
    text = (run / "trials.csv").read_text()
    lines = text.splitlines()
    header = lines[0].split(",")
    last = lines[-1]
    sps = last.split(",")[header.index("samples_per_s")]  # the case: 196.14 cut to 19
    cut_at = last.index("," + sps + ",") + 1 + len(sps) // 2
    cases = {
        "cut": "\n".join(lines[:-1] + [last[:40]]) + "\n",  # the last row cut mid-line, a newline added
        "cut-in-number": "\n".join(lines[:-1] + [last[:cut_at]]),  # as a cut file ends: inside a number
        "empty": "",
        "garbage": '\x00\x01 not, a\ntable"\n"',
        "short": lines[0].split(",")[0] + "\n1\n",
        "header-only": lines[0] + "\n",
        "not-a-number": "\n".join(lines[:-1] + [last.replace(sps, "1e", 1)]) + "\n",
    }
    messages = {
        "cut": f"line {len(lines)} has",
        "cut-in-number": f"line {len(lines)} is cut short inside column samples_per_s",
        "empty": "not a trials table",
        "garbage": "not",
        "short": "not an autotune trials table",
        "header-only": "the header and no trial",
        "not-a-number": f"line {len(lines)}, column samples_per_s: '1e'",
    }
    for name, content in cases.items():
        copy = tmp_path / name
        shutil.copytree(run, copy)
        (copy / "study.db").unlink()
        (copy / "trials.csv").write_text(content)
        for module in ("autotune.show", "autotune.report"):
            out = cli(module, copy)
            assert out.returncode == 2, (name, module, out.stdout + out.stderr)
            assert "Traceback" not in out.stderr and str(copy / "trials.csv") in out.stderr, out.stderr
            assert messages[name] in out.stderr, (name, out.stderr)
    # Issue 28 item 3: wherever the file is cut inside its last row, it is refused, not scored.
    from autotune.results.review import ReviewError, _read_trials_csv

    path = tmp_path / "cut-anywhere.csv"
    for end in range(len(text) - len(last), len(text)):  # 1 character of the last row .. all but its newline
        path.write_text(text[:end])
        with pytest.raises(ReviewError, match=r"line \d+ (is cut short|has \d+ fields)|the header and no trial"):
            _read_trials_csv(path)


def test_report_metadata_of_the_wrong_type_is_shown_as_text_not_a_traceback(run, tmp_path):
    """Issue 28 item 8: a study whose recorded device_memory_gib is not a number broke the
    report's format code; every field of the run's record is read back as whatever it is."""
    from autotune.results.review import SETTINGS_ATTR

    copy = tmp_path / "run"
    study, settings = copied_study(run, copy)
    settings["meta"].update(device_memory_gib="lots", memory_cap_gib="some", seq_len={"a": 1}, torch=[2],
                            reductions="x", driver=3.5, device_name=None)
    study.set_user_attr(SETTINGS_ATTR, settings)
    for module in ("autotune.show", "autotune.report"):
        out = cli(module, copy, *(["--out", tmp_path / "page"] if module == "autotune.report" else []))
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stdout + out.stderr
    assert "lots GiB" in (tmp_path / "page" / "report.html").read_text()


@pytest.mark.parametrize("key,value,message", [
    ("global_batch", "abc", "settings global_batch='abc': must be a whole number >= 1"),
    ("budgets", [float("nan")], "settings budgets=[nan]: must be a list of GiB > 0"),
    ("objective", "fastest", "settings objective='fastest': one of roi, throughput"),
    ("roi", {"memory_price_per_gib_hour": -1, "compute_price_per_hour": 3.5, "workload_samples": 1e7},
     "settings roi.memory_price_per_gib_hour=-1: a price must be a finite number >= 0"),
    ("roi", "cheap", "settings roi='cheap': needs finite prices >= 0 and workload_samples > 0"),
])
def test_settings_read_back_from_a_study_are_checked_like_the_command_line(run, tmp_path, key, value, message):
    from autotune.results.review import SETTINGS_ATTR

    copy = tmp_path / "run"
    study, settings = copied_study(run, copy)
    settings[key] = value
    study.set_user_attr(SETTINGS_ATTR, settings)
    for module in ("autotune.show", "autotune.report"):
        out = cli(module, copy)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stdout + out.stderr
        assert message in out.stderr and str(copy / "study.db") in out.stderr, out.stderr


def test_a_study_of_5000_trials_is_read_and_reported_in_full_by_real_processes(tmp_path):
    """Issue 28 item 9, in real processes (the times are bench/scale.py's to check, not a
    test's): show and report read a 5,000-trial study, the page stays under 3 MB (it was 15 MB)
    with one mark per trial up to the detail limit and the rest drawn per group."""
    import importlib.util

    from autotune.results.plot_style import DETAIL_LIMIT

    spec = importlib.util.spec_from_file_location("scale", ROOT / "bench" / "scale.py")
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)
    db = tmp_path / "study.db"
    scale.build_study(db, 5000)
    shown = cli("autotune.show", db)
    assert shown.returncode == 0 and "4998 trials" in shown.stdout, shown.stdout + shown.stderr
    out = cli("autotune.report", db, "--out", tmp_path / "page")
    assert out.returncode == 0, out.stdout + out.stderr
    page = (tmp_path / "page" / "report.html").read_text()
    assert len(page.encode()) < 3e6
    assert page.count('class="trial-point"') <= 2 * DETAIL_LIMIT  # the Pareto plot and the ROI plot
    crowd = sum(int(n) for n in re.findall(r'class="trial-crowd"[^>]*data-count="(\d+)"', page))
    assert crowd > 4000  # every ok trial is drawn: the rest in their groups' shapes
    assert f"{DETAIL_LIMIT} of the 4998 trials" in page
