"""What a tuned file may make this process import and call.

A ``best.yaml`` names code: the model builder (``model.target``) and the optimizer
(``optimizer.target``). ``tuned.optimizer()`` imports the one and ``tuned.model_builder()``
(examples/train.py) the other, and calls what they name. A tuned file passed between people
is therefore code, like a pickle: one that names ``os:remove`` would run it. So a target is
imported only from a package trusted here:

* torch, torchao and autotune, always;
* the packages this machine tuned: a run records the top-level package of its builder and
  its optimizer when it writes best.yaml (``record_tuned``), in ``trusted-packages.txt`` of
  autotune's config folder (``$AUTOTUNE_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/autotune``,
  else ``~/.config/autotune``). The record lives outside the tuned file: a file cannot vouch
  for itself;
* the packages the caller names: ``load_tuned(path, trust=["my_models"])``, the environment
  (``AUTOTUNE_TRUST=my_models,other``), or ``examples/train.py --trust my_models``.

Anything else is refused before it is imported, naming the target and these overrides.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

ALWAYS_TRUSTED = ("torch", "torchao", "autotune")
TRUST_ENV = "AUTOTUNE_TRUST"
RECORD_NAME = "trusted-packages.txt"


class UntrustedTarget(ValueError):
    """A tuned file names code from a package this process was not told to trust."""


def package_of(target: str) -> str:
    """The top-level package of ``package.module:function`` or ``package.module.Class``."""
    return target.replace(":", ".").split(".", 1)[0].strip()


def config_dir() -> Path:
    if os.environ.get("AUTOTUNE_CONFIG_DIR"):
        return Path(os.environ["AUTOTUNE_CONFIG_DIR"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "autotune"


def recorded() -> set[str]:
    try:
        return {line.strip() for line in (config_dir() / RECORD_NAME).read_text().splitlines() if line.strip()}
    except (OSError, UnicodeDecodeError):
        return set()


def record_tuned(targets: Iterable[str]) -> None:
    """Remember the packages of ``targets`` (a run's builder and optimizer) as tuned here.
    A record that cannot be written costs only a ``trust=`` later, so failing is quiet."""
    new = {package_of(t) for t in targets if t} - set(ALWAYS_TRUSTED) - recorded()
    if not new:
        return
    try:
        config_dir().mkdir(parents=True, exist_ok=True)
        with open(config_dir() / RECORD_NAME, "a") as f:
            f.write("".join(f"{p}\n" for p in sorted(new)))
    except OSError:
        pass


def trusted(extra: Iterable[str] = ()) -> set[str]:
    from_env = {p.strip() for p in os.environ.get(TRUST_ENV, "").split(",") if p.strip()}
    return set(ALWAYS_TRUSTED) | recorded() | from_env | {package_of(p) for p in extra}


def check(target: str, key: str, source: str, extra: Iterable[str] = ()) -> None:
    """Refuse ``target`` (found at ``key`` of ``source``) unless its package is trusted."""
    package = package_of(str(target))
    if package and package in trusted(extra):
        return
    raise UntrustedTarget(
        f"{source}: {key}={target!r} names code in package {package!r}, which this machine has not tuned and was not "
        f"told to trust; a tuned file names code that is imported and run, so nothing of it was. If you trust it: "
        f"load_tuned(path, trust=[{package!r}]), or {TRUST_ENV}={package}, or examples/train.py --trust {package}")
