"""The file contract between the driver and a trial process: ``spec.json`` in, ``result.json`` out.

``TrialSpec`` is what the driver (``study/driver.py:trial_spec``), the runners, profiling and
the benchmarks write, and what the trial process (``trial/run.py``) reads: one typed
definition, checked when read, so a key that one side renames fails loudly at the other
instead of silently taking a default. ``TrialResult`` names the fields a result carries;
every status but ``ok`` carries ``cause``, and ``check_result`` holds a result read back to
that (the driver's side of the boundary: ``trial/runner.py``).
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypedDict, cast, get_type_hints

from autotune.train.strategy import Strategy

# Every way a trial ends (the driver records one of these as the trial's ``status``).
STATUSES = ("ok", "oom", "crash", "timeout", "nan", "error", "skipped", "pruned")


@dataclass
class ModelSpec:
    name: str
    target: str  # the builder, package.module.function (or package.module:function)
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrialSpec:
    model: ModelSpec
    seq_len: int
    device: str  # cpu | cuda | cuda:N
    strategy: dict[str, Any]  # Strategy.as_dict(), checked as a Strategy when read (``the_strategy``)
    warmup_steps: int
    measure_steps: int
    min_measure_s: float = 0.0
    lr: float = 1e-4
    seed: int = 0
    memory_cap_gib: float | None = None  # cap the allocator to this (a budget smaller than the card)
    # The user's optimizer (train/optimizer.py:OptimizerSpec): class or function, and keyword arguments.
    optimizer: dict[str, Any] = field(default_factory=lambda: {"target": "torch.optim.AdamW", "kwargs": {}})
    # Set by whoever launches the trial:
    result: str | None = None  # where to write result.json (default: beside spec.json)
    launched_at: float | None = None  # time.time() at launch: the trial's start-up is measured from it
    profile_dir: str | None = None  # profile=true: trace the timed steps into this folder
    # How precisely to measure (study/fidelity.py): "probe" (memory settled, speed from a
    # few steps) or "full" (the whole window). ``race_speed``: the samples/s range in which
    # this configuration's verdict against the best is still open; a full measurement stops
    # once its interval leaves that range (it is decided) or lies inside it (tied).
    fidelity: str = "full"
    race_speed: list[float] | None = None
    cpu_threads: int | None = None  # CPU: torch.set_num_threads before the model (None: torch's default)
    # After the measurement, count the bytes activation offload would copy and time the host
    # link (search=auto's bound on offload, fact 6): only where the space has offload to bound.
    offload_bound: bool = True

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialSpec:
        """Read a spec; an unknown or missing key is an error naming it."""
        if isinstance(data, TrialSpec):
            return data
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"trial spec: unknown key(s) {unknown}; known: {sorted(known)}")
        try:
            spec = cls(**{**data, "model": ModelSpec(**data["model"])})
            spec.the_strategy()
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"trial spec: {e}") from None
        return spec

    def the_strategy(self) -> Strategy:
        """The strategy as its value class: every dimension checked (train/dimensions.py)."""
        return Strategy(**self.strategy)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def but(self, **changes: Any) -> TrialSpec:
        """A copy with some fields changed (a result path, a launch time, a profile folder)."""
        return TrialSpec.from_dict({**self.to_dict(), **changes})


class TrialResult(TypedDict, total=False):
    """What result.json holds. Measurements appear only where the trial got that far."""

    status: str  # one of STATUSES
    cause: str | None  # why, for every status but ok
    phase: str  # error: "build" (the model builder failed) or "isolation" (the clean-start check)
    device: str
    pid: int
    clean_start: bool
    isolation: str  # fork | fresh
    # memory
    peak_memory_gib: float  # the figure scoring uses: peak reserved (CUDA) or peak RSS growth (CPU)
    peak_allocated_gib: float
    peak_reserved_gib: float
    device_peak_gib: float  # NVML: reserved plus the CUDA context
    cuda_context_gib: float
    fragmentation_gib: float
    num_alloc_retries: int
    static_gib: float  # parameters, gradients, optimizer state on the device
    optimizer: str  # the optimizer class the trial trained with
    numerics: str  # what changes training numerics ("" for fp32 with the plain optimizer)
    memory_growth_gib: float
    saved_gib: float  # bytes autograd saves for backward at this micro-batch (offload's copies)
    saved_per_sample_gib: float
    host_link_gib_s: float
    # time
    samples_per_s: float
    step_time_s: float
    time_spread: float
    step_times_s: list[float]
    losses: list[float]
    timings: dict[str, float]  # startup_s, build_s, first_step_s, total_s
    wall_s: float
    fidelity: str  # probe | full (study/fidelity.py)
    race: str | None  # a raced full measurement's verdict: behind | ahead | tied (stopped early), or open
    flops_per_sample: float  # training FLOPs per sample (3 x the forward's, from torch's flop counter)
    # what else used the device during the timed steps (trial/contention.py)
    contended: bool
    contention: str | None  # why, when contended
    trial_cores: int
    own_cpu_cores: float
    other_cpu_cores: float
    load_average: float | None
    gpu_other_processes: int
    gpu_other_memory_gib: float
    gpu_other_sm_util: int | None
    n_checkpointed: int
    n_blocks: int


# The JSON types each annotation of TrialResult admits (a field a result does not hold is
# absent; None only where the annotation allows it).
_JSON_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
                                             "list[float]": (list,), "dict[str, float]": (dict,)}


class ResultError(ValueError):
    """A result file that breaks the contract: the message names the key and the value."""


def check_result(data: Any) -> TrialResult:
    """``data`` (a result.json as read back) as a ``TrialResult``: a mapping with a known
    status, a cause for every status but ``ok``, the figures of an ok one, and every field
    ``TrialResult`` names of its type. Fields it does not name pass as they are (device
    details the table keeps: ``peak_rss_gib``, ``allocator_conf``, ...)."""
    if not isinstance(data, dict):
        raise ResultError(f"trial result: not a mapping but {type(data).__name__}")
    if data.get("status") not in STATUSES:
        raise ResultError(f"trial result: status={data.get('status')!r}; one of {', '.join(STATUSES)}")
    if data["status"] != "ok" and not isinstance(data.get("cause"), str):
        raise ResultError(f"trial result: status={data['status']!r} without a cause")
    if data["status"] == "ok":
        for key in ("peak_memory_gib", "samples_per_s"):
            if not isinstance(data.get(key), (int, float)) or not math.isfinite(data[key]):
                raise ResultError(f"trial result: status='ok' with {key}={data.get(key)!r}")
    for key, (name, wanted) in _field_types().items():
        value = data.get(key)
        if value is None:
            continue  # absent, or None where the trial did not get that far
        if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
            raise ResultError(f"trial result: {key}={value!r} is not {name}")
    return cast(TrialResult, data)


@functools.cache
def _field_types() -> dict[str, tuple[str, tuple[type, ...]]]:
    """Each TrialResult field: (its type's name, the JSON types it admits), read once."""
    out = {}
    for key, annotation in get_type_hints(TrialResult).items():
        text = str(annotation)
        name = annotation.__name__ if text.startswith("<class ") else text.replace(" | None", "")
        out[key] = (name, _JSON_TYPES[name])
    return out
