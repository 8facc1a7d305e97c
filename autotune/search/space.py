"""Search spaces: check a space, enumerate the configurations it names.

A space is the ``search_space`` config group (``autotune/conf/search_space/*.yaml``, typed by
``SearchSpaceConfig``: ``search_space=full``), or a file of the user's own named by
``search_space.path``. Either lists the values of each dimension; micro-batch bounds are
inclusive and the tried values are the divisors of ``global_batch`` inside them, so that
``micro_batch * accumulation == global_batch`` always holds. ``offload`` and ``allocator``
may be left out (then: no offload, the default allocator). The schema checks types when
Hydra composes the config; the checks here need the whole space (fractions in [0, 1], known
values, bounds in order) and report every problem at once.
"""
from __future__ import annotations

import math

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import yaml

from autotune.train.optimizer import MODEL_STATE_DEFAULTS, OPTIMIZER_IMPLS, OPTIMIZER_STATES, WEIGHTS, combination_problem
from autotune.train.strategy import ALLOCATORS, PRECISIONS, Strategy, checkpoint_label

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "conf" / "search_space"  # the shipped spaces
SPACE_KEYS = {"checkpointing", "precision", "micro_batch", "offload", "allocator", *MODEL_STATE_DEFAULTS}


@dataclass(frozen=True)
class SearchSpace:
    checkpointing: tuple  # labels: none, full or a fraction such as "0.5"
    precision: tuple
    micro_batch_min: int
    micro_batch_max: int
    offload: tuple = (False,)
    allocator: tuple = ("default",)
    optimizer_state: tuple = ("default",)
    optimizer_offload: tuple = (False,)
    weights: tuple = ("fp32",)
    optimizer_impl: tuple = ("default",)

    @property
    def activation_only(self) -> bool:
        """Only the default of every model-state dimension (what escalation extends)."""
        return all(getattr(self, k) == (v,) for k, v in MODEL_STATE_DEFAULTS.items())

    def with_model_state(self, other: "SearchSpace") -> "SearchSpace":
        """This space with ``other``'s model-state dimensions."""
        from dataclasses import replace

        return replace(self, **{k: getattr(other, k) for k in MODEL_STATE_DEFAULTS})

    def micro_batches(self, global_batch: int) -> List[int]:
        return [d for d in divisors(global_batch) if self.micro_batch_min <= d <= self.micro_batch_max]

    def grid(self, global_batch: int) -> Dict[str, list]:
        """The Optuna grid: every dimension with its values."""
        return {
            "checkpointing": list(self.checkpointing),
            "precision": list(self.precision),
            "micro_batch": self.micro_batches(global_batch),
            "offload": list(self.offload),
            "allocator": list(self.allocator),
            # only where the space varies them: an activation-only space keeps the keys (and
            # so the study names) of the spaces that had no model-state dimensions
            **({} if self.activation_only else {k: list(getattr(self, k)) for k in MODEL_STATE_DEFAULTS}),
        }


def canonical(config: dict) -> dict:
    """A configuration as the study stores it: the model-state keys only where one of them is
    not its default, so a configuration of an activation-only space and the same one listed
    by a wider space (escalation, ``search_space=full``) are one configuration."""
    if all(config.get(k, v) == v for k, v in MODEL_STATE_DEFAULTS.items()):
        return {k: v for k, v in config.items() if k not in MODEL_STATE_DEFAULTS}
    return {**MODEL_STATE_DEFAULTS, **config}


def divisors(n: int) -> List[int]:
    """The divisors of ``n`` in order, in O(sqrt(n)) (a global batch of 10^8 is answered at once)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0] if n > 0 else []
    return sorted(set(small + [n // d for d in small]))


def shipped_spaces() -> List[str]:
    return sorted(f.stem for f in SHIPPED_DIR.glob("*.yaml"))


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key given twice in one mapping is an error (the
    plain loader keeps the last silently, so a space file could say two things at once)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key '{key}'", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_space_file(path: str, problems: List[str]) -> Optional[dict]:
    """The dimensions in a space file of the user's own (absolute or relative to the working
    directory), or None with the problem appended."""
    file, key = Path(path), "search_space.path"
    if not file.is_file():
        problems.append(f"{key}={path}: no such file (relative paths start at the working directory {Path.cwd()}); "
                        f"pass the path of your own space file, or pick a shipped space: "
                        f"search_space={'|'.join(shipped_spaces())}")
        return None
    try:
        data = yaml.load(file.read_bytes().decode("utf-8"), Loader=_StrictLoader) or {}
    except UnicodeDecodeError as e:
        problems.append(f"{key}={path}: not UTF-8 text ({e}); save the file as UTF-8")
        return None
    except yaml.YAMLError as e:
        problems.append(f"{key}={path}: not valid YAML ({e}); fix the file")
        return None
    if not isinstance(data, dict):
        problems.append(f"{key}={path}: must be a mapping of dimensions; see {SHIPPED_DIR / 'default.yaml'}")
        return None
    return data


def load_space(group: dict, problems: List[str], overridden: Iterable[str] = ()) -> Optional[SearchSpace]:
    """Check the composed ``search_space`` group, or the file its ``path`` names; append every
    problem found to ``problems``. ``overridden``: the keys set on the command line; with a
    file, those of the group (``search_space.micro_batch.max=8``) apply over the file's, and are
    checked as the file's are (they were once ignored, unchecked)."""
    if group.get("path"):
        data = load_space_file(str(group["path"]), problems)
        if data is None:
            return None
        given = [k for k in overridden if k.startswith("search_space.") and k != "search_space.path"]
        for key in given:
            dim, _, bound = key.removeprefix("search_space.").partition(".")
            if dim == "micro_batch" and bound in ("min", "max"):
                bounds = data.get("micro_batch") if isinstance(data.get("micro_batch"), dict) else {}
                data["micro_batch"] = {**bounds, bound: (group.get("micro_batch") or {}).get(bound)}
            elif dim in SPACE_KEYS and not bound:
                data[dim] = group.get(dim)
        source = Path(str(group["path"])).name + (f" with the command line's {', '.join(sorted(given))}" if given
                                                   else "")
    else:
        data = {k: v for k, v in group.items() if k not in ("name", "path")}
        source = f"search_space={group.get('name')}"
    return check_space(data, source, problems)


def check_space(data: dict, source: str, problems: List[str]) -> Optional[SearchSpace]:
    """A SearchSpace from a mapping of dimensions, or None; every problem goes to ``problems``."""
    for unknown in sorted(set(data) - SPACE_KEYS):
        problems.append(f"{source}: unknown dimension '{unknown}'; known: {', '.join(sorted(SPACE_KEYS))}")

    def values(name: str, allowed: tuple, default=None) -> tuple:
        vals = data.get(name, default)
        if not isinstance(vals, list) or not vals:
            problems.append(f"{source}: {name} must be a non-empty list drawn from {list(allowed)}; got {vals!r}")
            return ()
        bad = [v for v in vals if type(v) is not type(allowed[0]) or v not in allowed]
        if bad:
            problems.append(f"{source}: {name} has unknown value(s) {bad}; use values from {list(allowed)}")
        return tuple(dict.fromkeys(v for v in vals if v not in bad))  # bad ones may be unhashable (lists)

    ckpt: tuple = ()
    raw = data.get("checkpointing")
    if not isinstance(raw, list) or not raw:
        problems.append(f"{source}: checkpointing must be a non-empty list of none, full or fractions of the "
                        f"blocks in [0, 1] (e.g. [none, 0.5, full]); got {raw!r}")
    else:
        labels = []
        for v in raw:
            try:
                labels.append(checkpoint_label(v))
            except ValueError:
                problems.append(f"{source}: checkpointing value {v!r} is neither none, full nor a fraction of the "
                                "blocks in [0, 1]; e.g. [none, 0.25, 0.5, full]")
        ckpt = tuple(dict.fromkeys(labels))
    prec = values("precision", PRECISIONS)
    offload = values("offload", (False, True), [False])
    allocator = values("allocator", tuple(ALLOCATORS), ["default"])
    model_state = {"optimizer_state": values("optimizer_state", OPTIMIZER_STATES, ["default"]),
                   "optimizer_offload": values("optimizer_offload", (False, True), [False]),
                   "weights": values("weights", WEIGHTS, ["fp32"]),
                   "optimizer_impl": values("optimizer_impl", OPTIMIZER_IMPLS, ["default"])}
    mb = data.get("micro_batch")
    lo = hi = None
    if not isinstance(mb, dict) or set(mb) - {"min", "max"}:
        problems.append(f"{source}: micro_batch must be a mapping {{min: N, max: M}} (inclusive bounds); got {mb!r}")
    else:
        lo, hi = mb.get("min", 1), mb.get("max", 1 << 30)
        for bound, v in (("min", lo), ("max", hi)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                problems.append(f"{source}: micro_batch.{bound}={v!r} must be an integer >= 1")
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            problems.append(f"{source}: micro_batch.min={lo} is above micro_batch.max={hi}; swap them")
    if lo is None or not ckpt or not prec or not offload or not allocator or not all(model_state.values()):
        return None
    return SearchSpace(ckpt, prec, int(lo), int(hi), offload, allocator, **model_state)


def skip_reason(strategy: Strategy, supported: tuple, unsupported: Dict[str, str],
                device_kind: str = "cuda") -> Optional[str]:
    """Why the device cannot run ``strategy`` (so it is recorded as skipped), or None."""
    if strategy.precision not in supported:
        return unsupported.get(strategy.precision, f"{strategy.precision} is not supported on this device")
    if device_kind != "cuda" and strategy.offload:
        return "offload moves saved activations from the device to CPU memory; on a CPU run there is nothing to move"
    if device_kind != "cuda" and strategy.allocator != "default":
        return f"allocator={strategy.allocator} configures the CUDA caching allocator; a CPU run has none"
    if device_kind != "cuda" and strategy.optimizer_offload:
        return "optimizer_offload moves the optimizer state from the device to the host; on a CPU run it is there already"
    return combination_problem(strategy)
