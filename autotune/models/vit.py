"""ViT image classification (``model=vit``): random images and labels.

Images have no sequence length: ``seq_len`` is ignored; the token count follows from
``image_size`` and ``patch_size`` in the model's config ((224 / 16)^2 + 1 = 197 for ViT-base).
"""
from __future__ import annotations

import torch
from transformers import ViTConfig, ViTForImageClassification

from autotune.models import hf_loss
from autotune.train.workload import Workload, find_blocks


def build(device: str, seq_len: int, **config) -> Workload:
    cfg = ViTConfig(**config)
    with torch.device(device):
        model = ViTForImageClassification(cfg)

    def make_batch(n: int, dev) -> dict:
        g = torch.Generator(device="cpu").manual_seed(n)
        size = cfg.image_size if isinstance(cfg.image_size, int) else int(cfg.image_size[0])  # a square image
        pixels = torch.randn(n, cfg.num_channels, size, size, generator=g)
        labels = torch.randint(0, int(cfg.num_labels or 2), (n,), generator=g)
        return {"pixel_values": pixels.to(dev), "labels": labels.to(dev)}

    return Workload(model=model, make_batch=make_batch, loss=hf_loss, blocks=find_blocks(model))
