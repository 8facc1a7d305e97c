"""Built-in workloads: Hugging Face models built from a config, with random weights.

Nothing is downloaded: each builder makes the architecture from its config class. The
model is built directly on the trial's device, which skips a CPU build and a copy.
"""
from __future__ import annotations

import torch
# Imported here, not inside the builder, so the trial's memory baseline (taken after the
# builder's module is imported) does not count the library's own import.
from transformers import BertConfig, BertForSequenceClassification

from autotune.workload import Workload, find_blocks


def _hf_loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    return model(**batch).loss


def bert(device: str, seq_len: int, **config) -> Workload:
    """BERT with a sequence-classification head (two labels) on random token ids."""
    cfg = BertConfig(**config)
    if seq_len > cfg.max_position_embeddings:
        raise ValueError(f"seq_len={seq_len} exceeds the model's max_position_embeddings="
                         f"{cfg.max_position_embeddings}; lower seq_len")
    with torch.device(device):
        model = BertForSequenceClassification(cfg)
    vocab, labels = cfg.vocab_size, cfg.num_labels

    def make_batch(n: int, dev) -> dict:
        g = torch.Generator(device="cpu").manual_seed(n)
        ids = torch.randint(0, vocab, (n, seq_len), generator=g)
        y = torch.randint(0, labels, (n,), generator=g)
        return {"input_ids": ids.to(dev), "labels": y.to(dev)}

    return Workload(model=model, make_batch=make_batch, loss=_hf_loss, blocks=find_blocks(model))
