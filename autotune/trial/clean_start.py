"""The run-time check that a trial starts as a fresh process would, before it measures.

Isolation is structural (each trial is a process of its own: ``autotune/trial/forkserver.py``),
and this check makes it verifiable: a trial refuses to measure in a process that has run
a trial before, that still holds an earlier trial's model parameters, or whose CUDA
allocator already holds memory. A trial that fails it ends ``error`` with the reason, and
the driver stops the study: measuring on would only produce figures that cannot be trusted.
"""
from __future__ import annotations

import gc
import weakref

import torch

_trials_started = 0  # trials begun in this process; a forked child inherits its parent's 0
_earlier_parameters: weakref.WeakSet[torch.Tensor] = weakref.WeakSet()  # of models trials built here
_passed = False  # the check passed for the trial now running in this process


class DirtyStart(RuntimeError):
    """This process is not in the state a fresh process would be in: it must not measure."""


def track(model: torch.nn.Module) -> None:
    """Remember a trial's parameters (weakly), so a later start in this process sees them alive."""
    _earlier_parameters.update(model.parameters())


def check_clean_start(device_type: str, index: int = 0) -> None:
    """Raise ``DirtyStart`` unless this process may measure a trial now; call it after the
    device is ready (CUDA context created) and before the model is built. Cheap (no scan of
    the heap): a process that never ran a trial holds no trial's tensors, and on CUDA any
    live device tensor shows in the allocator's counters."""
    global _trials_started, _passed
    _passed = False
    problems: list[str] = []
    if _trials_started:
        problems.append(f"this process already ran {_trials_started} trial(s)")
    if len(_earlier_parameters):
        gc.collect()  # what only garbage cycles still hold does not count
        if len(_earlier_parameters):
            problems.append(f"{len(_earlier_parameters)} parameter(s) of an earlier trial's model are still alive")
    if device_type == "cuda":
        allocated, reserved = torch.cuda.memory_allocated(index), torch.cuda.memory_reserved(index)
        if allocated or reserved:
            problems.append(f"the CUDA allocator already holds {allocated} B allocated, {reserved} B reserved")
    _trials_started += 1
    if problems:
        raise DirtyStart("not a clean start, so this trial did not measure: " + "; ".join(problems)
                         + ". Run trials in fresh processes (trial.isolation=fork or fresh)")
    _passed = True


def passed() -> bool:
    """Whether the trial running in this process passed the check (also after it ran out
    of memory: its ``oom`` is then a clean process's and may prune others)."""
    return _passed


def trusted(record) -> bool:
    """A recorded trial that may prune others (an out-of-memory error, a peak over a
    budget): only a measurement from a process that passed the check."""
    return str(record.get("clean_start")).strip().lower() == "true"
