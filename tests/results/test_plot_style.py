"""The report page's SVG plot and pareto.png draw each configuration alike."""
import re

import numpy as np
import pandas as pd
from matplotlib.markers import MarkerStyle

from autotune.results import page, plot_style
from autotune.results.record import RunRecord
from autotune.scoring.score import Baseline

FRACTIONS = ["none", "0.25", "0.5", "full"]


def scored_table() -> pd.DataFrame:
    rows = []
    for i, ckpt in enumerate(FRACTIONS):
        for j, prec in enumerate(["fp32", "bf16"]):
            rows.append(dict(number=len(rows), status="ok", checkpointing=ckpt, precision=prec, micro_batch=4,
                             accumulation=2, offload=False, allocator="default",
                             peak_memory_gib=10.0 - 2 * i - j, device_peak_gib=10.0 - 2 * i - j,
                             samples_per_s=100.0 - 10 * i + 5 * j, time_spread=0.01, fits_budget=True,
                             on_pareto=False, roi=float(i), memory_saved_gib=2.0 * i))
    rows.append(dict(rows[0], number=len(rows), status="oom", peak_memory_gib=np.nan, samples_per_s=np.nan))
    return pd.DataFrame(rows)


def png_marker(fig, label: str) -> np.ndarray:
    coll = next(c for c in fig.axes[0].collections if c.get_label() == label)
    return coll.get_paths()[0].vertices


def reference(shape: str) -> np.ndarray:
    style = MarkerStyle(plot_style.MATPLOTLIB_MARKERS[shape])
    return style.get_path().transformed(style.get_transform()).vertices


def test_each_checkpointed_fraction_has_its_own_marker_in_both_plots():
    scored = scored_table()
    baseline = Baseline(10.0, 100.0, True, "measured")
    svg = page._pareto_svg(scored, 0, baseline, RunRecord(objective="roi", budgets=[8.0]))
    by_number = {int(n): shape for shape, n in
                 re.findall(r'data-marker="([\w-]+)" opacity="[\d.]+" data-number="(\d+)"', svg)}
    assert len(by_number) == 8  # every ok point carries its marker
    fig = page.pareto_figure(scored, 0, [8.0], baseline, "t")
    shapes = {}
    for _, row in scored[scored["status"] == "ok"].iterrows():
        shape = by_number[int(row["number"])]
        label = f"ckpt {row['checkpointing']} / {row['precision']}"
        assert np.allclose(png_marker(fig, label), reference(shape)), (label, shape)
        shapes.setdefault(row["checkpointing"], set()).add(shape)
    # One marker per fraction, the same for both precisions, and no two fractions alike.
    assert all(len(s) == 1 for s in shapes.values())
    assert len({next(iter(s)) for s in shapes.values()}) == len(FRACTIONS)
    assert shapes["none"] == {"circle"} and shapes["full"] == {"square"}
    # The ROI plot of the same run ranks the fractions the same way, though it shows fewer.
    scored.loc[scored["checkpointing"] == "0.25", "roi"] = np.nan
    roi_points = re.findall(r'data-marker="([\w-]+)" opacity="[\d.]+" data-number="(\d+)"', page._roi_svg(scored, None))
    assert len(roi_points) == 6
    for shape, n in roi_points:
        assert shape == by_number[int(n)]


def test_the_axis_and_the_budgets_drawn_agree():
    assert plot_style.drawn_budgets([8, 20, 140], 10.0) == [8, 20]  # 140 would squash the points
    assert plot_style.x_limit(10.0, [8, 140]) == 10.0 * plot_style.X_MARGIN
    assert plot_style.x_limit(10.0, [15]) == 15 * plot_style.X_MARGIN


def test_a_large_study_keeps_a_mark_for_the_front_the_best_and_the_latest_and_draws_the_rest_together(tmp_path):
    """Issue 28 item 9: past plot_style.DETAIL_LIMIT trials, the report draws one shape per
    legend group for the rest and tables only the front, the best and the latest trials."""
    rng = np.random.default_rng(0)
    n = plot_style.DETAIL_LIMIT * 4
    base = scored_table().iloc[:8]
    scored = pd.concat([base] * (n // 8), ignore_index=True)
    scored["number"] = range(len(scored))
    scored["peak_memory_gib"] = rng.uniform(1, 10, len(scored))
    scored["samples_per_s"] = rng.uniform(10, 100, len(scored))
    scored["on_pareto"], scored["cause"] = False, None
    front = [3, 17, 29]
    scored.loc[front, "on_pareto"] = True
    best = 17
    baseline = Baseline(10.0, 100.0, True, "measured")
    svg = page._pareto_svg(scored, best, baseline, RunRecord(objective="roi", budgets=[8.0]))
    marked = {int(m) for m in re.findall(r'class="trial-point"[^>]*data-number="(\d+)"', svg)}
    assert len(marked) == plot_style.DETAIL_LIMIT
    assert set(front) <= marked  # the front and the best keep their hover details
    assert set(range(n - 100, n)) <= marked  # so do the latest trials
    crowd = sum(int(c) for c in re.findall(r'class="trial-crowd"[^>]*data-count="(\d+)"', svg))
    assert crowd == n - len(marked)  # every other trial is drawn, in its group's one shape
    assert svg.count('class="trial-crowd"') <= 2 * 8  # one per legend group (and fit), not one per trial
    record = RunRecord(model="m", device_name="cpu", global_batch=8, budgets=[8.0], budget_gib=8.0, objective="roi",
                       seq_len=8, command="python -m autotune")
    page.write_report(tmp_path, scored, best, baseline, record)
    html_text = (tmp_path / "report.html").read_text()
    table = html_text[html_text.index("id='trials'"):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") - 1 == plot_style.DETAIL_LIMIT  # rows, less the header
    assert f"{plot_style.DETAIL_LIMIT} of the {n} trials" in html_text and "trials.csv holds every one" in html_text


def test_a_small_study_is_drawn_and_tabled_in_full():
    scored = scored_table()
    baseline = Baseline(10.0, 100.0, True, "measured")
    svg = page._pareto_svg(scored, 0, baseline, RunRecord(objective="roi", budgets=[8.0]))
    assert svg.count('class="trial-point"') == 8 and "trial-crowd" not in svg
