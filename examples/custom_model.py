"""Tune your own model: python -m autotune model=custom model.target=examples.custom_model.build"""
import torch

from autotune import Workload


def build(device: str, seq_len: int, width: int = 256, depth: int = 6) -> Workload:
    with torch.device(device):  # built directly on the trial's device
        layers = [torch.nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width, batch_first=True)
                  for _ in range(depth)]
        model = torch.nn.Sequential(torch.nn.Embedding(1000, width), *layers, torch.nn.Linear(width, 1000))

    def make_batch(n: int, dev) -> torch.Tensor:  # n synthetic samples of seq_len tokens
        return torch.randint(0, 1000, (n, seq_len), device=dev)

    def loss(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:  # next-token loss
        logits = model(tokens[:, :-1])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

    return Workload(model=model, make_batch=make_batch, loss=loss, blocks=layers)  # blocks: what may be checkpointed
