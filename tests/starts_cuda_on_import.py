"""A builder module whose import, in the fork server, leaves torch's CUDA state initialised,
as transformers' import does on a GPU machine with torchao installed
(tests/trial/test_forkserver.py). A CPU machine has no CUDA to start, so the flag is set."""
import sys

import torch

from tests.workloads import mlp as build  # noqa: F401

if sys.argv[0].endswith("forkserver.py"):  # the server (python -m autotune.trial.forkserver)
    torch.cuda._initialized = True
