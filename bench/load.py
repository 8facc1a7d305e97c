"""Busy processes for the whole of a run: the loaded machine of issue 29's acceptance.

    python bench/load.py 2 -- python -m autotune model=bert   # 2 busy processes beside the command

Each busy process spins in pure Python (one core's worth of demand each, no memory); they
start before the command and are killed when it ends, so the whole run competes with them.
Prints the command's exit code and wall time, and the load average before and after.
"""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time


def spin() -> None:
    x = 0
    while True:
        x = (x + 1) % 1_000_003


class Busy:
    """``with Busy(n):`` n spinning processes for the block's duration."""

    def __init__(self, n: int):
        self.n, self.procs = n, []

    def __enter__(self):
        self.procs = [multiprocessing.Process(target=spin, daemon=True) for _ in range(self.n)]
        for p in self.procs:
            p.start()
        time.sleep(1.0)  # let the scheduler see them before the command starts
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.join()


def main(argv) -> int:
    if "--" not in argv or not argv[0].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    n, cmd = int(argv[0]), argv[argv.index("--") + 1:]
    before = os.getloadavg()[0]
    with Busy(n):
        start = time.perf_counter()
        rc = subprocess.call(cmd)
        elapsed = time.perf_counter() - start
        after = os.getloadavg()[0]
    print(f"exit {rc}; {elapsed:.1f} s beside {n} busy process(es); load average {before:.2f} before, {after:.2f} at "
          "the end", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
