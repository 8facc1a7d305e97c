"""The first stop of a run is never lost (tune._StopOnce), wherever the signal lands."""
import signal
import time

import pytest

from autotune.run import _StopOnce


class _CollectedAsTheSignalComes:
    """A finalizer that is running when the stop arrives (as a database connection collected
    by the garbage collector): Python swallows an exception raised there."""

    def __del__(self):
        signal.raise_signal(signal.SIGINT)
        total = 0
        for i in range(1000):  # the handler runs between these lines, inside __del__
            total += i


def test_a_stop_that_lands_in_a_finalizer_still_stops_the_run(capsys):
    with pytest.raises(KeyboardInterrupt):
        with _StopOnce() as stop:
            _CollectedAsTheSignalComes()  # collected at once: the stop lands in __del__
            deadline = time.monotonic() + 5  # the run goes on; the stop must reach it here
            while time.monotonic() < deadline:
                pass
            raise AssertionError("the stop was swallowed by the finalizer")
    assert stop.count == 1  # delivered once more, then raised once: not a second stop
    assert "Traceback" not in capsys.readouterr().err  # and not printed as an ignored exception


def test_later_stops_are_held():
    with _StopOnce() as stop:
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
            for _ in range(1000):
                pass
        signal.raise_signal(signal.SIGINT)  # the second: said, not raised
        for _ in range(1000):
            pass
    assert stop.count == 2
