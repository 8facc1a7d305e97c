"""A memory strategy and the code that applies it.

The trial process and ``load_tuned(...).apply`` call the same functions here, so what a
user trains with is exactly what was measured.
"""
from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.train.dimensions import (
    ALLOCATORS,
    AUTOCAST_DTYPES,
    DIMENSIONS,
    MODEL_STATE,
    checkpoint_fraction,
    checkpoint_label,
    in_group,
    tags,
    value_in,
)

if TYPE_CHECKING:
    import torch
# torch itself is imported where a strategy is applied: the readers (show, report) use this
# module for its names and labels alone, and start 1.4 s sooner without it.
PRECISIONS = DIMENSIONS["precision"].values


class Strategy:
    """One configuration: a value for every dimension of train/dimensions.py, each checked and
    in its one spelling (``Strategy(micro_batch=8, accumulation=4, precision="bf16")``, or
    positionally in the declarations' order; the dimensions not given take their defaults).
    Immutable and hashable; its values read as attributes (``strategy.precision``)."""

    __slots__ = ("_values",)
    _values: dict[str, Any]

    def __init__(self, *args: Any, **values: Any) -> None:
        if len(args) > len(DIMENSIONS):
            raise TypeError(f"Strategy takes at most {len(DIMENSIONS)} values in order ({', '.join(DIMENSIONS)})")
        values = {**dict(zip(DIMENSIONS, args, strict=False)), **values}
        unknown = sorted(set(values) - set(DIMENSIONS))
        if unknown:
            raise TypeError(f"unknown strategy dimension(s) {', '.join(unknown)}; known: {', '.join(DIMENSIONS)}")
        object.__setattr__(self, "_values", {name: d.check(values[name]) if name in values else d.default
                                             for name, d in DIMENSIONS.items()})

    @classmethod
    def of(cls, row: Mapping[str, Any], global_batch: int | None = None) -> Strategy:
        """The strategy of a params dict or a table row: a dimension it lacks (None, NaN) takes
        its default; with ``global_batch``, the accumulation follows from the micro-batch."""
        values = {name: value_in(row, name) for name in DIMENSIONS}
        if global_batch is not None:
            values["accumulation"] = global_batch // values["micro_batch"]
        return cls(**values)

    def __getattr__(self, name: str) -> Any:
        try:
            return object.__getattribute__(self, "_values")[name]
        except KeyError:
            raise AttributeError(f"Strategy has no dimension {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Strategy is immutable: strategy.replace(...) makes a changed one")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Strategy) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self._values.items()))

    def __repr__(self) -> str:
        return f"Strategy({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"

    def __reduce__(self) -> tuple[Any, ...]:
        return _strategy, (dict(self._values),)

    def replace(self, **changes: Any) -> Strategy:
        return Strategy(**{**self._values, **changes})

    @property
    def model_state(self) -> tuple[Any, ...]:
        """The model-state dimensions: what changes the memory no micro-batch changes."""
        return tuple(self._values[d.name] for d in in_group(MODEL_STATE))

    @property
    def checkpoint_fraction(self) -> float:
        return checkpoint_fraction(self._values["checkpointing"])

    @property
    def global_batch(self) -> int:
        return int(self._values["micro_batch"] * self._values["accumulation"])

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def label(self) -> str:
        return " ".join(tags(self._values))


def _strategy(values: dict[str, Any]) -> Strategy:
    return Strategy(**values)


def blocks_to_checkpoint(blocks: Sequence[torch.nn.Module], fraction: float) -> list[torch.nn.Module]:
    """The blocks a fraction selects: the first round(fraction x n) from the input side (at
    least one when the fraction is above 0). Every block of a transformer stack holds the
    same activations, so which ones matters little for memory; a fixed rule keeps a trial
    and ``load_tuned(...).apply`` identical."""
    blocks = list(blocks)
    if fraction <= 0 or not blocks:
        return []
    k = min(len(blocks), max(1, math.floor(fraction * len(blocks) + 0.5)))
    return blocks[:k]


def _checkpointed(forward: Callable[..., Any]) -> Callable[..., Any]:
    import torch
    import torch.utils.checkpoint

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():  # evaluation: nothing to save, nothing to recompute
            return forward(*args, **kwargs)
        # Non-reentrant checkpointing supports keyword arguments and restores the RNG state,
        # so dropout in the recomputed forward matches the original one.
        return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return run


def apply_checkpointing(blocks: Iterable[torch.nn.Module], mode: Any) -> int:
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
            setattr(block, "_autotune_checkpointed", True)  # noqa: B010 (a module attribute mypy would read as a submodule)
    return len(chosen)


def apply_declared(model: torch.nn.Module, strategy: Strategy) -> None:
    """The dimensions that carry their own ``apply`` (train/dimensions.py: a dimension of
    one's own) set their values up on the model; a trial and ``tuned.apply`` both call this."""
    for d in DIMENSIONS.values():
        if d.apply is not None:
            d.apply(model, getattr(strategy, d.name))


def autocast_context(precision: str, device_type: str) -> contextlib.AbstractContextManager[Any]:
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: use one of {', '.join(PRECISIONS)}")
    if precision == "fp32":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=device_type, dtype=getattr(torch, AUTOCAST_DTYPES[precision]))


def offload_context(offload: bool, device_type: str) -> contextlib.AbstractContextManager[Any]:
    """Keep the tensors autograd saves for backward in CPU memory (pinned on CUDA, so the
    copies back overlap), which trades PCIe traffic for device memory."""
    if not offload:
        return contextlib.nullcontext()
    import torch

    return torch.autograd.graph.save_on_cpu(pin_memory=device_type == "cuda")


def saved_bytes_counter(total: list[Any]) -> contextlib.AbstractContextManager[Any]:
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
def forward_context(strategy: Strategy, device_type: str,
                    count_saved: list[Any] | None = None) -> Iterator[None]:
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
# (bench/pinned_alloc.py, benchmarks/budgets-h200-2026-12-07): BERT-large's offload first
# steps took 8-26 s with the former. The steps after are the same either way.
PINNED_FAST = "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"


def allocator_env(allocator: str, offload: bool = False) -> dict[str, Any]:
    """Environment for a process whose CUDA allocator should use ``allocator`` (and, with
    ``offload``, pin host memory by registering it on several threads: ``PINNED_FAST``); it
    must be set before CUDA starts in that process."""
    conf = ",".join(c for c in (ALLOCATORS[allocator], PINNED_FAST if offload else None) if c)
    return {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}


def make_scaler(precision: str, device_type: str) -> torch.amp.GradScaler:
    """A gradient scaler, enabled for fp16 only (bf16 has fp32's range and needs none)."""
    import torch

    return torch.amp.GradScaler(device_type, enabled=precision == "fp16")
