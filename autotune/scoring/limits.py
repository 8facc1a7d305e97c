"""How far the answer is from the hardware's limits: the memory floor and the MFU.

* **Memory floor**: the smallest model state any measured configuration kept (parameters,
  gradients and optimizer state: ``static_gib``) plus the smallest activation footprint any
  measured configuration had (its peak less its model state). No configuration of the space
  measured so far goes below either part, so their sum is the floor the space reaches; a
  best far above it leaves memory on the table (a larger micro-batch or less
  checkpointing would use it).
* **MFU** (model FLOPs utilisation): training FLOPs per sample (3 x the forward's, as
  torch's flop counter counts them in a full measurement; recomputation is not counted)
  times samples/s, over the device's peak dense 16-bit tensor throughput. A small MFU says
  launch- or memory-bound (larger micro-batches, compilation); the peaks are the vendors'
  dense (not sparse) figures for the cards named below, and unknown cards get no MFU.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

# Peak dense bf16/fp16 tensor throughput, FLOP/s, by a fragment of torch's device name
# (vendor datasheets, without sparsity). The first fragment found in the name wins.
PEAK_16BIT = (
    ("H200", 989.4e12), ("H100 PCIe", 756.0e12), ("H100 NVL", 835.0e12), ("H100", 989.4e12),
    ("GH200", 989.4e12), ("A100", 312.0e12), ("L40S", 362.0e12), ("L4", 121.0e12), ("A10G", 70.0e12),
)


def peak_flops(device_name: str) -> float | None:
    for fragment, flops in PEAK_16BIT:
        if fragment in (device_name or ""):
            return flops
    return None


def memory_floor(table: pd.DataFrame) -> float | None:
    """The smallest model state plus the smallest activation footprint measured, in GiB."""
    if table.empty or "static_gib" not in table:
        return None
    ok = table[(table["status"] == "ok")]
    static = pd.to_numeric(ok["static_gib"], errors="coerce")
    peak = pd.to_numeric(ok["peak_memory_gib"], errors="coerce")
    good = np.isfinite(static) & np.isfinite(peak)
    if not good.any():
        return None
    return float(static[good].min() + (peak[good] - static[good]).clip(lower=0).min())


def flops_per_sample(table: pd.DataFrame) -> float | None:
    """The model's training FLOPs per sample: the same for every configuration (it counts the
    model's work, not its recomputation), so the median over the trials that counted it."""
    if "flops_per_sample" not in table:
        return None
    values = pd.to_numeric(table["flops_per_sample"], errors="coerce")
    values = values[np.isfinite(values) & (values > 0)]
    return float(values.median()) if len(values) else None


def limits_line(table: pd.DataFrame, best_row: pd.Series | None, device_name: str) -> str | None:
    """'best uses 22.19 GiB, 3.1x the floor (7.2 GiB ...); 291 TFLOP/s, 29 % of ...', or None."""
    if best_row is None:
        return None
    parts = []
    peak = float(best_row["peak_memory_gib"])
    floor = memory_floor(table)
    if floor and floor > 0:
        parts.append(f"best uses {peak:.3g} GiB, {peak / floor:.1f}x the memory floor of this space ({floor:.3g} GiB: "
                     "the smallest model state plus the smallest activation footprint measured)")
    fps = flops_per_sample(table)
    if fps:
        achieved = fps * float(best_row["samples_per_s"])
        device_peak = peak_flops(device_name)
        text = f"{achieved / 1e12:.3g} TFLOP/s of model work ({fps / 1e9:.3g} GFLOP per sample)"
        if device_peak:
            text += (f", {achieved / device_peak:.0%} of the device's dense 16-bit peak "
                     f"({device_peak / 1e12:.0f} TFLOP/s): the MFU")
        else:
            text += f"; no MFU: the peak throughput of '{device_name}' is not known here"
        parts.append(text)
    elif "flops_error" in table and table["flops_error"].notna().any():
        parts.append(f"no MFU: torch's flop counter failed ({table['flops_error'].dropna().iloc[0]})")
    return "; ".join(parts) or None
