"""``autotune.tune(...)``: a study from Python, the very run ``python -m autotune`` makes.

    import autotune
    result = autotune.tune(model="bert", budget_gib=8, device="cpu")
    result.best                 # the Tuned of best.yaml (None when nothing fit)
    result.trials, result.front # trials.csv and pareto.csv as DataFrames
    result.per_budget           # {budget: Tuned or None}, one per budget
    result.paths                # every file written, by name

The keyword arguments are the command line's keys (``python -m autotune --help``): a value
for a key, a dict for a group of keys (``trial={"measure_steps": 5}``), and ``overrides``
for anything in Hydra's own grammar (``["search_space=full", "+experiment=NAME"]``). They
are checked as the command line's are, before anything runs: an unknown key, a wrong type
or a bad value raises ``ConfigError`` with every problem. The run then goes through
``run.run``, the function behind the command line, with the same outputs under
``run_dir`` (by default ``outputs/<date>/<time>`` in the working directory, as Hydra's).
"""
from __future__ import annotations

import datetime
import html
import logging
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from autotune.study.plan import ConfigError
from autotune.study.workers import hydra_quoted

log = logging.getLogger("autotune")


@dataclass
class TuneResult:
    """What a run found and where it wrote it; the same files the command line writes."""

    exit_code: int  # the command line's: 0 a best config, 1 none fit, 2 refused, 130 interrupted
    run_dir: Path
    command: str  # the command line that makes the same run
    best: Any = None  # autotune.Tuned of best.yaml, or None
    per_budget: dict[float, Any] = field(default_factory=dict)  # budget -> Tuned or None
    trials: pd.DataFrame = field(default_factory=pd.DataFrame)
    front: pd.DataFrame = field(default_factory=pd.DataFrame)
    paths: dict[str, Path] = field(default_factory=dict)
    headline: list[str] = field(default_factory=list)  # the lines a run ends with

    def __repr__(self) -> str:
        lines = [f"TuneResult(exit_code={self.exit_code}, run_dir={str(self.run_dir)!r})", *self.headline]
        if "report" in self.paths:
            lines.append(f"report: {self.paths['report']}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """The headline and a link to the report, for a notebook."""
        head = "".join(f"<li>{html.escape(line)}</li>" for line in self.headline) or "<li>no outputs</li>"
        report = self.paths.get("report")
        link = f"<p><a href='{html.escape(report.as_posix())}'>{html.escape(str(report))}</a></p>" if report else ""
        return (f"<div><b>autotune</b> (exit code {self.exit_code}, {len(self.trials)} trials)"
                f"<ul>{head}</ul>{link}</div>")


def _override(key: str, value: Any) -> list[str]:
    """``key=value`` in Hydra's override grammar; a dict gives one per key below it."""
    if isinstance(value, Mapping):
        return [o for k, v in value.items() for o in _override(f"{key}.{k}", v)]
    return [f"{key}={_value(value)}"]


def _value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_value(v) for v in value) + "]"
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str):  # quoted where the grammar would read it otherwise
        plain = re.fullmatch(r"[\w.:/@+-]+", value) and value.lower() not in ("null", "true", "false")
        return value if plain else hydra_quoted(value)
    raise TypeError(f"{value!r} ({type(value).__name__}): pass a str, number, bool, None, list or dict")


def _compose(args: list[str]):
    """The config the command line would compose from ``args``; ConfigError on any problem."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from autotune.study.config import CONF_DIR, register, unknown_key_problems

    problems = unknown_key_problems(args)
    if problems:
        raise ConfigError(problems)
    register()
    GlobalHydra.instance().clear()  # a notebook's earlier initialisation, or a test's
    try:
        with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
            return compose(config_name="config", overrides=args)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError([str(e).splitlines()[0]]) from None


class _Output:
    """The log lines a run prints, to the caller's stdout and to ``run_dir/autotune.log`` (as
    Hydra's logging does for the command line), and its errors kept for the exception."""

    def __init__(self, run_dir: Path):
        self.errors: list[str] = []
        self.handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout),
                                                logging.FileHandler(run_dir / "autotune.log")]
        keep = _Errors(self.errors)
        self.handlers.append(keep)

    def __enter__(self) -> _Output:
        for h in self.handlers:
            h.setFormatter(logging.Formatter("%(message)s"))
            log.addHandler(h)
        self.level, self.propagate = log.level, log.propagate
        log.setLevel(logging.INFO)
        log.propagate = False  # a notebook's root handlers would print each line twice
        return self

    def __exit__(self, *exc) -> None:
        for h in self.handlers:
            log.removeHandler(h)
            h.close()
        log.setLevel(self.level)
        log.propagate = self.propagate


class _Errors(logging.Handler):
    def __init__(self, into: list[str]):
        super().__init__(logging.ERROR)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


def tune(model: str | None = None, budget_gib: float | Sequence[float] | None = None, *,
         overrides: Sequence[str] = (), run_dir: str | Path | None = None, **settings: Any) -> TuneResult:
    """Run a study as ``python -m autotune`` would and return its ``TuneResult``.

    ``model``, ``budget_gib`` and every other keyword: the command line's keys (a dict for a
    group: ``trial={"measure_steps": 5}``); ``overrides``: more, in Hydra's grammar. Raises
    ``ConfigError`` (every problem, each naming the key, the value and the fix) before any
    trial when the configuration is wrong."""
    from omegaconf import OmegaConf

    from autotune.run import run
    from autotune.system.quiet import quiet_third_party

    quiet_third_party()  # as the command line: third-party lines known to be harmless are dropped
    args: list[str] = []
    for key, value in (("model", model), ("budget_gib", budget_gib), *settings.items()):
        if value is not None:
            args += _override(key, value)
    args += list(overrides)
    cfg = _compose(args)
    now = datetime.datetime.now()
    folder = (
        Path(run_dir) if run_dir is not None else Path("outputs") / now.strftime("%Y-%m-%d") / now.strftime("%H-%M-%S")
    )
    folder.mkdir(parents=True, exist_ok=True)
    hydra_dir = folder / ".hydra"  # what the command line's Hydra keeps: the config and the overrides
    hydra_dir.mkdir(exist_ok=True)
    (hydra_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (hydra_dir / "overrides.yaml").write_text(yaml.safe_dump(args))
    from autotune.store.storage import redact_files

    redact_files(hydra_dir, cfg.get("storage"))
    outcome: dict[str, Any] = {}
    with _Output(folder) as out:
        code = run(cfg, folder, args, [], None, outcome)
    if code == 2 and "files" not in outcome:
        raise ConfigError(out.errors or ["the run was refused; see autotune.log"])
    return _result(code, folder, args, outcome)


def _result(code: int, run_dir: Path, args: list[str], outcome: dict[str, Any]) -> TuneResult:
    import shlex

    from autotune.train.tuned import load_tuned

    paths = {name: run_dir / f for name, f in (("trials", "trials.csv"), ("front", "pareto.csv"),
                                               ("report", "report.html"), ("plot", "pareto.png"),
                                               ("study", "study.db"), ("log", "autotune.log"))
             if (run_dir / f).is_file()}
    per_budget: dict[float, Any] = {}
    for budget, name in zip(outcome.get("budgets", []), _budget_files(outcome), strict=False):
        file = run_dir / name if name else None
        per_budget[budget] = load_tuned(file) if file is not None and file.is_file() else None
        if file is not None and file.is_file():
            paths[file.stem] = file
    best = load_tuned(run_dir / "best.yaml") if "best.yaml" in outcome.get("files", []) else None
    if best is not None:
        paths["best"] = run_dir / "best.yaml"
    def read(p):
        return (pd.read_csv(p) if p is not None else pd.DataFrame())
    return TuneResult(exit_code=code, run_dir=run_dir, command=" ".join(["python -m autotune",
                                                                          *map(shlex.quote, args)]),
                      best=best, per_budget=per_budget, trials=read(paths.get("trials")),
                      front=read(paths.get("front")), paths=paths, headline=list(outcome.get("headline", [])))


def _budget_files(outcome: dict[str, Any]) -> list[str | None]:
    """The tuned file of each budget, in the budgets' order (None where none fit)."""
    from autotune.scoring.budgets import budget_label

    files = set(outcome.get("files", []))
    budgets = outcome.get("budgets", [])
    names = [f"best-{budget_label(b)}.yaml" for b in budgets] if len(budgets) > 1 else ["best.yaml"]
    return [n if n in files else None for n in names]
