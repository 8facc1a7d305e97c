"""The scoring settings: what turns a table of measured trials into a verdict.

Four values decide every score: the global batch (ROI's time per sample), the memory
budgets, the ROI prices and the objective. They travel together, as one ``Scoring``:
from the plan (the command line's values, checked there with the keys a user types) to
the search, the re-measurement, the outputs, into the study (``to_dict``, so
``python -m autotune.show`` / ``.report`` score it again), and back (``from_dict``, which
checks what it reads as strictly as the command line is checked).
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

ROI_KEYS = ("memory_price_per_gib_hour", "compute_price_per_hour", "workload_samples")


class ScoringError(ValueError):
    """Settings read back that are not what a run writes; the message names the key and value."""


def _finite(value: Any, minimum: float, strict: bool) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and (value > minimum if strict else value >= minimum))


def roi_problems(roi: dict[str, Any], where: str = "roi.") -> list[str]:
    """The ROI settings' rules, the one place they are written: finite prices >= 0 and a job of
    finite samples > 0. One message per broken rule, naming ``where`` + the key and the fix."""
    problems = []
    for key in ROI_KEYS:
        value, strict = roi.get(key), key == "workload_samples"
        if not _finite(value, 0, strict=strict):
            problems.append(f"{where}{key}={value}: " + (
                "must be a finite number > 0 (samples the whole job trains on); e.g. roi.workload_samples=1e8"
                if strict else f"a price must be a finite number >= 0; e.g. roi.{key}=0.5"))
    return problems


@dataclass(frozen=True)
class Scoring:
    global_batch: int
    budgets: tuple[float, ...]  # GiB; the first is the primary one (best.yaml is for it)
    roi: dict[str, float] = field(hash=False)  # ROI_KEYS: the prices and the job's samples
    objective: str = "roi"  # roi | throughput

    def __post_init__(self) -> None:
        object.__setattr__(self, "budgets", tuple(float(b) for b in self.budgets))

    @property
    def primary_budget(self) -> float:
        return self.budgets[0]

    def but(self, budgets: Iterable[float] | None = None, objective: str | None = None) -> Scoring:
        """The same settings judged under other budgets or another objective (``show --budget``)."""
        return replace(self, budgets=tuple(budgets) if budgets else self.budgets, objective=objective or self.objective)

    def to_dict(self) -> dict[str, Any]:
        return {"global_batch": self.global_batch, "budgets": list(self.budgets), "roi": dict(self.roi),
                "objective": self.objective}

    @classmethod
    def from_dict(cls, settings: Any) -> Scoring:
        """Settings as ``to_dict`` wrote them; anything else raises ``ScoringError`` naming it."""
        from autotune.scoring.score import OBJECTIVES

        if not isinstance(settings, dict):
            raise ScoringError("its autotune settings are not a mapping")
        g = settings.get("global_batch")
        if isinstance(g, bool) or not isinstance(g, int) or g < 1:
            raise ScoringError(f"settings global_batch={g!r}: must be a whole number >= 1")
        budgets = settings.get("budgets")
        if not isinstance(budgets, list) or not budgets or not all(_finite(b, 0, strict=True) for b in budgets):
            raise ScoringError(f"settings budgets={budgets!r}: must be a list of GiB > 0")
        roi = settings.get("roi")
        if not isinstance(roi, dict):
            raise ScoringError(f"settings roi={roi!r}: needs finite prices >= 0 and workload_samples > 0")
        problems = roi_problems(roi, "settings roi.")
        if problems:
            raise ScoringError("; ".join(problems))
        objective = settings.get("objective")
        if objective not in OBJECTIVES:
            raise ScoringError(f"settings objective={objective!r}: one of {', '.join(OBJECTIVES)}")
        return cls(global_batch=g, budgets=tuple(budgets), roi={k: roi[k] for k in ROI_KEYS}, objective=objective)
