"""Use a tuned configuration in training: ``load_tuned(path)`` reads a ``best.yaml``.

    tuned = load_tuned("outputs/.../best.yaml")
    tuned.set_allocator()                     # before CUDA starts: the tuned allocator setting
    model = tuned.apply(model)                # checkpointing on the tuned blocks (and bf16 weights if tuned)
    optimizer = tuned.optimizer(model.parameters())  # the optimizer the trials used, its state as tuned
    scaler = tuned.scaler()                   # gradient scaling, enabled for fp16 only
    for step ...:
        for micro in range(tuned.accumulation):
            with tuned.forward_context():     # the tuned precision, and offload if tuned
                loss = ... / tuned.accumulation
            scaler.scale(loss).backward()
        scaler.step(optimizer); scaler.update(); optimizer.zero_grad()

``tuned.limit_memory()`` caps the process at the budget it was tuned for, as the trials were.
Trainers: ``TrainingArguments(**tuned.to_hf_training_args())``, ``Trainer(**tuned.to_lightning())``.
"""
from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from autotune.train import trust
from autotune.train.best_schema import BEST_FORMAT, BestConfig
from autotune.train.dimensions import BATCH, DIMENSIONS
from autotune.train.exporters import hf_training_args, lightning_trainer_kwargs
from autotune.train.optimizer import OptimizerSpec
from autotune.train.optimizer import build as build_optimizer
from autotune.train.optimizer import unsupported as build_problem
from autotune.train.strategy import (
    Strategy,
    allocator_env,
    apply_checkpointing,
    apply_declared,
    autocast_context,
    forward_context,
    make_scaler,
    offload_context,
)
from autotune.train.target import resolve
from autotune.train.values import MAX_ACCUMULATION, count_problem, gib_problem, lr_problem
from autotune.train.workload import find_blocks


@dataclass
class Tuned:
    strategy: Strategy
    device_type: str = "cuda"  # the device kind it was tuned on; autocast's default
    model: dict[str, Any] = field(default_factory=dict)  # name, target, config, seq_len of the tuned model
    measured: dict[str, Any] = field(default_factory=dict)  # the trial's figures
    budget_gib: float | None = None  # the budget it was tuned for
    memory_cap_gib: float | None = None  # the cap the trials ran under (None: uncapped)
    optimizer_spec: OptimizerSpec = field(default_factory=OptimizerSpec)  # the optimizer the trials trained with
    lr: float | None = None  # the learning rate the trials used (trial.lr), unless optimizer_spec sets one
    numerics: str = ""  # what changes training numerics, as best.yaml says
    loss_parity: float | None = None
    source: str = "the tuned config"  # where it was read, for messages
    trust: tuple[str, ...] = ()  # packages the caller trusts besides train/trust.py's defaults

    @property
    def checkpointing(self) -> str:
        return str(self.strategy.checkpointing)

    @property
    def precision(self) -> str:
        return str(self.strategy.precision)

    @property
    def offload(self) -> bool:
        return bool(self.strategy.offload)

    @property
    def allocator(self) -> str:
        return str(self.strategy.allocator)

    @property
    def micro_batch(self) -> int:
        return int(self.strategy.micro_batch)

    @property
    def accumulation(self) -> int:
        return int(self.strategy.accumulation)

    @property
    def global_batch(self) -> int:
        return self.strategy.global_batch

    def apply(self, model: torch.nn.Module, blocks: Sequence[torch.nn.Module] | None = None) -> torch.nn.Module:
        """Set up what the model itself carries of the tuned strategy:

        * checkpointing on ``blocks`` (default: the model's repeated layers), the same blocks
          the trial checkpointed (``strategy.blocks_to_checkpoint``);
        * activation offload, if tuned: the model's forward runs under ``save_on_cpu``, so
          it holds with a plain ``tuned.autocast()`` too;
        * the allocator setting, if tuned (``set_allocator``; it warns when CUDA has already
          started, since the setting then cannot take effect).

        * bf16 weights, if tuned (then build the optimizer with ``tuned.optimizer``).

        Precision stays a context around each forward (``tuned.autocast()`` or
        ``tuned.forward_context()``), with ``tuned.scaler()`` for fp16."""
        apply_checkpointing(find_blocks(model) if blocks is None else blocks, self.checkpointing)
        if self.strategy.weights == "bf16":  # the tuned optimizer rounds its updates stochastically
            model.to(torch.bfloat16)
        if self.offload and not getattr(model, "_autotune_offloaded", False):
            model.forward = _offloaded(model.forward, self.device_type)
            setattr(model, "_autotune_offloaded", True)  # noqa: B010 (a module attribute mypy would read as a submodule)
        apply_declared(model, self.strategy)
        self.set_allocator()
        return model

    def optimizer(self, params: Any, lr: float | None = None, **kwargs: Any) -> torch.optim.Optimizer:
        """The tuned optimizer over ``params``: the optimizer the trials trained with (best.yaml's
        ``optimizer``), holding its state as tuned (8/4-bit, on the host, bf16 weights with
        stochastic rounding, fused). ``lr`` and ``kwargs`` override best.yaml's."""
        spec = replace(self.optimizer_spec, kwargs={**self.optimizer_spec.kwargs, **kwargs})
        trust.check(spec.target, "optimizer.target", self.source, self.trust)  # before anything is imported
        why_not = build_problem(self.strategy, spec)
        if why_not:
            raise ValueError(f"the tuned optimizer cannot be built: {why_not}")
        optimizer: torch.optim.Optimizer = build_optimizer(params, self.strategy, spec,
                                                           lr if lr is not None else (self.lr or 1e-3))
        return optimizer

    def check_trust(self) -> None:
        """Raise ``trust.UntrustedTarget`` unless both the model builder and the optimizer this
        file names come from trusted packages; imports nothing."""
        trust.check(self.model.get("target") or "autotune.models.bert.build", "model.target", self.source, self.trust)
        trust.check(self.optimizer_spec.target, "optimizer.target", self.source, self.trust)

    def model_builder(self) -> Callable[..., Any]:
        """The builder the trials built the model with (best.yaml's ``model.target``; BERT's when
        it names none), imported only from a trusted package (``train/trust.py``)."""
        target = self.model.get("target") or "autotune.models.bert.build"
        trust.check(target, "model.target", self.source, self.trust)
        builder: Callable[..., Any] = resolve(target)
        return builder

    def autocast(self, device_type: str | None = None) -> contextlib.AbstractContextManager[Any]:
        return autocast_context(self.precision, device_type or self.device_type)

    def forward_context(self, device_type: str | None = None) -> contextlib.AbstractContextManager[Any]:
        """The context for each micro-step's forward: autocast, plus activation offload if tuned."""
        return forward_context(self.strategy, device_type or self.device_type)

    def forward(self, device_type: str | None = None) -> contextlib.AbstractContextManager[Any]:
        """Deprecated name of ``forward_context`` (it is a context, not a forward pass)."""
        warnings.warn("Tuned.forward() is renamed Tuned.forward_context()", DeprecationWarning, stacklevel=2)
        return self.forward_context(device_type)

    def set_allocator(self) -> None:
        """Set PYTORCH_CUDA_ALLOC_CONF for the tuned allocator (and, with offload, the faster
        pinning the trials used: strategy.PINNED_FAST); call it before CUDA starts."""
        env = allocator_env(self.allocator, self.strategy.offload)
        if not env or os.environ.get("PYTORCH_CUDA_ALLOC_CONF") == env["PYTORCH_CUDA_ALLOC_CONF"]:
            return  # nothing to set, or set already (before CUDA started, or by the user)
        if torch.cuda.is_initialized():
            if self.allocator == "default":
                return  # offload's faster pinning alone (PINNED_FAST): only the first step is slower without it
            warnings.warn(f"allocator={self.allocator} was tuned, but CUDA has already started in this process, so "
                          "the setting cannot take effect; call tuned.set_allocator() before any CUDA work, or set "
                          f"PYTORCH_CUDA_ALLOC_CONF={env['PYTORCH_CUDA_ALLOC_CONF']} in the environment", stacklevel=2)
            return
        os.environ.update(env)

    def limit_memory(self, device: int = 0) -> float | None:
        """Cap this process's CUDA allocator at the budget this config was tuned for, less
        the CUDA context, as on a card of that size; returns the fraction set, or None when
        the tuning ran uncapped (no budget given: the whole device).

        With several budgets the trials ran under the largest cap and each budget's winner
        was judged by its measured device-level peak; this caps at the budget itself, so a
        training run checks that judgement on the simulated smaller card."""
        cap = self.budget_gib if self.memory_cap_gib else None
        if not cap or not torch.cuda.is_available():
            return None
        context = self.measured.get("cuda_context_gib") or 0.0
        fraction = max(0.0, min(1.0, (cap - context) * 1024**3 / torch.cuda.get_device_properties(device).total_memory))
        torch.cuda.set_per_process_memory_fraction(fraction, device)
        return fraction

    def scaler(self, device_type: str | None = None) -> torch.amp.GradScaler:
        return make_scaler(self.precision, device_type or self.device_type)

    def to_hf_training_args(self, world_size: int = 1) -> dict[str, Any]:
        """``TrainingArguments(output_dir=..., **tuned.to_hf_training_args())``; warns about what
        it cannot express (``exporters.hf_training_args``)."""
        return hf_training_args(self, world_size)

    def to_lightning(self, world_size: int = 1) -> dict[str, Any]:
        """``lightning.Trainer(**tuned.to_lightning())``, DataLoader batch_size=tuned.micro_batch;
        warns about what it cannot express (``exporters.lightning_trainer_kwargs``)."""
        return lightning_trainer_kwargs(self, world_size)


def _offloaded(forward: Callable[..., Any], device_type: str) -> Callable[..., Any]:
    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        with offload_context(True, device_type):
            return forward(*args, **kwargs)

    return run


def load_tuned(path: str | os.PathLike[str], trust: Sequence[str] = ()) -> Tuned:
    """Read a ``best.yaml`` (or the ``best.yaml`` of a run directory). It names code (the model
    builder, the optimizer), imported only when asked for (``tuned.optimizer()``,
    ``tuned.model_builder()``) and only from trusted packages: torch, torchao, autotune, those
    this machine tuned, and ``trust`` (``train/trust.py``)."""
    path = Path(path)
    if path.is_dir():
        path = path / "best.yaml"
    try:
        data = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a readable autotune best.yaml ({type(e).__name__}: {e}); pass the best.yaml "
                         "a run wrote (UTF-8 text)") from None
    return tuned_from_dict(data, source=str(path), trust=trust)


def _check_run_figures(data: dict[str, Any], s: dict[str, Any], source: str) -> None:
    """best.yaml's run-level figures held to the command line's checks: the global batch (and
    micro_batch x accumulation equal to it) and the budgets."""
    checks: tuple[tuple[str, Callable[[Any], str | None]], ...] = (
        ("global_batch", lambda v: count_problem(v, "global_batch")), ("budget_gib", gib_problem),
        ("memory_cap_gib", lambda v: gib_problem(v, "memory_cap_gib")))
    for key, check in checks:
        if data.get(key) is not None and check(data[key]):
            raise ValueError(f"{source}: {key}={data[key]!r}: {check(data[key])}; correct it or use the best.yaml the "
                             "run wrote")
    if data.get("global_batch") is not None and data["global_batch"] != s["micro_batch"] * s["accumulation"]:
        raise ValueError(f"{source}: global_batch={data['global_batch']} is not strategy.micro_batch x "
                         f"strategy.accumulation ({s['micro_batch']} x {s['accumulation']}); correct it or use the "
                         "best.yaml the run wrote")


def tuned_from_dict(data: Any, source: str = "the tuned config", trust: Sequence[str] = ()) -> Tuned:
    """A ``Tuned`` from best.yaml's content as a mapping: how a Hydra app that composes
    best.yaml as a config group gets it (``tuned_from_dict(OmegaConf.to_container(cfg.tuned))``)."""
    if not isinstance(data, dict) or not isinstance(data.get("strategy"), dict):
        raise ValueError(f"{source}: not a readable autotune best.yaml (no strategy mapping); pass the best.yaml a "
                         "run wrote")
    s = data["strategy"]

    def bad(key: str, why: str | None) -> ValueError:
        return ValueError(f"{source}: strategy.{key}={s.get(key)!r}: {why}; correct it or use the best.yaml "
                          "the run wrote")

    # The command line's own checks (train/values.py), so that what a file says is held to what
    # a run accepts, and no exporter passes on a value a trainer would reject.
    for key, maximum in (("micro_batch", None), ("accumulation", MAX_ACCUMULATION)):
        problem = count_problem(s.get(key), f"strategy.{key}", maximum)
        if problem:
            raise bad(key, problem)
    _check_run_figures(data, s, source)
    opt: dict[str, Any] = data["optimizer"] if isinstance(data.get("optimizer"), dict) else {}
    for key, value in (
        ("optimizer.lr", opt.get("lr")),
        ("optimizer.kwargs.lr", (opt.get("kwargs") or {}).get("lr") if isinstance(opt.get("kwargs"), dict) else None),
    ):
        if value is not None and lr_problem(value, key):
            raise ValueError(f"{source}: {key}={value!r}: {lr_problem(value, key)}; correct it or use the best.yaml "
                             "the run wrote")
    for d in DIMENSIONS.values():  # each dimension's own check; "false" is a string, not false
        if d.group != BATCH and (d.required or d.name in s) and d.problem(s.get(d.name)):
            raise bad(d.name, d.problem(s.get(d.name)))
    fmt = data.get("format", BEST_FORMAT)
    if isinstance(fmt, bool) or not isinstance(fmt, int) or not 1 <= fmt <= BEST_FORMAT:
        raise ValueError(f"{source}: format={fmt!r}: this autotune reads best.yaml format {BEST_FORMAT}; a newer "
                         "format comes from a newer autotune (upgrade it), anything else is not a best.yaml")
    try:  # the schema: no unknown key, every value of its type (train/best_schema.py)
        OmegaConf.merge(OmegaConf.structured(BestConfig), data)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", "") or "?"
        raise ValueError(f"{source}: {key}: {str(e).splitlines()[0]}; correct it or use the best.yaml the run "
                         "wrote") from None
    try:
        strategy = Strategy(**{name: s[name] for name in DIMENSIONS if name in s})
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{source}: not a readable autotune best.yaml ({type(e).__name__}: {e})") from None
    opt = data.get("optimizer") or {}
    return Tuned(strategy=strategy, device_type=(data.get("device") or {}).get("kind", "cuda"),
                 model=data.get("model") or {}, measured=data.get("measured") or {}, budget_gib=data.get("budget_gib"),
                 memory_cap_gib=data.get("memory_cap_gib"),
                 optimizer_spec=OptimizerSpec(target=opt.get("target", "torch.optim.AdamW"),
                                              kwargs=dict(opt.get("kwargs") or {})),
                 lr=opt.get("lr"), numerics=data.get("numerics") or "", loss_parity=data.get("loss_parity"),
                 source=source, trust=tuple(trust))
