import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
# The packages runs record as tuned (autotune/train/trust.py) go to a folder of the test
# session's own, inherited by every process the tests start: no test writes into ~/.config.
os.environ["AUTOTUNE_CONFIG_DIR"] = tempfile.mkdtemp(prefix="autotune-tests-config-")
TEST_CONF = ROOT / "tests" / "conf"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def trial_env() -> dict:
    """Environment for trial processes: tests.workloads importable, no GPU unless asked."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def cli_command(run_dir: Path, *overrides: str) -> list:
    """``python -m autotune`` as a user types it, with the test model group on the search
    path, the study storage under the test's own directory and no minimum time of timed
    steps (trial.min_measure_s: 5 s a trial otherwise), unless the test sets them."""
    if not any(o.startswith("storage=") for o in overrides):
        overrides = (f"storage=sqlite:///{run_dir.parent / 'studies.db'}", *overrides)
    if not any(o.startswith("trial.min_measure_s=") for o in overrides):
        overrides = ("trial.min_measure_s=0", *overrides)
    from autotune.study.workers import hydra_quoted

    return [sys.executable, "-m", "autotune", f"hydra.run.dir={hydra_quoted(str(run_dir))}",
            f"hydra.searchpath=[file://{TEST_CONF}]", *overrides]


def run_cli(run_dir: Path, *overrides: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cli_command(run_dir, *overrides), cwd=ROOT, env=trial_env(), capture_output=True,
                          text=True, timeout=timeout)


def compose(*overrides: str):
    """The real config, composed with the overrides a user would type."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from autotune.cli import CONF_DIR

    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        return hydra_compose(config_name="config",
                             overrides=[f"hydra.searchpath=[file://{TEST_CONF}]", *overrides])
