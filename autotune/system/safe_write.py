"""Outputs that are whole or absent: a file is written beside its place and renamed into it,
and a stop signal that arrives while the outputs are written waits until they are done.

A rename within one directory is atomic on POSIX file systems, so a reader (or a run cut
short) sees the old file or the new one, never half of one. Ctrl-C or SIGTERM during the
writing would otherwise leave a truncated trials.csv or a 0-byte pareto.png; deferring them
for the seconds the writing takes keeps the README's promise of outputs and a note.
"""
from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PARTIAL_PREFIX = ".partial-"


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (same suffix, so writers that infer the format
    from it work); on success it replaces ``path``, on failure it is removed."""
    tmp = path.with_name(PARTIAL_PREFIX + path.name)
    tmp.unlink(missing_ok=True)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text)


@contextmanager
def signals_deferred(signals=(signal.SIGINT, signal.SIGTERM)) -> Iterator[list[int]]:
    """Hold back ``signals`` inside the block; yields the list of those that arrived, and
    restores the previous handlers on the way out (the caller decides what a held-back stop
    means: here, a note and exit code 130 after the outputs are written)."""
    arrived: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: arrived.append(signum)) for s in signals}
    try:
        yield arrived
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
