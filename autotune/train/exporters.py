"""The tuned strategy as the settings of the trainers people use.

    TrainingArguments(output_dir="out", **tuned.to_hf_training_args())     # Hugging Face
    Trainer(**tuned.to_lightning())                                        # Lightning

Each exporter returns plain keyword arguments (no import of the framework) and warns, by
name, about every part of the strategy the framework's settings cannot express, with the
call that applies it instead: ``tuned.apply(model)`` sets up selective checkpointing,
activation offload and the allocator on the model object itself, which any trainer then
runs as it is.
"""
from __future__ import annotations

import warnings
from typing import Any

from autotune.train.dimensions import DIMENSIONS, checkpoint_fraction, checkpoint_label


class NotExpressible(UserWarning):
    """A tuned setting the target framework has no setting for."""


def _per_device(tuned: Any, world_size: int) -> int:
    """Accumulation per device that keeps the tuned global batch with ``world_size`` devices."""
    if world_size < 1:
        raise ValueError(f"world_size={world_size}: must be >= 1 (the number of training processes)")
    per_step = tuned.micro_batch * world_size
    if tuned.global_batch % per_step:
        raise ValueError(f"world_size={world_size}: the tuned global batch {tuned.global_batch} is not a multiple of "
                         f"micro_batch {tuned.micro_batch} x {world_size} devices; use a world_size that divides "
                         f"{tuned.global_batch // tuned.micro_batch}")
    return int(tuned.global_batch // per_step)


def _warn(framework: str, missing: list[str]) -> None:
    if missing:
        warnings.warn(f"{framework} settings cannot express: {'; '.join(missing)}. Call tuned.apply(model) on the "
                      "model before handing it to the trainer: it sets these up on the model itself.",
                      NotExpressible, stacklevel=3)


def _model_side(tuned: Any, full_checkpointing_expressible: bool) -> list[str]:
    """The parts of the strategy that only ``tuned.apply(model)`` can set up."""
    missing = []
    fraction = checkpoint_fraction(tuned.checkpointing)
    if 0 < fraction < 1 or (fraction == 1 and not full_checkpointing_expressible):
        missing.append(f"checkpointing={checkpoint_label(tuned.checkpointing)} (activation checkpointing of "
                       f"{'the first ' + format(fraction, '.0%') + ' of' if fraction < 1 else 'all'} the blocks)")
    return missing + _not_expressible(tuned.strategy, optimizer_side=False)


def _not_expressible(strategy: Any, optimizer_side: bool) -> list[str]:
    """The declared notes (train/dimensions.py) of the dimensions away from their defaults that
    no trainer setting expresses, applied by ``tuned.apply(model)`` or by ``tuned.optimizer``."""
    return [d.not_expressible.format(name=d.name, value=d.spell(getattr(strategy, d.name)))
            for d in DIMENSIONS.values() if d.not_expressible and d.optimizer_side == optimizer_side
            and getattr(strategy, d.name) != d.default]


HF_OPTIM = {("AdamW", "default", "default"): "adamw_torch", ("AdamW", "default", "fused"): "adamw_torch_fused",
            ("AdamW", "8bit", "default"): "adamw_torch_8bit", ("AdamW", "4bit", "default"): "adamw_torch_4bit",
            ("SGD", "default", "default"): "sgd"}  # torch.optim / torchao optimizers Hugging Face names


def _optimizer_side(tuned: Any) -> list[str]:
    """What of the tuned optimizer only ``tuned.optimizer(params)`` builds."""
    return _not_expressible(tuned.strategy, optimizer_side=True)


def _hf_optimizer(tuned: Any) -> tuple[Any, ...]:
    """(TrainingArguments keys for the tuned optimizer, what they cannot express)."""
    s, spec = tuned.strategy, tuned.optimizer_spec
    key = (spec.name if spec.target.startswith("torch.optim") else spec.target, s.optimizer_state, s.optimizer_impl)
    args, missing = {}, _optimizer_side(tuned)
    name = HF_OPTIM.get(key)
    if name is None:
        missing.append(f"the optimizer {spec.target} ({s.optimizer_state} state, {s.optimizer_impl} "
                       "implementation): pass Trainer(optimizers=(tuned.optimizer(model.parameters()), None))")
    elif not missing:
        args["optim"] = name
    lr = spec.kwargs.get("lr", tuned.lr)
    if lr is not None:
        args["learning_rate"] = lr
    if "weight_decay" in spec.kwargs:
        args["weight_decay"] = spec.kwargs["weight_decay"]
    return args, missing


def hf_training_args(tuned: Any, world_size: int = 1) -> dict[str, Any]:
    """``transformers.TrainingArguments`` keyword arguments for the tuned strategy.

    Full checkpointing maps onto ``gradient_checkpointing`` (``activation_checkpointing`` in
    the transformers releases that renamed it; non-reentrant, as the trials ran it); a
    fraction of the blocks, offload and the allocator do not, and are warned
    about. ``world_size``: data-parallel processes; accumulation is divided among them."""
    ckpt = _hf_checkpointing_key()
    args = {"per_device_train_batch_size": tuned.micro_batch,
            "gradient_accumulation_steps": _per_device(tuned, world_size),
            "bf16": tuned.precision == "bf16", "fp16": tuned.precision == "fp16",
            ckpt: checkpoint_fraction(tuned.checkpointing) == 1.0}
    if args[ckpt]:
        args[f"{ckpt}_kwargs"] = {"use_reentrant": False}
    optim_args, optim_missing = _hf_optimizer(tuned)
    args.update(optim_args)
    _warn("Hugging Face TrainingArguments", _model_side(tuned, full_checkpointing_expressible=True) + optim_missing)
    return args


def _hf_checkpointing_key() -> str:
    """``activation_checkpointing`` where the installed transformers has it (it renamed
    ``gradient_checkpointing``, which still works there with a deprecation warning)."""
    try:
        import dataclasses

        from transformers import TrainingArguments
    except ImportError:
        return "gradient_checkpointing"
    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


LIGHTNING_PRECISION = {"fp32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}


def lightning_trainer_kwargs(tuned: Any, world_size: int = 1) -> dict[str, Any]:
    """``lightning.Trainer`` keyword arguments for the tuned strategy: ``precision`` and
    ``accumulate_grad_batches``. ``configure_optimizers`` returns ``tuned.optimizer(self.parameters())``
    (warned about when the tuned model state is not the plain optimizer's). The DataLoader's
    ``batch_size`` is ``tuned.micro_batch``.
    Lightning has no checkpointing setting: any checkpointing, offload and the allocator
    are warned about (``tuned.apply(model)`` in ``LightningModule.configure_model``)."""
    kwargs = {"precision": LIGHTNING_PRECISION[tuned.precision],
              "accumulate_grad_batches": _per_device(tuned, world_size)}
    s = tuned.strategy
    state = [f"{d.name}={d.spell(getattr(s, d.name))}" for d in DIMENSIONS.values() if d.optimizer_side]
    optimizer = ([f"the tuned optimizer ({', '.join(state)}): "
                  "LightningModule.configure_optimizers must return tuned.optimizer(self.parameters())"]
                 if any(getattr(s, d.name) != d.default for d in DIMENSIONS.values() if d.optimizer_side) else [])
    _warn("Lightning Trainer", _model_side(tuned, full_checkpointing_expressible=False) + optimizer)
    return kwargs
