"""Public path of the training-side memory monitor (``autotune/train/monitor.py``).

    from autotune.monitor import track_memory, LeakCheck
"""
from autotune.train.monitor import LeakCheck, MemoryGrowthWarning, MemoryStats, track_memory

__all__ = ["LeakCheck", "MemoryGrowthWarning", "MemoryStats", "track_memory"]
