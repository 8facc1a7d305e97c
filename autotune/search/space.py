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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autotune.train.dimensions import ALWAYS_KEYED, BATCH, DIMENSIONS, MODEL_STATE, Dimension, in_group, searched
from autotune.train.optimizer import combination_problem
from autotune.train.strategy import Strategy

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "conf" / "search_space"  # the shipped spaces
SPACE_KEYS = {d.name for d in searched()}


@dataclass(frozen=True)
class SearchSpace:
    """The values of every searched dimension (``choices``; one left out: its default only)
    and the micro-batch's inclusive bounds."""

    choices: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    micro_batch_min: int = 1
    micro_batch_max: int = 1 << 30

    def __post_init__(self) -> None:
        unknown = sorted(set(self.choices) - SPACE_KEYS - {"micro_batch"})
        if unknown:
            raise ValueError(f"unknown dimension(s) {', '.join(unknown)}; known: {', '.join(sorted(SPACE_KEYS))}")
        full = {d.name: tuple(self.choices.get(d.name, (d.default,))) for d in searched() if d.group != BATCH}
        object.__setattr__(self, "choices", full)

    def __getitem__(self, name: str) -> tuple[Any, ...]:
        return self.choices[name]

    def varies(self, group: str) -> bool:
        """Does the space list a value other than the default for a dimension of ``group``?"""
        return any(self.choices[d.name] != (d.default,) for d in in_group(group) if d.name in self.choices)

    @property
    def activation_only(self) -> bool:
        """Only the default of every model-state dimension (what escalation extends)."""
        return not self.varies(MODEL_STATE)

    def with_model_state(self, other: SearchSpace) -> SearchSpace:
        """This space with ``other``'s model-state dimensions."""
        return SearchSpace({**self.choices, **{d.name: other[d.name] for d in in_group(MODEL_STATE)}},
                           self.micro_batch_min, self.micro_batch_max)

    def micro_batches(self, global_batch: int) -> list[int]:
        return [d for d in divisors(global_batch) if self.micro_batch_min <= d <= self.micro_batch_max]

    def grid(self, global_batch: int) -> dict[str, list[Any]]:
        """The Optuna grid: every dimension with its values. A group not always keyed (the
        model state) only where the space varies it: an activation-only space keeps the keys
        (and so the study names) of the spaces that had no model-state dimensions."""
        out: dict[str, list[Any]] = {}
        for d in searched():
            if d.name == "micro_batch":
                out[d.name] = self.micro_batches(global_batch)
            elif d.group in ALWAYS_KEYED or self.varies(d.group):
                out[d.name] = list(self.choices[d.name])
        return out


def canonical(config: dict[str, Any]) -> dict[str, Any]:
    """A configuration as the study stores it: the keys of a group not always keyed (the model
    state) only where one of them is not its default, so a configuration of an activation-only
    space and the same one listed by a wider space (escalation, ``search_space=full``) are one
    configuration."""
    out = dict(config)
    for group in {d.group for d in DIMENSIONS.values()} - set(ALWAYS_KEYED):
        dims = in_group(group)
        if all(config.get(d.name, d.default) == d.default for d in dims):
            for d in dims:
                out.pop(d.name, None)
        else:
            out.update({d.name: config.get(d.name, d.default) for d in dims})
    return out


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in order, in O(sqrt(n)) (a global batch of 10^8 is answered at once)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0] if n > 0 else []
    return sorted(set(small + [n // d for d in small]))


def shipped_spaces() -> list[str]:
    return sorted(f.stem for f in SHIPPED_DIR.glob("*.yaml"))


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key given twice in one mapping is an error (the
    plain loader keeps the last silently, so a space file could say two things at once)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key '{key}'", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_space_file(path: str, problems: list[str]) -> dict[str, Any] | None:
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


def load_space(group: dict[str, Any], problems: list[str], overridden: Iterable[str] = ()) -> SearchSpace | None:
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
                bounds = data["micro_batch"] if isinstance(data.get("micro_batch"), dict) else {}
                data["micro_batch"] = {**bounds, bound: (group.get("micro_batch") or {}).get(bound)}
            elif dim in SPACE_KEYS and not bound:
                data[dim] = group.get(dim)
        source = Path(str(group["path"])).name + (f" with the command line's {', '.join(sorted(given))}" if given
                                                   else "")
    else:
        data = {k: v for k, v in group.items() if k not in ("name", "path")}
        source = f"search_space={group.get('name')}"
    return check_space(data, source, problems)


def check_space(data: dict[str, Any], source: str, problems: list[str]) -> SearchSpace | None:
    """A SearchSpace from a mapping of dimensions, or None; every problem goes to ``problems``."""
    for unknown in sorted(set(data) - SPACE_KEYS):
        problems.append(f"{source}: unknown dimension '{unknown}'; known: {', '.join(sorted(SPACE_KEYS))}")
    choices = {d.name: _values(d, data, source, problems) for d in searched() if d.group != BATCH}
    bounds = _micro_batch_bounds(data.get("micro_batch"), source, problems)
    if bounds is None or not all(choices.values()):
        return None
    return SearchSpace(choices, *bounds)


def _values(d: Dimension, data: dict[str, Any], source: str, problems: list[str]) -> tuple[Any, ...]:
    """A dimension's listed values in their one spelling (its default where the space leaves it
    out, except checkpointing and precision, which a space must list), or () with the problem."""
    vals = data.get(d.name) if d.required or d.name in data else [d.default]
    allowed = list(d.values) if d.values else "none, full or fractions of the blocks in [0, 1] (e.g. [none, 0.5, full])"
    if not isinstance(vals, list) or not vals:
        problems.append(f"{source}: {d.name} must be a non-empty list drawn from {allowed}; got {vals!r}")
        return ()
    good, bad = [], []
    for v in vals:
        try:
            good.append(d.check(v))
        except (TypeError, ValueError):
            bad.append(v)
            if d.parse is not None:  # an open set of values: say what is wrong with each
                problems.append(f"{source}: {d.name} value {v!r}: {d.problem(v)}")
    if bad and d.parse is None:
        problems.append(f"{source}: {d.name} has unknown value(s) {bad}; use values from {allowed}")
    return tuple(dict.fromkeys(good))  # bad ones may be unhashable (lists)


def _micro_batch_bounds(mb: Any, source: str, problems: list[str]) -> tuple[int, int] | None:
    if not isinstance(mb, dict) or set(mb) - {"min", "max"}:
        problems.append(f"{source}: micro_batch must be a mapping {{min: N, max: M}} (inclusive bounds); got {mb!r}")
        return None
    lo, hi = mb.get("min", 1), mb.get("max", 1 << 30)
    for bound, v in (("min", lo), ("max", hi)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            problems.append(f"{source}: micro_batch.{bound}={v!r} must be an integer >= 1")
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        problems.append(f"{source}: micro_batch.min={lo} is above micro_batch.max={hi}; swap them")
        return None
    if any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in (lo, hi)):
        return None
    return int(lo), int(hi)


def skip_reason(strategy: Strategy, supported: tuple[Any, ...], unsupported: dict[str, str],
                device_kind: str = "cuda") -> str | None:
    """Why the device cannot run ``strategy`` (so it is recorded as skipped), or None."""
    if strategy.precision not in supported:
        return unsupported.get(strategy.precision, f"{strategy.precision} is not supported on this device")
    if device_kind != "cuda":
        for d in DIMENSIONS.values():
            value = getattr(strategy, d.name)
            if d.cuda_only and value != d.default:
                return d.cuda_only.format(value=d.spell(value))
    return combination_problem(strategy)
