"""The Hydra entry point behind ``python -m autotune``."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from autotune.study.config import CONF_DIR, register
from autotune.store.storage import redact_files

register()


def check_run_dir(argv) -> None:
    """Exit with one message when the run directory cannot be made or written: Hydra makes it
    before any of autotune's code runs, and would end with a traceback."""
    if any(a in ("-h", "--help", "--hydra-help", "--info", "-c", "--cfg", "--shell-completion", "-sc")
           or a.startswith(("--info=", "--cfg=")) for a in argv):
        return  # Hydra answers these without a run directory
    target = Path("outputs")  # Hydra's default: outputs/<date>/<time> under the working directory
    for arg in argv:
        if arg.startswith("hydra.run.dir="):
            from hydra.core.override_parser.overrides_parser import OverridesParser

            try:
                value = str(OverridesParser.create().parse_override(arg).value())
            except Exception:
                return  # Hydra reports a malformed override itself
            target = Path(value.split("${")[0]) if "${" in value else Path(value)
    try:
        target.mkdir(parents=True, exist_ok=True)
        if not os.access(target, os.W_OK):
            raise PermissionError(13, "Permission denied", str(target))
    except OSError as e:
        print(f"error: the run directory {target} cannot be made or written ({e.strerror or e}: "
              f"{e.filename or target}); run from a writable folder or pass hydra.run.dir=A_WRITABLE_PATH",
              file=sys.stderr)
        sys.exit(2)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    from autotune.tune import tune  # after Hydra has set up logging and the run directory

    hc = HydraConfig.get()
    if hc.output_subdir:  # Hydra wrote the command line there, a storage password included
        redact_files(Path(hc.runtime.output_dir) / hc.output_subdir, cfg.storage or os.environ.get("AUTOTUNE_STORAGE"))
    code = tune(cfg, Path(hc.runtime.output_dir), list(hc.overrides.task), list(hc.overrides.hydra))
    if code:
        sys.exit(code)
