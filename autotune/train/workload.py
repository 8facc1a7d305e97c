"""The public contract between autotune and a model: what a trial needs to train it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Workload:
    """A model plus what it takes to train it on synthetic data.

    model:      the module, already on the trial's device
    make_batch: make_batch(n, device) -> a batch of n synthetic samples
    loss:       loss(model, batch) -> scalar loss tensor (forward included)
    blocks:     the modules eligible for activation checkpointing (usually the layers)
    optimizer:  optimizer(params) -> torch.optim.Optimizer, if the model trains with its own
                (else the ``optimizer`` config group's, AdamW by default). autotune cannot
                change how a factory of the user's holds its state, so the model-state
                dimensions keep their defaults for it.
    """

    model: torch.nn.Module
    make_batch: Callable[[int, torch.device], Any]
    loss: Callable[[torch.nn.Module, Any], torch.Tensor]
    blocks: list[torch.nn.Module] = field(default_factory=list)
    optimizer: Callable[[Any], torch.optim.Optimizer] | None = None


def find_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated layers: the largest ModuleList whose children share one class.

    This finds ``encoder.layer`` in BERT, ``h`` in GPT-2 and ``layers`` in Llama; a model
    with no such list returns [] and must name its blocks itself.
    """
    best: list[torch.nn.Module] = []
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > len(best):
            children = list(module)
            if len({type(c) for c in children}) == 1:
                best = children
    return best
