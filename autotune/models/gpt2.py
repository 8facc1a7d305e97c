"""GPT-2 as a causal language model (``model=gpt2``): next-token loss on random tokens."""
from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from autotune.models import causal_lm, check_seq_len
from autotune.train.workload import Workload


def build(device: str, seq_len: int, **config) -> Workload:
    cfg = GPT2Config(**config)
    check_seq_len(seq_len, cfg.n_positions, "n_positions")
    with torch.device(device):
        model = GPT2LMHeadModel(cfg)
    return causal_lm(model, cfg.vocab_size, seq_len)
