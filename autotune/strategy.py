"""A memory strategy and the code that applies it.

The trial process and ``load_tuned(...).apply`` call the same functions here, so what a
user trains with is exactly what was measured.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import asdict, dataclass
from typing import Iterable

import torch
import torch.utils.checkpoint

CHECKPOINTING = ("none", "full")
PRECISIONS = ("fp32", "bf16", "fp16")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Strategy:
    checkpointing: str  # none | full
    precision: str  # fp32 | bf16 | fp16
    micro_batch: int  # samples per forward/backward
    accumulation: int  # micro-steps per optimizer step

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.accumulation

    def as_dict(self) -> dict:
        return asdict(self)

    def label(self) -> str:
        return f"ckpt={self.checkpointing} prec={self.precision} mb={self.micro_batch} acc={self.accumulation}"


def _checkpointed(forward):
    @functools.wraps(forward)
    def run(*args, **kwargs):
        if not torch.is_grad_enabled():  # evaluation: nothing to save, nothing to recompute
            return forward(*args, **kwargs)
        # Non-reentrant checkpointing supports keyword arguments and restores the RNG state,
        # so dropout in the recomputed forward matches the original one.
        return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return run


def apply_checkpointing(blocks: Iterable[torch.nn.Module], mode: str) -> int:
    """Wrap each block's forward in activation checkpointing; returns how many are wrapped.

    The block stays in its place (state_dict keys unchanged); only its ``forward`` is
    replaced on the instance. Applying twice is a no-op.
    """
    if mode not in CHECKPOINTING:
        raise ValueError(f"checkpointing={mode!r}: use one of {', '.join(CHECKPOINTING)}")
    blocks = list(blocks)
    if mode == "none":
        return 0
    if not blocks:
        raise ValueError("checkpointing=full needs the model's blocks, but none were given or found; "
                         "pass blocks=[...] (the repeated layers of the model)")
    for block in blocks:
        if not getattr(block, "_autotune_checkpointed", False):
            block.forward = _checkpointed(block.forward)
            block._autotune_checkpointed = True
    return len(blocks)


def autocast_context(precision: str, device_type: str):
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: use one of {', '.join(PRECISIONS)}")
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=AUTOCAST_DTYPES[precision])


def make_scaler(precision: str, device_type: str) -> torch.amp.GradScaler:
    """A gradient scaler, enabled for fp16 only (bf16 has fp32's range and needs none)."""
    return torch.amp.GradScaler(device_type, enabled=precision == "fp16")
