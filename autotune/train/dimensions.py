"""The strategy's dimensions, each declared once.

A dimension is one ``Dimension``: its name, default and allowed values (and so its type),
its group, what it means for memory and speed (the orders ``search=auto`` reasons with),
whether it changes the numbers training computes, what a CPU run cannot do with it, what a
trainer's settings cannot express of it, and its spelling in labels. Every other place that
lists dimensions derives the list from ``DIMENSIONS``:

* ``Strategy`` (train/strategy.py): its values, checks and label;
* best.yaml's schema (train/best_schema.py) and ``load_tuned``;
* the search-space schema (study/config.py), its checks and enumeration (search/space.py);
* ``search=auto``'s family key and its memory and speed orders (search/auto.py);
* the trials table, the report's and ``show``'s columns, the replay's key, loss parity's
  reference runs, the Hugging Face and Lightning exporters.

As Optuna's ``distributions`` module is the one description of a parameter that its trials,
samplers and storages share, this module is the one description of a strategy dimension.

A dimension of one's own: a module that calls ``declare(Dimension(...))``, named in the
environment variable ``AUTOTUNE_DIMENSIONS`` (comma-separated module paths). It is imported
here, before anything derives from the declarations, in the driver and in every trial
process alike. Its ``apply`` hook sets the value up on the model (a trial and
``load_tuned(...).apply`` both call it); a search space lists its values under its name.
"""
from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# The groups: the batch split (not a family dimension), what activations cost, and the model
# state (optimizer state, its place, weights, optimizer implementation), whose keys a trials
# table holds only where one of them is not its default (search/space.py ``canonical``).
BATCH, ACTIVATION, MODEL_STATE = "batch", "activation", "model_state"
ALWAYS_KEYED = (BATCH, ACTIVATION)  # groups whose keys every configuration carries

CHECKPOINT_ALIASES = {"none": 0.0, "full": 1.0}


def checkpoint_fraction(value: Any) -> float:
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


def checkpoint_label(value: Any) -> str:
    """The one spelling of a checkpointing value in tables and files: none, full or the fraction."""
    f = checkpoint_fraction(value)
    return "none" if f == 0 else "full" if f == 1 else f"{f:g}"


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
        raise ValueError(f"{value!r} is not an integer >= 1")
    return int(value)


@dataclass(frozen=True)
class Dimension:
    name: str
    default: Any
    values: tuple[Any, ...] = ()  # the allowed values, in the order spaces list them; (): open
    help: str = ""
    group: str = ACTIVATION  # BATCH | ACTIVATION | MODEL_STATE, or a group of one's own
    parse: Callable[[Any], Any] | None = None  # a value as given -> its one spelling (ValueError)
    searched: bool = True  # listed by a search space (accumulation follows from the micro-batch)
    required: bool = False  # a search space must list it (one left out otherwise: its default only)
    tag: str = ""  # its part of Strategy.label, "{}" the value; shown where not the default
    always_shown: bool = False  # ...or always
    # Memory and speed orders (search/auto.py, facts 3 and 7): a rank per value, larger
    # holding at least as much memory / being at most as fast at one micro-batch, the rest
    # equal. None: configurations with different values do not bound each other.
    heavier: Callable[[Any], float] | None = None
    slower: Callable[[Any], float] | None = None
    fixed_memory: bool = True  # changes memory that does not grow with the micro-batch
    numerics: Mapping[Any, str] = field(default_factory=dict)  # values that change training's numbers -> label
    cuda_only: str = ""  # why a CPU run skips a value other than the default ("{value}": the value)
    # What a trainer's settings cannot express of a value other than the default, and the call
    # that applies it instead (train/exporters.py); None: the exporters map it themselves.
    not_expressible: str | None = "{name}={value} (tuned.apply(model) applies it)"
    optimizer_side: bool = False  # applied by tuned.optimizer(...) rather than tuned.apply(model)
    # A dimension of one's own: sets its value up on the model, (model, value) -> None.
    apply: Callable[[Any, Any], None] | None = None

    @property
    def type(self) -> type:
        return type(self.default)

    def check(self, value: Any) -> Any:
        """``value`` in its one spelling, or a ValueError naming the dimension and the fix."""
        if self.type is bool and type(value).__name__ == "bool_":  # numpy's, from a table
            value = bool(value)
        if self.parse is not None:
            try:
                return self.parse(value)
            except ValueError as e:  # the parser names the value; the dimension's name leads
                why = str(e).split(": ", 1)[-1] if str(e).startswith(f"{self.name}=") else str(e)
                raise ValueError(f"{self.name}={value!r}: {why}") from None
        problem = self.problem(value)
        if problem:
            raise ValueError(f"{self.name}={value!r}: {problem}")
        return value

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` and how to fix it, or None."""
        if self.parse is not None:
            try:
                self.check(value)
            except ValueError as e:
                return str(e).split(": ", 1)[-1]
            return None
        if self.values and (type(value) is not self.type or value not in self.values):
            if self.type is bool:
                return "must be true or false (unquoted)"
            return f"use one of {', '.join(map(_spell, self.values))}"
        return None

    def shown(self, value: Any) -> bool:
        return self.always_shown or value != self.default

    def spell(self, value: Any) -> str:
        """The value as files and the command line write it (true, not True)."""
        return _spell(value)


def _spell(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _rank(*heaviest_first: Any) -> Callable[[Any], float]:
    return lambda v: float(len(heaviest_first) - heaviest_first.index(v))


DIMENSIONS: dict[str, Dimension] = {}


def declare(dimension: Dimension) -> Dimension:
    """Add a dimension (a module named by ``AUTOTUNE_DIMENSIONS`` calls this)."""
    if dimension.name in DIMENSIONS:
        raise ValueError(f"dimension {dimension.name!r} is declared twice; give yours another name")
    if not dimension.name.isidentifier():
        raise ValueError(f"dimension name {dimension.name!r}: use a Python identifier (letters, digits, _)")
    if dimension.values and dimension.default not in dimension.values:
        raise ValueError(f"dimension {dimension.name}: default {dimension.default!r} is not among its values "
                         f"{list(dimension.values)}")
    DIMENSIONS[dimension.name] = dimension
    return dimension


# Allocator settings -> PYTORCH_CUDA_ALLOC_CONF; autocast's dtypes by torch name.
ALLOCATORS = {"default": None, "expandable": "expandable_segments:True"}
AUTOCAST_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}

declare(
    Dimension(
        "checkpointing",
        "none",
        parse=checkpoint_label,
        required=True,
        always_shown=True,
        tag="ckpt={}",
        fixed_memory=False,
        help="activation checkpointing: none, full or a fraction of the blocks (from the input side)",
        heavier=lambda v: -checkpoint_fraction(v),
        slower=checkpoint_fraction,
        not_expressible=None,
    )
)
declare(Dimension(
    "precision", "fp32", ("fp32", "bf16", "fp16"), required=True, always_shown=True, tag="prec={}",
    help="autocast precision of the forward (fp32: none)",
    numerics={"bf16": "bf16 autocast", "fp16": "fp16 autocast"}, not_expressible=None))
declare(
    Dimension(
        "micro_batch",
        1,
        parse=_positive_int,
        group=BATCH,
        required=True,
        always_shown=True,
        tag="mb={}",
        not_expressible=None,
        help="samples per forward/backward (the space gives bounds; the tried values divide the global batch)",
    )
)
declare(Dimension(
    "accumulation", 1, parse=_positive_int, group=BATCH, searched=False, always_shown=True, tag="acc={}",
    not_expressible=None, help="micro-steps per optimizer step: micro_batch x accumulation = the global batch"))
declare(Dimension(
    "offload", False, (False, True), tag="offload", fixed_memory=False, slower=float,
    help="saved activations kept in pinned host memory (save_on_cpu), copied back for backward",
    cuda_only="offload moves saved activations from the device to CPU memory; on a CPU run there is nothing to move",
    not_expressible="offload=true (saved activations kept in pinned host memory)"))
declare(Dimension(
    "allocator", "default", tuple(ALLOCATORS), tag="alloc={}",
    help="the CUDA caching allocator's segments: default | expandable",
    cuda_only="allocator={value} configures the CUDA caching allocator; a CPU run has none",
    not_expressible="allocator={value} (tuned.set_allocator() before CUDA starts, or the PYTORCH_CUDA_ALLOC_CONF "
                    "environment variable)"))
# The model-state dimensions: train/optimizer.py says how each is built.
declare(Dimension(
    "optimizer_state", "default", ("default", "8bit", "4bit"), group=MODEL_STATE, tag="opt={}",
    heavier=_rank("default", "8bit", "4bit"), numerics={"8bit": "8bit optimizer state", "4bit": "4bit optimizer state"},
    help="AdamW's moments: default, or block-quantised to 8 or 4 bits (torchao)", not_expressible=None,
    optimizer_side=True))
declare(Dimension(
    "optimizer_offload", False, (False, True), group=MODEL_STATE, tag="opt-offload", heavier=_rank(False, True),
    help="the optimizer state and step on the host (torchao's CPUOffloadOptimizer)", optimizer_side=True,
    cuda_only="optimizer_offload moves the optimizer state from the device to the host; on a CPU run it is there "
              "already",
    not_expressible="optimizer_offload=true (the optimizer state and step on the host)"))
declare(Dimension(
    "weights", "fp32", ("fp32", "bf16"), group=MODEL_STATE, tag="w={}", heavier=_rank("fp32", "bf16"),
    numerics={"bf16": "bf16 weights (stochastic rounding)"}, optimizer_side=True,
    help="the parameters' precision: fp32, or bf16 with AdamW rounding each update stochastically (torchao)",
    not_expressible="weights=bf16 (tuned.apply(model) casts the weights; AdamW with stochastic rounding)"))
declare(Dimension(
    "optimizer_impl", "default", ("default", "forloop", "foreach", "fused"), group=MODEL_STATE, tag="impl={}",
    help="torch.optim's implementation switch", not_expressible=None, optimizer_side=True))


def searched() -> list[Dimension]:
    """The dimensions a search space lists."""
    return [d for d in DIMENSIONS.values() if d.searched]


def family() -> list[Dimension]:
    """A configuration's family: every searched dimension but the micro-batch (search/auto.py)."""
    return [d for d in searched() if d.group != BATCH]


def in_group(group: str) -> list[Dimension]:
    return [d for d in DIMENSIONS.values() if d.group == group]


def defaults(group: str | None = None) -> dict[str, Any]:
    return {d.name: d.default for d in DIMENSIONS.values() if group is None or d.group == group}


def missing(value: Any) -> bool:
    """A table cell of a trial that has no value for a key (None or NaN)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def value_in(row: Mapping[str, Any], name: str) -> Any:
    """A dimension's value in a table row or a params dict, checked; its default where the row
    has none (a trial of a space without the dimension, or recorded before it existed)."""
    d = DIMENSIONS[name]
    value = row.get(name)
    if missing(value):
        return d.default
    if d.type is int or d.type is bool:  # numpy's, or a float column's
        value = d.type(value)  # type: ignore[arg-type]
    return d.check(value)


def tags(values: Mapping[str, Any], style: str = "label") -> list[str]:
    """A configuration's words, one per dimension shown: ``label``: Strategy.label's tags
    (ckpt=none, offload); ``key``: key=value as the command line writes it."""
    out = []
    for d in DIMENSIONS.values():
        if d.name not in values:
            continue
        value = values[d.name]
        if d.shown(value):
            out.append(d.tag.format(d.spell(value)) if style == "label" and d.tag else f"{d.name}={d.spell(value)}")
    return out


def extras(values: Mapping[str, Any]) -> list[tuple[Dimension, Any]]:
    """(dimension, value) of each dimension not always shown whose value is not its default."""
    return [(d, values.get(d.name, d.default)) for d in DIMENSIONS.values()
            if not d.always_shown and d.shown(values.get(d.name, d.default))]


def short_label(values: Mapping[str, Any]) -> str:
    """'none/bf16/mb32x2' and what else differs from the defaults ('+ offload', ...): the
    report's and the terminal's name for a configuration."""
    text = f"{values['checkpointing']}/{values['precision']}/mb{values['micro_batch']}"
    text += f"x{values['accumulation']}" if values.get("accumulation", 1) > 1 else ""
    return text + "".join(f" + {d.name}" if v is True else f" + {d.name} {d.spell(v)}" for d, v in extras(values))


def numerics_of(values: Mapping[str, Any]) -> list[str]:
    """What in a configuration makes training compute other numbers than fp32 with the plain
    optimizer, each a label for trials.csv, best.yaml and the report."""
    return [d.numerics[values[d.name]] for d in DIMENSIONS.values() if values.get(d.name) in d.numerics]


def _load_plugins() -> None:
    for module in filter(None, (m.strip() for m in os.environ.get("AUTOTUNE_DIMENSIONS", "").split(","))):
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ImportError(f"AUTOTUNE_DIMENSIONS={os.environ['AUTOTUNE_DIMENSIONS']}: cannot import {module} ({e}); "
                              "name a module on the Python path that declares your dimensions") from e


_load_plugins()
