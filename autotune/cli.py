"""The Hydra entry point behind ``python -m autotune``."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from autotune.store.storage import redact_files
from autotune.study.config import CONF_DIR, register

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


def check_keys(argv) -> None:
    """Exit with one line per unknown key, each with the nearest known one, before Hydra
    composes the config (study/config.py:unknown_key_problems)."""
    from autotune.study.config import unknown_key_problems

    problems = unknown_key_problems(argv)
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)


def early_fork_server(cfg: DictConfig, run_dir: Path):
    """The fork server's imports (torch, transformers, the model's builder: seconds) started
    before the driver's own (autotune.run: about 3 s on two cores), where the composed config
    already says it will be used: a plain run of one driver with trial.isolation=fork.
    The plan is checked afterwards; a server it does not use is stopped (driver.run_study).
    On the 2-core CPU default this was about 3 s of the first trial's wait."""
    try:
        target = OmegaConf.select(cfg, "model._target_", default=None)
    except OmegaConfBaseException:  # model=custom without model.target: the plan's checks say so
        return None
    if (cfg.get("dry_run") or OmegaConf.select(cfg, "trial.isolation", default=None) != "fork"
            or str(cfg.get("workers")) != "1" or not isinstance(target, str) or ":" not in target):
        return None
    from autotune.train.strategy import allocator_env
    from autotune.trial.runner import ForkServer

    forks = ForkServer(target)
    forks.prestart(allocator_env("default"), run_dir / "trials")
    return forks


def _close_early(forks, log_dir: Path) -> None:
    """Stop the early server; where it served no trial (a config the plan refused, a stop
    before the first trial), its log goes too: a refused command leaves no trials/ folder."""
    forks.close()
    if not forks.used:
        (log_dir / "forkserver.log").unlink(missing_ok=True)
        try:
            log_dir.rmdir()  # only if empty
        except OSError:
            pass


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    hc = HydraConfig.get()
    forks = early_fork_server(cfg, Path(hc.runtime.output_dir))
    try:
        from autotune.run import run  # after Hydra has set up logging and the run directory

        if hc.output_subdir:  # Hydra wrote the command line there, a storage password included
            redact_files(Path(hc.runtime.output_dir) / hc.output_subdir,
                         cfg.storage or os.environ.get("AUTOTUNE_STORAGE"))
        code = run(cfg, Path(hc.runtime.output_dir), list(hc.overrides.task), list(hc.overrides.hydra), forks)
    finally:
        if forks is not None:
            _close_early(forks, Path(hc.runtime.output_dir) / "trials")
    if code:
        sys.exit(code)
