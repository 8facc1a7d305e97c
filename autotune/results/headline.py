"""The answer in a few sentences: what to use, what it saves against the baseline, how sure.

The report's first paragraph and the terminal's last block. Generated from the scored
table alone (no run metadata beyond the device name), so a rebuilt report says the same:

    Use none/bf16/mb32x2: 22.19 GiB, fits the 24 GiB budget, 283 samples/s.
    Against the baseline none/fp32/mb64 (47.3 GiB, 71.5 samples/s): 3.96x the speed at
    53 % less memory.
    Certainty: clear, ahead of the runner-up (none/fp16/mb32x2, 279 samples/s) by more than both
    spreads.
    Hardware: MFU 29 %; 3.5x the memory floor of this space (6.32 GiB).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from autotune.scoring.limits import flops_per_sample, memory_floor, peak_flops
from autotune.scoring.score import Baseline, contenders, is_baseline_strategy, objective_column, within_noise
from autotune.train.dimensions import short_label
from autotune.train.strategy import Strategy
from autotune.train.values import is_true

SAME_SPEED = 0.05  # speeds within this share of each other are "as fast" in words


def config_label(row) -> str:
    """'none/bf16/mb32x2' and what else differs from the defaults ('+ offload', ...)."""
    return short_label(Strategy.of(row).as_dict())


def _overlap(a, b) -> bool:
    """Whether two trials' speed intervals (samples_per_s_lo/_hi) overlap: then neither is
    known to be faster."""
    try:
        return float(a["samples_per_s_lo"]) <= float(b["samples_per_s_hi"]) and \
            float(b["samples_per_s_lo"]) <= float(a["samples_per_s_hi"])
    except (KeyError, TypeError, ValueError):
        return False


def _speed_words(ratio: float, tied: bool = False) -> str:
    if tied:
        return "the same speed within noise"
    if ratio >= 1 + SAME_SPEED:
        return f"{ratio:.2f}x the speed"
    if ratio <= 1 - SAME_SPEED:
        return f"{100 * (1 - ratio):.0f} % slower"
    return "the same speed (within 5 %)"


def _memory_words(best_gib: float, base_gib: float, lower_bound: bool) -> str:
    change = best_gib / base_gib - 1
    if lower_bound:
        return f"at least {100 * -change:.0f} % less memory" if change < 0 else "more memory"
    if abs(change) < 0.02:
        return "the same memory"
    return f"{100 * abs(change):.0f} % {'less' if change < 0 else 'more'} memory"


def baseline_sentence(best_row, baseline: Baseline, scored: pd.DataFrame, global_batch: int) -> str:
    name = f"none/fp32/mb{global_batch}"
    sps = float(best_row["samples_per_s"])
    plain = scored[is_baseline_strategy(scored)]
    at_global = plain[plain["micro_batch"] == global_batch]
    if baseline.measured and baseline.samples_per_s:
        fits = "" if "does not fit" not in baseline.note else ", over the budget"
        tied = len(at_global) > 0 and at_global.index[0] != best_row.name and _overlap(best_row, at_global.iloc[0])
        if len(at_global) and at_global.index[0] == best_row.name:
            return f"This is the baseline {name}: nothing in the space beats it at the objective within the budget."
        return (f"Against the baseline {name} ({baseline.peak_memory_gib:.3g} GiB{fits}, "
                f"{baseline.samples_per_s:.3g} samples/s): {_speed_words(sps / baseline.samples_per_s, tied)} at "
                f"{_memory_words(float(best_row['peak_memory_gib']), baseline.peak_memory_gib, False)}.")
    ended = f"ended {at_global.iloc[0]['status']}" if len(at_global) else "was not run"
    text = f"The baseline {name} {ended}"
    ran = plain[plain["status"] == "ok"].sort_values("micro_batch")
    if len(ran):  # the plain configuration at its largest micro-batch that ran: what the user could run
        r = ran.iloc[-1]
        text += (
            f"; against {config_label(r)}, the largest plain one that ran ({float(r['peak_memory_gib']):.3g} GiB, "
            f"{float(r['samples_per_s']):.3g} samples/s): "
            f"{_speed_words(sps / float(r['samples_per_s']), r.name != best_row.name and _overlap(best_row, r))} at "
            f"{_memory_words(float(best_row['peak_memory_gib']), float(r['peak_memory_gib']), False)}"
        )
    return text + "."


def _figure(row, objective: str) -> str:
    return f"ROI {money(float(row['roi']))}" if objective == "roi" else f"{float(row['samples_per_s']):.3g} samples/s"


def certainty_sentence(scored: pd.DataFrame, best: int, objective: str) -> str:
    key = objective_column(objective)
    if f"{key}_lo" not in scored or f"{key}_hi" not in scored:
        return "Certainty: not assessed, the table holds no measured spreads."
    b = scored.loc[best]
    busy = scored.get("contended", pd.Series(False, index=scored.index)).fillna(False).astype(bool)
    tied = scored[contenders(scored, objective)].drop(index=best, errors="ignore")
    if len(tied):
        names = ", ".join(config_label(r) for _, r in tied.sort_values(key, ascending=False).head(2).iterrows())
        more = f" and {len(tied) - 2} more" if len(tied) > 2 else ""
        text = (f"tied within noise with {names}{more}: any of them serves; this one won the tie by the rule "
                f"(a stable measurement first, then less memory)")
        if busy[[best, *tied.index]].any():
            text = "uncertain, " + text + " (measured under load: the order among them is not known)"
        return "Certainty: " + text + "."
    others = scored[scored["fits_budget"] & np.isfinite(scored[key])].drop(index=best)
    if others.empty:
        return "Certainty: the only configuration that fits; nothing to compare it with."
    runner = others.loc[others[key].idxmax()]
    named = f"the runner-up ({config_label(runner)}, {_figure(runner, objective)})"
    if within_noise(scored, objective).drop(index=best).any():  # tied only through a wide interval
        text = (f"likely: {named} is below this one's lower bound, though its own wide interval reaches "
                "this one's")
    else:
        text = f"clear, ahead of {named} by more than both spreads"
    if busy[best]:
        text = "uncertain, measured under load: the speed reflects the load as much as this configuration"
    elif is_true(b.get("noisy")):
        text += f", though its own timing is noisy (spread {100 * float(b.get('time_spread') or 0):.0f} %)"
    return "Certainty: " + text + "."


def hardware_sentence(scored: pd.DataFrame, best_row, device_name: str) -> str | None:
    parts = []
    fps, peak = flops_per_sample(scored), peak_flops(device_name)
    if fps and peak:
        parts.append(f"MFU {100 * fps * float(best_row['samples_per_s']) / peak:.0f} %")
    floor = memory_floor(scored)
    if floor and floor > 0:
        parts.append(f"{float(best_row['peak_memory_gib']) / floor:.1f}x the memory floor of this space "
                     f"({floor:.3g} GiB)")
    return ("Hardware: " + "; ".join(parts) + ".") if parts else None


def headline(scored: pd.DataFrame, best: int | None, baseline: Baseline, objective: str,
             budget_gib: float, global_batch: int, device_name: str = "") -> list[str]:
    """The headline's sentences; the first names what to use (or why nothing can be)."""
    if best is None:
        return [f"No configuration to use: nothing that ran ok fits {budget_gib:.3g} GiB (see below)."]
    b = scored.loc[best]
    first = (f"Use {config_label(b)}: {float(b['peak_memory_gib']):.3g} GiB, fits the {budget_gib:.3g} GiB budget, "
             f"{float(b['samples_per_s']):.3g} samples/s")
    if objective == "roi" and pd.notna(b.get("roi")):
        first += f", ROI {money(float(b['roi']))}"
    lines = [first + ".", baseline_sentence(b, baseline, scored, global_batch),
             certainty_sentence(scored, best, objective)]
    hardware = hardware_sentence(scored, b, device_name)
    return lines + ([hardware] if hardware else [])


def money(usd: float) -> str:
    """USD for a reader: '$1.3k', '-$42', '$0.18'."""
    sign, v = ("-" if usd < 0 else ""), abs(usd)
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{sign}${v / scale:.3g}{unit}"
    return f"{sign}${v:.2g}" if v < 1 else f"{sign}${v:.3g}"
