"""Structured config schemas for the Hydra app.

The YAML files under ``conf/`` extend these dataclasses, so a wrong type or an unknown key
fails when Hydra composes the config, with the full key in the message. Value checks that
need more than a type (ranges, divisors, the device's memory) live in ``plan.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

# The configs ship inside the package (autotune/conf/, package data), so an installed wheel
# runs as a checkout does; an absolute path keeps Hydra from reading it as a module path.
CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


@dataclass
class CpuReduction:
    """What a CPU run shrinks so that the default run finishes in minutes on two cores."""

    config: Dict[str, Any] = field(default_factory=dict)  # merged into ModelConfig.config
    seq_len: Optional[int] = None
    global_batch: Optional[int] = None


@dataclass
class ModelConfig:
    name: str = MISSING
    # A builder "package.module:function" called as builder(device=..., seq_len=..., **config);
    # it returns an autotune.Workload.
    _target_: str = MISSING
    # For model=custom: the builder, "package.module:function" (_target_ interpolates it).
    target: Optional[str] = None
    config: Dict[str, Any] = field(default_factory=dict)
    cpu: CpuReduction = field(default_factory=CpuReduction)


@dataclass
class SearchSpaceConfig:
    name: str = MISSING
    # A space file: absolute, relative to the working directory, or a shipped one
    # (search_spaces/NAME.yaml, inside the package).
    path: str = MISSING


@dataclass
class SearchConfig:
    strategy: str = "auto"  # auto | grid | random | tpe | nsga2 (conf/search/)
    n_trials: Optional[int] = None  # the most trials the search runs; None: no limit
    timeout: Optional[float] = None  # seconds after which no new trial starts; None: no limit


@dataclass
class RoiConfig:
    memory_price_per_gib_hour: float = MISSING
    compute_price_per_hour: float = MISSING
    workload_samples: float = MISSING


@dataclass
class TrialConfig:
    warmup_steps: int = 2  # optimizer steps run before the measured window
    # Timed optimizer steps; the median and spread come from these. On the H200 five steps
    # gave BERT-large spreads of up to 13 % (an IQR of five points), ten at most 2 %.
    measure_steps: int = 10
    # ... and at least this many seconds of them (at most 200 steps): a fast configuration
    # is timed over more steps, so the fixed cost of its fresh process stays a small share.
    min_measure_s: float = 5.0
    # Wall-clock limit of one trial process, start-up included. Default: derived from the
    # steps it runs (STARTUP_S plus STEP_S per optimizer step; see plan.default_timeout).
    timeout_s: Optional[float] = None
    # Fresh-process re-measurements of each close contender (the top two, and any other
    # within the measured spread of the top one) before the winner is named; 0: none.
    repeats: int = 1
    # How each trial gets its fresh process: fork (a child of a server that has imported
    # torch and the model's builder, autotune/trial/forkserver.py) or fresh (a new interpreter,
    # python -m autotune.trial, paying the imports every time). Both measure in a process
    # that never ran another trial.
    isolation: str = "fork"
    lr: float = 1e-4  # AdamW learning rate
    seed: int = 0


@dataclass
class TuneConfig:
    model: ModelConfig = MISSING
    search_space: SearchSpaceConfig = MISSING
    search: SearchConfig = field(default_factory=SearchConfig)
    roi: RoiConfig = MISSING
    trial: TrialConfig = field(default_factory=TrialConfig)
    global_batch: int = 64  # samples per optimizer step, the same for every trial
    seq_len: int = 512  # tokens per sample, for sequence models
    # Peak-memory budget in GiB, or a list of budgets ([16, 24, 40]) tuned in one go; a
    # budget makes every trial run capped to it (the largest, for a list). Default: the
    # device's memory, uncapped.
    budget_gib: Optional[Any] = None
    objective: str = "roi"  # roi | throughput
    device: str = "auto"  # auto (CUDA if present, else CPU) | cpu | cuda | cuda:N
    cpu_reduce: bool = True  # on CPU, apply model.cpu so the run stays short
    study_name: Optional[str] = None  # default: <model>-<space>-<budget>GiB-<digest of the measured setup>
    storage: Optional[str] = None  # an Optuna storage URL; default: SQLite outputs/autotune.db
    # true: the best configuration runs once more, in a process of its own, under
    # torch.profiler; its trace (profile/trace.json, for chrome://tracing or Perfetto) and
    # the top operators (profile/top_ops.txt) land next to the report.
    profile: bool = False
    # Drivers on one study (autotune/study/workers.py): a number, or "auto" (one per visible GPU;
    # one on CPU). On CUDA each worker gets a GPU of its own.
    workers: Any = 1


def register() -> None:
    ConfigStore.instance().store(name="tune_schema", node=TuneConfig)
