"""The Hydra entry point behind ``python -m autotune``."""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from autotune.config import register
from autotune.storage import redact_files

register()
# conf/ sits beside the package (editable install); an absolute path keeps Hydra from
# treating it as a Python module path.
CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    from autotune.tune import tune  # after Hydra has set up logging and the run directory

    hc = HydraConfig.get()
    if hc.output_subdir:  # Hydra wrote the command line there, a storage password included
        redact_files(Path(hc.runtime.output_dir) / hc.output_subdir)
    code = tune(cfg, Path(hc.runtime.output_dir), list(hc.overrides.task), list(hc.overrides.hydra))
    if code:
        sys.exit(code)
