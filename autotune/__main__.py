import signal
import sys


def _stopped_early(signum, frame):
    # Ctrl-C or SIGTERM while Python imports autotune and Hydra composes the config (seconds),
    # or once the run has returned: no trial is running. tune() handles the stops in between.
    print("interrupted while autotune was starting or ending: no trial was running", file=sys.stderr)
    raise SystemExit(130)


# First, before the imports that take seconds: a stop then ends without a traceback.
signal.signal(signal.SIGINT, _stopped_early)
signal.signal(signal.SIGTERM, _stopped_early)

from autotune.system.quiet import quiet_third_party  # noqa: E402

quiet_third_party()  # before the imports that bring torchao (system/quiet.py)

from autotune.cli import check_keys, check_run_dir, main  # noqa: E402


def run() -> None:
    """``python -m autotune`` and the ``autotune`` console script."""
    check_keys(sys.argv[1:])
    check_run_dir(sys.argv[1:])
    main()


if __name__ == "__main__":
    run()
