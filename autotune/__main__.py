import sys

from autotune.cli import check_run_dir, main


def run() -> None:
    """``python -m autotune`` and the ``autotune`` console script."""
    check_run_dir(sys.argv[1:])
    main()


if __name__ == "__main__":
    run()
