"""How many torch threads a CPU trial runs (``trial.cpu_threads``).

torch sizes its CPU thread pool to the cores a process may use. Beside other busy processes
those threads wait on each other at every parallel region: measured on 2 cores beside 2
busy processes (bench/load.py), BERT's steps ran 3-25x slower with torch's 2 threads and
1.6-2.0x slower with one, and the whole default run took 391 s against 101-117 s (quiet:
51-62 s). A training run beside that load would suffer the same, so the trials measure what
it should run: with ``auto``, the study measures what other processes use of its cores while
it starts (the driver and its fork server left out) and, where they keep one or more cores
busy, CPU trials run with the cores they leave free. A quiet machine keeps torch's default.
"""
from __future__ import annotations

import time
from collections.abc import Iterable

from autotune.system.linux import cpu_busy_seconds, pid_cpu_seconds, process_cpu_seconds, usable_cpus

MIN_WINDOW_S = 0.5  # the shortest start-up window the decision rests on
BUSY_CORES = 0.5  # others' use that rounds to a core: from here on a thread fewer


class OtherCpuUse:
    """Other processes' CPU use on this process's cores from construction to ``cores()``,
    less this process's own and that of ``pids`` (its children: the fork server)."""

    def __init__(self, pids: Iterable[int] = ()):
        self.cpus = usable_cpus()
        self.pids = list(pids)
        self.t0 = time.monotonic()
        self.busy0 = cpu_busy_seconds(self.cpus)
        self.own0 = self._own()

    def _own(self) -> float:
        return process_cpu_seconds() + sum(pid_cpu_seconds(p) or 0.0 for p in self.pids)

    def cores(self) -> float | None:
        """Cores' worth of CPU time others took, or None where /proc/stat is unreadable."""
        time.sleep(max(0.0, MIN_WINDOW_S - (time.monotonic() - self.t0)))
        busy = cpu_busy_seconds(self.cpus)
        wall = time.monotonic() - self.t0
        if busy is None or self.busy0 is None or wall <= 0:
            return None
        return max(0.0, (busy - self.busy0 - (self._own() - self.own0)) / wall)


def free_core_threads(others: float | None, cores: int) -> int | None:
    """Threads for CPU trials where others keep a core or more busy, else None (torch's default)."""
    if others is None or others < BUSY_CORES:
        return None
    return max(1, cores - round(others))
