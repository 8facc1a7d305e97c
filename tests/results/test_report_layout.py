"""The report a person reads in ten seconds (issue 30): the headline, the layout at a desktop
and a phone width, effects that mean something, contention in short, labels that do not
overlap. The reports are rebuilt from recorded runs (bench/results/*.study.db: the CPU
default's quiet run and its run beside two busy processes, bench/cpu_default.py)."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT

QUIET_RUN = ROOT / "bench" / "results" / "cpu_default.study.db"
LOADED_RUN = ROOT / "bench" / "results" / "cpu_default_load2.study.db"
ARTIFACTS = ROOT / "test-artifacts"  # git-ignored; CI keeps the screenshots there


def rebuilt(study_db: Path, where: Path) -> tuple:
    """(report.html, the terminal's output) of ``python -m autotune.report`` on a copy of a run."""
    where.mkdir(parents=True, exist_ok=True)
    shutil.copy(study_db, where / "study.db")
    out = subprocess.run([sys.executable, "-m", "autotune.report", str(where)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return where / "report.html", out.stdout


def reviewed(study_db: Path):
    from autotune.results.review import open_reviewed

    r = open_reviewed(str(study_db), None)
    return r, r.results()[0]


# Every word of every table cell on one line: a Range over the word has one client rect per
# line it spans. Headers may break at their <wbr> (between text nodes) and a word after a
# hyphen between letters ("PCIe-|bound"), as typesetting does; never elsewhere ("-6|0", "Fal|se").
LAYOUT_PROBE = """(() => {
  const broken = [];
  document.querySelectorAll('th, td').forEach(cell => {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.textContent.matchAll(/(?:[^\\s-]|-(?![A-Za-z]))+-?/g)) {
        const range = document.createRange();
        range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
        const tops = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (tops.size > 1) broken.push(m[0]);
      }
    }
  });
  const boxes = sel => Array.from(document.querySelectorAll(sel)).map(e => {
    const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; });
  const headline = document.querySelector('.headline');
  return {broken: broken, cells: document.querySelectorAll('td').length,
          page_width: document.documentElement.scrollWidth, window_width: window.innerWidth,
          headline: headline ? headline.innerText : null,
          headline_top: headline ? headline.getBoundingClientRect().top : null,
          tables_top: Math.min(...Array.from(document.querySelectorAll('table'))
            .map(t => t.getBoundingClientRect().top)),
          findings: Array.from(document.querySelectorAll('#effects td.finding')).map(td =>
            [+td.dataset.lo, +td.dataset.hi, td.textContent]),
          noise: document.querySelectorAll('#effects td.noise').length,
          labels: boxes('#pareto-plot .point-label'), points: boxes('#pareto-plot .trial-point')};
})()"""


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.fixture(scope="module")
def quiet_report(tmp_path_factory):
    return rebuilt(QUIET_RUN, tmp_path_factory.mktemp("quiet"))


@pytest.mark.parametrize("width", [1280, 390])
def test_the_cpu_default_report_reads_at_a_desktop_and_a_phone_width(quiet_report, width):
    from autotune.results.headline import config_label
    from autotune.scoring.effects import strategy_effects
    from tests.browser import chromium, visit

    if chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed here (apt-get install chromium); CI installs it")
    page, _ = quiet_report
    seen = visit(page, LAYOUT_PROBE, screenshot=ARTIFACTS / f"report-{width}.png", width=width)
    v = seen.value
    assert seen.errors == [] and seen.remote == []
    assert v["window_width"] == width and v["cells"] > 50
    assert v["broken"] == [], v["broken"]  # no word of a header or a cell split across lines
    assert v["page_width"] <= width, v["page_width"]  # wide tables scroll in their box, the page does not

    # The headline leads the page and states the best, its memory, its speed and the baseline.
    r, result = reviewed(QUIET_RUN)
    best = result.scored.loc[result.best]
    text = v["headline"]
    assert text is not None and v["headline_top"] < v["tables_top"]
    assert text.startswith(f"Use {config_label(best)}: {best['peak_memory_gib']:.3g} GiB")
    assert f"{best['samples_per_s']:.3g} samples/s" in text
    if config_label(best) == f"none/fp32/mb{r.scoring.global_batch}":
        assert "This is the baseline none/fp32/mb16: nothing in the space beats it" in text, text
    else:
        assert re.search(r"Against the baseline none/fp32/mb16 \([\d.]+ GiB, [\d.]+ samples/s\): .+ at \d+ % "
                         r"less memory", text), text
    assert "Certainty: " in text

    # An effect is a finding only where its interval excludes no change; each cell says so.
    effects = strategy_effects(result.scored, r.scoring.global_batch)
    assert len(v["findings"]) == int(effects["time_finding"].sum() + effects["memory_finding"].sum())
    assert len(v["findings"]) + v["noise"] >= 2  # the recorded run compares at least one strategy
    for lo, hi, shown in v["findings"]:
        assert lo > 0 or hi < 0, (lo, hi, shown)

    # The plot's labels: the best's and the front's, none over another or over a point.
    assert len(v["labels"]) >= 2
    for i, a in enumerate(v["labels"]):
        assert not any(_overlap(a, b) for b in v["labels"][i + 1:]), v["labels"]
        assert not any(_overlap(a, p) for p in v["points"]), (a, v["points"])


def test_the_headline_is_the_terminals_last_block(quiet_report):
    from autotune.results.headline import headline

    _, terminal = quiet_report
    r, result = reviewed(QUIET_RUN)
    lines = headline(result.scored, result.best, result.baseline, r.scoring.objective, r.scoring.primary_budget,
                     r.scoring.global_batch, str(r.record.device_name))
    assert terminal.rstrip("\n").split("\n\n")[-1].splitlines() == lines
    assert lines[0].startswith("Use ") and "fits the" in lines[0]


def test_an_effect_spanning_no_change_reads_as_noise_not_as_a_finding():
    """Checkpointing 10 % slower, both trials 15 % noisy: the interval spans zero, so the
    report says it is not separable from noise, with no figure a reader could take as found."""
    from autotune.results.page import _effects_table
    from autotune.scoring.effects import NOISE, strategy_effects

    df = pd.DataFrame([[0, "ok", "none", "fp32", 8, 1, 10.0, 10.0, 0.15],
                       [1, "ok", "full", "fp32", 8, 1, 4.0, 9.0, 0.15],
                       [2, "ok", "none", "bf16", 8, 1, 6.0, 30.0, 0.01]],
                      columns=["number", "status", "checkpointing", "precision", "micro_batch", "accumulation",
                               "peak_memory_gib", "samples_per_s", "time_spread"])
    df["time_spread"] = df["time_spread"].where(df["number"] != 2, 0.01)
    effects = strategy_effects(df, 8)
    ckpt = effects.set_index("strategy").loc["activation checkpointing (full)"]
    assert ckpt["time"] == NOISE and ckpt["memory"] == "-60 %" and ckpt["memory_finding"]
    table = _effects_table(effects)
    ckpt_row = next(row for row in table.split("<tr>") if "activation checkpointing (full)" in row)
    assert "class='finding' data-lo='-0.6' data-hi='-0.6'>-60&nbsp;%" in ckpt_row
    assert f"<td class='text noise'>{NOISE}</td>" in ckpt_row and "+11" not in ckpt_row
    amp_row = next(row for row in table.split("<tr>") if "AMP bf16" in row)
    assert amp_row.count("class='finding'") == 2  # 3x faster outside both spreads, 40 % less memory


def test_contention_is_a_short_summary_with_the_detail_folded(tmp_path):
    """The run beside two busy processes: every trial contended. The report says so in one
    sentence, the per-trial detail inside a folded <details>; the terminal in one line."""
    page, terminal = rebuilt(LOADED_RUN, tmp_path / "loaded")
    r, result = reviewed(LOADED_RUN)
    contended = int(result.scored["contended"].fillna(False).astype(bool).sum())
    assert contended >= 5  # the recorded run is the loaded one
    html = page.read_text()
    summary = re.search(r"<span class='contention'>(.*?)</span>", html, flags=re.S).group(1)
    text = re.sub(r"<[^>]+>", "", summary)
    assert len(text) < 300 and f"{contended} of " in text, text  # a few lines at most
    detail = re.search(r"<details class='contention-detail'><summary>per trial</summary><ul>(.*?)</ul></details>",
                       html, flags=re.S).group(1)
    assert detail.count("<li>") == contended
    line = next(x for x in terminal.splitlines() if x.startswith("contention: "))
    assert len(line) < 300 and "trial 1" not in line.split("(per trial")[0]


def test_png_labels_are_placed_without_overlap_in_a_crowded_front():
    """A front of 12 points packed into a sliver of memory: labelled naively (every point, one
    offset) their labels would overlap; placed, none overlaps another or any point, and the
    best always has one."""
    from autotune.results.page import _label_order, pareto_figure, point_label
    from autotune.scoring.score import Baseline

    n = 12
    mem = 0.13 + 0.002 * np.arange(n)
    df = pd.DataFrame({"number": range(n), "status": "ok", "checkpointing": "none", "precision": "fp32",
                       "micro_batch": [4 * (1 + i % 3) for i in range(n)], "accumulation": 1,
                       "peak_memory_gib": mem, "samples_per_s": 10 + 0.2 * np.arange(n), "fits_budget": True,
                       "on_pareto": True, "offload": False})
    best = 5
    fig = pareto_figure(df, best, [1.0], Baseline(1.0, None, False, ""), "crowded")
    fig.canvas.draw()
    ax = fig.axes[0]
    placed = [t for t in ax.texts if t.get_gid() == "point-label"]
    boxes = [t.get_window_extent() for t in placed]
    assert 2 <= len(placed) < n  # crowded: some labels left out rather than overlapping
    assert point_label(df.loc[best]) in [t.get_text() for t in placed] and _label_order(df, best)[0] == best
    for i, a in enumerate(boxes):
        assert not any(a.overlaps(b) for b in boxes[i + 1:])
    xy = ax.transData.transform(df[["peak_memory_gib", "samples_per_s"]].to_numpy())
    for box in boxes:
        assert not any(box.x0 < x < box.x1 and box.y0 < y < box.y1 for x, y in xy)
    # The naive placement (every point, 4 points up and right) overlaps here: the test can fail.
    naive = [ax.annotate(point_label(r), (r["peak_memory_gib"], r["samples_per_s"]), textcoords="offset points",
                         xytext=(4, 4), fontsize=7) for _, r in df.iterrows()]
    fig.canvas.draw()
    naive_boxes = [t.get_window_extent() for t in naive]
    assert any(a.overlaps(b) for i, a in enumerate(naive_boxes) for b in naive_boxes[i + 1:])
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_label_placement_keeps_labels_apart_and_inside_the_frame():
    from autotune.results.labels import Box, place

    frame = Box(0, 0, 200, 100)
    points = [(100, 50), (102, 50), (104, 51), (190, 5)]
    spots = place(points, ["first", "second", "third", "edge"], frame)
    got = [s for s in spots if s is not None]
    assert spots[0] is not None and spots[3] is not None  # the first placed first; the edge one flips inward
    assert all(s.box.inside(frame) for s in got)
    assert not any(a.box.overlaps(b.box) for i, a in enumerate(got) for b in got[i + 1:])
    marks = [Box(x - 5, y - 5, x + 5, y + 5) for x, y in points]
    assert not any(s.box.overlaps(m) for s in got for m in marks)
    assert place([(10, 10)], [None], frame) == [None]
