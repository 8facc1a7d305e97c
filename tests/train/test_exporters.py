"""The tuned config in the trainers people use: Hugging Face Trainer (a real short run on a
tiny BERT), Lightning (its kwargs' values; Lightning is not a dependency), and the warning
for every setting a framework cannot express."""
import warnings

import pytest
import torch

from autotune import load_tuned
from autotune.train.exporters import NotExpressible, _hf_checkpointing_key
from tests.train.test_example import TINY, best_yaml


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq_len: int = 16):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, TINY["vocab_size"], (n, seq_len), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def hf_train(tuned, tmp_path, steps=3, model_hook=None):
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**TINY))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kwargs = tuned.to_hf_training_args()
    if model_hook:
        model_hook(model)
    args = TrainingArguments(output_dir=str(tmp_path / "hf"), max_steps=steps, use_cpu=True, report_to=[],
                             save_strategy="no", logging_steps=1, learning_rate=1e-3, **kwargs)
    trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(tuned.global_batch * steps))
    result = trainer.train()
    return kwargs, [w for w in caught if issubclass(w.category, NotExpressible)], result, trainer


def test_hf_training_args_drive_a_real_trainer_run_with_full_checkpointing(tmp_path):
    tuned = load_tuned(best_yaml(tmp_path, checkpointing="full", precision="fp32", micro_batch=2, accumulation=4))
    forwards = []
    kwargs, warned, result, trainer = hf_train(
        tuned, tmp_path, model_hook=lambda m: m.bert.encoder.layer[0].attention.register_forward_hook(
            lambda *_: forwards.append(1)))
    ckpt = _hf_checkpointing_key()  # gradient_checkpointing, or its new name where transformers renamed it
    assert kwargs == {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "bf16": False,
                      "fp16": False, ckpt: True, f"{ckpt}_kwargs": {"use_reentrant": False}, "optim": "adamw_torch"}
    assert warned == []  # everything in this config is a TrainingArguments setting
    assert result.global_step == 3 and torch.isfinite(torch.tensor(result.training_loss))
    assert trainer.args.train_batch_size * trainer.args.gradient_accumulation_steps == tuned.global_batch
    # Checkpointed: block 0 runs its forward again in backward, twice per micro-step.
    assert len(forwards) == 2 * 3 * 4


def test_selective_checkpointing_and_offload_are_warned_about_and_apply_sets_them_up(tmp_path):
    tuned = load_tuned(best_yaml(tmp_path, checkpointing="0.5", precision="fp32", micro_batch=4, accumulation=2,
                                 offload=True))
    forwards = {0: 0, 1: 0}

    def apply(model):
        tuned.apply(model)  # what the warning says to do
        for i in (0, 1):
            model.bert.encoder.layer[i].attention.register_forward_hook(
                lambda *_, i=i: forwards.__setitem__(i, forwards[i] + 1))

    kwargs, warned, result, _ = hf_train(tuned, tmp_path, steps=2, model_hook=apply)
    ckpt = _hf_checkpointing_key()
    assert kwargs[ckpt] is False and f"{ckpt}_kwargs" not in kwargs
    assert len(warned) == 1
    text = str(warned[0].message)
    assert "checkpointing=0.5" in text and "offload=true" in text and "tuned.apply(model)" in text
    assert result.global_step == 2
    micro_steps = 2 * 2
    assert forwards == {0: 2 * micro_steps, 1: micro_steps}  # only the first half of the blocks recomputes


@pytest.mark.parametrize("precision, hf, lightning", [("bf16", (True, False), "bf16-mixed"),
                                                      ("fp16", (False, True), "16-mixed"),
                                                      ("fp32", (False, False), "32-true")])
def test_precision_maps_onto_each_framework(tmp_path, precision, hf, lightning):
    tuned = load_tuned(best_yaml(tmp_path, checkpointing="none", precision=precision, micro_batch=8, accumulation=2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: no checkpointing, offload or allocator
        args = tuned.to_hf_training_args()
        assert (args["bf16"], args["fp16"]) == hf
        assert tuned.to_lightning() == {"precision": lightning, "accumulate_grad_batches": 2}


def test_lightning_names_checkpointing_and_the_allocator_it_has_no_setting_for(tmp_path):
    tuned = load_tuned(best_yaml(tmp_path, checkpointing="full", precision="bf16", micro_batch=2, accumulation=8,
                                 allocator="expandable"))
    with pytest.warns(NotExpressible, match=r"checkpointing=full .*allocator=expandable"):
        kwargs = tuned.to_lightning(world_size=2)
    assert kwargs == {"precision": "bf16-mixed", "accumulate_grad_batches": 4}  # 2 x 4 x 2 devices = 16


def test_a_world_size_that_breaks_the_global_batch_is_refused(tmp_path):
    tuned = load_tuned(best_yaml(tmp_path, checkpointing="none", precision="fp32", micro_batch=2, accumulation=3))
    with pytest.raises(ValueError, match=r"world_size=2: the tuned global batch 6 is not a multiple"):
        tuned.to_hf_training_args(world_size=2)
    assert tuned.to_hf_training_args(world_size=3)["gradient_accumulation_steps"] == 1


@pytest.mark.parametrize("strategy, optimizer, optim", [
    ({"optimizer_state": "8bit"}, None, "adamw_torch_8bit"),
    ({"optimizer_state": "4bit"}, None, "adamw_torch_4bit"),
    ({"optimizer_impl": "fused"}, None, "adamw_torch_fused"),
    ({}, {"target": "torch.optim.SGD", "kwargs": {"momentum": 0.0}, "lr": 0.01}, "sgd"),
])
def test_the_tuned_optimizer_maps_onto_hugging_face_optim(tmp_path, strategy, optimizer, optim):
    path = best_yaml(tmp_path, checkpointing="none", precision="bf16", **strategy)
    if optimizer:
        import yaml

        data = yaml.safe_load(path.read_text())
        path.write_text(yaml.safe_dump({**data, "optimizer": optimizer}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotExpressible)  # everything here is a TrainingArguments setting
        kwargs = load_tuned(path).to_hf_training_args()
    assert kwargs["optim"] == optim
    if optimizer:
        assert kwargs["learning_rate"] == 0.01


def test_what_hugging_face_and_lightning_cannot_build_of_the_optimizer_is_warned_about(tmp_path):
    tuned = load_tuned(best_yaml(tmp_path, checkpointing="none", precision="bf16", weights="bf16",
                                 optimizer_state="8bit"))
    with pytest.warns(NotExpressible, match=r"weights=bf16"):
        kwargs = tuned.to_hf_training_args()
    assert "optim" not in kwargs  # adamw_torch_8bit would train bf16 weights without stochastic rounding
    with pytest.warns(NotExpressible, match=r"configure_optimizers must return tuned.optimizer"):
        tuned.to_lightning()
    optimizer = tuned.optimizer([torch.nn.Parameter(torch.zeros(512, dtype=torch.bfloat16))])
    assert type(optimizer).__name__ == "AdamW8bit" and optimizer.bf16_stochastic_round
