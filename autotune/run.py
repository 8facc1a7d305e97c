"""One tuning run: check the config, run the study, score it, write every output."""
from __future__ import annotations

import logging
import math
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

import optuna
import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from sqlalchemy.exc import SQLAlchemyError

from autotune.results.changes import best_change, last_best, remember_best
from autotune.results.headline import headline
from autotune.results.outputs import summary, write_outputs
from autotune.results.page import write_report
from autotune.results.record import RunRecord
from autotune.results.review import record_settings, scored_for_report
from autotune.scoring.budgets import budgets_summary, budgets_table, per_budget
from autotune.scoring.limits import limits_line
from autotune.store.claims import MAX_CUTS, given_up, params_of
from autotune.store.storage import StorageError, default_storage, open_study, redact, snapshot
from autotune.store.table import CONFIGURATION_KEYS, left_out_note, trials_table
from autotune.study.config import added_key_problems
from autotune.study.driver import SEARCH_END_ATTR, IsolationError, ModelBuildError, run_study
from autotune.study.fidelity import effort_line
from autotune.study.plan import ConfigError, Plan, make_plan
from autotune.study.profile import profile_best
from autotune.study.workers import start_workers, stop_workers, take_cpu_share, wait_workers
from autotune.system.safe_write import signals_deferred
from autotune.train.device import environment
from autotune.trial.runner import ForkServerError

log = logging.getLogger("autotune")


def _overridden_keys(overrides) -> frozenset:
    return frozenset(o.split("=", 1)[0].lstrip("+~") for o in overrides)


def dry_run_text(plan: Plan) -> str:
    """dry_run=true: what would run, as it would run (the model's sizes after any CPU
    reduction, each configuration with its skip reason), and that nothing ran."""
    from autotune.study.driver import device_skip, grid_configs
    from autotune.train.strategy import Strategy

    sizes = ", ".join(f"{k}={v}" for k, v in plan.model_config.items() if isinstance(v, (int, float, str, bool)))
    lines = ["dry run: nothing is measured, no study is opened or written",
             f"model {plan.model_name} ({plan.model_target}) as it will run: {sizes or 'its builder defaults'}; "
             f"seq_len {plan.seq_len}, global batch {plan.global_batch}",
             f"trials: {plan.warmup_steps} warm-up and at least {plan.measure_steps} timed steps"
             + (f" and {plan.min_measure_s:g} s" if plan.min_measure_s else "")
             + f", {plan.timeout_s:g} s limit each, isolation {plan.isolation}, {plan.repeats} re-measurement(s) "
               f"of each close contender; objective {plan.objective}"]
    configs = grid_configs(plan)
    will = "runs" if plan.search == "grid" else "may run"
    rows = []
    for c in configs:
        strategy = Strategy.of(c, plan.global_batch)
        reason = device_skip(plan, c)
        rows.append(f"  {strategy.label()} " + (f"skipped: {reason}" if reason else will))
    lines.append(f"{len(configs)} configurations ({sum(1 for r in rows if 'skipped:' not in r)} runnable"
                 + ("" if plan.search == "grid" else f"; search={plan.search} measures those its bounds cannot "
                    "rule out") + "):")
    if plan.escalate:
        rows.append("if none of these fits the budget, the search escalates to the optimizer and model-state "
                    "dimensions of search_space=full (search.escalate=false: it does not)")
    return "\n".join(lines + rows)


def check_build(plan: Plan) -> tuple:
    """dry_run=true: call the model's builder once on the meta device (no memory, no weights),
    so that a builder returning the wrong type fails here, not at the first trial. Returns
    (the line to print, whether it is an error). A builder that cannot build on the meta
    device is not an error: its trials build it for real."""
    from autotune.trial.run import not_a_workload, resolve_builder

    try:
        built = resolve_builder(plan.model_target)(device="meta", seq_len=plan.seq_len, **plan.model_config)
    except Exception as e:
        return (f"builder check: {plan.model_target} could not build on the meta device ({type(e).__name__}: "
                f"{str(e)[:200]}); the first trial builds it for real", False)
    wrong = not_a_workload(plan.model_target, built)
    if wrong:
        return f"model._target_={plan.model_target}: {wrong}", True
    params = sum(p.numel() for p in built.model.parameters())
    return (f"builder check: {plan.model_target} returns a Workload on the meta device ({params / 1e6:.1f}M "
            f"parameters, {len(built.blocks)} blocks to checkpoint)", False)


def _describe(plan: Plan) -> None:
    d = plan.device
    grid = plan.choices
    n = math.prod(len(v) for v in grid.values())
    log.info(f"device: {d.name} ({d.kind}, {d.memory_gib:.1f} GiB); budget "
             + ", ".join(f"{b:g}" for b in plan.budgets) + " GiB"
             + (" (the device's memory)" if plan.budget_is_device_memory else "")
             + (f"; trials capped to {plan.memory_cap_gib:g} GiB" if plan.memory_cap_gib else ""))
    log.info(f"model {plan.model_name}, seq_len {plan.seq_len}, global batch {plan.global_batch}; "
             f"{n} configurations: " + " x ".join(f"{k} {v}" for k, v in grid.items() if len(v) > 1 or k in
                                                  CONFIGURATION_KEYS))
    limits = [f"{k}={v:g}" for k, v in (("n_trials", plan.n_trials), ("timeout", plan.search_timeout_s)) if v]
    log.info(f"search: {plan.search}" + (f" ({', '.join(limits)})" if limits else "")
             + (f"; {plan.workers} workers on the study" if plan.workers > 1 else ""))
    if plan.reductions:
        log.info("CPU run: reduced so it finishes in minutes (GPU runs use the full size; cpu_reduce=false "
                 "turns this off): " + ", ".join(plan.reductions))


# The storage URL can come from the environment instead of the command line, which keeps a
# password out of argv (ps), shell history and Hydra's .hydra/ files; the workers that
# workers=N starts get the URL and the study name this way (workers.start_workers).
STORAGE_ENV, STUDY_NAME_ENV = "AUTOTUNE_STORAGE", "AUTOTUNE_STUDY_NAME"


def _with_environment(cfg):
    if cfg.storage is None and os.environ.get(STORAGE_ENV):
        cfg.storage = os.environ[STORAGE_ENV]
    if cfg.study_name is None and os.environ.get(STUDY_NAME_ENV):
        cfg.study_name = os.environ[STUDY_NAME_ENV]
    return cfg


class _StopOnce:
    """SIGINT and SIGTERM during a run: the first stops it (a KeyboardInterrupt where it
    arrives: the running trial is killed and recorded, then the outputs of what finished are
    written); the ones after it are held, said once, and change nothing. A second interrupt
    raised inside the handling of the first once ended the run with a traceback, no report,
    and, one time in four, a trial that readers could not decode (issue 28)."""

    def __init__(self):
        self.count, self.signum = 0, signal.SIGINT
        self.previous = {}

    def __call__(self, signum, frame):
        self.count += 1
        if self.count == 1:
            self.signum = signum
            raise KeyboardInterrupt(f"signal {signum}")
        if self.count == 2:  # os.write: a handler may run inside logging's own lock
            os.write(2, b"stopping already: writing the outputs of the trials that finished "
                        b"(kill -9 ends it at once; the same command resumes)\n")

    def _unraisable(self, info):
        """The first stop's KeyboardInterrupt raised inside a finalizer (a database connection
        collected as the signal came) is swallowed by Python with a traceback, and the run went
        on as if no stop had come. Sent again instead, from a thread once this hook has returned
        (sent from here, the handler would run inside the hook, where it is swallowed again)."""
        if issubclass(info.exc_type, KeyboardInterrupt) and self.count == 1:
            self.count = 0
            threading.Timer(0.01, os.kill, (os.getpid(), self.signum)).start()
            return
        self.previous_hook(info)

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread may set signal handlers: a run in a thread keeps the caller's
        self.previous = {s: signal.signal(s, self) for s in (signal.SIGINT, signal.SIGTERM)}
        self.previous_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        return self

    def __exit__(self, *exc):
        if not self.previous:
            return
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        sys.unraisablehook = self.previous_hook


def run(cfg: DictConfig, run_dir: Path, overrides=(), hydra_overrides=(), forks=None,
        outcome: dict | None = None) -> int:
    """Run the whole loop; returns the process exit code. ``hydra_overrides`` (hydra.*
    settings such as a search path) are passed on to the other workers; ``forks``, a fork
    server started early (cli.py), to the study; ``outcome``, where given, gets the plan, the
    tuned files written and the headline (api.py builds its result from them)."""
    with _StopOnce():
        try:
            return _tune(cfg, run_dir, overrides, hydra_overrides, forks, {} if outcome is None else outcome)
        except KeyboardInterrupt:  # outside a trial and the outputs (a config check, a moment between)
            log.info("interrupted: no outputs were written; the trials that finished (if any) are in the study, and "
                     "the same command resumes it and writes them")
            return 130


def _tune(cfg: DictConfig, run_dir: Path, overrides, hydra_overrides, forks, outcome: dict) -> int:
    started = time.monotonic()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    plan = _checked_plan(cfg, overrides)
    if plan is None:
        return 2
    outcome["plan"] = plan
    _describe(plan)
    storage = plan.storage or default_storage(Path.cwd())
    # Into logs, report and best.yaml: each override quoted so that the line pastes into a shell.
    # Hydra's own settings that change what is composed (a search path) are part of it; where
    # the outputs go is not.
    composed = [o for o in hydra_overrides if o.split("=", 1)[0].lstrip("+~") not in
                ("hydra.run.dir", "hydra.sweep.dir", "hydra.output_subdir")]
    command = redact(" ".join(["python -m autotune", *map(shlex.quote, [*composed, *overrides])]), storage)
    log.info(f"study '{plan.study_name}' in {redact(storage)}")
    if plan.dry_run:
        log.info(dry_run_text(plan))
        line, wrong = check_build(plan)
        (log.error if wrong else log.info)(line)
        return 2 if wrong else 0
    ran = _run_the_study(plan, run_dir, storage, [*overrides, *hydra_overrides], forks)
    if isinstance(ran, int):
        return ran
    study, interrupted = ran
    record = RunRecord(model=plan.model_name, device_name=plan.device.name, global_batch=plan.global_batch,
                       seq_len=plan.seq_len, budget_gib=plan.budget_gib, budgets=list(plan.budgets),
                       memory_cap_gib=plan.memory_cap_gib, objective=plan.objective,
                       torch=torch.__version__ + (f", CUDA {torch.version.cuda}" if torch.version.cuda else ""),
                       command=command, reductions=tuple(plan.reductions), **environment(plan.device),
                       search_end=study.user_attrs.get(SEARCH_END_ATTR), escalated=study.user_attrs.get("escalated"))
    try:
        return _write_outputs(plan, study, run_dir, storage, record, started, interrupted, outcome)
    except (StorageError, OSError) as e:  # a full disk, a folder made read-only meanwhile
        log.error(f"the outputs could not be written in {run_dir}: {e}. The study is intact in {redact(storage)}; "
                  f"once the cause is fixed, the same command resumes it and writes them all (python -m "
                  f"autotune.report STORAGE_URL --study '{plan.study_name}' --out DIR rebuilds the report alone)")
        return 1


def _checked_plan(cfg: DictConfig, overrides) -> Plan | None:
    """The plan, or None with every problem logged (the command's exit code is then 2)."""
    added = added_key_problems(overrides)
    try:
        plan = make_plan(_with_environment(OmegaConf.to_object(cfg)), _overridden_keys(overrides))
        if added:
            raise ConfigError(added)
        return plan
    except ConfigError as e:
        log.error(str(ConfigError(added + [p for p in e.problems if p not in added])))
    except OmegaConfBaseException as e:  # a missing mandatory value, for example
        hint = ("; for model=custom pass model.target=package.module.build" if "target" in str(e)
                else "; set it on the command line as key=value")
        log.error(f"invalid configuration: {e}{hint}")
    return None


def _run_the_study(plan: Plan, run_dir: Path, storage: str, overrides: list, forks):
    """(the study, whether a stop interrupted it), or the exit code of a failure, logged."""
    others = []
    try:
        if plan.workers > 1:
            others = start_workers(plan.workers, overrides, run_dir, plan.study_name, storage, plan.device)
        # after starting the others: a process inherits the affinity it starts with
        cores = take_cpu_share(plan.workers, plan.device)
        if cores is not None:
            log.info(f"this worker runs on core(s) {', '.join(map(str, cores))}: each CPU worker has its own share")
        study = run_study(plan, run_dir, storage, forks=forks)
        wait_workers(others)  # they may still be finishing a re-measurement
        return study, False
    except (StorageError, ModelBuildError, IsolationError, ForkServerError) as e:
        stop_workers(others)
        log.error(str(e))
    except (optuna.exceptions.StorageInternalError, SQLAlchemyError) as e:  # deleted, read-only, corrupt meanwhile
        stop_workers(others)
        cause = str(e.__cause__ or e).strip().splitlines()[0]
        log.error(f"storage {redact(storage)} failed during the run ({type(e.__cause__ or e).__name__}: "
                  f"{redact(cause, storage)}): was it deleted, moved, made read-only or changed by another program? "
                  f"The trials that finished are in it if it is intact; the same command resumes study "
                  f"'{plan.study_name}' once it is back (the last snapshot in a run directory, study.db, can be "
                  "copied back)")
    except OSError as e:  # the run directory filled up or became unwritable
        stop_workers(others)
        log.error(f"cannot write {e.filename or run_dir} ({e.strerror or e}): free space or make it writable; the "
                  f"trials that finished are in study '{plan.study_name}', and the same command resumes it")
    except KeyboardInterrupt:  # the first stop; later ones are held by _StopOnce
        stop_workers(others)
        try:
            return open_study(plan.study_name, storage, None), True
        except StorageError as e:
            log.error(f"interrupted, and {e}")
            return 130
    return 2


def _say(plan: Plan, results, scored, record: RunRecord, took_s: float) -> None:
    """The terminal's summary of a run: the trials, the best and why, the limits, the effort."""
    primary = results[0]
    log.info(summary(scored, primary.best, plan.objective, record.why))
    if record.limits:
        log.info(f"limits: {record.limits}")
    log.info(record.effort + f"; the run took {took_s:.0f} s")
    if record.change:
        log.info(f"changed since the last run: {record.change}")
    if len(results) > 1:
        log.info(budgets_summary(results))


def _write_outputs(plan: Plan, study, run_dir: Path, storage: str, record: RunRecord, started: float,
                   interrupted: bool, outcome: dict) -> int:
    # A stop signal while the outputs are written waits for them (safe_write): they end whole.
    with signals_deferred() as stops:
        # What `python -m autotune.report` / `.show` need to score the study again, kept with it.
        record_settings(study, plan.scoring, record)
        snapshot(study, run_dir / "study.db")
        table = trials_table(study)
        record = record.but(left_out=left_out_note(table))
        if record.left_out:
            log.warning(record.left_out)
        if table.empty:
            if interrupted or stops:
                log.info(f"interrupted before any trial finished: nothing to report. Run the same command again to "
                         f"resume study '{plan.study_name}'")
                return 130
            log.error("no trial finished")
            return 1
        results = per_budget(table, plan.scoring)
        primary = results[0]
        scored, best, baseline = scored_for_report(results), primary.best, primary.baseline
        record = record.but(why=primary.why if best is not None else None,
                            limits=limits_line(table, None if best is None else scored.loc[best], plan.device.name),
                            effort=effort_line(study.get_trials(deepcopy=False)),
                            change=best_change(last_best(study), primary.scored, best, plan.scoring))
        if not interrupted:
            remember_best(study, primary.scored, best, plan.scoring)
        files = write_outputs(run_dir, plan, results, record.command)
        outcome.update(files=files, budgets=[r.budget_gib for r in results])
    interrupted = interrupted or bool(stops)
    if plan.profile and primary.best is not None and not interrupted:
        try:
            trace = profile_best(plan, scored.loc[primary.best], run_dir)
        except KeyboardInterrupt:  # the profile is extra: the report is still written
            trace, interrupted = None, True
        if trace is not None:
            record = record.but(profile=str(trace.relative_to(run_dir)))
    with signals_deferred() as stops:
        report = write_report(run_dir, scored, best, baseline, record,
                              budgets_table(results) if len(results) > 1 else None)
        _say(plan, results, scored, record, time.monotonic() - started)
        log.info(f"outputs: {run_dir}  (report: {report.name}, tuned config: {', '.join(files) or 'none'})")
        outcome["headline"] = headline(scored, best, baseline, plan.objective, plan.budget_gib, plan.global_batch,
                                       plan.device.name)
        log.info("\n" + "\n".join(outcome["headline"]))
    interrupted = interrupted or bool(stops)
    if interrupted:
        log.info(f"interrupted: the outputs cover the trials that finished. Run the same command again to "
                 f"resume study '{plan.study_name}'")
        return 130
    lost = given_up(study)
    if lost:
        log.error(f"{len(lost)} configuration(s) were cut short {MAX_CUTS} times by a driver that died under them "
                  "and are given up, never measured: " + "; ".join(f"trial {t.number} ({params_of(t)})" for t in lost)
                  + ". The same command does not retry them again; study_name=NEW_NAME starts a study that does")
        return 1
    return 0 if best is not None else 1
