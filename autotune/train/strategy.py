"""A memory strategy and the code that applies it.

The trial process and ``load_tuned(...).apply`` call the same functions here, so what a
user trains with is exactly what was measured.
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import asdict, dataclass
from typing import Iterable, List, Optional, Sequence

from typing import TYPE_CHECKING

from autotune.train.optimizer import OPTIMIZER_IMPLS, OPTIMIZER_STATES, WEIGHTS

CHECKPOINT_ALIASES = {"none": 0.0, "full": 1.0}
PRECISIONS = ("fp32", "bf16", "fp16")
AUTOCAST_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}  # torch's dtypes, by name
if TYPE_CHECKING:
    import torch
# torch itself is imported where a strategy is applied: the readers (show, report) use this
# module for its names and labels alone, and start 1.4 s sooner without it.
ALLOCATORS = {"default": None, "expandable": "expandable_segments:True"}  # -> PYTORCH_CUDA_ALLOC_CONF


def checkpoint_fraction(value) -> float:
    """none -> 0, full -> 1, a number in [0, 1] -> itself; anything else is a ValueError."""
    if isinstance(value, str) and value in CHECKPOINT_ALIASES:
        return CHECKPOINT_ALIASES[value]
    try:
        f = float(value)
    except (TypeError, ValueError):
        f = float("nan")
    if isinstance(value, bool) or not 0.0 <= f <= 1.0:
        raise ValueError(f"checkpointing={value!r}: use none, full or a fraction of the blocks in [0, 1], e.g. 0.5")
    return f


def checkpoint_label(value) -> str:
    """The one spelling of a checkpointing value in tables and files: none, full or the fraction."""
    f = checkpoint_fraction(value)
    return "none" if f == 0 else "full" if f == 1 else f"{f:g}"


@dataclass(frozen=True)
class Strategy:
    checkpointing: str  # none | full | a fraction of the blocks, e.g. "0.5" (see checkpoint_label)
    precision: str  # fp32 | bf16 | fp16
    micro_batch: int  # samples per forward/backward
    accumulation: int  # micro-steps per optimizer step
    offload: bool = False  # saved activations kept in pinned CPU memory (save_on_cpu)
    allocator: str = "default"  # default | expandable (CUDA caching allocator segments)
    # The model-state dimensions (train/optimizer.py says how each is built):
    optimizer_state: str = "default"  # default | 8bit | 4bit (AdamW's moments block-quantised)
    optimizer_offload: bool = False  # optimizer state and step on the host (CUDA only)
    weights: str = "fp32"  # fp32 | bf16 (AdamW with stochastic rounding)
    optimizer_impl: str = "default"  # default | forloop | foreach | fused (torch.optim's switch)

    def __post_init__(self):
        object.__setattr__(self, "checkpointing", checkpoint_label(self.checkpointing))
        for key, allowed in (("allocator", tuple(ALLOCATORS)), ("optimizer_state", OPTIMIZER_STATES),
                             ("weights", WEIGHTS), ("optimizer_impl", OPTIMIZER_IMPLS)):
            if getattr(self, key) not in allowed:
                raise ValueError(f"{key}={getattr(self, key)!r}: use one of {', '.join(allowed)}")

    @property
    def model_state(self) -> tuple:
        """The model-state dimensions: what changes the memory no micro-batch changes."""
        return (self.optimizer_state, self.optimizer_offload, self.weights, self.optimizer_impl)

    @property
    def checkpoint_fraction(self) -> float:
        return checkpoint_fraction(self.checkpointing)

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.accumulation

    def as_dict(self) -> dict:
        return asdict(self)

    def label(self) -> str:
        extra = (" offload" if self.offload else "") + (f" alloc={self.allocator}" if self.allocator != "default" else "")
        extra += (f" opt={self.optimizer_state}" if self.optimizer_state != "default" else "") + (
            " opt-offload" if self.optimizer_offload else "") + (f" w={self.weights}" if self.weights != "fp32" else "") + (
            f" impl={self.optimizer_impl}" if self.optimizer_impl != "default" else "")
        return (f"ckpt={self.checkpointing} prec={self.precision} mb={self.micro_batch} "
                f"acc={self.accumulation}{extra}")


def blocks_to_checkpoint(blocks: Sequence[torch.nn.Module], fraction: float) -> List[torch.nn.Module]:
    """The blocks a fraction selects: the first round(fraction x n) from the input side (at
    least one when the fraction is above 0). Every block of a transformer stack holds the
    same activations, so which ones matters little for memory; a fixed rule keeps a trial
    and ``load_tuned(...).apply`` identical."""
    blocks = list(blocks)
    if fraction <= 0 or not blocks:
        return []
    k = min(len(blocks), max(1, math.floor(fraction * len(blocks) + 0.5)))
    return blocks[:k]


def _checkpointed(forward):
    import torch
    import torch.utils.checkpoint

    @functools.wraps(forward)
    def run(*args, **kwargs):
        if not torch.is_grad_enabled():  # evaluation: nothing to save, nothing to recompute
            return forward(*args, **kwargs)
        # Non-reentrant checkpointing supports keyword arguments and restores the RNG state,
        # so dropout in the recomputed forward matches the original one.
        return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return run


def apply_checkpointing(blocks: Iterable[torch.nn.Module], mode) -> int:
    """Wrap the selected blocks' forward in activation checkpointing; returns how many.

    ``mode``: none, full or a fraction (``blocks_to_checkpoint`` says which blocks). The
    block stays in its place (state_dict keys unchanged); only its ``forward`` is replaced
    on the instance. Applying twice is a no-op.
    """
    fraction = checkpoint_fraction(mode)
    blocks = list(blocks)
    if fraction == 0:
        return 0
    if not blocks:
        raise ValueError(f"checkpointing={checkpoint_label(mode)} needs the model's blocks, but none were given or "
                         "found; pass blocks=[...] (the repeated layers of the model), or Workload(blocks=[...])")
    chosen = blocks_to_checkpoint(blocks, fraction)
    for block in chosen:
        if not getattr(block, "_autotune_checkpointed", False):
            block.forward = _checkpointed(block.forward)
            block._autotune_checkpointed = True
    return len(chosen)


def autocast_context(precision: str, device_type: str):
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: use one of {', '.join(PRECISIONS)}")
    if precision == "fp32":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=device_type, dtype=getattr(torch, AUTOCAST_DTYPES[precision]))


def offload_context(offload: bool, device_type: str):
    """Keep the tensors autograd saves for backward in CPU memory (pinned on CUDA, so the
    copies back overlap), which trades PCIe traffic for device memory."""
    if not offload:
        return contextlib.nullcontext()
    import torch

    return torch.autograd.graph.save_on_cpu(pin_memory=device_type == "cuda")


def saved_bytes_counter(total: list):
    """Hooks in offload's place that add to ``total[0]`` the bytes of every tensor autograd
    saves and leave the tensor where it is: what ``save_on_cpu`` would copy to the host (and
    back), since it copies each saved tensor once per save, at this same level."""
    def pack(t: torch.Tensor) -> torch.Tensor:
        total[0] += t.numel() * t.element_size()
        # Detached: a saved tensor that is its own op's output (softmax, tanh, ...) would
        # otherwise hold its grad_fn, which holds the packed tensor: a cycle through
        # autograd's C++ graph that Python's garbage collector cannot see, keeping the whole
        # counting forward's graph (parameters included) alive for the life of the process.
        return t.detach()

    import torch

    return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)


@contextlib.contextmanager
def forward_context(strategy: Strategy, device_type: str, count_saved: Optional[list] = None):
    """What wraps each micro-step's forward: the precision and, if tuned, the offload.
    ``count_saved`` (a one-item list), for a configuration without offload: sum up what
    offload would move (``saved_bytes_counter``)."""
    outer = (saved_bytes_counter(count_saved) if count_saved is not None and not strategy.offload
             else offload_context(strategy.offload, device_type))
    with outer, autocast_context(strategy.precision, device_type):
        yield


# Offload pins a host block for every tensor autograd saves; the first step pins them all (the
# host caching allocator keeps them for later steps). cudaHostAlloc pins 16 GiB in 11.4 s on an
# H200's host, malloc + cudaHostRegister on 8 threads in 2.6 s, at the same copy rate after
# (bench/pinned_alloc.py, docs/gpu-runs/budgets-h200-2026-12-07): BERT-large's offload first
# steps took 8-26 s with the former. The steps after are the same either way.
PINNED_FAST = "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"


def allocator_env(allocator: str, offload: bool = False) -> dict:
    """Environment for a process whose CUDA allocator should use ``allocator`` (and, with
    ``offload``, pin host memory by registering it on several threads: ``PINNED_FAST``); it
    must be set before CUDA starts in that process."""
    conf = ",".join(c for c in (ALLOCATORS[allocator], PINNED_FAST if offload else None) if c)
    return {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}


def make_scaler(precision: str, device_type: str) -> torch.amp.GradScaler:
    """A gradient scaler, enabled for fp16 only (bf16 has fp32's range and needs none)."""
    import torch

    return torch.amp.GradScaler(device_type, enabled=precision == "fp16")
