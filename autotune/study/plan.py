"""Turn a composed config into a checked run plan, or report every problem at once.

Nothing here runs a trial or writes storage: a bad config is rejected before either.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from autotune.scoring.score import OBJECTIVES
from autotune.scoring.settings import Scoring, roi_problems
from autotune.search.space import SearchSpace, divisors, load_space
from autotune.study.config import TuneConfig
from autotune.study.workers import visible_gpus, worker_count
from autotune.system.linux import usable_cores
from autotune.train.device import DeviceInfo, resolve_device
from autotune.train.optimizer import OptimizerSpec
from autotune.train.strategy import Strategy
from autotune.train.target import identity as target_identity
from autotune.train.target import resolve
from autotune.train.target import split as split_target
from autotune.train.values import MAX_ACCUMULATION, gib_problem, is_positive, lr_problem
from autotune.trial.contract import ModelSpec, TrialSpec


class ConfigError(ValueError):
    """One or more problems with the config, each naming the key, the value and the fix."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass
class Plan:
    model_name: str
    model_target: str
    model_config: dict
    seq_len: int
    global_batch: int
    device: DeviceInfo
    budget_gib: float  # the primary budget: the first listed (best.yaml is for it)
    budget_is_device_memory: bool
    budgets: list[float]  # every budget a best config is reported for
    memory_cap_gib: float | None  # trials run capped to this (the largest budget); None: uncapped
    space: SearchSpace
    space_name: str
    micro_batches: list[int]
    objective: str
    roi: dict[str, float]
    warmup_steps: int
    measure_steps: int
    timeout_s: float
    repeats: int
    lr: float
    seed: int
    study_name: str
    storage: str | None
    search: str = "auto"  # the search strategy (autotune.search)
    isolation: str = "fork"  # fork | fresh: how each trial gets its fresh process (runner)
    cpu_threads: Any = "auto"  # CPU trials: torch threads, or auto (study/threads.py sizes them at the start)
    min_measure_s: float = 0.0  # timed steps go on until they add up to this
    fidelity: str = "full"  # auto: search with probes, contenders in full (trial/fidelity.py) | full
    n_trials: int | None = None
    search_timeout_s: float | None = None
    front_resolution: float = 0.0  # search=auto: the Pareto front settled to this fraction of memory
    optimizer: OptimizerSpec = field(default_factory=OptimizerSpec)  # the user's optimizer
    escalate: bool = False  # nothing fits on the activation side: search the model-state dimensions too
    reductions: list[str] = field(default_factory=list)  # what a CPU run shrank, for the log and report
    profile: bool = False  # trace the best configuration once more under torch.profiler
    dry_run: bool = False  # print the plan, run nothing
    workers: int = 1  # drivers on this study (autotune/study/workers.py)
    # Everything that changes a measurement (the study's name derives from it, and the
    # study records it: storage.check_setup refuses a study that measured another setup).
    setup: dict = field(default_factory=dict)

    @property
    def scoring(self) -> Scoring:
        """The settings every verdict on this plan's trials is scored with."""
        return Scoring(global_batch=self.global_batch, budgets=tuple(self.budgets), roi=dict(self.roi),
                       objective=self.objective)

    @property
    def choices(self) -> dict[str, list]:
        """Each dimension with its values (micro-batches: the divisors the space allows)."""
        return self.space.grid(self.global_batch)

    @property
    def reduced(self) -> bool:
        return bool(self.reductions)

    def trial_spec(self, strategy: Strategy, fidelity: str = "full",
                   race_speed: list[float] | None = None) -> dict[str, Any]:
        """spec.json's content for one trial of this plan (``trial/contract.py``) at ``fidelity``
        (``trial/fidelity.py``)."""
        return TrialSpec(
            fidelity=fidelity,
            race_speed=race_speed,
            model=ModelSpec(name=self.model_name, target=self.model_target, config=dict(self.model_config)),
            seq_len=self.seq_len,
            device=self.device.torch_device,
            strategy=strategy.as_dict(),
            warmup_steps=self.warmup_steps,
            measure_steps=self.measure_steps,
            min_measure_s=self.min_measure_s,
            lr=self.lr,
            seed=self.seed,
            memory_cap_gib=self.memory_cap_gib,
            cpu_threads=self.cpu_threads if isinstance(self.cpu_threads, int) else None,
            offload_bound=True in self.space["offload"],
            optimizer={"target": self.optimizer.target, "kwargs": dict(self.optimizer.kwargs)},
        ).to_dict()


def _defined_in_source(target: str) -> bool:
    """Does ``package.module:function`` name a module whose source defines ``function`` at
    top level? Read, not imported: importing a Hugging Face builder here costs this process
    seconds (transformers) that only the trial processes need; they import it anyway, and
    a builder that then fails to import stops the study at its first trial."""
    import ast
    import importlib.util

    module_name, attr = split_target(target)
    if not module_name or not attr:
        return False
    spec = importlib.util.find_spec(module_name)  # imports the parent packages only; raises if one is missing
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return False
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8", errors="replace"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == attr:
            return True
    return False


def _check_builder(target: str, problems: list[str], key: str = "model._target_") -> None:
    """``key``: the key the user typed (model=custom's ``model.target`` sets ``model._target_``)."""
    from autotune.trial.run import resolve_builder

    try:
        if _defined_in_source(target):
            return
    except (ImportError, ValueError, SyntaxError, OSError):
        pass  # the import below says what is wrong
    try:
        builder = resolve_builder(target)
    except (ImportError, AttributeError, ValueError) as e:
        problems.append(f"{key}={target}: cannot be imported ({type(e).__name__}: {e}); "
                        "give 'package.module.function' of an importable builder")
        return
    if not callable(builder):
        problems.append(f"{key}={target}: is not callable; it must name a function returning a Workload")


def _refused(target: str, kwargs: dict, error: Exception, problems: list[str]) -> None:
    shown = " ".join(f"optimizer.{k}={v}" for k, v in kwargs.items()) or f"optimizer._target_={target}"
    problems.append(f"{shown}: {target} refused these arguments ({type(error).__name__}: {error}); fix or remove them")


def _check_optimizer(group: dict, lr: float, problems: list[str]) -> OptimizerSpec | None:
    """The optimizer group as a spec, after building it once on a one-element parameter so
    that a bad class or keyword fails here, with the optimizer's own words, not in every trial."""
    import torch

    group = dict(group or {})
    target = group.pop("_target_", None)
    partial = group.pop("_partial_", True)
    if not isinstance(target, str) or not target:
        problems.append(f"optimizer._target_={target!r}: name the optimizer class, e.g. optimizer=sgd or "
                        "optimizer._target_=torch.optim.AdamW")
        return None
    if partial is not True:
        problems.append(f"optimizer._partial_={partial!r}: must be true (autotune passes the model's parameters "
                        "to what _target_ names)")
    try:
        factory = resolve(target)
    except (ImportError, AttributeError, ValueError) as e:
        problems.append(f"optimizer._target_={target}: cannot be imported ({type(e).__name__}: {e}); give "
                        "package.module.Class of an importable optimizer")
        return None
    kwargs = {k: (list(v) if isinstance(v, tuple) else v) for k, v in group.items()}
    # An optimizer class checks its arguments in its own __init__, before torch's base class
    # refuses an empty parameter list: that refusal says the arguments passed, without the
    # parameter group that imports torch._dynamo (1.7 s of the driver's start on 2 cores).
    # A function of the user's is called as a trial would call it.
    optimizer_class = isinstance(factory, type) and issubclass(factory, torch.optim.Optimizer)
    try:
        built = factory([] if optimizer_class else [torch.nn.Parameter(torch.zeros(1))], **{"lr": lr, **kwargs})
    except ValueError as e:
        if not (optimizer_class and "empty parameter list" in str(e)):
            _refused(target, kwargs, e, problems)
            return None
        built = None
    except Exception as e:  # the optimizer's own check of its arguments
        _refused(target, kwargs, e, problems)
        return None
    if not optimizer_class and not isinstance(built, torch.optim.Optimizer):
        problems.append(f"optimizer._target_={target}: returned {type(built).__name__}, not a torch.optim.Optimizer")
        return None
    return OptimizerSpec(target=target, kwargs=kwargs)


STARTUP_S = 120.0  # interpreter, imports, CUDA context and model build, with room to spare
STEP_S = 60.0  # per optimizer step (warm-up, memory step and timed steps)


def _check_workers(value, device) -> list[str]:
    if value == "auto":
        return []
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return [f"workers={value}: must be a whole number >= 1 or auto (one per visible GPU); e.g. workers=2"]
    if device is not None and device.kind == "cuda":
        gpus = len(visible_gpus())
        if value > max(1, gpus):
            return [f"workers={value}: only {gpus} GPU(s) visible and each CUDA worker needs its own; use "
                    f"workers={max(1, gpus)} or workers=auto"]
    elif value > usable_cores():
        return [f"workers={value}: this process may use {usable_cores()} CPU core(s), and CPU workers share them; "
                f"use workers <= {usable_cores()}"]
    return []


ISOLATIONS = ("fork", "fresh")
FIDELITY_MODES = ("auto", "full")




def _check_sequence(seq_len: int, micro_batch: int, model_config: dict, device) -> list[str]:
    """A seq_len the model and the device could ever hold, before any trial finds out."""
    positions = model_config.get("max_position_embeddings")
    if isinstance(positions, int) and seq_len > positions:
        return [f"seq_len={seq_len}: above the model's max_position_embeddings={positions}; use seq_len <= "
                f"{positions}, or raise model.config.max_position_embeddings"]
    # One layer's hidden states of the smallest micro-batch at 2 bytes a value: a floor far
    # below any real configuration's peak, so only a size no device could hold is refused.
    hidden = model_config.get("hidden_size") or model_config.get("n_embd") or 1
    floor_gib = micro_batch * seq_len * (hidden if isinstance(hidden, int) else 1) * 2 / 2 ** 30
    if floor_gib > device.memory_gib:
        return [f"seq_len={seq_len}: the smallest configuration (micro_batch={micro_batch}) needs more than "
                f"{floor_gib:.3g} GiB for one layer's activations alone, above this device's "
                f"{device.memory_gib:.1f} GiB; use a smaller seq_len"]
    return []


def default_timeout(warmup_steps: int, measure_steps: int, min_measure_s: float = 0.0) -> float:
    """A limit no healthy trial reaches: 905 s with the default 2 warm-up and 10 timed steps
    and 5 s of timed steps at least."""
    return STARTUP_S + STEP_S * (warmup_steps + 1 + measure_steps) + min_measure_s


def default_study_name(model: str, space: str, budgets: list[float], measured: dict) -> str:
    """model-space-budgets plus a digest of everything that changes a measurement, so that
    rerunning the same command resumes its study and a changed one starts its own."""
    digest = hashlib.sha1(json.dumps(measured, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{model}-{space}-{'-'.join(f'{b:.1f}'.removesuffix('.0') for b in budgets)}GiB-{digest}"


def make_plan(cfg: TuneConfig, overridden: frozenset = frozenset()) -> Plan:
    """Check ``cfg`` and resolve it; ``overridden`` holds the keys the user set explicitly.
    Every problem is collected (each part below adds its own) and raised at once."""
    problems: list[str] = []
    device = None
    try:
        device = resolve_device(cfg.device)
    except ValueError as e:
        problems.append(str(e))
    model_config, seq_len, global_batch, reductions = _reduced_for_cpu(cfg, device, overridden)
    problems += _run_problems(cfg, seq_len, global_batch, device)
    roi = {k: getattr(cfg.roi, k) for k in ("memory_price_per_gib_hour", "compute_price_per_hour", "workload_samples")}
    problems += roi_problems(roi)
    budgets = _budgets(cfg.budget_gib, device, problems)
    memory_cap = max(budgets) if cfg.budget_gib is not None and device is not None and device.kind == "cuda" \
        and budgets else None
    group = cfg.search_space
    space = load_space(asdict(group) if is_dataclass(group) else OmegaConf.to_container(group), problems, overridden)
    micro_batches = _micro_batches(space, global_batch, problems)
    if device is not None and micro_batches and seq_len >= 1:
        problems += _check_sequence(seq_len, min(micro_batches), model_config, device)
    _check_builder(cfg.model._target_, problems,
                   "model.target" if "model.target" in overridden and "model._target_" not in overridden
                   else "model._target_")
    group_opt = cfg.optimizer if isinstance(cfg.optimizer, dict) else OmegaConf.to_container(cfg.optimizer)
    optimizer = _check_optimizer(group_opt, cfg.trial.lr, problems) if is_positive(cfg.trial.lr) else None
    if problems:
        raise ConfigError(problems)
    setup = _setup(cfg, model_config, seq_len, global_batch, memory_cap, device, space, optimizer)
    group = cfg.search_space  # a make_dataclass class (train/dimensions.py): mypy sees no fields
    space_name = Path(group.path).stem if group.path else group.name  # type: ignore[attr-defined]
    return _plan(cfg, device, model_config, seq_len, global_batch, budgets, memory_cap, space, space_name,
                 micro_batches, roi, optimizer, reductions, setup)


def _reduced_for_cpu(cfg: TuneConfig, device, overridden: frozenset) -> tuple:
    """(model config, seq_len, global batch, what was reduced): a CPU run's smaller model
    (``model.cpu``), except where the user set a key."""
    model_config = dict(cfg.model.config)
    seq_len, global_batch = cfg.seq_len, cfg.global_batch
    reductions: list[str] = []
    if device is None or device.kind != "cpu" or not cfg.cpu_reduce:
        return model_config, seq_len, global_batch, reductions
    for key, value in cfg.model.cpu.config.items():
        if f"model.config.{key}" not in overridden and model_config.get(key) != value:
            reductions.append(f"{key} {model_config.get(key)}->{value}")
            model_config[key] = value
    for key, value in (("seq_len", cfg.model.cpu.seq_len), ("global_batch", cfg.model.cpu.global_batch)):
        if value is not None and key not in overridden and getattr(cfg, key) != value:
            reductions.append(f"{key} {getattr(cfg, key)}->{value}")
            if key == "seq_len":
                seq_len = value
            else:
                global_batch = value
    return model_config, seq_len, global_batch, reductions


def _run_problems(cfg: TuneConfig, seq_len: int, global_batch: int, device) -> list[str]:
    """The problems of the run's own keys: sizes, objective, trial and search settings."""
    problems = []
    if global_batch < 1:
        problems.append(f"global_batch={global_batch}: must be a positive integer; e.g. global_batch=64")
    if seq_len < 1:
        problems.append(f"seq_len={seq_len}: must be a positive integer; e.g. seq_len=512")
    if cfg.objective not in OBJECTIVES:
        problems.append(f"objective={cfg.objective}: unknown objective; use one of {', '.join(OBJECTIVES)}")
    return problems + _trial_problems(cfg.trial) + _search_problems(cfg.search) + _check_workers(cfg.workers, device)


def _trial_problems(t) -> list[str]:
    problems = []
    if t.warmup_steps < 0:
        problems.append(f"trial.warmup_steps={t.warmup_steps}: must be >= 0; e.g. trial.warmup_steps=2")
    if t.measure_steps < 1:
        problems.append(f"trial.measure_steps={t.measure_steps}: must be >= 1; e.g. trial.measure_steps=5")
    if t.timeout_s is not None and not is_positive(t.timeout_s):
        problems.append(f"trial.timeout_s={t.timeout_s}: must be > 0 seconds; e.g. trial.timeout_s=600, "
                        "or leave it unset to derive it from the steps")
    if t.repeats < 0:
        problems.append(f"trial.repeats={t.repeats}: must be >= 0 (0 turns re-measurement off); e.g. trial.repeats=1")
    if t.isolation not in ISOLATIONS:
        problems.append(f"trial.isolation={t.isolation}: use fork (the default: each trial a child of a pre-imported "
                        "server) or fresh (a new interpreter per trial)")
    if t.fidelity not in FIDELITY_MODES:
        problems.append(f"trial.fidelity={t.fidelity}: use auto (probe each configuration, measure the contenders in "
                        "full) or full (every trial measures the whole window)")
    if t.cpu_threads != "auto" and not (isinstance(t.cpu_threads, int) and not isinstance(t.cpu_threads, bool)
                                        and t.cpu_threads >= 1):
        problems.append(f"trial.cpu_threads={t.cpu_threads}: use auto (the cores other processes leave free) or a "
                        "whole number >= 1; e.g. trial.cpu_threads=2")
    if not t.min_measure_s >= 0:  # NaN fails too
        problems.append(f"trial.min_measure_s={t.min_measure_s}: must be a number of seconds >= 0; e.g. "
                        "trial.min_measure_s=5")
    if lr_problem(t.lr):
        problems.append(f"trial.lr={t.lr}: {lr_problem(t.lr)}")
    if not 0 <= t.seed < 2 ** 32:
        problems.append(f"trial.seed={t.seed}: a seed must be in [0, 2^32 - 1]; e.g. trial.seed=0")
    return problems


def _search_problems(sc) -> list[str]:
    from autotune.search import STRATEGIES

    problems = []
    if sc.method not in STRATEGIES:
        problems.append(f"search.method={sc.method}: unknown search; use search=NAME with NAME one of "
                        f"{', '.join(STRATEGIES)}")
    if sc.n_trials is not None and sc.n_trials < 1:
        problems.append(f"search.n_trials={sc.n_trials}: must be >= 1, or null for no limit; e.g. search.n_trials=20")
    if not 0 <= sc.front_resolution < 1:
        problems.append(f"search.front_resolution={sc.front_resolution:g}: must be a fraction in [0, 1) "
                        "(0 settles the objective only); e.g. search.front_resolution=0.1")
    if sc.timeout is not None and not is_positive(sc.timeout):
        problems.append(f"search.timeout={sc.timeout:g}: must be > 0 seconds, or null for no limit; e.g. "
                        "search.timeout=1800")
    return problems


def _budgets(raw, device, problems: list[str]) -> list[float]:
    """The budgets in GiB (the device's memory where none is given); problems appended."""
    budgets: list[float] = []
    if device is None:
        return budgets
    is_list = isinstance(raw, (list, tuple))  # OmegaConf.to_object has made a ListConfig a list
    listed = list(raw) if is_list else [raw]
    if raw is None:
        return [device.memory_gib]
    for b in listed:
        where = f"budget_gib={raw}" + (f" ({b})" if is_list else "")
        problem = gib_problem(b)
        if problem:
            problems.append(f"{where}: {problem} or budget_gib=[16,24,40], or leave it unset")
        elif b > device.memory_gib + 1e-9:
            problems.append(f"{where}: above this device's memory ({device.memory_gib:.1f} GiB on "
                            f"{device.name}); use a value <= {device.memory_gib:.1f} or leave it unset")
        else:
            budgets.append(float(b))
    if not listed:
        problems.append("budget_gib=[]: give at least one budget, e.g. budget_gib=[16,24], or leave it unset")
    if len(set(budgets)) != len(budgets):
        problems.append(f"budget_gib={raw}: a budget is listed twice; list each once")
    return budgets


def _micro_batches(space, global_batch: int, problems: list[str]) -> list[int]:
    """The space's micro-batches that divide the global batch; problems appended."""
    if space is None or global_batch < 1:
        return []
    micro_batches = space.micro_batches(global_batch)
    if not micro_batches:
        problems.append(
            f"search_space micro_batch bounds [{space.micro_batch_min}, {space.micro_batch_max}] leave no divisor "
            f"of global_batch={global_batch}; use bounds that include one of "
            f"{', '.join(map(str, divisors(global_batch)))}"
        )
    elif global_batch // max(micro_batches) > MAX_ACCUMULATION:
        problems.append(
            f"global_batch={global_batch}: even micro_batch={max(micro_batches)} needs "
            f"{global_batch // max(micro_batches)} accumulated micro-batches per optimizer step (at most "
            f"{MAX_ACCUMULATION}), so one trial would run for hours; lower global_batch or raise the search "
            "space's micro_batch.max"
        )
    return micro_batches


def _setup(cfg: TuneConfig, model_config: dict, seq_len: int, global_batch: int, memory_cap, device, space,
           optimizer) -> dict:
    """What decides the measurements: its digest names the study, so a changed setup starts its own."""
    t = cfg.trial
    # format 2: studies with two objectives (samples/s, peak memory); format 3: every trial
    # in a fresh process (a format-2 study may hold warm-worker figures, which were wrong)
    measured = {"format": 3, "target": target_identity(cfg.model._target_), "config": model_config, "seq_len": seq_len,
                "memory_cap_gib": memory_cap, "global_batch": global_batch, "device": device.name,
                "space": space.grid(global_batch), "warmup": t.warmup_steps, "measure": t.measure_steps,
                "min_measure_s": t.min_measure_s, "lr": t.lr, "seed": t.seed}
    if t.fidelity != "full":  # probes measure speed differently: their study is not a full one's
        measured["fidelity"] = t.fidelity
    if t.cpu_threads != "auto" and device.kind == "cpu":  # a fixed thread count measures other speeds
        measured["cpu_threads"] = t.cpu_threads
    if optimizer is not None and optimizer != OptimizerSpec(kwargs={"weight_decay": 0.01}):
        # only a non-default optimizer joins the digest, so studies of earlier runs keep their names
        measured["optimizer"] = {"target": optimizer.target, "kwargs": optimizer.kwargs}
    return measured


def _plan(cfg: TuneConfig, device, model_config, seq_len, global_batch, budgets, memory_cap, space, space_name,
          micro_batches, roi, optimizer, reductions, setup) -> Plan:
    t, sc = cfg.trial, cfg.search
    return Plan(
        model_name=cfg.model.name, model_target=cfg.model._target_, model_config=model_config, seq_len=seq_len,
        global_batch=global_batch, device=device, budget_gib=float(budgets[0]),
        budget_is_device_memory=cfg.budget_gib is None, budgets=budgets, memory_cap_gib=memory_cap, space=space,
        space_name=space_name, micro_batches=micro_batches, objective=cfg.objective, roi=roi,
        warmup_steps=t.warmup_steps, measure_steps=t.measure_steps, repeats=t.repeats, lr=t.lr, seed=t.seed,
        timeout_s=(t.timeout_s if t.timeout_s is not None
                   else default_timeout(t.warmup_steps, t.measure_steps, t.min_measure_s)),
        study_name=cfg.study_name or default_study_name(cfg.model.name, space_name, budgets, setup),
        storage=cfg.storage, reductions=reductions, search=sc.method, n_trials=sc.n_trials,
        search_timeout_s=sc.timeout, front_resolution=sc.front_resolution, optimizer=optimizer,
        escalate=sc.escalate and space.activation_only, isolation=t.isolation, cpu_threads=t.cpu_threads,
        min_measure_s=t.min_measure_s, fidelity=t.fidelity, profile=cfg.profile, dry_run=cfg.dry_run,
        setup=setup, workers=worker_count(cfg.workers, device))
