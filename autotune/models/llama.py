"""A Llama-architecture causal language model (``model=llama``; size set in its YAML)."""
from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from autotune.models import causal_lm, check_seq_len
from autotune.train.workload import Workload


def build(device: str, seq_len: int, **config) -> Workload:
    cfg = LlamaConfig(**config)
    check_seq_len(seq_len, cfg.max_position_embeddings, "max_position_embeddings")
    with torch.device(device):
        model = LlamaForCausalLM(cfg)
    return causal_lm(model, cfg.vocab_size, seq_len)
