"""A builder module whose import ends the process (tests/test_forkserver.py)."""
raise SystemExit(3)
