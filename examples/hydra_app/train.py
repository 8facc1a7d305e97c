"""A Hydra training app that takes autotune's best.yaml as a config group.

    cp outputs/.../best.yaml examples/hydra_app/conf/tuned/mine.yaml
    python examples/hydra_app/train.py tuned=mine steps=50

``conf/config.yaml`` lists ``tuned`` in its defaults, so the tuned strategy composes with the
app's own settings and can be swapped on the command line like any group. The training
loop is examples/train.py's.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/train.py
from train import build_workload, train  # noqa: E402

from autotune import tuned_from_dict  # noqa: E402
from autotune.train.best_schema import register_tuned_schema  # noqa: E402

register_tuned_schema()  # conf/config.yaml types the tuned group with it


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    tuned = tuned_from_dict(OmegaConf.to_container(cfg.tuned, resolve=True), source=f"tuned={cfg.tuned_name}")
    tuned.set_allocator()  # before CUDA starts
    device = torch.device(cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(cfg.seed)
    result = train(tuned, build_workload(tuned, device), device, cfg.steps, warmup=min(2, cfg.steps - 1))
    result["strategy"] = tuned.strategy.label()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
