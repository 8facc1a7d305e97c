"""The optimizer a trial trains with: the user's, then the tuned model-state dimensions.

The user's optimizer is a factory ``params -> torch.optim.Optimizer``: the ``optimizer``
config group (``_target_`` plus keyword arguments, as Hydra's ``_partial_`` instantiation
makes it; ``OptimizerSpec``) or ``Workload(optimizer=...)``, which wins when both are given.
The strategy's model-state dimensions then change how that optimizer holds its state:

* ``optimizer_state``: ``default`` | ``8bit`` | ``4bit``. AdamW's two moments held
  block-quantised (torchao's ``AdamW8bit`` / ``AdamW4bit``): 2 or 1 byte a parameter
  instead of 8. torchao is PyTorch's own low-bit library: its optimizers are plain
  ``torch.optim.Optimizer`` subclasses whose step ``torch.compile`` builds for whatever
  device the parameters are on, so the same code runs in a CPU trial and on the GPU
  (bitsandbytes' are CUDA kernels only).
* ``optimizer_offload``: the state and the step on the host, in pinned memory (torchao's
  ``CPUOffloadOptimizer``: gradients copied to the host as backward produces them, the
  step on the CPU, the new weights copied back). CUDA only.
* ``weights``: ``fp32`` | ``bf16``. The parameters (and so the gradients) in bf16, with
  AdamW rounding each update stochastically (torchao, ``bf16_stochastic_round``): small
  updates survive in expectation without an fp32 master copy, 2 + 2 bytes a parameter
  instead of 4 + 4.
* ``optimizer_impl``: ``default`` | ``forloop`` | ``foreach`` | ``fused``: torch.optim's
  implementation switch (``foreach`` holds temporary copies of whole parameter lists;
  ``fused`` is one kernel). Only for optimizers that take the switch.

Low-bit state and bf16 weights with stochastic rounding need AdamW: other optimizers get
the dimension's default only (``unsupported``, recorded as the trial's skip reason).
Not built: FSDP2's ``CPUOffloadPolicy`` as a second host-offload route (it needs a process
group even on one GPU); torchao's offload is what is measured.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.train.dimensions import DIMENSIONS, MODEL_STATE, defaults, missing, numerics_of
from autotune.train.target import resolve

if TYPE_CHECKING:
    import torch

# torch is imported where it is used: scoring and the readers (show, report) import this module
# for its names alone, and a reader starts 1.4 s sooner without torch.

# The model-state dimensions and their defaults (the strategy as it was before they existed).
MODEL_STATE_DEFAULTS = defaults(MODEL_STATE)


def state_value(key: str, value: Any) -> Any:
    """A model-state dimension's value, its default where a trial has none (one of an
    activation-only space, or measured before escalation)."""
    return MODEL_STATE_DEFAULTS[key] if missing(value) else value


OPTIMIZER_STATES = DIMENSIONS["optimizer_state"].values
WEIGHTS = DIMENSIONS["weights"].values
_IMPL_KWARGS = {"forloop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}

OptimizerFactory = Callable[[Any], "torch.optim.Optimizer"]


@dataclass(frozen=True)
class OptimizerSpec:
    """The user's optimizer as the config names it: a class or function and its keyword
    arguments (the learning rate comes from ``trial.lr`` unless ``kwargs`` sets one)."""

    target: str = "torch.optim.AdamW"
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.target.replace(":", ".").rsplit(".", 1)[-1]


def _is_adamw(cls: type) -> bool:
    import torch

    return cls is torch.optim.AdamW


def _accepts(cls: type, name: str) -> bool:
    try:
        return name in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


def combination_problem(strategy: Any) -> str | None:
    """Why these model-state values do not go together (whatever the optimizer), or None:
    such combinations are not enumerated, and a sampler's pick of one is recorded skipped."""
    state, weights, impl = strategy.optimizer_state, strategy.weights, strategy.optimizer_impl
    if weights == "bf16" and strategy.precision != "bf16":
        return (f"weights=bf16 computes in bf16 whatever autocast says; it pairs with precision=bf16, not "
                f"{strategy.precision}")
    if impl != "default" and (state != "default" or weights != "fp32" or strategy.optimizer_offload):
        return f"optimizer_impl={impl} is a torch.optim switch; the torchao optimizer this strategy uses has none"
    if strategy.optimizer_offload and (state != "default" or weights != "fp32"):
        return ("optimizer_offload keeps the state on the host already; low-bit state or bf16 weights there would "
                "only save host memory")
    if strategy.optimizer_offload and strategy.precision == "fp16":
        return "optimizer_offload steps on the host, where GradScaler cannot unscale the gradients; use bf16"
    return None


def unsupported(strategy: Any, spec: OptimizerSpec, custom_factory: bool = False) -> str | None:
    """Why ``strategy``'s model-state dimensions cannot apply to this optimizer, or None."""
    if strategy.model_state == tuple(MODEL_STATE_DEFAULTS.values()):
        return None
    state, weights, impl = strategy.optimizer_state, strategy.weights, strategy.optimizer_impl
    problem = combination_problem(strategy)
    if problem:
        return problem
    if custom_factory:
        return ("the workload builds its own optimizer (Workload.optimizer), so autotune cannot change how it "
                "holds its state; only the default model-state settings apply")
    try:
        cls = resolve(spec.target)
    except (ImportError, AttributeError) as e:
        return f"optimizer._target_={spec.target} cannot be imported ({e})"
    adamw = _is_adamw(cls)
    if (state != "default" or weights != "fp32") and not adamw:
        what = f"optimizer_state={state}" if state != "default" else f"weights={weights}"
        return (f"{what} needs AdamW (torchao's low-bit and stochastic-rounding AdamW replace it); the optimizer is "
                f"{spec.name}")
    if impl != "default" and not _accepts(cls, "fused" if impl == "fused" else "foreach"):
        return f"optimizer_impl={impl}: {spec.name} has no {'fused' if impl == 'fused' else 'foreach'} switch"
    return None


def changes_numerics(strategy: Any) -> list[str]:
    """What in ``strategy`` makes training compute other numbers than fp32 with the plain
    optimizer (each one a label for trials.csv, best.yaml and the report)."""
    return numerics_of(strategy.as_dict())


def build(params: Any, strategy: Any, spec: OptimizerSpec, lr: float, custom: OptimizerFactory | None = None) -> Any:
    """The optimizer ``strategy`` trains with. ``custom``: the workload's own factory."""
    params = list(params)
    if custom is not None:
        return custom(params)
    cls = resolve(spec.target)
    kwargs = {"lr": lr, **spec.kwargs}
    if strategy.optimizer_offload:
        from torchao.optim import CPUOffloadOptimizer

        return CPUOffloadOptimizer(params, cls, **kwargs)
    if strategy.optimizer_state != "default" or strategy.weights == "bf16":
        import torchao.optim as tao

        low_bit = {"default": tao._AdamW, "8bit": tao.AdamW8bit, "4bit": tao.AdamW4bit}[strategy.optimizer_state]
        return low_bit(params, bf16_stochastic_round=strategy.weights == "bf16", **kwargs)
    kwargs.update(_IMPL_KWARGS.get(strategy.optimizer_impl, {}))
    return cls(params, **kwargs)


def needs_torchao(strategy: Any) -> bool:
    return bool(strategy.optimizer_offload or strategy.optimizer_state != "default" or strategy.weights == "bf16")


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor holds: a wrapper subclass (torchao's quantised state) reports its
    logical dtype and shape, so its inner tensors are counted instead."""
    import torch

    flatten = getattr(type(t), "__tensor_flatten__", None)
    if flatten is not None and type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
        names, _ = flatten(t)
        return sum(tensor_bytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


def state_tensors(optimizer: Any) -> list[torch.Tensor]:
    """The optimizer state's tensors on the device the model trains on: the host-side
    copies of an offloaded optimizer are not device memory."""
    import torch

    inner = getattr(optimizer, "d_opt", None)  # CPUOffloadOptimizer: small tensors stay on the device
    optimizers = [inner] if inner is not None else ([] if hasattr(optimizer, "optim_dict") else [optimizer])
    return [v for opt in optimizers for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
