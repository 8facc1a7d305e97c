"""autotune: measure memory strategies for PyTorch training and pick the best one."""
# The names load on first use (PEP 562): ``python -m autotune.show`` and ``.report`` import this
# package on their way to their own modules, and need neither torch nor the training side.
_EXPORTS = {"Strategy": "autotune.train.strategy", "Tuned": "autotune.train.tuned",
            "load_tuned": "autotune.train.tuned", "tuned_from_dict": "autotune.train.tuned",
            "Workload": "autotune.train.workload", "find_blocks": "autotune.train.workload",
            "tune": "autotune.api", "TuneResult": "autotune.api", "ConfigError": "autotune.study.plan"}

__all__ = ["ConfigError", "Strategy", "TuneResult", "Tuned", "Workload", "find_blocks", "load_tuned", "tune",
           "tuned_from_dict"]


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
