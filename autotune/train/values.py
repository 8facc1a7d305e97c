"""The value checks shared by the command line (``study/plan.py``) and ``load_tuned``
(``train/tuned.py``): one function per kind of value, so that a file read back is held to
what the command line accepts, and the exporters never pass on what a trainer would reject.

Each check returns why a value is refused (with an example of a good one), or None.
"""
from __future__ import annotations

import math
from typing import Any

# A trial runs whole optimizer steps of `accumulation` micro-steps: past this many, one
# trial would run for hours (and a trainer's step would too).
MAX_ACCUMULATION = 4096


def is_true(value: Any) -> bool:
    """A yes/no cell read back from a table: numpy booleans, "True" strings; NaN is no."""
    return str(value).strip().lower() == "true"


def is_number(value: Any) -> bool:
    """An int or float that is finite (bool, NaN and infinity are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_positive(value: Any) -> bool:
    """A finite number > 0."""
    return is_number(value) and value > 0


def gib_problem(value: Any, key: str = "budget_gib", example: str = "24") -> str | None:
    """A memory size in GiB: a finite number > 0."""
    if not is_number(value):
        return f"not a finite number of GiB; e.g. {key}={example}"
    if value <= 0:
        return f"must be > 0; e.g. {key}={example}"
    return None


def lr_problem(value: Any, key: str = "trial.lr") -> str | None:
    if not is_positive(value):
        return f"a learning rate must be a finite number > 0; e.g. {key}=1e-4"
    return None


def count_problem(value: Any, key: str, maximum: int | None = None) -> str | None:
    """A whole number >= 1 (4.7 is not 4, "4" is not a number, true is not 1), at most ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"must be a whole number >= 1; e.g. {key}=4"
    if maximum is not None and value > maximum:
        return f"at most {maximum}; e.g. {key}={min(maximum, 64)}"
    return None
