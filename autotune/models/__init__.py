"""Built-in workloads: Hugging Face models built from a config, with random weights.

Nothing is downloaded: each builder makes the architecture from its config class, directly
on the trial's device (no CPU build and copy). One module per model family, each importing
only its own transformers classes at the top, so a trial's memory baseline (taken after
the builder's module is imported) does not count the library's import, and a trial does
not pay for importing the other families.
"""
from __future__ import annotations

import torch


def hf_loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    return model(**batch).loss


def check_seq_len(seq_len: int, limit: int, name: str) -> None:
    if seq_len > limit:
        raise ValueError(f"seq_len={seq_len} exceeds the model's {name}={limit}; lower seq_len")


def random_tokens(n: int, seq_len: int, vocab: int):
    """n x seq_len token ids, the same for the same n (every trial trains on the same data)."""
    g = torch.Generator(device="cpu").manual_seed(n)
    return torch.randint(0, vocab, (n, seq_len), generator=g), g


def causal_lm(model: torch.nn.Module, vocab: int, seq_len: int):
    """The Workload of a causal language model: next-token loss on random tokens."""
    from autotune.train.workload import Workload, find_blocks

    def make_batch(n: int, dev) -> dict:
        ids, _ = random_tokens(n, seq_len, vocab)
        ids = ids.to(dev)
        return {"input_ids": ids, "labels": ids}  # the model shifts the labels itself

    return Workload(model=model, make_batch=make_batch, loss=hf_loss, blocks=find_blocks(model))
