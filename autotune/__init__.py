"""autotune: measure memory strategies for PyTorch training and pick the best one."""
from autotune.train.strategy import Strategy
from autotune.train.tuned import Tuned, load_tuned, tuned_from_dict
from autotune.train.workload import Workload, find_blocks

__all__ = ["Strategy", "Tuned", "Workload", "find_blocks", "load_tuned", "tuned_from_dict"]
