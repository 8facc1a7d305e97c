import sys

from autotune.cli import check_run_dir, main

check_run_dir(sys.argv[1:])
main()
