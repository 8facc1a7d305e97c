"""The linter's rules (pyproject.toml, [tool.ruff]) hold over the whole repository, and the type
checker's ([tool.mypy]: strict where the contracts live) over the package."""
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_ruff_finds_nothing():
    if shutil.which("ruff") is None and subprocess.run([sys.executable, "-m", "ruff", "--version"],
                                                       capture_output=True).returncode != 0:
        pytest.fail("ruff is not installed: pip install -e '.[test]' brings it")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "autotune", "tests", "bench", "examples"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_finds_nothing():
    if subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True).returncode != 0:
        pytest.fail("mypy is not installed: pip install -e '.[test]' brings it")
    out = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success: no issues found" in out.stdout
