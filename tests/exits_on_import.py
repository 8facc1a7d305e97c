"""A builder module whose import ends the process (tests/trial/test_forkserver.py)."""
raise SystemExit(3)
