"""Public path of the model contract (``autotune/train/workload.py``).

    from autotune.workload import Workload, find_blocks
"""
from autotune.train.workload import Workload, find_blocks

__all__ = ["Workload", "find_blocks"]
