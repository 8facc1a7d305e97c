"""The Pareto report: a self-contained HTML page (interactive inline SVG plots, a sortable
trials table, no network) and a PNG of the main plot.

A pure function of the scored trials table plus run metadata. Rebuild it for a finished
run or study without running anything:

    python -m autotune.report outputs/2026-12-03/10-00-00 [--out DIR]
    python -m autotune.report outputs/autotune.db --study NAME --out DIR
"""
from __future__ import annotations

import html
import re
from pathlib import Path, PurePosixPath
from urllib.parse import quote

import numpy as np
import pandas as pd

from autotune.results import labels, plot_style, svgplot
from autotune.results.headline import headline, money
from autotune.results.outputs import contention_summary, no_best, unavailable
from autotune.results.record import RunRecord
from autotune.scoring.effects import MEMORY_NOISE, strategy_effects
from autotune.scoring.score import Baseline
from autotune.store.storage import redact
from autotune.store.table import MEMORY_AGREEMENT
from autotune.system.safe_write import replacing, write_text
from autotune.train.dimensions import DIMENSIONS, checkpoint_fraction, checkpoint_label, extras
from autotune.train.strategy import Strategy

# The key columns first (what a reader compares, and what shows on a phone before scrolling).
TABLE_COLUMNS = ["number", *(d.name for d in DIMENSIONS.values() if d.always_shown), "peak_memory_gib",
                 "samples_per_s", "roi", "status", "fits_budget", "on_pareto", "fidelity",
                 *(d.name for d in DIMENSIONS.values() if not d.always_shown), "time_spread", "noisy",
                 "contended", "device_peak_gib", "peak_allocated_gib", "fragmentation_gib", "num_alloc_retries",
                 "samples_per_s_runs", "peak_memory_gib_runs", "numerics", "loss_parity", "cause"]


def _pyplot():
    """matplotlib.pyplot, imported when the PNG is drawn, not when the run starts: on a fresh
    machine its first import builds the font cache (seconds, before the first trial)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw_families(ax, ok: pd.DataFrame, fractions) -> None:
    """One series per checkpointing / precision / offload: marker, colour and fill, with the
    speed intervals as error bars; points over the budget drawn faint."""
    ok["offload"] = ok.get("offload", False)
    for (ckpt, prec, offload), g in ok.groupby(["checkpointing", "precision", "offload"]):
        fits = g[g["fits_budget"]]
        over = g[~g["fits_budget"]]
        colour = plot_style.colour(prec)
        shape = plot_style.marker(checkpoint_fraction(ckpt), fractions)
        style = dict(marker=plot_style.MATPLOTLIB_MARKERS[shape], edgecolors=colour,
                     facecolors="none" if offload is True else colour)
        ax.scatter(fits["peak_memory_gib"], fits["samples_per_s"], s=46,
                   label=f"ckpt {ckpt} / {prec}" + (" / offload" if offload is True else ""), **style)
        if len(over):
            ax.scatter(over["peak_memory_gib"], over["samples_per_s"], s=46, alpha=0.35, **style)
        ax.errorbar(g["peak_memory_gib"], g["samples_per_s"], fmt="none", ecolor=colour, alpha=0.6, lw=1,
                    yerr=[(g["samples_per_s"] - g.get("samples_per_s_lo", g["samples_per_s"])).clip(lower=0),
                          (g.get("samples_per_s_hi", g["samples_per_s"]) - g["samples_per_s"]).clip(lower=0)])


def pareto_figure(scored: pd.DataFrame, best: int | None, budgets: list[float], baseline: Baseline,
                  title: str):
    """The Pareto plot as a matplotlib Figure (pareto.png)."""
    fig, ax = _pyplot().subplots(figsize=(10, 5.2), dpi=110)
    ok = scored[(scored["status"] == "ok") & np.isfinite(scored["peak_memory_gib"])].copy()
    ok["checkpointing"] = ok["checkpointing"].map(checkpoint_label)
    _draw_families(ax, ok, _run_fractions(scored))
    noisy = ok[[plot_style.is_noisy(r) for r in ok[[c for c in ("noisy", "contended") if c in ok]].to_dict("records")]]
    if len(noisy):
        ax.scatter(noisy["peak_memory_gib"], noisy["samples_per_s"], s=170, facecolors="none",
                   edgecolors=plot_style.NOISY_RING["edge"], linestyles=[(0, plot_style.NOISY_RING["dash"])],
                   label="noisy or contended")
    front = scored[scored["on_pareto"]].sort_values("peak_memory_gib")
    if len(front):
        ax.plot(front["peak_memory_gib"], front["samples_per_s"], color="black", lw=1.2, alpha=0.7,
                label="Pareto front")
    if best is not None:
        b = scored.loc[best]
        ax.scatter([b["peak_memory_gib"]], [b["samples_per_s"]], marker="*", s=420, facecolor="none",
                   edgecolor="red", linewidth=1.6, label="best", zorder=5)
    if baseline.measured and baseline.samples_per_s:
        ax.scatter([baseline.peak_memory_gib], [baseline.samples_per_s], marker="D", s=110, facecolor="none",
                   edgecolor="black", label="baseline", zorder=4)
    # A budget far right of every point (the device's whole memory, say) would squash them.
    top = float(ok["peak_memory_gib"].max()) if len(ok) else max(budgets)
    xmax = plot_style.x_limit(top, budgets)
    drawn = plot_style.drawn_budgets(budgets, top)
    for i, budget in enumerate(sorted(budgets)):
        if budget in drawn:
            ax.axvline(budget, color="red", ls=["--", ":", "-."][i % 3], lw=1, label=f"budget {budget:.1f} GiB")
        else:
            ax.plot([], [], " ", label=f"budget {budget:.1f} GiB (beyond the right edge)")
    failed = scored[~scored["status"].isin(["ok", "skipped", "pruned"])]
    if len(failed):
        ax.scatter(np.full(len(failed), min(max(budgets), xmax)), np.zeros(len(failed)), marker="x", color="red",
                   s=40, label=f"failed ({len(failed)}: {', '.join(sorted(set(failed['status'])))})", clip_on=False)
    ax.set_xlabel("peak memory (GiB)  - lower is better")
    ax.set_ylabel("throughput (samples/s)  - higher is better")
    ax.set_title(title.replace("$", r"\$"), fontsize=10)  # a name's $...$ is text, not mathtext
    ax.grid(alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0, right=xmax)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    _label_points(fig, ax, ok, best)
    return fig


LABEL_PT = 7  # the PNG's point labels, in points


def _label_points(fig, ax, ok: pd.DataFrame, best: int | None) -> None:
    """Label the best and the Pareto front (labels.place: none overlaps another or a point),
    once the axes' layout is final: the offsets are fixed in points, so the layout must not
    change after this."""
    to_px = 72 / fig.dpi
    height = fig.bbox.height
    order = _label_order(ok, best)
    xy = ax.transData.transform(ok[["peak_memory_gib", "samples_per_s"]].to_numpy(dtype=float))
    pts = {i: (float(x), height - float(y)) for i, (x, y) in zip(ok.index, xy, strict=False)}
    frame = ax.get_window_extent()
    font_px = LABEL_PT / to_px
    spots = labels.place([pts[i] for i in order], [point_label(ok.loc[i]) for i in order],
                         labels.Box(frame.x0, height - frame.y1, frame.x1, height - frame.y0),
                         obstacles=[p for i, p in pts.items() if i not in order],
                         char_px=0.62 * font_px, height_px=1.25 * font_px, marker_px=6.0)
    ha = {"start": "left", "middle": "center", "end": "right"}
    for i, spot in zip(order, spots, strict=False):
        if spot is None:
            continue
        px, py = pts[i]
        ax.annotate(point_label(ok.loc[i]), (ok.loc[i, "peak_memory_gib"], ok.loc[i, "samples_per_s"]),
                    textcoords="offset points", xytext=((spot.x - px) * to_px, (py - spot.y) * to_px),
                    ha=ha[spot.anchor], va="baseline", fontsize=LABEL_PT, color="#444", gid="point-label")


def point_label(row) -> str:
    """A point's label: its micro-batch and accumulation (the legend gives the rest)."""
    acc = int(row.get("accumulation", 1) or 1)
    return f"mb{int(row['micro_batch'])}" + (f"x{acc}" if acc > 1 else "")


def _label_order(ok: pd.DataFrame, best: int | None) -> list:
    """The points that get a label, first placed first: the best, then the front by memory."""
    front = ok[ok["on_pareto"].fillna(False).astype(bool)].sort_values("peak_memory_gib").index
    return ([best] if best in ok.index else []) + [i for i in front if i != best]


# Sorts a table by the clicked header: numbers as numbers, blanks last; again to reverse.
SORT_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th, col) {
  th.style.cursor = "pointer";
  th.addEventListener("click", function () {
    var body = th.closest("table").tBodies[0], rows = Array.from(body.rows);
    var dir = th.dataset.dir === "asc" ? -1 : 1; th.dataset.dir = dir === 1 ? "asc" : "desc";
    function key(r) { var c = r.cells[col], t = c.textContent.trim();
                      if (c.dataset.v !== undefined) return parseFloat(c.dataset.v);
                      return t === "" ? null : t; }
    rows.sort(function (a, b) { var x = key(a), y = key(b);
      if (x === null) return 1; if (y === null) return -1;
      return (x < y ? -1 : x > y ? 1 : 0) * dir; });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""


def _ok_points(scored: pd.DataFrame) -> pd.DataFrame:
    return scored[(scored["status"] == "ok") & np.isfinite(scored["peak_memory_gib"])
                  & np.isfinite(scored["samples_per_s"])]


def _run_fractions(scored: pd.DataFrame) -> list:
    """The checkpointed fractions that rank the markers in every plot of the run."""
    return [checkpoint_fraction(c) for c in _ok_points(scored)["checkpointing"]]


def _pareto_svg(scored: pd.DataFrame, best: int | None, baseline: Baseline, record: RunRecord) -> str:
    ok = _ok_points(scored)
    front = scored[scored["on_pareto"]].sort_values("peak_memory_gib")
    best_mark = None
    if best is not None:
        b = scored.loc[best]
        best_mark = svgplot.Mark(float(b["peak_memory_gib"]), float(b["samples_per_s"]),
                                 "best by " + record.objective + "\n" + svgplot.trial_hover(b))
    base_mark = None
    if baseline.measured and baseline.samples_per_s:
        base_mark = svgplot.Mark(baseline.peak_memory_gib, baseline.samples_per_s, f"baseline: {baseline.note}")
    budgets = [(float(b), f"budget {_num(b, '.3g')} GiB") for b in record.budgets]
    return svgplot.scatter(ok, "peak_memory_gib", "samples_per_s", "peak memory (GiB) - lower is better",
                           "throughput (samples/s) - higher is better", "pareto-svg", front=front, best=best_mark,
                           baseline=base_mark, vlines=budgets, fractions=_run_fractions(scored),
                           detail=plot_style.detailed(ok, best), labelled=_label_order(ok, best),
                           label_of=point_label)


def _roi_svg(scored: pd.DataFrame, best: int | None) -> str:
    ok = _ok_points(scored)
    ok = ok[np.isfinite(ok["roi"]) & np.isfinite(ok["memory_saved_gib"])] if "roi" in ok else ok.iloc[:0]
    if ok.empty:
        return "<p>No ROI: the baseline (none / fp32 / micro_batch = global batch) did not run ok.</p>"
    best_mark = None
    if best is not None and best in ok.index:
        b = ok.loc[best]
        best_mark = svgplot.Mark(float(b["memory_saved_gib"]), float(b["roi"]), "best\n" + svgplot.trial_hover(b))
    return svgplot.scatter(ok, "memory_saved_gib", "roi", "memory saved against the baseline (GiB)",
                           "ROI (USD over the job)", "roi-svg", best=best_mark, x_from_zero=False,
                           fractions=_run_fractions(scored), detail=plot_style.detailed(ok, best))


def _environment_html(record: RunRecord) -> str:
    rows = [("device", record.device_name), ("device memory", _gib(record.device_memory_gib)),
            ("driver", record.driver), ("torch", record.torch_version or record.torch),
            ("CUDA", record.cuda_version), ("transformers", record.transformers_version),
            ("Python", record.python)]
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows if v)
    return f"<table class='environment'>{cells}</table>"


def _profile_html(record: RunRecord) -> str:
    trace = record.profile
    if not trace or not _run_relative(str(trace)):  # a link only to a file the run wrote beside the page
        return ""
    href, text = html.escape(quote(str(trace)), quote=True), html.escape(str(trace))
    return (f"<h2>Profile of the best configuration</h2><p>torch.profiler trace of its measured steps, from a run of "
            f"its own: <a href=\"{href}\">{text}</a> (open it in chrome://tracing or Perfetto); the operators "
            f"that took the most time are in <code>profile/top_ops.txt</code>.</p>")


def _run_relative(path: str) -> bool:
    """A relative path inside the run directory: no scheme (javascript:, http:), no root, no ..."""
    p = PurePosixPath(path)
    return bool(re.fullmatch(r"[\w./-]+", path)) and not p.is_absolute() and ".." not in p.parts


def _esc(value) -> str:
    """Every value put into the page goes through here: read back from a study or a file, it
    may be anything (the report escapes at the point of interpolation, whatever the source)."""
    return html.escape(str(value))


def _num(value, fmt: str = "g") -> str:
    """A number as text for the page; whatever else was read back, escaped."""
    try:
        return format(float(value), fmt)
    except (TypeError, ValueError):
        return html.escape(str(value))


def _numbers(numbers, limit: int = 30) -> str:
    """Trial numbers for a sentence: the first ``limit``, then how many more (a large study
    would list thousands)."""
    numbers = [str(int(n)) for n in numbers]
    more = len(numbers) - limit
    return ", ".join(numbers[:limit]) + (f" and {more} more (trials.csv)" if more > 0 else "")


def _gib(v) -> str | None:
    """A size read back from the study's record: a number as GiB, anything else as text."""
    return None if v is None else f"{_num(v)} GiB"


MONEY_COLUMNS = ("roi", "roi_lo", "roi_hi")  # USD over the job: "$1.3k"
TEXT_COLUMNS = ("cause", "why", "measured", "rule_of_thumb", "memory", "time", "rests_on", "contention")


def _cell(value, column: str, percent: tuple) -> tuple:
    """(text shown, sort key or None, css class) of one table cell."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "", None, ""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value)).lower(), None, "flag"
    if isinstance(value, (int, float, np.integer, np.floating)):
        v = float(value)
        if column in percent:
            return (f"{100 * v:+.0f}\u00a0%" if np.isfinite(v) else "unbounded"), v, "num"
        if column in MONEY_COLUMNS:
            return (money(v) if np.isfinite(v) else ("-inf" if v < 0 else "inf")), v, "num"
        text = str(int(v)) if isinstance(value, (int, np.integer)) else f"{v:.4g}"
        return text, v, "num"
    if column.endswith("_runs") and isinstance(value, str):  # one figure per run: "21.5; 19.5; 20.4"
        return "; ".join(_num(v, ".3g") for v in value.split(";")), None, "text"
    return str(value), None, "text" if column in TEXT_COLUMNS or len(str(value)) > 24 else ""


def _table(df: pd.DataFrame, percent: tuple = (), table_id: str | None = None) -> str:
    """An HTML table in a horizontally scrolling box: numbers never break (a non-breaking
    space holds '12 %' together), sentences wrap at spaces only, and a header breaks at its
    underscores (micro_<wbr>batch), never inside a word. A cell's data-v is its number, for
    sorting what is shown in other units ($1.3k)."""
    head = "".join("<th>" + _esc(c).replace("_", "_<wbr>") + "</th>" for c in df.columns)
    rows = []
    for record in df.itertuples(index=False, name=None):
        cells = []
        for column, value in zip(df.columns, record, strict=False):
            text, key, css = _cell(value, column, percent)
            attrs = (f" class='{css}'" if css else "") + (f" data-v='{key:.17g}'" if key is not None else "")
            cells.append(f"<td{attrs}>{_esc(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    table_attrs = (f" id='{table_id}' class='sortable'" if table_id else "")
    return (f"<div class='scroll'><table{table_attrs}><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _effects_table(effects: pd.DataFrame) -> str:
    """The strategy effects: a change is shown as a finding (class 'finding', its interval in
    data-lo/data-hi) only where it is one; otherwise the cell reads that it is not separable
    from noise here (class 'noise')."""
    def cell(row, what: str) -> str:
        if not row[f"{what}_finding"]:
            return f"<td class='text noise'>{_esc(row[what])}</td>"
        lo, hi = ((row["time_change_lo"], row["time_change_hi"]) if what == "time"
                  else (row["memory_change"], row["memory_change"]))
        return (f"<td class='finding' data-lo='{float(lo):.6g}' data-hi='{float(hi):.6g}'>"
                f"{_esc(row[what]).replace(' %', '&nbsp;%')}</td>")

    head = "".join(f"<th>{h}</th>" for h in ("strategy", "micro_<wbr>batch", "memory", "time (per sample)",
                                             "rests on", "rule of thumb"))
    def compared(row) -> str:  # nothing to compare: the reason once, across both columns
        return (cell(row, "memory") + cell(row, "time") if row["rests_on"]
                else f"<td class='text noise' colspan='2'>{_esc(row['measured'])}</td>")

    rows = "".join(
        f"<tr><td class='text'>{_esc(r['strategy'])}</td><td class='num'>{_num(r['micro_batch'], '.0f')}</td>"
        f"{compared(r)}<td class='text'>{_esc(r['rests_on'])}</td>"
        f"<td class='text'>{_esc(r['rule_of_thumb'])}</td></tr>"
        for _, r in effects.iterrows()
    )
    return f"<div class='scroll'><table id='effects'><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>"


def _best_html(scored: pd.DataFrame, best: int | None, record: RunRecord) -> str:
    """The best configuration and what the run says about it (or why there is none)."""
    esc = _esc
    if best is None:
        first, causes = no_best(scored)
        best_html = f"<p class='best'><b>{esc(first[0].upper() + first[1:])}.</b></p>" + (
            "<ul class='causes'>" + "".join(f"<li>{esc(c)}</li>" for c in causes) + "</ul>" if causes else ""
        )
    else:
        b = scored.loc[best]
        best_html = (
            f"<p class='best'>Best by <b>{esc(record.objective)}</b>: checkpointing <b>{esc(b['checkpointing'])}</b>, "
            f"precision <b>{esc(b['precision'])}</b>, micro_batch <b>{int(b['micro_batch'])}</b> x accumulation "
            f"<b>{int(b['accumulation'])}</b> - peak {b['peak_memory_gib']:.2f} GiB, {b['samples_per_s']:.1f} samples/s"
            + (f", ROI {money(float(b['roi']))}" if pd.notna(b.get("roi")) else "")
            + "".join(f", {d.name} <b>{esc(d.spell(v))}</b>" for d, v in extras(Strategy.of(b).as_dict()))
            + "</p>"
            + (
                f"<p class='numerics'><b>Changes training numerics</b>: {esc(b['numerics'])}; loss parity: "
                + (
                    "not measured"
                    if pd.isna(b.get("loss_parity"))
                    else f"losses within {b['loss_parity']:.2%} of the plain optimizer's over the same steps, seed "
                    "and batch"
                )
                + ".</p>"
                if isinstance(b.get("numerics"), str) and b.get("numerics")
                else ""
            )
            + (f"<p class='why'>Why: {esc(record.why)}.</p>" if record.why else "")
            + (f"<p class='limits'><b>Limits</b>: {esc(record.limits)}.</p>" if record.limits else "")
            + (f"<p class='effort'><b>Cost</b>: {esc(record.effort)}.</p>" if record.effort else "")
        )
    if record.change:
        best_html += f"<p class='change'><b>Changed since the last run</b>: {esc(record.change)}</p>"
    best_html += "".join(f"<p class='unavailable'><b>Unavailable on this device</b> (skipped, never run): "
                         f"{esc(u)}.</p>" for u in unavailable(scored))
    if record.escalated:
        best_html += f"<p class='escalated'><b>Escalated</b>: {esc(record.escalated)}.</p>"
    if record.search_end:
        best_html += f"<p class='search-end'><b>Search</b>: {esc(record.search_end)}.</p>"
    return best_html


def _notes(scored: pd.DataFrame, baseline: Baseline, record: RunRecord) -> list[str]:
    """The report's notes, HTML: the baseline, caps, reductions, repeats, contention, noise,
    disagreements, and what was skipped or pruned."""
    esc = _esc
    skipped = scored[scored["status"] == "skipped"]
    notes = [f"Baseline (none / fp32 / micro_batch = global batch): {esc(baseline.note)}."]
    if record.left_out:
        notes.append(esc(record.left_out) + ".")
    if record.memory_cap_gib:
        notes.append(
            f"Every trial ran with its CUDA allocator capped to {_num(record.memory_cap_gib)} GiB less its CUDA "
            "context (torch.cuda.set_per_process_memory_fraction), as on a card of that size; a trial fits a "
            "budget when its reserved memory plus the context stays within it. Not simulated: the smaller "
            "card's speed, and memory other processes would hold on it."
        )
    if record.reductions:
        notes.append("CPU run with a reduced model so it finishes in minutes: " + esc(", ".join(record.reductions))
                     + ". GPU runs use the full size.")
    if "samples_per_s_runs" in scored.columns and scored["samples_per_s_runs"].notna().any():
        notes.append("The close contenders were measured again in fresh processes; their samples/s is the median "
                     "over every process (samples_per_s_runs), time_spread the larger of the within-process and "
                     "between-process spreads. A difference inside the spread decides nothing: among configurations "
                     "tied within it, a stable one wins, then the one using less memory.")
    contention = contention_summary(scored)
    if contention:
        short, detail = contention
        notes.append(f"<span class='contention'><b>Contention</b>: {esc(short)}.</span>" + (
            "<details class='contention-detail'><summary>per trial</summary><ul>"
            + "".join(f"<li>{esc(d)}</li>" for d in detail) + "</ul></details>" if detail else ""))
    noisy = scored[scored.get("noisy", pd.Series(False, index=scored.index)).fillna(False).astype(bool)]
    if len(noisy):
        notes.append(f"{len(noisy)} trial(s) flagged noisy (timing spread above 10 %, or measured under contention): "
                     + esc(_numbers(noisy["number"])) + ".")
    disagree = scored[scored.get("memory_disagrees", pd.Series(False, index=scored.index)).fillna(False).astype(bool)]
    if len(disagree):
        notes.append(f"{len(disagree)} configuration(s) whose runs' peak memory differs by more than "
                     f"{100 * MEMORY_AGREEMENT:.0f} % (peak_memory_gib_runs; the largest is used): trials "
                     + esc(_numbers(disagree["number"])) + ".")
    if len(skipped):
        notes.append(f"{len(skipped)} configuration(s) skipped, never run: "
                     + esc("; ".join(sorted(set(skipped["cause"].dropna())))) + ".")
    pruned = scored[scored["status"] == "pruned"]
    if len(pruned):
        notes.append(f"{len(pruned)} configuration(s) pruned, never run: the same strategy ran out of memory at a "
                     "smaller micro-batch (trials " + esc(_numbers(pruned["number"])) + ").")
    return notes


def _page(title: str, record: RunRecord, headline_html: str, best_html: str, notes: list[str], budget_html: str,
          front: pd.DataFrame, effects: pd.DataFrame, shown: pd.DataFrame, scored: pd.DataFrame, cols: list,
          scored_svg: tuple) -> str:
    """report.html from its parts."""
    esc = _esc
    pareto_svg, roi_svg = scored_svg
    run_line = (f"{esc(title)} - seq_len {esc(str(record.seq_len))} - budget "
                f"{', '.join(_num(b, '.1f') for b in record.budgets)} GiB - device {esc(record.device_name)}"
                + (" - torch " + esc(record.torch) if record.torch else ""))
    shown_note = ("" if len(shown) == len(scored)
                  else "The Pareto front, the best and the latest trials; trials.csv holds every one. ")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>autotune report - {esc(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; max-width: 1200px; color: #222; }}
@media (max-width: 600px) {{ body {{ margin: 0.6em; }} }}
.scroll {{ overflow-x: auto; max-width: 100%; margin-bottom: 1.5em; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
th, td {{ padding: 3px 5px; border-bottom: 1px solid #ddd; text-align: right; overflow-wrap: normal;
  word-break: normal; }}
td {{ white-space: nowrap; }} td.text {{ white-space: normal; text-align: left; min-width: 14em; max-width: 32em; }}
th {{ background: #f3f3f3; vertical-align: bottom; }} #effects th {{ text-align: left; }} td.noise {{ color: #777; }}
.headline {{ font-size: 1.1em; background: #f4f8fd; border-left: 4px solid #3465a4; padding: 0.3em 0.9em; }}
.headline p {{ margin: 0.45em 0; }} .headline p:first-child {{ font-weight: bold; }}
.best {{ font-size: 1.05em; }} code {{ background: #f3f3f3; padding: 1px 4px; overflow-wrap: anywhere; }}
svg.plot {{ max-width: 100%; height: auto; }}
</style></head><body>
<h1>autotune report</h1>
{headline_html}
<p>{run_line}</p>
<p>Command: <code>{esc(redact(record.command))}</code></p>
{best_html}
<ul>{"".join(f"<li>{n}</li>" for n in notes)}</ul>
{budget_html}
<h2>Pareto plot: memory against throughput</h2>
<p>Hover a point for its configuration. Up and left is better.</p>
<div id="pareto-plot">{pareto_svg}</div>
<h2>ROI against memory saved</h2>
<p>ROI of each configuration that ran, against the memory it saves over the baseline.</p>
<div id="roi-plot">{roi_svg}</div>
<h2>Pareto front</h2>
{_table(front)}
<h2>Strategy effects against none / fp32 (measured) beside common rules of thumb</h2>
<p>A time change is a finding only where the range both trials' measured spreads allow excludes no change
(the range is shown beside it); a memory change only where it exceeds what runs of one configuration differ
by ({100 * MEMORY_NOISE:.0f} %). The rules of thumb are figures often quoted for each technique, not measurements.</p>
{_effects_table(effects)}
<h2>{"All trials" if len(shown) == len(scored) else f"{len(shown)} of the {len(scored)} trials"}</h2>
<p>{shown_note}Click a column's header to sort by it.</p>
{_table(shown[cols], table_id="trials")}
<h2>Measured on</h2>
{_environment_html(record)}
<p>Reproduce: <code>{esc(redact(record.command))}</code> (a new study_name measures again; the same one resumes).</p>
{_profile_html(record)}
<script>{SORT_SCRIPT}</script>
</body></html>
"""
    return page


def write_report(run_dir: Path, scored: pd.DataFrame, best: int | None, baseline: Baseline, record: RunRecord,
                 per_budget: pd.DataFrame | None = None) -> Path:
    """Write report.html and pareto.png into run_dir; returns the HTML path.

    ``scored`` is scored at the primary budget; ``per_budget`` (several budgets) holds the
    winner of each budget and why it won."""
    title = f"{record.model} on {record.device_name} - global batch {record.global_batch}"
    fig = pareto_figure(scored, best, record.budgets, baseline, title)
    with replacing(run_dir / "pareto.png") as tmp:
        fig.savefig(tmp)  # for terminals and READMEs; the page draws its own
    _pyplot().close(fig)

    esc = _esc
    cols = [c for c in TABLE_COLUMNS if c in scored.columns]
    shown = scored[plot_style.detailed(scored, best)]  # every trial, up to plot_style.DETAIL_LIMIT
    front = scored[scored["on_pareto"]].sort_values("peak_memory_gib")[cols]
    effects = strategy_effects(scored, record.global_batch)
    lead = headline(scored, best, baseline, record.objective, record.budget_gib, record.global_batch,
                    str(record.device_name or ""))
    headline_html = ("<div class='headline'>" + "".join(f"<p>{esc(line)}</p>" for line in lead) + "</div>")
    best_html = _best_html(scored, best, record)
    notes = _notes(scored, baseline, record)
    budget_html = ""
    if per_budget is not None:
        budget_html = ("<h2>Best per budget</h2>\n<p>The same trials, judged against each budget (the table and "
                       f"plot below use the first, {_num(record.budget_gib)} GiB).</p>\n" + _table(per_budget))
    page = _page(title, record, headline_html, best_html, notes, budget_html, front, effects, shown, scored, cols,
                 scored_svg=(_pareto_svg(scored, best, baseline, record), _roi_svg(scored, best)))
    path = run_dir / "report.html"
    write_text(path, page)
    return path
