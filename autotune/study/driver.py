"""The study loop: configurations go into the study's queue, trial processes measure them.

Each trial runs in a process of its own (``runner.run_trial``), so a trial that dies, hangs
or runs out of memory cannot take the driver with it. The queue lives in the study storage
(``claims``), so several drivers can share one study. Every trial ends in one recorded
status, stored as the Optuna trial's user attribute ``status`` (with ``cause``):
ok -> COMPLETE (value = samples/s), skipped and pruned -> PRUNED, every failure -> FAIL.

Feasibility is monotone in micro-batch: for one strategy, a larger micro-batch holds more
activations. So a configuration whose strategy already ran out of memory at a smaller
micro-batch is recorded ``pruned``, with that trial as its cause, and never run.
"""
from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from pathlib import Path

import optuna

from autotune.search import QueueSearch, make_search
from autotune.search.space import canonical, skip_reason
from autotune.store.claims import (
    Heartbeat,
    duplicate_of,
    enqueue_missing,
    is_repeat,
    recover,
    waiting,
)
from autotune.store.counts import finished_and_planned, running, trials_run
from autotune.store.optuna_access import fixed_params, storage_of, trial_id
from autotune.store.storage import check_setup, open_study
from autotune.store.table import result_attrs, trials_table
from autotune.study.fidelity import (
    MAX_BEST_ROUNDS,
    best_without_window,
    final_round,
    final_rounds,
    full_round,
    race_range,
    search_fidelity,
)
from autotune.study.parity import run_references
from autotune.study.plan import Plan
from autotune.study.progress import progress_line, time_left
from autotune.study.threads import OtherCpuUse, free_core_threads
from autotune.train.dimensions import ALWAYS_KEYED, DIMENSIONS, MODEL_STATE, in_group
from autotune.train.optimizer import combination_problem, unsupported
from autotune.train.strategy import Strategy, allocator_env
from autotune.trial.clean_start import trusted
from autotune.trial.progress import Ticker
from autotune.trial.runner import ForkServer, run_trial

log = logging.getLogger("autotune")
SEARCH_END_ATTR = "search_end"  # why the last run's search ended, for the report
POLL_S = 1.0  # how often a driver with nothing left to claim checks on other drivers' trials

class ModelBuildError(RuntimeError):
    """The model could not be built: every configuration builds the same model, so the study stops."""


class IsolationError(RuntimeError):
    """A trial found its process not clean (clean_start.py): no later figure could be trusted."""


class Stopping:
    """The search's own limits: ``n_trials`` trials run in the study, ``timeout`` seconds of
    this driver's wall time. Either reached: no new trial starts (the running one ends)."""

    def __init__(self, n_trials: int | None, timeout_s: float | None):
        self.n_trials, self.timeout_s, self.start = n_trials, timeout_s, time.monotonic()
        self.reason: str | None = None

    def reached(self, study: optuna.Study) -> bool:
        if self.n_trials is not None and trials_run(study) >= self.n_trials:
            self.reason = f"search.n_trials={self.n_trials} reached"
        elif self.timeout_s is not None and time.monotonic() - self.start >= self.timeout_s:
            self.reason = f"search.timeout={self.timeout_s:g} s reached"
        return self.reason is not None


def measure_queue(study: optuna.Study, plan: Plan, run_dir: Path, search=None, stopping: Stopping | None = None,
                  on_trial: Callable[[str], None] = log.info, runner=run_trial, of: int | None = None) -> None:
    """Run the search's trials until it has nothing left (or a limit is reached) and no
    other driver still runs one.

    Trials other drivers run are waited for (a dead driver's trial is recovered and retried
    here), so when this returns the study holds a final state for every trial it started.
    """
    search = search or QueueSearch("queued", [])
    choices = plan.choices
    waiting_said = False
    while True:
        stop = stopping is not None and stopping.reached(study)
        if stop and stopping is not None and hasattr(search, "left") and search.left(study) == 0:
            stopping.reason, stop = None, False  # the limit came as the search ran out: it ended
        trial = None if stop else search.next_trial(study)
        if trial is None:
            recover(study)
            if waiting(study, getattr(search, "only", None)) and not (
                    stopping is not None and stopping.reason):
                continue
            others = running(study)
            if not others:
                return
            if not waiting_said:
                on_trial(f"waiting for {others} trial(s) run by other drivers of study '{plan.study_name}'")
                waiting_said = True
            time.sleep(POLL_S)
            continue
        waiting_said = False
        earlier = duplicate_of(study, trial)
        if earlier is not None:  # enqueued twice by drivers starting together: the earlier one runs
            trial.set_user_attr("duplicate_of", earlier)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        try:
            _measure(study, trial, plan, run_dir, choices, on_trial, runner, of,
                     lambda: time_left(study, search, stopping, plan))
        except optuna.exceptions.UpdateFinishedTrialError:
            # Another driver closed this trial as orphaned (it heard no heartbeat in time):
            # its result is dropped here and the configuration retried by recover().
            on_trial(f"trial {trial.number} was closed by another driver while it ran; its configuration is retried")


def _measure(study, trial: optuna.Trial, plan: Plan, run_dir: Path, choices: dict, on_trial, runner, of,
             eta: Callable[[], str] = lambda: "") -> None:
    try:
        result, strategy = _run_one(study, trial, plan, run_dir, choices, on_trial, runner)
        _record(study, trial, plan, run_dir, result, strategy, on_trial, of, eta)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM, anywhere in it: recorded cut short, retried on resume
        try:
            trial.set_user_attr("status", "interrupted")
            trial.set_user_attr("cause", "the driver was interrupted while this trial ran")
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # it was told its result just before the stop: it stands
        raise


def _run_one(study, trial: optuna.Trial, plan: Plan, run_dir: Path, choices: dict, on_trial, runner) -> tuple:
    """(the result, the strategy) of one claimed trial: skipped, pruned, or run in a process."""
    # A configuration of an activation-only space has no model-state keys (space.canonical)
    given = set(trial.params) | set(fixed_params(storage_of(study).get_trial(trial_id(trial))))
    params = {name: trial.suggest_categorical(name, choices[name]) for name in choices
              if DIMENSIONS[name].group in ALWAYS_KEYED or name in given}
    strategy = Strategy.of(params, plan.global_batch)
    trial.set_user_attr("accumulation", strategy.accumulation)
    reason = device_skip(plan, params)
    smaller = None if reason else oom_at_smaller_micro_batch(study, params)
    if reason:
        result = {"status": "skipped", "cause": reason}
    elif smaller is not None:
        result = {"status": "pruned", "pruned_by": smaller.number,
                  "cause": f"micro_batch={params['micro_batch']} needs more memory than micro_batch="
                           f"{smaller.params['micro_batch']} of the same strategy, which ran out of memory in "
                           f"trial {smaller.number}"}
    else:
        trial_dir = run_dir / "trials" / f"{trial.number:03d}"
        fidelity = trial.user_attrs.get("fidelity") or search_fidelity(plan)
        race = (race_range(trials_table(study), plan, trial.user_attrs["repeat_of"])
                if trial.user_attrs.get("race") and trial.user_attrs.get("repeat_of") is not None else None)
        with Heartbeat(study, trial_id(trial)), Ticker(on_trial, trial_dir, f"trial {trial.number} "
                                                         f"({strategy.label().strip()})"):
            result = runner(plan.trial_spec(strategy, fidelity, race), trial_dir, plan.timeout_s,
                            env=allocator_env(strategy.allocator, strategy.offload))
        result.setdefault("fidelity", fidelity)  # what was asked of a trial that failed (an OOM probe is a probe)
    return result, strategy


def _record(study, trial: optuna.Trial, plan: Plan, run_dir: Path, result: dict, strategy: Strategy, on_trial, of,
            eta) -> None:
    """Store a trial's result, say it, and stop the study where the result says it must."""
    for k, v in result_attrs(result).items():
        trial.set_user_attr(k, v)
    done, planned = finished_and_planned(study)
    repeat = trial.user_attrs.get("repeat")
    line = (progress_line(done + 1, of or planned, strategy, result, "confirm" if repeat else None)
            + (f"  [repeat {repeat} of trial {trial.user_attrs.get('repeat_of')}]" if repeat else ""))
    if result["status"] == "ok":
        peak = result.get("device_peak_gib", result.get("peak_memory_gib"))
        study.tell(trial, [float(result["samples_per_s"]), float(peak or 0.0)])  # an ok result has both (check_result)
    else:
        study.tell(trial, state=optuna.trial.TrialState.PRUNED if result["status"] in ("skipped", "pruned")
                   else optuna.trial.TrialState.FAIL)
    if result["status"] != "skipped":
        on_trial(line + (eta() if result["status"] != "pruned" else ""))
    elif not _skipped_before(study, trial.number, result["cause"]):  # one line per reason, not per configuration
        on_trial(
            line + "  (the other configurations it applies to are skipped without a line; the summary counts them)"
        )
    if result.get("phase") == "isolation":
        raise IsolationError(f"{result['cause']} (trial {trial.number}); the study stopped here")
    if result.get("phase") == "build":
        raise ModelBuildError(
            f"{result['cause']} (trial {trial.number}, log: {run_dir / 'trials' / f'{trial.number:03d}' / 'log.txt'}). "
            "Every configuration builds the same model, so the study stopped here; fix the "
            "model and run the same command again to resume"
        )


def oom_at_smaller_micro_batch(study: optuna.Study, params: dict):
    """A finished trial of the same strategy at a smaller micro-batch that ran out of memory
    in a clean process (clean_start.py)."""
    same = {k: v for k, v in params.items() if k != "micro_batch"}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,)):
        if (
            t.user_attrs.get("status") == "oom"
            and trusted(t.user_attrs)
            and t.params.get("micro_batch", params["micro_batch"]) < params["micro_batch"]
            and all(t.params.get(k) == v for k, v in same.items())
        ):
            return t
    return None


def grid_configs(plan: Plan, space=None) -> list:
    """Every configuration of the plan's space (or ``space``), less the model-state
    combinations that do not go together (``optimizer.combination_problem``)."""
    grid = (space or plan.space).grid(plan.global_batch)
    configs = [dict(zip(grid, values, strict=False)) for values in itertools.product(*grid.values())]
    return [canonical(c) for c in configs if not combination_problem(Strategy.of(c, plan.global_batch))]


def _skipped_before(study: optuna.Study, number: int, cause: str) -> bool:
    return any(t.number != number and t.user_attrs.get("status") == "skipped" and t.user_attrs.get("cause") == cause
               for t in study.get_trials(deepcopy=False))


def device_skip(plan: Plan, config: dict):
    """Why this device, or the plan's optimizer, cannot run ``config`` (recorded skipped), or None."""
    d, strategy = plan.device, Strategy.of(config, plan.global_batch)
    return skip_reason(strategy, d.precisions, d.unsupported, d.kind) or unsupported(strategy, plan.optimizer)


def run_study(plan: Plan, run_dir: Path, storage: str, on_trial: Callable[[str], None] = log.info,
              runner=run_trial, forks: ForkServer | None = None) -> optuna.Study:
    """Measure what the search strategy picks until it ends or a limit is reached, then
    re-measure the close contenders in fresh processes.

    Other drivers may work on the same study at the same time; resuming is the same thing
    after a driver died: trials left running are closed and retried (claims.recover), finished ones
    are not run again. ``runner`` runs one trial (``runner.run_trial``; the replay
    benchmark passes a recorded table instead). ``forks``: a fork server the entry point
    started before its own imports (cli.py); used where it serves this plan, else closed.
    """
    fork = plan.isolation == "fork" and runner is run_trial
    if forks is not None and not (fork and forks.preload == plan.model_target):
        forks.close()
        forks = None
    if fork and forks is None:
        forks = ForkServer(plan.model_target)
    if forks is not None:  # its imports overlap the set-up below
        forks.prestart(allocator_env("default"), run_dir / "trials")
    # trial.cpu_threads=auto: what others use of the cores while the study sets up (study/threads.py)
    others = (OtherCpuUse(forks.pids() if forks is not None else ())
              if plan.device.kind == "cpu" and plan.cpu_threads == "auto" and runner is run_trial else None)
    try:
        return _run_study(plan, run_dir, storage, on_trial, forks or runner, others)
    finally:
        if forks is not None:
            forks.close()


def _run_study(plan: Plan, run_dir: Path, storage: str, on_trial, runner, others=None) -> optuna.Study:
    configs = grid_configs(plan)
    runnable = [c for c in configs if not device_skip(plan, c)]
    search = make_search(plan.search, configs, runnable, plan.choices, plan)
    study = open_study(plan.study_name, storage, getattr(search, "sampler", None)
                       or optuna.samplers.RandomSampler(seed=plan.seed))
    if plan.setup:
        check_setup(study, plan.setup, storage)
    retried = recover(study)
    done_before, _ = finished_and_planned(study)
    added = search.start(study)
    if done_before:
        on_trial(f"resuming study '{plan.study_name}': {done_before} trial(s) finished, {added} new "
                 f"configuration(s), {len(retried)} retried")
    if others is not None:
        plan = _size_cpu_threads(plan, others, on_trial)
    _search_and_confirm(study, plan, run_dir, search, on_trial, runner, configs)
    wider = escalation(study, plan, on_trial)
    if wider is not None:
        configs = grid_configs(wider)
        search = make_search(plan.search, configs, [c for c in configs if not device_skip(wider, c)],
                             wider.choices, wider)
        search.start(study)
        _search_and_confirm(study, wider, run_dir, search, on_trial, runner, configs)
    run_references(study, plan, run_dir, runner, on_trial)
    return study


def _size_cpu_threads(plan: Plan, others: OtherCpuUse, on_trial) -> Plan:
    """The plan with the CPU trials' thread count (study/threads.py): the cores other processes
    left free while the study set up, where they kept one or more busy; else torch's default."""
    from dataclasses import replace

    used = others.cores()
    threads = free_core_threads(used, len(others.cpus))
    if threads is not None:
        on_trial(f"the CPU is busy: other processes used {used:.1f} of the {len(others.cpus)} core(s) as the study "
                 f"started, so CPU trials run {threads} torch thread(s), the cores left free (threads beside busy "
                 "processes wait on each other; a training run beside this load should do the same); "
                 "trial.cpu_threads=N sets it")
    return replace(plan, cpu_threads=threads)


def escalation(study: optuna.Study, plan: Plan, on_trial) -> Plan | None:
    """The plan widened to the model-state dimensions of ``search_space=full`` when
    ``plan.escalate`` holds and no measured configuration fits some budget; else None."""
    if not plan.escalate or plan.search not in ("auto", "grid"):
        return None
    from dataclasses import replace

    from autotune.scoring.score import score
    from autotune.search.space import SHIPPED_DIR, load_space

    table = trials_table(study)
    if table.empty:
        return None
    # Only memory is a reason: a trial ran out of it, or ran and needed more than a budget
    # (trials that all crashed or erred say nothing about what would fit).
    memory_bound = (table["status"] == "oom").any() or (table["status"] == "ok").any()
    short = [b for b in plan.budgets if memory_bound
             and not score(table, plan.global_batch, b, plan.roi)[0]["fits_budget"].any()]
    if not short and "escalated" not in study.user_attrs:  # a resumed run goes on where it escalated
        return None
    problems: list[str] = []
    full = load_space({"path": str(SHIPPED_DIR / "full.yaml")}, problems)
    if full is None:
        raise RuntimeError(f"the shipped full space does not load: {problems}")
    wider = replace(plan, space=plan.space.with_model_state(full), escalate=False)
    ok = table[table["status"] == "ok"]
    lightest = (f"; the lightest measured used {ok['peak_memory_gib'].min():.2f} GiB" if not ok.empty
                else "; every configuration measured ran out of memory")
    dims = ", ".join(f"{d.name} {list(full[d.name])}" for d in in_group(MODEL_STATE))
    if "escalated" in study.user_attrs:
        on_trial(f"resuming the escalated search ({study.user_attrs['escalated']})")
        return wider
    said = (f"nothing fit budget_gib={', '.join(f'{b:g}' for b in short)} on the activation side alone "
            f"({trials_run(study)} configurations run{lightest})")
    on_trial(f"{said}. Escalating: searching the optimizer and model-state dimensions too ({dims}); "
             "search.escalate=false turns this off")
    study.set_user_attr("escalated", f"{said}; then searched {dims} too")
    return wider


def _search_and_confirm(study, plan: Plan, run_dir: Path, search, on_trial, runner, configs: list) -> None:
    n_configs = len(configs)
    stopping = Stopping(plan.n_trials, plan.search_timeout_s)
    measure_queue(study, plan, run_dir, search, stopping, on_trial, runner,
                  of=None if plan.search == "grid" else n_configs)
    end = None
    if stopping.reason:
        end = f"search stopped: {stopping.reason}; the same command with a larger limit resumes it"
    elif plan.search == "auto":
        front = (f" or add a Pareto-front point {plan.front_resolution:.0%} apart in memory (search.front_resolution)"
                 if plan.front_resolution > 0 else "")
        end = (f"search 'auto' ended: {trials_run(study, configs)} of {n_configs} configurations run; by their "
               f"bounds, none left could beat the best by more than its measured spread{front}")
    elif plan.search != "grid":
        end = f"search '{plan.search}' ended: {trials_run(study, configs)} of {n_configs} configurations run"
    if end:
        on_trial(end)
        study.set_user_attr(SEARCH_END_ATTR, end)  # the report says it too
    if stopping.reason and "timeout" in stopping.reason:
        return
    if plan.fidelity == "auto":
        _confirm_in_full(study, plan, run_dir, on_trial, runner)
        return
    from autotune.study.confirm import baseline, contended, contenders  # scoring needs the table built here

    table = trials_table(study)
    close = contenders(table, plan) if plan.repeats else []
    busy = [n for n in contended(table, plan) if n not in close]
    base = [n for n in baseline(table, plan) if n not in close + busy] if close else []
    # Round by round (A B C, A B C, ...), not each configuration's repeats together, so
    # that the configurations compared see the same conditions.
    rounds = [close + base + busy] + [close + base] * (plan.repeats - 1)
    for k, numbers in enumerate(rounds, start=1):
        for number in numbers:
            enqueue_missing(study, [study.trials[number].params], {"repeat": k, "repeat_of": number})
    said = []
    if close:
        said.append(f"{len(close)} close contender(s)" + (" and the ROI baseline" if base else "")
                    + f" {plan.repeats} more time(s) each")
    if busy:
        said.append(f"{len(busy)} trial(s) measured while other processes competed for the device, once more")
    if said:
        on_trial(f"re-measuring {' and '.join(said)}, each in a fresh process, interleaved")
    if any(rounds):
        measure_queue(study, plan, run_dir, QueueSearch("repeats", [], only=is_repeat), None, on_trial, runner)


def _confirm_in_full(study, plan: Plan, run_dir: Path, on_trial, runner) -> None:
    """trial.fidelity=auto after the search (study/fidelity.py): the contenders by the probes
    in full (raced), the best of every budget over the whole window, then one interleaved
    round of those still tied where the tie rests on contended figures."""
    # Each phase has its own repeat index, so that drivers sharing the study (workers=N)
    # queue the same measurement once (claims.enqueue_missing keys on it).
    def measure(numbers: list, said: str, phase: int) -> None:
        if not numbers:
            return
        for number, race in numbers:
            enqueue_missing(study, [study.trials[number].params],
                            {"repeat": phase, "repeat_of": number, "fidelity": "full", "race": race})
        on_trial(said)
        measure_queue(study, plan, run_dir, QueueSearch("repeats", [], only=is_repeat), None, on_trial, runner)

    first = full_round(trials_table(study), plan) if plan.repeats else []
    measure(first, f"measuring {len(first)} contender(s) in full, each in a fresh process: the top one over the whole "
                   "window, the others until their interval decides against the best", 1)
    for k in range(MAX_BEST_ROUNDS):
        need = best_without_window(trials_table(study), plan)
        if not need:
            break
        measure([(n, False) for n in need], f"measuring the best ({', '.join(f'trial {n}' for n in need)}) over the "
                                            "whole window: a configuration named best always has a full measurement",
                2 + k)
    rounds = final_rounds(trials_table(study), plan)
    for r in range(rounds):
        final = final_round(trials_table(study), plan)
        measure([(n, False) for n in final], f"re-measuring the {len(final)} configurations tied at the top once more "
                                             f"(round {r + 1} of {rounds}), interleaved in fresh processes, so that a "
                                             "load weighs on each alike", 2 + MAX_BEST_ROUNDS + r)
