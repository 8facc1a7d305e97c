"""The run record: what a run says about itself beside its trials.

A run writes it (``run.py``), stores it in the study (``review.record_settings``, the
settings' ``meta``) and hands it to the report (``page.write_report``); ``report`` and
``show`` read it back from a study or a run directory (``review.py``). One typed record, so
that the report reads fields, not a dict padded with ``"?"``.

Read back, a record is tolerant: a study written by an older autotune, or edited, may lack
fields (they take their defaults) or hold values of another type. Those are shown as they
are rather than refused: the record only labels the report, the verdict comes from the trials
and the scoring settings, which are checked (``scoring/settings.py``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from autotune.scoring.settings import Scoring

Shown = Any  # a value the report prints as it is (a study may hold any type there)


@dataclass(frozen=True)
class RunRecord:
    # what was tuned and how (the scoring settings are the verdict's: Scoring)
    model: Shown = "?"
    device_name: Shown = "?"
    global_batch: Shown = None
    seq_len: Shown = "?"
    budget_gib: Shown = None
    budgets: list[Any] = field(default_factory=list)
    memory_cap_gib: Shown = None
    objective: str = "roi"
    command: str = ""
    reductions: Shown = ()  # what a CPU run shrank in the model
    # where it ran (train/device.py:environment)
    torch: Shown = None
    torch_version: Shown = None
    cuda_version: Shown = None
    device_memory_gib: Shown = None
    driver: Shown = None
    transformers_version: Shown = None
    python: Shown = None
    # how it went: the search's end, an escalation, the verdict's words
    search_end: Shown = None
    escalated: Shown = None
    why: Shown = None
    limits: Shown = None
    effort: Shown = None
    change: Shown = None
    left_out: Shown = None
    profile: Shown = None  # the best's profile trace, relative to the run directory

    def to_dict(self) -> dict[str, Any]:
        """The JSON the study stores (its settings' ``meta``)."""
        out = asdict(self)
        out["reductions"] = list(out["reductions"] or [])
        return out

    @classmethod
    def from_dict(cls, data: Any) -> RunRecord:
        """A record read back: known fields taken, unknown ones ignored, a non-mapping empty."""
        if not isinstance(data, dict):
            return cls()
        known = {f.name for f in fields(cls)}
        record = cls(**{k: v for k, v in data.items() if k in known})
        return record if isinstance(record.budgets, list) else replace(record, budgets=[])

    def scored_by(self, scoring: Scoring) -> RunRecord:
        """This record under the settings the trials are scored with (which a reader checked)."""
        return replace(self, global_batch=scoring.global_batch, budgets=list(scoring.budgets),
                       budget_gib=scoring.primary_budget, objective=scoring.objective)

    def but(self, **changes: Any) -> RunRecord:
        return replace(self, **changes)
