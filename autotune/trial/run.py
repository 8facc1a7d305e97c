"""One trial, in a process of its own: build the model, train it briefly, measure, report.

    python -m autotune.trial outputs/.../trials/000/spec.json

reads the spec, writes ``result.json`` beside it (or at the spec's ``result`` path), and
exits 0 whenever it could write a result, whatever the trial's status. A process that
ends without a result file is recorded as ``crash`` by the driver.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch  # noqa: E402

from autotune.system.quiet import quiet_third_party  # noqa: E402
from autotune.train import optimizer as optim  # noqa: E402
from autotune.train.measure import (  # noqa: E402
    CudaMemory,
    host_link_gib_s,
    memory_growth_gib,
    memory_probe,
    step_time_stats,
)
from autotune.train.strategy import Strategy, apply_checkpointing, apply_declared, forward_context, make_scaler  # noqa: E402
from autotune.train.target import resolve  # noqa: E402
from autotune.train.workload import Workload  # noqa: E402
from autotune.trial import clean_start  # noqa: E402
from autotune.trial.clean_start import DirtyStart, check_clean_start, track  # noqa: E402
from autotune.trial.contention import Contention  # noqa: E402
from autotune.trial.contract import TrialResult, TrialSpec  # noqa: E402
from autotune.trial.fidelity import (  # noqa: E402
    FIRST_MICRO_STEPS,
    MAX_FIRST_STEPS,
    ONE_STEP_SPREAD,
    PROBE_STEPS,
    probe_done,
    race_verdict,
)
from autotune.trial.progress import PROGRESS_FILE, TrialProgress  # noqa: E402

MAX_MEASURE_STEPS = 200  # the most timed steps min_measure_s can ask for


def resolve_builder(target: str):
    """Import the model's builder, ``package.module.function`` (or ``package.module:function``)."""
    return resolve(target)


def not_a_workload(target: str, built) -> str | None:
    """What is wrong with what builder ``target`` returned, or None where it is a Workload."""
    if isinstance(built, Workload):
        return None
    got = type(built)
    return (f"{target} returned {got.__module__}.{got.__qualname__}, not an autotune Workload; return "
            "Workload(model=..., make_batch=..., loss=..., blocks=[...]) (from autotune import Workload; "
            "examples/custom_model.py shows one)")


def preload(target: str | None) -> None:
    """What a trial process imports before it takes its memory baseline, so that no import
    counts as the trial's memory or time: the model builder's module and what the first
    optimizer imports (constructing one imports torch._dynamo: 1.1 s and 66 MB on a 2-core
    CPU, which a tiny model's trial would otherwise report as its peak)."""
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])
    if target:
        try:
            resolve_builder(target)
        except Exception:  # reported by the trial itself, as a build error
            traceback.print_exc()


def optimizer_step(workload, batch, strategy: Strategy, optimizer, scaler, device_type: str,
                   micro_steps: int | None = None) -> torch.Tensor:
    """One optimizer step of ``strategy.accumulation`` micro-steps (or the first
    ``micro_steps`` of them: a probe's first step); returns the mean loss."""
    total = torch.zeros((), device=batch_device(batch))
    for _ in range(strategy.accumulation if micro_steps is None else micro_steps):
        with forward_context(strategy, device_type):
            loss = workload.loss(workload.model, batch) / strategy.accumulation
        scaler.scale(loss).backward()
        total += loss.detach().float()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return total


def first_steps(workload, batch, strategy: Strategy, optimizer, scaler, device_type: str) -> int:
    """A probe's first step (trial/fidelity.py): ``FIRST_MICRO_STEPS`` micro-steps and the
    optimizer step, repeated while the loss scaler skips the optimizer step (a skipped step
    creates no optimizer state). Returns how many ran."""
    micro_steps = min(strategy.accumulation, FIRST_MICRO_STEPS)
    for n in range(1, MAX_FIRST_STEPS + 1):
        scale = scaler.get_scale() if scaler.is_enabled() else None
        optimizer_step(workload, batch, strategy, optimizer, scaler, device_type, micro_steps)
        if scale is None or scaler.get_scale() >= scale:  # the scaler lowers its scale when it skips
            return n
    return MAX_FIRST_STEPS


def saved_bytes(workload, strategy: Strategy, device: torch.device, device_type: str) -> dict:
    """What autograd saves in one micro-step's forward, in GiB: at the trial's micro-batch
    (``saved_gib``) and, from a one-sample forward, per sample (``saved_per_sample_gib``;
    saved bytes are a line in micro-batch: the saved weights plus a share per sample).
    Forward only, graphs dropped; it runs after the measured steps."""
    def count(n: int) -> int:
        total = [0]
        batch = workload.make_batch(n, device)
        with forward_context(strategy, device_type, total):
            loss = workload.loss(workload.model, batch)
        del loss, batch
        return total[0]

    at_m = count(strategy.micro_batch)
    out = {"saved_gib": at_m / 2**30}
    if strategy.micro_batch > 1:
        out["saved_per_sample_gib"] = (at_m - count(1)) / (strategy.micro_batch - 1) / 2**30
    return out


def flops_per_sample(workload, strategy: Strategy, device: torch.device, device_type: str) -> float:
    """The training FLOPs per sample: 3 x one sample's forward, as torch's flop counter counts
    them (backward is twice the forward; recomputation is not counted, the MFU convention).
    Forward only, without gradients, after the measured steps, and of one sample: a sample's
    work does not depend on the micro-batch, and a micro-batch's forward may not fit beside
    what the steps left cached under a budget's cap. Attention runs as the math kernel's
    matmuls here: torch's counter has no formula for the CPU's fused attention (it counted
    none of it) and rejects the fused CUDA kernels' grouped-query shapes (Llama: "sdpa_flop_count:
    query/key/value shapes are incompatible"); the matmuls are the work either kernel does."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    batch = workload.make_batch(1, device)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), forward_context(strategy, device_type), sdpa_kernel(SDPBackend.MATH), counter:
        workload.loss(workload.model, batch)
    return 3.0 * counter.get_total_flops()


def start_profiler(device_type: str):
    """torch.profiler over the measured steps (the profile run only: it slows what it sees)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_type == "cuda" else [])
    prof = profile(activities=activities, profile_memory=True)
    prof.__enter__()
    return prof


def write_profile(prof, out: Path, device_type: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out / "trace.json"))
    key = "self_cuda_time_total" if device_type == "cuda" else "self_cpu_time_total"
    (out / "top_ops.txt").write_text(prof.key_averages().table(sort_by=key, row_limit=30))


def batch_tensors(batch) -> list:
    if isinstance(batch, torch.Tensor):
        return [batch]
    values = batch.values() if isinstance(batch, dict) else batch
    return [v for v in values if isinstance(v, torch.Tensor)]


def batch_device(batch):
    return batch_tensors(batch)[0].device


def run(spec) -> dict:
    """Run one trial in this process; ``spec`` is a TrialSpec or its dict (spec.json's content)."""
    spec = TrialSpec.from_dict(spec)
    strategy = spec.the_strategy()
    device = spec.device
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    if device_type == "cpu" and spec.cpu_threads:  # study/threads.py: a busy CPU's free cores
        torch.set_num_threads(spec.cpu_threads)
    timings: dict = {}
    progress = TrialProgress(Path(spec.result).with_name(PROGRESS_FILE) if spec.result else None)
    builder = resolve_builder(spec.model.target)
    if optim.needs_torchao(strategy):
        import torchao.optim  # noqa: F401  (imported before the baseline: an import is not the trial's memory)
    probe = memory_probe(device)  # after imports (and CUDA start-up), before the model
    check_clean_start(device_type, getattr(probe, "index", 0))  # raises DirtyStart
    limits = probe.limit(spec.memory_cap_gib) if isinstance(probe, CudaMemory) else {}
    # From the driver's launch (interpreter, imports, CUDA context) to here.
    timings["startup_s"] = time.time() - (spec.launched_at or time.time())
    built = _build(spec, strategy, builder, device_type, progress, timings)
    if isinstance(built, dict):
        return built  # skipped
    workload, optimizer, scaler, batch, n_ckpt = built
    trial = _Trial(spec, strategy, device_type, workload, optimizer, scaler, batch, n_ckpt, probe, progress, timings)
    memory = trial.settle_memory()
    window = trial.timed_window(memory is None)
    result = trial.result(window, memory, limits)
    if result["status"] == "ok":
        trial.add_bounds(result)
    steps = window["step_times"]
    result.update(step_time_stats(steps, strategy.global_batch))
    if len(steps) == 1:  # one step shows no spread: a probe's is assumed (trial/fidelity.py)
        result.update(time_spread=ONE_STEP_SPREAD, spread_assumed=True)
    result["memory_growth_gib"] = memory_growth_gib(window["in_use"])
    return result


def _build(spec: TrialSpec, strategy: Strategy, builder, device_type: str, progress, timings: dict):
    """(workload, optimizer, scaler, batch, blocks checkpointed) with the strategy applied, or
    the result of a trial skipped because the model or optimizer cannot take it."""
    sync = torch.cuda.synchronize if device_type == "cuda" else (lambda: None)
    t = time.perf_counter()
    progress.say("building the model", "build")
    torch.manual_seed(spec.seed)
    try:
        workload = builder(device=spec.device, seq_len=spec.seq_len, **spec.model.config)
    except torch.OutOfMemoryError:
        raise
    except Exception as e:
        raise BuildError(f"{type(e).__name__}: {e}") from e
    wrong = not_a_workload(spec.model.target, workload)
    if wrong:  # else the first use fails with an AttributeError in every trial
        raise BuildError(wrong)
    track(workload.model)
    workload.model.train()
    if strategy.checkpoint_fraction > 0 and not workload.blocks:
        return {"status": "skipped", "cause": f"checkpointing={strategy.checkpointing} was asked for, but the model "
                "exposes no blocks: give Workload(blocks=[...]) the repeated layers to checkpoint"}
    n_ckpt = apply_checkpointing(workload.blocks, strategy.checkpointing)
    opt_spec = optim.OptimizerSpec(**spec.optimizer)
    why_not = optim.unsupported(strategy, opt_spec, custom_factory=workload.optimizer is not None)
    if why_not:
        return {"status": "skipped", "cause": why_not}
    if strategy.weights == "bf16":
        workload.model.to(torch.bfloat16)
    apply_declared(workload.model, strategy)
    optimizer = optim.build(workload.model.parameters(), strategy, opt_spec, spec.lr, workload.optimizer)
    scaler = make_scaler(strategy.precision, device_type)
    batch = workload.make_batch(strategy.micro_batch, torch.device(spec.device))
    sync()
    timings["build_s"] = time.perf_counter() - t
    return workload, optimizer, scaler, batch, n_ckpt


@dataclass
class _Trial:
    """One built trial: its steps, its memory window and its timed window."""

    spec: TrialSpec
    strategy: Strategy
    device_type: str
    workload: Workload
    optimizer: Any
    scaler: Any
    batch: Any
    n_ckpt: int
    probe: Any
    progress: TrialProgress
    timings: dict

    def sync(self) -> None:
        if self.device_type == "cuda":
            torch.cuda.synchronize()

    def step(self) -> float:
        return float(optimizer_step(self.workload, self.batch, self.strategy, self.optimizer, self.scaler,
                                    self.device_type))  # synchronises

    def settle_memory(self):
        """The optimizer state created before the memory window (a probe's short first step,
        or on CPU one whole step), then on CPU the memory step; its figures, or None where
        the timed window measures memory (CUDA)."""
        spec, probe = self.spec, self.probe
        if spec.fidelity == "probe" or probe.separate_window:
            self.progress.say("first step (creates the optimizer state)", "first")
            t = time.perf_counter()
            if spec.fidelity == "probe":  # trial/fidelity.py: a short first step settles the state
                self.timings["first_steps"] = first_steps(self.workload, self.batch, self.strategy, self.optimizer,
                                                          self.scaler, self.device_type)
            else:  # CPU, a full measurement: one whole step before the memory step
                self.step()
            self.timings["first_step_s"] = time.perf_counter() - t
        if not probe.separate_window:
            return None
        model = self.workload.model
        tensors = sum(optim.tensor_bytes(v) for v in [*model.parameters(), *model.buffers(),
                                                       *optim.state_tensors(self.optimizer),
                                                       *batch_tensors(self.batch)])
        self.progress.say("memory step", "memory")
        probe.start_window(tensors)  # what else is resident is not counted (measure.py)
        self.step()
        return probe.end_window()

    def timed_window(self, memory_in_window: bool) -> dict:
        """The timed steps: at least ``measure`` of them and at least ``min_measure_s`` seconds
        (as torch.utils.benchmark's blocked_autorange does), at most MAX_MEASURE_STEPS; a raced
        full measurement stops once its interval settles its verdict (trial/fidelity.py)."""
        spec, probe = self.spec, self.probe
        warmup, measure, min_measure_s = spec.warmup_steps, spec.measure_steps, spec.min_measure_s
        if spec.fidelity == "probe":  # settled: the timed steps (CUDA: and the memory window) begin
            warmup, measure, min_measure_s = 0, PROBE_STEPS, 0.0
        w: dict[str, Any] = {"step_times": [], "losses": [], "in_use": [], "status": "ok", "cause": None, "race": None}
        profiler = None
        contention = Contention(getattr(probe, "handle", None))
        i = 0
        while i < warmup + measure or (sum(w["step_times"]) < min_measure_s
                                       and len(w["step_times"]) < MAX_MEASURE_STEPS):
            if i == warmup:
                profiler = start_profiler(self.device_type) if spec.profile_dir else None
                if memory_in_window:
                    probe.start_window()
                contention.start()
            self.progress.say(f"warm-up step {i + 1} of {warmup}" if i < warmup else
                              f"timed step {i - warmup + 1} of at least {measure}"
                              + (f" and {min_measure_s:g} s" if min_measure_s else ""),
                              "warm-up" if i < warmup else "timed")
            self.sync()
            t = time.perf_counter()
            loss = self.step()
            self.sync()
            dt = time.perf_counter() - t
            self.timings.setdefault("first_step_s", dt)
            if i >= warmup and self._timed(w, dt, loss, i - warmup, measure):
                break
            i += 1
        self.timings["measured_s"] = sum(w["step_times"])
        w["load"] = contention.finish() if w["step_times"] else {}
        if profiler is not None and spec.profile_dir:
            profiler.__exit__(None, None, None)
            write_profile(profiler, Path(spec.profile_dir), self.device_type)
        return w

    def _timed(self, w: dict, dt: float, loss: float, k: int, measure: int) -> bool:
        """Record timed step ``k``; whether the window ends here."""
        w["step_times"].append(dt)
        w["losses"].append(loss)
        w["in_use"].append(self.probe.in_use())
        if not math.isfinite(loss):
            w["status"], w["cause"] = "nan", f"non-finite loss {loss} at measured step {k}"
            return True
        w["race"] = race_verdict(w["step_times"], self.strategy.global_batch, self.spec.race_speed, measure)
        if w["race"] in ("below", "above"):
            return True  # decided; a tie goes on to the whole window, so that it may be named best as it is
        return self.spec.fidelity == "probe" and probe_done(w["step_times"])  # slow steps: fewer say enough

    def result(self, w: dict, memory, limits: dict) -> dict:
        spec, strategy, workload = self.spec, self.strategy, self.workload
        measured_memory = memory or self.probe.finish()  # before anything below can touch the allocator
        # What no micro-batch changes: parameters, their gradients and the optimizer's state
        # (the floor of the memory line the auto search fits).
        tensors = list(workload.model.parameters()) + optim.state_tensors(self.optimizer)
        static_bytes = sum(optim.tensor_bytes(t) for t in tensors) + sum(
            p.numel() * p.element_size() for p in workload.model.parameters() if p.requires_grad)
        self.timings["total_s"] = time.time() - (spec.launched_at or time.time())
        race = w["race"]
        result = {"status": w["status"], "cause": w["cause"], "device": self.device_type,
                  "n_checkpointed": self.n_ckpt, "n_blocks": len(workload.blocks), "losses": w["losses"],
                  "step_times_s": w["step_times"], "timings": self.timings,
                  "allocator_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "static_gib": static_bytes / 2**30,
                  "optimizer": type(self.optimizer).__name__,
                  "numerics": ", ".join(optim.changes_numerics(strategy)),
                  **({"cpu_threads": torch.get_num_threads()} if self.device_type == "cpu" else {}),
                  "fidelity": "raced" if race in ("below", "above") else spec.fidelity, **limits, **w["load"]}
        if spec.race_speed:
            result["race"] = race or "open"
        result.update(measured_memory)
        return result

    def add_bounds(self, result: dict) -> None:
        """After the measurement, so that nothing here can change it: for search=auto's bound
        on offload (fact 6) the bytes offload would copy and the link it would copy over (a
        CPU probe skips it: offload runs on CUDA only, and a probe's cost is what it is for);
        for the MFU (scoring/limits.py) the model's work."""
        spec, strategy, device_type = self.spec, self.strategy, self.device_type
        device = torch.device(spec.device)
        if spec.offload_bound:
            self.progress.say("counting saved bytes (for the offload bound)", "after")
            try:
                if not strategy.offload and (device_type == "cuda" or spec.fidelity == "full"):
                    result.update(saved_bytes(self.workload, strategy, device, device_type))
                if device_type == "cuda":
                    result["host_link_gib_s"] = host_link_gib_s(self.probe.index)
            except Exception as e:  # only a bound is lost: the trial measured what it had to
                print(f"saved-bytes count or host-link probe failed, no offload bound from this trial: "
                      f"{type(e).__name__}: {e}", file=sys.stderr)
        if spec.fidelity == "full":
            try:
                result["flops_per_sample"] = flops_per_sample(self.workload, strategy, device, device_type)
            except Exception as e:  # only the MFU is lost; the table says why
                result["flops_error"] = f"{type(e).__name__}: {str(e)[:300]}"
                print(f"flop count failed, no MFU from this trial: {type(e).__name__}: {e}", file=sys.stderr)


class BuildError(RuntimeError):
    """The model builder failed: the same for every configuration, so the driver stops."""


def _is_sticky_cuda_error(e: Exception) -> bool:
    accelerator_error = getattr(torch, "AcceleratorError", None)
    text = str(e)
    return ((accelerator_error is not None and isinstance(e, accelerator_error))
            or "CUDA error" in text or "device-side assert" in text or "illegal memory access" in text)


def _write(path: Path, result: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str))
    os.replace(tmp, path)  # atomic: the driver never reads half a result


def run_spec_file(spec_path: Path, extra: dict | None = None) -> TrialResult:
    """Run the trial ``spec_path`` describes and write its result file; never raises for trial
    faults. ``extra``: fields added to the result (how the process was started)."""
    spec = json.loads(spec_path.read_text())
    result_path = Path(spec.get("result") or spec_path.with_name("result.json"))
    try:
        result = run(spec)
    except torch.OutOfMemoryError as e:
        result = {"status": "oom", "cause": str(e).splitlines()[0][:500]}
    except DirtyStart as e:
        result = {"status": "error", "phase": "isolation", "cause": str(e)}
    except BuildError as e:
        traceback.print_exc()
        result = {"status": "error", "phase": "build", "cause": f"the model builder failed: {e}"[:1000]}
    except Exception as e:  # any other failure of the user's code or ours: recorded, not raised
        traceback.print_exc()
        # A sticky CUDA error (device-side assert, illegal address) poisons this process's
        # context for good: the trial is a crash, and the process ends here.
        status = "crash" if _is_sticky_cuda_error(e) else "error"
        result = {"status": status, "cause": f"{type(e).__name__}: {e}"[:1000]}
    result.update(pid=os.getpid(), clean_start=clean_start.passed(), **(extra or {}))
    _write(result_path, result)
    print(json.dumps({k: result.get(k) for k in ("status", "cause", "peak_memory_gib", "samples_per_s")}))
    return cast(TrialResult, result)  # checked where the driver reads it back (runner._collect)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m autotune.trial SPEC.json", file=sys.stderr)
        return 2
    spec_path = Path(argv[0])
    quiet_third_party()
    try:
        target = json.loads(spec_path.read_text())["model"]["target"]
    except (OSError, ValueError, KeyError, TypeError):
        target = None  # run_spec_file reports what is wrong with the spec
    preload(target)
    run_spec_file(spec_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
