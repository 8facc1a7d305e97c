"""Use a tuned configuration in training: ``load_tuned(path)`` reads a ``best.yaml``.

    tuned = load_tuned("outputs/.../best.yaml")
    model = tuned.apply(model)                # activation checkpointing on its blocks
    scaler = tuned.scaler()                   # gradient scaling, enabled for fp16 only
    for step ...:
        for micro in range(tuned.accumulation):
            with tuned.autocast():            # the tuned precision
                loss = ... / tuned.accumulation
            scaler.scale(loss).backward()
        scaler.step(optimizer); scaler.update(); optimizer.zero_grad()
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import torch
import yaml

from autotune.strategy import Strategy, apply_checkpointing, autocast_context, make_scaler
from autotune.workload import find_blocks


@dataclass
class Tuned:
    strategy: Strategy
    device_type: str = "cuda"  # the device kind it was tuned on; autocast's default
    model: dict = field(default_factory=dict)  # name, target, config, seq_len of the tuned model
    measured: dict = field(default_factory=dict)  # the trial's figures

    @property
    def checkpointing(self) -> str:
        return self.strategy.checkpointing

    @property
    def precision(self) -> str:
        return self.strategy.precision

    @property
    def micro_batch(self) -> int:
        return self.strategy.micro_batch

    @property
    def accumulation(self) -> int:
        return self.strategy.accumulation

    @property
    def global_batch(self) -> int:
        return self.strategy.global_batch

    def apply(self, model: torch.nn.Module, blocks: Optional[Sequence[torch.nn.Module]] = None) -> torch.nn.Module:
        """Set up the tuned checkpointing on ``blocks`` (default: the model's repeated layers)."""
        apply_checkpointing(find_blocks(model) if blocks is None else blocks, self.checkpointing)
        return model

    def autocast(self, device_type: Optional[str] = None):
        return autocast_context(self.precision, device_type or self.device_type)

    def scaler(self, device_type: Optional[str] = None) -> torch.amp.GradScaler:
        return make_scaler(self.precision, device_type or self.device_type)


def load_tuned(path) -> Tuned:
    path = Path(path)
    if path.is_dir():
        path = path / "best.yaml"
    try:
        data = yaml.safe_load(path.read_text())
        s = data["strategy"]
        strategy = Strategy(checkpointing=s["checkpointing"], precision=s["precision"],
                            micro_batch=int(s["micro_batch"]), accumulation=int(s["accumulation"]))
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: not a readable autotune best.yaml ({type(e).__name__}: {e})") from None
    return Tuned(strategy=strategy, device_type=data.get("device", {}).get("kind", "cuda"),
                 model=data.get("model", {}), measured=data.get("measured", {}))
