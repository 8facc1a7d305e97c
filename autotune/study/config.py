"""Structured config schemas for the Hydra app.

The YAML files under ``conf/`` extend these dataclasses, so a wrong type or an unknown key
fails when Hydra composes the config, with the full key in the message. Value checks that
need more than a type (ranges, divisors, the device's memory) live in ``plan.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from autotune.train.dimensions import Dimension, searched

# The configs ship inside the package (autotune/conf/, package data), so an installed wheel
# runs as a checkout does; an absolute path keeps Hydra from reading it as a module path.
CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def opt(default=MISSING, help: str = "", factory=None):
    """A schema field with its one-line meaning: ``--help`` and the README's configuration
    table are made from these (tests/study/test_config.py), so each default has one source."""
    if factory is not None:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class CpuReduction:
    """What a CPU run shrinks so that the default run finishes in minutes on two cores."""

    config: dict[str, Any] = field(default_factory=dict)  # merged into ModelConfig.config
    seq_len: int | None = None
    global_batch: int | None = None


@dataclass
class ModelConfig:
    name: str = MISSING
    # A builder "package.module.function" (Hydra's spelling; "package.module:function" too)
    # called as builder(device=..., seq_len=..., **config);
    # it returns an autotune.Workload.
    _target_: str = MISSING
    target: str | None = opt(None, "model=custom: your builder, package.module.function (or :function), "
                                   "returning a Workload")
    config: dict[str, Any] = field(default_factory=dict)
    cpu: CpuReduction = field(default_factory=CpuReduction)


@dataclass
class MicroBatchBounds:
    min: int = 1
    max: int = 1 << 30


def _space_field(d: Dimension) -> tuple:
    """A dimension's field in a search space: the list of its values (the micro-batch: bounds)."""
    if d.name == "micro_batch":
        return d.name, MicroBatchBounds, field(default_factory=MicroBatchBounds)
    kind = list[Any] if d.parse is not None else list[d.type]  # type: ignore[name-defined]
    # no "help": the README's table lists the keys of the run, a space's dimensions are in
    # docs/guide.md (their meanings: train/dimensions.py)
    return d.name, kind, field(default_factory=lambda: [d.default], metadata={"dimension": d.help})


# A search space (autotune/conf/search_space/*.yaml): every searched dimension of
# train/dimensions.py as a list of values; ``path`` reads one from a file instead.
SearchSpaceConfig = make_dataclass("SearchSpaceConfig", [
    ("name", str, field(default=MISSING)),
    *(_space_field(d) for d in searched()),
    ("path", str | None, opt(None, "a space file of your own (replaces the group's dimensions)"))])


@dataclass
class SearchConfig:
    method: str = "auto"  # auto | grid | random | tpe | nsga2, set by the group (search=grid)
    n_trials: int | None = opt(None, "the most trials the search runs (null: no limit)")
    timeout: float | None = opt(None, "seconds after which no new trial starts (null: no limit)")
    escalate: bool = opt(True, "nothing fits on the activation side: search full's model-state dimensions too")
    front_resolution: float = opt(0.1, "auto also measures what could add a Pareto point this far apart "
                                  "in memory (0: off)")


@dataclass
class RoiConfig:
    """Prices and workload for the ROI score (autotune/scoring/score.py). Assumptions to replace
    with your own: one rented H200-class GPU at about $3.50 an hour, and a GiB of its memory
    priced as that hour spread over its 141 GB."""

    memory_price_per_gib_hour: float = opt(0.025, "USD per GiB of accelerator memory per hour")
    compute_price_per_hour: float = opt(3.5, "USD per accelerator hour")
    workload_samples: float = opt(1e7, "samples the whole training job processes")


@dataclass
class TrialConfig:
    warmup_steps: int = opt(2, "optimizer steps before the measured window")
    # On the H200 five steps gave BERT-large spreads of up to 13 % (an IQR of five points),
    # ten at most 2 %.
    measure_steps: int = opt(10, "timed optimizer steps (median, and IQR/median as the spread)")
    # A fast configuration is timed over more steps, so the fixed cost of its process stays small.
    min_measure_s: float = opt(5.0, "...and at least this many seconds of them (at most 200 steps)")
    timeout_s: float | None = opt(None, "limit per trial process (null: 120 s + 60 s per step + min_measure_s)")
    repeats: int = opt(1, "fresh-process re-measurements of each close contender before naming the best")
    # auto: what a verdict needs (autotune/trial/fidelity.py); the best always has a full measurement.
    fidelity: str = opt("auto", "auto: probes, the contenders in full | full: every trial in full")
    # Both measure in a process that never ran another trial (autotune/trial/forkserver.py).
    isolation: str = opt("fork", "fork (a child of a pre-imported server) | fresh (a new interpreter per trial)")
    # On a CPU that other processes keep busy, torch's threads beside them wait on each other:
    # steps 3-25x slower on 2 cores beside 2 busy processes, against 1.6-2.0x with one thread.
    cpu_threads: Any = opt("auto", "CPU trials: torch threads; auto: the cores other processes leave free at the start")
    lr: float = opt(1e-4, "the optimizer's learning rate (unless optimizer.lr is set)")
    seed: int = opt(0, "seed of the weights and the synthetic batches")


@dataclass
class TuneConfig:
    model: ModelConfig = MISSING
    # The optimizer group: _target_ (a torch.optim class or your own), _partial_, keyword arguments.
    optimizer: dict[str, Any] = field(default_factory=lambda: {"_target_": "torch.optim.AdamW", "_partial_": True})
    search_space: SearchSpaceConfig = MISSING  # type: ignore[valid-type]
    search: SearchConfig = field(default_factory=SearchConfig)
    roi: RoiConfig = field(default_factory=RoiConfig)
    trial: TrialConfig = field(default_factory=TrialConfig)
    global_batch: int = opt(64, "samples per optimizer step, the same in every trial")
    seq_len: int = opt(512, "tokens per sample, for sequence models")
    budget_gib: Any | None = opt(None, "GiB, or a list [16,24,40]; trials run capped to the largest (null: "
                                          "the device's memory)")
    objective: str = opt("roi", "roi | throughput (the fastest that fits)")
    device: str = opt("auto", "auto (CUDA if present) | cpu | cuda | cuda:N")
    cpu_reduce: bool = opt(True, "on CPU, shrink the model as model.cpu says (printed and reported)")
    study_name: str | None = opt(None, "null: model-space-budget-digest; the same command resumes it")
    storage: str | None = opt(None, "Optuna storage URL or journal:PATH (null: outputs/autotune.db; "
                                       "or AUTOTUNE_STORAGE)")
    profile: bool = opt(False, "true: the best runs once more under torch.profiler (profile/)")
    dry_run: bool = opt(False, "true: print what would run (sizes, configurations, skips and why) and run nothing")
    workers: Any = opt(1, "drivers on one study: N, or auto (one per visible GPU)")


# The config groups: their default is the option that config.yaml's defaults list picks.
GROUPS = {
    "model": "bert | bert-large | gpt2 | llama | vit | custom (autotune/conf/model/)",
    "optimizer": "adamw | sgd, or optimizer._target_=your.Optimizer (autotune/conf/optimizer/)",
    "search": "auto | grid | random | tpe | nsga2: how the next configuration is picked",
    "search_space": "default | full | budgets (autotune/conf/search_space/)",
    "experiment": "a named set of overrides (autotune/conf/experiment/), e.g. bert_large_budgets",
}


# Mappings whose keys are the user's own: a builder's keyword arguments (model.config, and
# what a CPU run changes of them) and the optimizer's (optimizer.momentum=0.9). A key added
# anywhere else would be read by nothing.
OPEN_KEYS = ("model.config", "model.cpu.config", "optimizer")


def schema_keys() -> list[str]:
    """Every key of the schema, dotted (``roi.memory_price_per_gib_hour``)."""
    import dataclasses
    import typing

    keys: list[str] = []

    def walk(cls, prefix: str):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            keys.append(prefix + f.name)
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name], prefix + f.name + ".")

    walk(TuneConfig, "")
    return keys


def _readable(key: str, known: list[str]) -> bool:
    """Is ``key`` one autotune reads: a config group, a schema key, Hydra's own, or a key
    under ``OPEN_KEYS``?"""
    return (key in GROUPS or key in known or key.startswith("hydra.")
            or any(key.startswith(prefix + ".") for prefix in OPEN_KEYS))


def _nearest(key: str, known: list[str]) -> str | None:
    """The known key a mistyped one most likely meant: the closest spelling, else the one
    ending in the same name (``fidelity`` for ``trial.fidelity``)."""
    import difflib

    near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if near:
        return near[0]
    same_leaf = [k for k in known if k.rsplit(".", 1)[-1] == key.rsplit(".", 1)[-1]]
    return same_leaf[0] if len(same_leaf) == 1 else None


def unknown_key_problems(overrides) -> list[str]:
    """``key=value`` overrides of a key the schema does not have, each with the nearest known
    key, before Hydra composes (it would answer ``Key 'budget' not in 'TuneConfig'`` and
    advise ``+budget=4``, a key nothing reads). Flags (``--help``), ``+``/``~`` overrides
    (``added_key_problems``), Hydra's own keys and keys under ``OPEN_KEYS`` are not checked."""
    known = schema_keys()
    problems = []
    for override in overrides:
        if override.startswith(("-", "+", "~")) or "=" not in override:
            continue
        key, value = (part.strip() for part in override.split("=", 1))
        if _readable(key, known):
            continue
        near = _nearest(key, known)
        problems.append(f"{override}: unknown key '{key}'; " + (f"did you mean {near}={value}?" if near else
                        "python -m autotune --help lists every key"))
    return problems


def added_key_problems(overrides) -> list[str]:
    """``+key=value`` overrides that add a key autotune does not read (Hydra accepts them, and
    the run would go on without the value: ``+roi.memory_price=5`` for
    ``roi.memory_price_per_gib_hour``), each with the nearest known key. Allowed: a config
    group (``+experiment=NAME``), Hydra's own keys, known keys (``++budget_gib=4``) and keys under
    ``OPEN_KEYS``."""
    known = schema_keys()
    problems = []
    for override in overrides:
        if not override.startswith("+"):
            continue
        key = override.lstrip("+").split("=", 1)[0].strip()
        if _readable(key, known):
            continue
        near = _nearest(key, known)
        problems.append(f"{override}: adds a key autotune does not read ({key}), so the run would go on without "
                        f"it; " + (f"did you mean {near}? Set it without '+'" if near else
                                   "autotune --help lists every key")
                        + f". New keys are taken only under {', '.join(k + '.*' for k in OPEN_KEYS)} (a builder's "
                          "or optimizer's own keyword arguments)")
    return problems


def _group_defaults() -> dict[str, str | None]:
    import yaml

    chosen = {}
    for entry in yaml.safe_load((Path(CONF_DIR) / "config.yaml").read_text())["defaults"]:
        if isinstance(entry, dict):
            chosen.update({k.split("@")[0].removeprefix("optional "): v for k, v in entry.items()})
    return chosen


def config_keys() -> list[tuple]:
    """(key, default as text, meaning) for every key a user sets: the groups, then the schema's."""
    import dataclasses
    import typing

    chosen = _group_defaults()
    rows = [(group, chosen.get(group) or "(none)", meaning) for group, meaning in GROUPS.items()]

    def walk(cls, prefix: str):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            key, kind = prefix + f.name, hints[f.name]
            if "help" in f.metadata:
                default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[operator]
                rows.append((key, _text(default), f.metadata["help"]))
            elif dataclasses.is_dataclass(kind):
                walk(kind, key + ".")

    walk(TuneConfig, "")
    nested = [r for r in rows[len(GROUPS):] if "." in r[0]]
    return rows[:len(GROUPS)] + [r for r in rows[len(GROUPS):] if "." not in r[0]] + nested


def _text(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def markdown_table() -> str:
    """The README's configuration table (tests/study/test_config.py keeps the two equal)."""
    lines = ["| key | default | meaning |", "| --- | --- | --- |"]
    lines += [f"| `{k}` | `{d}` | {m.replace('|', chr(92) + '|')} |" for k, d, m in config_keys()]
    return "\n".join(lines)


HELP_HEADER = """autotune: measure memory strategies for PyTorch training and pick the best one.

Runs short, isolated training trials of a model over combinations of activation
checkpointing, precision (fp32, bf16, fp16), micro-batch and gradient accumulation (the
global batch held fixed), on the GPU if there is one; measures peak memory and throughput;
scores each by memory saved against time lost (ROI); writes best.yaml (load it with
autotune.load_tuned), trials.csv and report.html (the Pareto front) to the run directory.

  autotune model=bert                                 tune BERT-base with the defaults
  autotune model=bert-large budget_gib=24             under a 24 GiB budget
  autotune model=custom model.target=my_pkg.models:build
  autotune experiment=bert_large_budgets              a named set of overrides
  autotune model=bert dry_run=true                    print the plan as it will run, run nothing
"""


def help_text() -> str:
    """``python -m autotune --help``: what it does, then every key with its default and meaning."""
    rows = config_keys()
    width = max(len(k) + len(d) for k, d, _ in rows) + 3
    keys = "\n".join(f"  {k}={d}".ljust(width + 3) + m for k, d, m in rows)
    return (f"{HELP_HEADER}\nKeys (key=default  meaning); set any as key=value:\n{keys}\n\n"
            "Hydra's own options: --hydra-help. Rebuild a report: python -m autotune.report RUN_DIR; "
            "compare budgets: python -m autotune.show RUN_DIR --budget 16.\n")


def register() -> None:
    store = ConfigStore.instance()
    store.store(name="tune_schema", node=TuneConfig)
    # Hydra prints hydra.help.template for --help; "$" would start one of its own variables.
    store.store(group="hydra/help", name="autotune", node={"app_name": "autotune", "header": "", "footer": "",
                                                           "template": help_text().replace("$", "$$")})
