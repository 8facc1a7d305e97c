"""BERT with a sequence-classification head (``model=bert``, ``model=bert-large``)."""
from __future__ import annotations

import torch

# Imported here, not inside the builder, so the trial's memory baseline (taken after the
# builder's module is imported) does not count the library's own import.
from transformers import BertConfig, BertForSequenceClassification

from autotune.models import check_seq_len, hf_loss, random_tokens
from autotune.train.workload import Workload, find_blocks


def build(device: str, seq_len: int, **config) -> Workload:
    """BERT with a sequence-classification head (two labels) on random token ids."""
    cfg = BertConfig(**config)
    check_seq_len(seq_len, cfg.max_position_embeddings, "max_position_embeddings")
    with torch.device(device):
        model = BertForSequenceClassification(cfg)
    vocab, labels = cfg.vocab_size, int(cfg.num_labels or 2)

    def make_batch(n: int, dev) -> dict:
        ids, g = random_tokens(n, seq_len, vocab)
        y = torch.randint(0, labels, (n,), generator=g)
        return {"input_ids": ids.to(dev), "labels": y.to(dev)}

    return Workload(model=model, make_batch=make_batch, loss=hf_loss, blocks=find_blocks(model))
