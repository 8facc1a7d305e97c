"""The ``best.yaml`` contract: what a run writes and what ``load_tuned`` reads, as one typed
schema with a format version.

A run builds its ``best.yaml`` from ``BestConfig`` (``results/outputs.py``) and
``tuned_from_dict`` reads it back through the same fields, so the keys are known in one
place. A Hydra training app can type its ``tuned`` group with it, so a wrong key or type in
a copied best.yaml fails when the app composes its config (examples/hydra_app/)::

    register_tuned_schema()          # before @hydra.main; conf/config.yaml then lists
    # defaults:
    #   - autotune/best@tuned        # the schema first, at the group's package...
    #   - tuned: mine                # ...then the copied best.yaml merges onto it
"""
from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import Any

from autotune.train.dimensions import DIMENSIONS

# 1: the first versioned format. A best.yaml without ``format`` predates it and reads the same.
BEST_FORMAT = 1


# The strategy's fields: one per dimension (train/dimensions.py), its default and type.
TunedStrategy = make_dataclass("TunedStrategy", [
    (d.name, d.type, field(default=d.default, metadata={"help": d.help})) for d in DIMENSIONS.values()])


@dataclass
class TunedOptimizer:
    target: str = "torch.optim.AdamW"  # the optimizer the trials trained with (the optimizer group)
    kwargs: dict[str, Any] = field(default_factory=dict)  # its keyword arguments; lr: trial.lr unless set
    lr: float | None = None  # trial.lr


@dataclass
class TunedDevice:
    kind: str = "cuda"  # cuda | cpu: where the trials ran
    name: str | None = None


@dataclass
class TunedModel:
    name: str | None = None
    target: str | None = None  # the builder, package.module.function (or package.module:function)
    config: dict[str, Any] = field(default_factory=dict)
    seq_len: int | None = None


@dataclass
class Measured:
    trial: int | None = None  # the trial's number in the study
    peak_memory_gib: float | None = None  # peak reserved memory (CUDA) or peak RSS growth (CPU)
    device_peak_gib: float | None = None  # reserved plus the CUDA context
    cuda_context_gib: float | None = None
    samples_per_s: float | None = None
    time_spread: float | None = None
    roi: float | None = None
    # full: measured over the whole window (a best always is); raced or probe: fewer steps
    # (autotune/trial/fidelity.py), for a best.yaml written where that could not happen
    fidelity: str | None = None


@dataclass
class BestConfig:
    format: int = BEST_FORMAT
    strategy: TunedStrategy = field(default_factory=TunedStrategy)  # type: ignore[valid-type]
    global_batch: int | None = None
    objective: str | None = None  # roi | throughput
    budget_gib: float | None = None  # the budget this configuration was chosen for
    memory_cap_gib: float | None = None  # the trials ran capped to this (None: uncapped)
    device: TunedDevice = field(default_factory=TunedDevice)
    model: TunedModel = field(default_factory=TunedModel)
    measured: Measured = field(default_factory=Measured)
    optimizer: TunedOptimizer = field(default_factory=TunedOptimizer)
    # What makes training compute other numbers than fp32 with the plain optimizer, and how far
    # the trial's losses were from the plain optimizer's over the same steps (see the report).
    numerics: str = ""
    loss_parity: float | None = None
    baseline: dict[str, Any] = field(default_factory=dict)
    command: str | None = None  # the command that reproduces the run


def register_tuned_schema() -> None:
    """Store the schema in Hydra's ConfigStore as ``autotune/best``."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(group="autotune", name="best", node=BestConfig)
