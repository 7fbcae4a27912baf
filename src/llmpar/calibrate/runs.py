"""Fit a stack to measured training runs: ``llmpar calibrate runs FILE... --stack BASE``.

What is fitted (docs/calibration.md, "Stacks from your runs"): a small, bounded set of the
stack's *physical* parameters (kernel efficiencies, overlap fractions, fixed costs, the saved
activation factor, allocator overhead) — never free weights on the breakdown's terms, which can
cut the throughput error and still wreck the ranking of layouts. The base stack's values are the
priors.

How:
* Every run is evaluated through :func:`llmpar.cost.step.step_time` — the same code `llmpar step`
  and the planner use — as arrays, one call per (model, hardware, dtype) group. A knob a run does
  not state (micro-batch, virtual stages, ZeRO stage, recompute) is searched and the fastest value
  that fits in memory kept: published and production runs are tuned (docs/architecture.md, FLOPs and MFU).
* Speed: residual log(t_predicted / t_measured) per run that ran, t the step time (from the
  measured step time, tokens/s, TFLOP/s under the row's FLOPs convention, or MFU).
* Memory: log(predicted / measured peak) for runs that ran; for runs that ran out of memory a
  one-sided residual log(capacity / predicted) when the prediction says it fits (a lower bound).
* Robust least squares (``scipy.optimize.least_squares``, trust-region reflective with bounds,
  soft-L1 loss at 5 %), plus a weak prior pulling each parameter to its base value, from the base
  values and a few deterministic starts; the lowest cost wins. Deterministic: same runs, same
  stack.
* Honest errors: k-fold cross-validation over *configurations* (model x GPU count cells; each
  row its own configuration when there are few): each fold is fitted without its configurations
  and predicts them. Reported next to the in-sample error, with the planner's regret: in each
  configuration with several measured layouts, how much slower the measured run of the layout
  llmpar ranks first is than the best measured one.

Nothing here prints.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from llmpar.calibrate.runs_io import CONVENTIONS, SETTING_KEYS, MeasuredRun
from llmpar.cost.flops import step_time_at_rate
from llmpar.errors import UserError
from llmpar.parallel import SCHEDULES as SCHEDULE_NAMES   # every schedule: a stack's `schedules` narrows it

# parameter path -> (lower, upper, prior scale, per GPU generation?)
PARAMETERS: dict[str, tuple[float, float, float, bool]] = {
    "kernels.gemm_efficiency": (0.2, 1.0, 0.15, True),
    "kernels.attention.forward_efficiency": (0.05, 1.0, 0.2, True),
    "kernels.attention.backward_efficiency": (0.05, 1.0, 0.2, True),
    "kernels.fp8.gemm_efficiency": (0.2, 1.0, 0.2, True),
    "kernels.elementwise_traffic": (0.5, 6.0, 1.0, False),
    "kernels.launch_s_per_layer": (0.0, 2e-3, 2e-4, False),
    "kernels.moe_s_per_layer": (0.0, 0.05, 2e-3, True),
    "kernels.moe_s_per_local_expert": (0.0, 0.005, 2e-4, True),
    "kernels.zero_gather_s_per_tensor_rank": (0.0, 1e-4, 1e-5, False),
    "overlap.tp": (0.0, 1.0, 0.3, False),
    "overlap.dp": (0.0, 1.0, 0.3, False),
    "overlap.pp": (0.0, 1.0, 0.5, False),
    "overlap.zero3_prefetch": (0.0, 1.0, 0.3, False),
    "overlap.param_gather": (0.0, 1.0, 0.3, False),
    "fixed.per_step_s": (0.0, 30.0, 0.5, False),
    "fixed.per_microbatch_s": (0.0, 1.0, 0.02, False),
    "network.scale_out_efficiency": (0.05, 1.0, 0.3, False),
    "network.scale_out_latency": (0.5, 20.0, 3.0, False),
    "memory.activation_factor": (0.3, 6.0, 1.0, False),
    "memory.working_layers": (0.0, 40.0, 5.0, False),
    "memory.allocator_overhead": (0.0, 1.0, 0.2, False),
    "memory.optimizer_step_bytes_per_param": (0.0, 16.0, 2.0, False),
}
SPEED_DEFAULT = ("kernels.gemm_efficiency", "kernels.attention.forward_efficiency", "fixed.per_microbatch_s")
FP8_DEFAULT = ("kernels.fp8.gemm_efficiency",)
MEMORY_DEFAULT = ("memory.activation_factor", "memory.allocator_overhead")
PRIOR_WEIGHT = 0.05      # residual units per prior-scale of departure from the base value
SOFT_L1_SCALE = 0.05     # log-error beyond which the loss grows linearly (one odd run is one run)
MICRO_BATCHES = (1, 2, 4, 8, 16)


# ------------------------------------------------------------------------------------ the runs

# One measured run: the record the readers produce (runs tables, logs, the published rows).
Run = MeasuredRun


def as_run(obj) -> Run:
    """A :class:`Run` (a reader's :class:`~llmpar.calibrate.runs_io.MeasuredRun`), or one built
    from any record with the same attribute names; a run must name its model."""
    if isinstance(obj, Run):
        if not obj.model:
            raise UserError(f"{obj.source}: the run names no model")
        return obj
    names = {f.name for f in dataclasses.fields(Run)}
    kw = {k: getattr(obj, k) for k in names if hasattr(obj, k)}
    kw["layout"] = dict(kw.get("layout") or {})
    if not kw.get("model"):
        raise UserError(f"{getattr(obj, 'source', '?')}: the run names no model")
    return Run(**kw)


@dataclass
class _Group:
    """Runs of one (model, hardware, dtype, recompute modules, stated settings), expanded over the
    knobs they leave out."""

    model: Any
    hw: Any
    dtype: str
    index: np.ndarray            # run index of each candidate
    modules: tuple | None        # the runs' recompute_modules (Megatron-Core), None: the stack's selective set
    settings: dict               # the settings the runs state (runs_io.SETTING_KEYS: --optimizer,
                                 # --grad-dtype, --tp-overlap ...); absent: the stack's
    par: Any                     # Parallel of arrays, one entry per candidate
    # what predict() computes once per group: (memory key, memory result) and the figures no stack
    # value changes (FLOPs, layout-rule violations); a fit of time-only parameters then costs
    # step time alone per evaluation (the same figures: memory depends on no time parameter)
    cache: dict = field(default_factory=dict)


PARTIAL_RECOMPUTE = (1 / 8, 1 / 4, 3 / 8, 1 / 2, 5 / 8, 3 / 4, 7 / 8)


def _recompute_layer_counts(rec: int, rec_given, n_given, per_chunk: int) -> list[int]:
    """recompute_layers values to evaluate: the stated one; for a run that does not state its
    recompute, full recompute of every layer (0) and of about 1/8 .. 7/8 of each chunk's layers
    (Megatron-Core's block method, searched like the other tuned knobs); otherwise 0 (all)."""
    from llmpar.cost.pipeline import partial_recompute_layers
    from llmpar.parallel import RECOMPUTE

    if RECOMPUTE[rec] != "full":
        return [0]
    if n_given:
        return [n_given]
    if rec_given is not None:
        return [0]
    partial = sorted({int(partial_recompute_layers(f, per_chunk)) for f in PARTIAL_RECOMPUTE} - {per_chunk})
    return [0] + [n for n in partial if n < per_chunk]


def _layout_candidates(run: Run, model, zero_stages=(0, 1, 2, 3),
                       schedules=SCHEDULE_NAMES, pp_zero_stages=None) -> list[dict[str, int]]:
    from llmpar.cost.pipeline import chunk_layers, schedule_feasible, stage_layers
    from llmpar.parallel import RECOMPUTE, SCHEDULES

    lay = run.layout
    where = run.source

    def num(key, default=None):
        v = lay.get(key, default)
        if v is None:
            return None
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise UserError(f"{where}: {key} must be a number, got {v!r}") from None
        if f != int(f) or f < 0:
            raise UserError(f"{where}: {key} must be a non-negative integer, got {v!r}")
        return int(f)

    tp, pp, cp, ep = (num(k, 1) for k in ("tp", "pp", "cp", "ep"))
    etp = num("etp", 0)
    etp = 0 if etp == tp else etp     # 0: expert-TP = tp (Parallel.etp)
    gpus, dp = num("gpus"), num("dp")
    if dp is None:
        if gpus is None:
            raise UserError(f"{where}: give gpus or dp")
        if gpus % (tp * cp * pp):
            raise UserError(f"{where}: gpus {gpus} is not divisible by tp*cp*pp = {tp * cp * pp}")
        dp = gpus // (tp * cp * pp)
    elif gpus is not None and gpus != tp * cp * pp * dp:
        raise UserError(f"{where}: gpus {gpus} disagrees with tp*cp*pp*dp = {tp * cp * pp * dp}")
    seq = num("seq")
    if seq is None:
        raise UserError(f"{where}: the run states no sequence length (seq)")
    gb, m_given, b_given = num("global_batch"), num("microbatches"), num("micro_batch")
    rec_given = lay.get("recompute")
    if rec_given is not None and str(rec_given) not in RECOMPUTE:
        raise UserError(f"{where}: recompute must be one of {', '.join(RECOMPUTE)}, got {rec_given!r}")
    recs = [RECOMPUTE.index(str(rec_given))] if rec_given is not None else list(range(len(RECOMPUTE)))
    if lay.get("recompute_modules") is not None:
        # Megatron-Core's --recompute-modules name what selective recompute re-runs
        if rec_given is not None and str(rec_given) != "selective":
            raise UserError(f"{where}: recompute_modules needs recompute: selective (got {rec_given})")
        recs = [RECOMPUTE.index("selective")]
    n_rec_given = num("recompute_layers")
    if n_rec_given and (rec_given is None or str(rec_given) != "full"):
        raise UserError(f"{where}: recompute_layers needs recompute: full")
    n_off = num("offload_layers") or 0
    if n_off:
        # Megatron-Core's rules for CPU offloading (layout.resolve): below the layer count, pp 1,
        # no recompute (an unstated recompute is therefore none)
        if n_off >= model.layers:
            raise UserError(f"{where}: offload_layers {n_off} must be below the model's {model.layers} layers")
        if pp > 1:
            raise UserError(f"{where}: offload_layers needs pp 1 (got pp {pp})")
        if rec_given is not None and str(rec_given) != "none":
            raise UserError(f"{where}: offload_layers needs recompute: none (got {rec_given})")
        recs = [RECOMPUTE.index("none")]
    zero_given = num("zero")
    # an unstated ZeRO stage is searched like the other tuned knobs (FSDP-style runs rarely say
    # which stage their sharding amounts to)
    zeros = [zero_given] if zero_given is not None else list(zero_stages)
    if zero_given is None and pp > 1 and pp_zero_stages is not None:
        # under pipeline parallelism only the stages the framework launches there
        # (layout.stack_violations)
        zeros = [z for z in zeros if z in pp_zero_stages] or zeros
    sp = lay.get("sp")
    sp = bool(tp > 1) if sp is None else bool(sp)
    sched = lay.get("schedule")
    v_given = num("virtual_stages")
    bs = [b_given] if b_given else [b for b in MICRO_BATCHES]
    per_stage = int(stage_layers(model.layers, pp))
    # a run that states no schedule ran one its framework implements (the stack's `schedules`):
    # the interleaved one is searched only where the stack has it, else its plain schedule (1F1B)
    single = [x for x in schedules if x != "interleaved"]
    plain = "1f1b" if "1f1b" in single or not single else single[0]
    if v_given:
        vs = [v_given]
    elif pp > 1 and (sched == "interleaved" or (sched is None and "interleaved" in schedules)):
        vs = [1] + [v for v in range(2, per_stage + 1) if per_stage % v == 0]
    else:
        vs = [1]
    out, infeasible = [], []
    for b in bs:
        if gb is not None:
            if gb % (b * dp):
                continue
            m = gb // (b * dp)
        elif m_given is not None:
            m = m_given
        else:
            raise UserError(f"{where}: the run states neither global_batch nor microbatches")
        for v in vs:
            per_chunk = int(chunk_layers(model.layers, pp, v))
            if n_rec_given and n_rec_given > per_chunk:
                raise UserError(f"{where}: recompute_layers {n_rec_given} exceeds the {per_chunk} layers of a "
                                f"pipeline chunk ({model.layers} layers / pp={pp}" + (f" / v={v})" if v > 1 else ")"))
            s_name = sched or ("interleaved" if v > 1 else plain)
            if s_name not in SCHEDULES:
                raise UserError(f"{where}: unknown schedule {s_name!r}")
            # the schedule's own rule (cost/pipeline.py), as the planner and the CLI apply it
            if not bool(schedule_feasible(SCHEDULES.index(s_name), pp, m, v)):
                infeasible.append(f"{s_name} with pp={pp}, {m} micro-batches, v={v}")
                continue
            for zero in zeros:
                for rec in recs:
                    for n_rec in _recompute_layer_counts(rec, rec_given, n_rec_given, per_chunk):
                        out.append(dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, zero=zero, sp=sp, recompute=rec,
                                        micro_batch=b, microbatches=m, seq=seq, schedule=SCHEDULES.index(s_name),
                                        virtual_stages=v, recompute_layers=n_rec, offload_layers=n_off))
    if not out:
        if infeasible:
            raise UserError(f"{where}: the schedule cannot run any candidate layout "
                            f"({infeasible[0]}; cost/pipeline.py schedule_feasible)")
        raise UserError(f"{where}: no micro-batch divides the global batch {gb} over dp={dp}")
    return out


def _check_measured(r: Run, hw, dtype: str) -> None:
    """What a run's hardware bounds: TFLOP/s per GPU at most the GPU's dense peak for the run's
    dtype (an MFU above 1 otherwise, which the readers refuse), peak memory at most its memory."""
    if r.tflops_per_gpu is not None and r.tflops_per_gpu * 1e12 > hw.gpu.peak(dtype):
        raise UserError(f"{r.source}: tflops_per_gpu {r.tflops_per_gpu:g} is above the dense {dtype} peak of "
                        f"{hw.gpu.name} ({hw.gpu.peak(dtype) / 1e12:g} TFLOP/s): an MFU above 1")
    for key in ("peak_allocated_bytes", "peak_reserved_bytes"):
        v = getattr(r, key)
        if v is not None and v > hw.gpu.memory:
            raise UserError(f"{r.source}: {key} {v / 2**30:.4g} GiB is more than the {hw.gpu.memory / 2**30:.4g} GiB "
                            f"of memory of {hw.gpu.name} ({hw.name})")


def prepare(runs: Iterable, *, hardware: str | None = None, models: dict | None = None,
            zero_stages=(0, 1, 2, 3),
            schedules=SCHEDULE_NAMES, notes: list[str] | None = None,
            pp_zero_stages=None) -> tuple[list[Run], list[_Group]]:
    """Resolve models and hardware and expand every run's candidate layouts into array groups.

    Each run goes through the rules ``llmpar step`` applies (``layout.check_layout``,
    ``layout.check_settings``) and its measurements through its hardware's bounds; a failure is
    one UserError naming the run's ``file:line``. A layout that breaks a layout rule is refused
    for a run that ran (status ok) and noted for one that did not (it is predicted not to run,
    which its status agrees with) or for a published row (``row:``), kept as published. The notes
    go to the runs' ``notes`` and to ``notes``."""
    from llmpar.parallel import Parallel, Settings
    from llmpar.layout import check_layout, check_settings, layout_violations
    from llmpar.specs import load_hardware, load_model
    from llmpar.specs.model import ModelSpec

    runs = [as_run(r) for r in runs]
    if not runs:
        raise UserError("no runs to evaluate")
    models = models or {}
    cache: dict[str, Any] = {}
    hw_cache: dict[str, Any] = {}

    def model_of(name, where):
        if name not in cache:
            spec = models.get(name)
            try:
                cache[name] = spec if isinstance(spec, ModelSpec) else load_model(name)
            except UserError as exc:
                raise UserError(f"{where}: {exc}") from None
        return cache[name]

    def hw_of(name, where):
        if name not in hw_cache:
            try:
                hw_cache[name] = load_hardware(name)
            except UserError as exc:
                raise UserError(f"{where}: {exc}") from None
        return hw_cache[name]

    buckets: dict[tuple, list[tuple[int, dict]]] = {}
    settings_ok: set[tuple] = set()
    for i, r in enumerate(runs):
        hw_name = r.hardware or hardware
        if hw_name is None:
            raise UserError(f"{r.source}: the run names no hardware; give --hardware")
        dtype = str(r.layout.get("dtype", "bf16"))
        hw = hw_of(str(hw_name), r.source)
        if (str(hw_name), dtype) not in settings_ok:
            try:   # the dtype needs a peak on this GPU (fp8 on A100), as step and plan say
                check_settings(hw, Settings(dtype=dtype))
            except UserError as exc:
                raise UserError(f"{r.source}: {str(exc).removeprefix('--')}") from None
            settings_ok.add((str(hw_name), dtype))
        _check_measured(r, hw, dtype)
        key = (r.model, str(hw_name), dtype, r.layout.get("recompute_modules"),
               tuple((k, r.layout[k]) for k in SETTING_KEYS if r.layout.get(k) is not None))
        for cand in _layout_candidates(r, model_of(r.model, r.source), zero_stages, schedules, pp_zero_stages):
            buckets.setdefault(key, []).append((i, cand))
    groups = []
    broken: dict[int, str] = {}    # run -> the layout rule every candidate of it breaks
    for (mname, hw_name, dtype, modules, stated), items in buckets.items():
        fields = items[0][1].keys()
        arr = {k: np.array([c[k] for _, c in items]) for k in fields}
        hw = hw_cache[hw_name]
        if hw.host_bandwidth is None and np.any(arr["offload_layers"] > 0):
            i = next(i for i, c in items if c["offload_layers"])
            raise UserError(f"{runs[i].source}: offload_layers needs the hardware's host_bandwidth (the CPU-GPU "
                            f"link); {hw.name} states none")
        model, par = model_of(mname, runs[items[0][0]].source), Parallel(**arr)
        index = np.array([i for i, _ in items])
        # the layout rules `llmpar step` and the planner apply (layout.layout_violations), over
        # every candidate at once; the message is check_layout's, of the first broken candidate
        bad = np.zeros(len(items), dtype=bool)
        for mask in layout_violations(model, par).values():
            bad = bad | np.broadcast_to(np.asarray(mask, dtype=bool), bad.shape)
        for i in dict.fromkeys(index[bad].tolist()):
            if bad[index == i].all():
                try:
                    check_layout(model, par.take(int(np.flatnonzero(index == i)[0])))
                except UserError as exc:
                    broken[i] = str(exc)
        groups.append(_Group(model=model, hw=hw, dtype=dtype, modules=modules, settings=dict(stated),
                             index=index, par=par))
    for i in sorted(broken):
        r = runs[i]
        if r.status == "ok" and not r.row:
            raise UserError(f"{r.source}: {broken[i]}")
        why = (f"the published run (row {r.row}) is kept as published" if r.status == "ok"
               else f"kept: predicted not to run, as its status ({r.status}) says")
        note = f"{r.source}: {broken[i]} (llmpar's layout rules); {why}"
        runs[i] = dataclasses.replace(r, notes=r.notes + (note,))
        if notes is not None:
            notes.append(note)
    return runs, groups


# ------------------------------------------------------------------------------ predictions

@dataclass
class Predictions:
    step_time_s: np.ndarray          # per run: the fastest candidate (that fits, if any fits)
    memory_bytes: np.ndarray         # predicted total of that candidate (pool + CUDA context + NCCL): the OOM bound
    capacity_bytes: np.ndarray
    fits: np.ndarray
    model_flops: np.ndarray          # per step, attention in full (convention 'full')
    causal_flops: np.ndarray
    hardware_flops: np.ndarray       # executed with full s^2 counting + recompute ('hardware')
    tokens_per_step: np.ndarray
    gpus: np.ndarray
    pick: list[dict]                 # the chosen candidate's knobs per run
    # that candidate's allocator figures (torch's max_memory_allocated / _reserved counterparts;
    # memory_bytes above is the total, pool + CUDA context + NCCL): for `llmpar validate`
    allocated_bytes: np.ndarray | None = None
    reserved_bytes: np.ndarray | None = None
    # the same of pipeline stage 0 (what world rank 0 measures: a run's memory_stage "first")
    first_allocated_bytes: np.ndarray | None = None
    first_reserved_bytes: np.ndarray | None = None


def predict(runs: list[Run], groups: list[_Group], stack) -> Predictions:
    """Every run through cost/step with ``stack`` (arrays; one call per group)."""
    from llmpar.cost import flops
    from llmpar.cost.step import step_time
    from llmpar.parallel import RECOMPUTE, SCHEDULES, Settings
    from llmpar.layout import layout_violations

    n = len(runs)
    out = {k: np.full(n, np.nan) for k in ("t", "mem", "cap", "mf", "cf", "hf", "tok", "gpus", "alloc", "pool",
                                           "alloc0", "pool0")}
    fits = np.zeros(n, dtype=bool)
    pick: list[dict] = [{} for _ in range(n)]
    best = np.full(n, np.inf)
    mem_key = _memory_key(stack)
    for g in groups:
        settings = Settings(dtype=g.dtype, stack=stack, recompute_modules=g.modules, **g.settings)
        if g.cache.get("memory_key") == mem_key:
            res = step_time(g.model, g.hw, g.par, settings, with_memory=False)
            mem = g.cache["memory"]
        else:
            res = step_time(g.model, g.hw, g.par, settings)
            mem = res["memory"]
            g.cache.update(memory_key=mem_key, memory=mem)
        t = np.asarray(res["step_time_s"], dtype=float)
        if "broken" not in g.cache:
            # a layout that breaks a layout rule (pp > layers, tp not dividing the heads, ...) cannot
            # run: llmpar's verdict for it is "does not run", as for one that does not fit
            broken = np.zeros(np.shape(np.asarray(mem["fits"])), dtype=bool)
            for mask in layout_violations(g.model, g.par).values():
                broken = broken | np.broadcast_to(np.asarray(mask, dtype=bool), broken.shape)
            g.cache["broken"] = broken
        fkey = (settings.selective_policy, settings.attention)   # what the FLOP counts read of the settings
        if g.cache.get("flops_key") != fkey:
            g.cache["flops_key"] = fkey
            g.cache["flops"] = (
                np.asarray(flops.model_flops_per_step(g.model, g.par), dtype=float),
                np.asarray(flops.model_flops_per_step(g.model, g.par, flops.CAUSAL_FLASH), dtype=float),
                np.asarray(flops.hardware_flops_per_step(g.model, g.par, flops.CAUSAL_FULL,
                                                         settings.selective_policy, settings.attention), dtype=float))
        broken = g.cache["broken"]
        ok = np.asarray(mem["fits"], dtype=bool) & ~broken
        total = np.asarray(mem["total_bytes"], dtype=float)
        alloc = np.broadcast_to(np.asarray(mem["allocated_bytes"], dtype=float), total.shape)
        pool = np.broadcast_to(np.asarray(mem["reserved_bytes"], dtype=float), total.shape)
        alloc0 = np.broadcast_to(np.asarray(mem["first_stage_allocated_bytes"], dtype=float), total.shape)
        pool0 = np.broadcast_to(np.asarray(mem["first_stage_reserved_bytes"], dtype=float), total.shape)
        mf, cf, hf = g.cache["flops"]
        # rank candidates of a run: fitting ones first, then by time
        score = t + np.where(ok, 0.0, 1e12)
        for j, i in enumerate(g.index):
            if score[j] < best[i]:
                best[i] = score[j]
                out["t"][i], out["mem"][i], out["cap"][i] = t[j], total[j], float(mem["capacity_bytes"] if np.ndim(
                    mem["capacity_bytes"]) == 0 else np.asarray(mem["capacity_bytes"])[j])
                out["mf"][i], out["cf"][i], out["hf"][i] = mf.flat[j] if mf.ndim else mf, cf.flat[j] if cf.ndim else cf, \
                    hf.flat[j] if hf.ndim else hf
                par = g.par.take(j)
                out["tok"][i] = float(par.tokens_per_step)
                out["gpus"][i] = float(par.gpus)
                out["alloc"][i], out["pool"][i] = alloc.flat[j], pool.flat[j]
                out["alloc0"][i], out["pool0"][i] = alloc0.flat[j], pool0.flat[j]
                fits[i] = bool(ok[j])
                pick[i] = {"micro_batch": int(par.micro_batch), "virtual_stages": int(par.virtual_stages),
                           "zero": int(par.zero), "recompute": RECOMPUTE[int(par.recompute)],
                           "microbatches": int(par.microbatches), "schedule": SCHEDULES[int(par.schedule)],
                           "sp": bool(par.sp), "recompute_layers": int(par.recompute_layers),
                           "offload_layers": int(par.offload_layers)}
    return Predictions(out["t"], out["mem"], out["cap"], fits, out["mf"], out["cf"], out["hf"], out["tok"],
                       out["gpus"], pick, out["alloc"], out["pool"], out["alloc0"], out["pool0"])


def _memory_key(stack) -> str:
    """The stack's values that memory can depend on: all of them but the PARAMETERS outside
    ``memory.`` (kernel fractions, overlaps, fixed and network costs change step time only)."""
    import json

    d = stack.model_dump()
    for path in PARAMETERS:
        if path.startswith("memory."):
            continue
        node = d
        *parts, last = path.split(".")
        for part in parts:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(last, None)
    return json.dumps(d, sort_keys=True, default=str)


def comparable_peak(runs: list[Run], pred: Predictions) -> np.ndarray:
    """The predicted figure each run's measured peak is compared with: the allocator pool for a
    measured torch max_memory_reserved, the allocated bytes for max_memory_allocated (neither
    includes the CUDA context or NCCL buffers, which torch does not count); the total otherwise.
    Of the most-loaded pipeline stage, or of stage 0 when the run measured world rank 0
    (``memory_stage: first``); the FITS verdict always takes the most-loaded stage."""
    def one(i, r):
        first = r.memory_stage == "first"
        if r.peak_reserved_bytes:
            return (pred.first_reserved_bytes if first else pred.reserved_bytes)[i]
        if r.peak_allocated_bytes:
            return (pred.first_allocated_bytes if first else pred.allocated_bytes)[i]
        return pred.memory_bytes[i]
    return np.array([one(i, r) for i, r in enumerate(runs)], dtype=float)


def measured_step_time(runs: list[Run], pred: Predictions) -> np.ndarray:
    """Each run's measured step time (nan without a speed figure), from whichever figure it has."""
    from llmpar.specs import load_hardware

    t = np.full(len(runs), np.nan)
    for i, r in enumerate(runs):
        if r.status != "ok":
            continue
        flops_of = {"full": pred.model_flops[i], "causal": pred.causal_flops[i], "hardware": pred.hardware_flops[i]}
        if r.convention not in flops_of:
            raise UserError(f"{r.source}: unknown FLOPs convention {r.convention!r}; one of {', '.join(CONVENTIONS)}")
        order = ("step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu")
        if r.metric in order:
            order = (r.metric,) + tuple(k for k in order if k != r.metric)
        key = next((k for k in order if getattr(r, k) is not None), None)
        if key == "step_time_s":
            t[i] = r.step_time_s
        elif key == "tokens_per_s_per_gpu":
            t[i] = step_time_at_rate(pred.tokens_per_step[i], r.tokens_per_s_per_gpu, pred.gpus[i])
        elif key == "tflops_per_gpu":
            t[i] = step_time_at_rate(flops_of[r.convention], r.tflops_per_gpu * 1e12, pred.gpus[i])
        elif key == "mfu":
            peak = load_hardware(r.hardware).gpu.peak(r.mfu_peak_dtype) if r.hardware else np.nan
            t[i] = step_time_at_rate(flops_of[r.convention], r.mfu * peak, pred.gpus[i])
    return t


def check_physics(runs: list[Run], pred: Predictions, t_meas: np.ndarray, groups: list[_Group]) -> None:
    """A measured step time (or tokens/s) that would do the run's work faster than its GPUs can
    is refused with its file:line before anything is fitted to it (reliability review, item 6: a
    1e-9 s step drove gemm_efficiency to its bound): the implied MFU, the model's causal FLOPs (the
    fewest any convention counts) over the step time, the GPUs and the dense peak of the run's
    dtype, must be at most 1. The TFLOP/s and MFU columns are bounded where they are read."""
    group_of = {int(i): g for g in groups for i in np.unique(g.index)}
    for i, r in enumerate(runs):
        t = t_meas[i]
        g = group_of.get(i)
        if g is None or not np.isfinite(t) or t <= 0:
            continue
        peak = g.hw.gpu.peak(g.dtype)
        mfu = pred.causal_flops[i] / (t * pred.gpus[i] * peak)
        if mfu > 1.0:
            raise UserError(f"{r.source}: the measured step ({t:.3g} s for {pred.tokens_per_step[i]:,.0f} tokens on "
                            f"{int(pred.gpus[i]):,} GPUs) implies an MFU of {mfu:,.3g} against {g.hw.gpu.name}'s dense "
                            f"{g.dtype} peak: faster than the GPUs can compute; refusing to fit it (check the unit: "
                            "step_time_s is seconds, tokens_per_s_per_gpu per GPU)")


def measured_memory(runs: list[Run]) -> np.ndarray:
    return np.array([(r.peak_reserved_bytes or r.peak_allocated_bytes or np.nan) if r.status == "ok" else np.nan
                     for r in runs], dtype=float)


# ---------------------------------------------------------------------------------- fitting

def stack_with(stack, values: dict[str, float], generation: str | None):
    """A copy of ``stack`` with ``values`` (dotted paths) set; a per-generation value is set for
    ``generation`` and keeps the other generations' entries."""
    data = stack.model_dump()
    for path, value in values.items():
        node = data
        parts = path.split(".")
        for p in parts[:-1]:
            node = node[p]
        old = node[parts[-1]]
        if isinstance(old, dict):
            node[parts[-1]] = {**old, (generation or "default"): float(value)}
        else:
            node[parts[-1]] = float(value)
    return type(stack).model_validate(data)


def base_values(stack, names, generation):
    return np.array([stack.value(n, generation) for n in names], dtype=float)


@dataclass
class _Problem:
    runs: list[Run]
    groups: list[_Group]
    stack: Any
    names: list[str]
    generation: str | None
    t_meas: np.ndarray
    m_meas: np.ndarray
    use: np.ndarray                  # runs in this fit

    def evaluate(self, x) -> Predictions:
        return predict(self.runs, self.groups, stack_with(self.stack, dict(zip(self.names, x)), self.generation))

    def residuals(self, x) -> np.ndarray:
        pred = self.evaluate(x)
        return np.concatenate([data_residuals(self.runs, pred, self.t_meas, self.m_meas, self.use), self.prior(x)])

    def prior(self, x) -> np.ndarray:
        x0 = base_values(self.stack, self.names, self.generation)
        scale = np.array([PARAMETERS[n][2] for n in self.names])
        return PRIOR_WEIGHT * (np.asarray(x) - x0) / scale


def data_residuals(runs, pred: Predictions, t_meas, m_meas, use) -> np.ndarray:
    """log errors of speed (ran) and memory (ran: peak; OOM: one-sided lower bound)."""
    speed = np.where(use & np.isfinite(t_meas), np.log(pred.step_time_s / np.where(np.isfinite(t_meas), t_meas, 1.0)), 0.0)
    mem_ok = use & np.isfinite(m_meas)
    mem = np.where(mem_ok, np.log(comparable_peak(runs, pred) / np.where(mem_ok, m_meas, 1.0)), 0.0)
    oom = use & np.array([r.status == "oom" for r in runs])
    bound = np.where(oom, np.maximum(np.log(pred.capacity_bytes / pred.memory_bytes), 0.0), 0.0)
    return np.nan_to_num(np.concatenate([speed, mem, bound]), nan=0.0, posinf=10.0, neginf=-10.0)


def default_parameters(runs: list[Run]) -> list[str]:
    names: list[str] = []
    if any(r.has_speed for r in runs):
        names += SPEED_DEFAULT
        if any(str(r.layout.get("dtype")) == "fp8" and r.has_speed for r in runs):
            names += FP8_DEFAULT
    if any(r.has_memory for r in runs):
        names += MEMORY_DEFAULT
    return names


def _solve(prob: _Problem, start=None) -> np.ndarray:
    from scipy.optimize import least_squares

    lo = np.array([PARAMETERS[n][0] for n in prob.names])
    hi = np.array([PARAMETERS[n][1] for n in prob.names])
    x0 = np.clip(base_values(prob.stack, prob.names, prob.generation), lo, hi)
    # the base values, then (deterministically) the middle of the box: the objective is smooth in
    # these parameters except where a searched knob (micro-batch, chunks) flips, so two starts do
    starts = [x0, 0.5 * (lo + hi)] if start is None else [np.clip(start, lo, hi)]
    best, best_cost = x0, math.inf
    for s in starts:
        r = least_squares(prob.residuals, s, bounds=(lo, hi), loss="soft_l1", f_scale=SOFT_L1_SCALE,
                          diff_step=1e-3, x_scale=np.maximum(hi - lo, 1e-9) / 4, max_nfev=60, method="trf")
        if r.cost < best_cost - 1e-12:
            best, best_cost = r.x, r.cost
    return np.asarray(best)


# ------------------------------------------------------------------------------ the report

def configurations(runs: list[Run]) -> list[tuple]:
    """The configuration (model, GPU count, hardware) of each run: the unit of cross-validation."""
    def gpus(r):
        lay = r.layout
        if lay.get("gpus") is not None:
            return int(lay["gpus"])
        return int(lay.get("dp", 1)) * int(lay.get("tp", 1)) * int(lay.get("pp", 1)) * int(lay.get("cp", 1))

    return [(r.model, gpus(r), r.hardware) for r in runs]


def error_stats(err: np.ndarray) -> dict[str, float | None]:
    e = np.abs(err[np.isfinite(err)])
    if e.size == 0:
        return {"runs": 0, "median_abs": None, "mean_abs": None, "max_abs": None}
    return {"runs": int(e.size), "median_abs": float(np.median(e)), "mean_abs": float(np.mean(e)),
            "max_abs": float(np.max(e))}


def regret(runs: list[Run], pred_t: np.ndarray, t_meas: np.ndarray, fits: np.ndarray,
           tokens: np.ndarray | None = None) -> dict[str, Any]:
    """In each configuration with >= 2 measured layouts: how much slower the measured layout
    llmpar ranks fastest (among those it predicts fit) is than the best measured one.

    Layouts are ranked and compared by time per token (``tokens``: each run's tokens per step),
    not by step time: two layouts of one configuration need not run the same global batch (the
    playbook's 1B on 32 GPUs at pp 2, dp 16, micro-batch 8 and 1 micro-batch steps 128
    sequences where the others step 256, and its 0.85 s step is half the throughput of the 0.89 s
    step of 256). Without ``tokens`` every run counts as the same batch."""
    cfg = configurations(runs)
    per_tok = np.ones(len(runs)) if tokens is None else np.asarray(tokens, dtype=float)
    pt = np.asarray(pred_t, dtype=float) / per_tok
    mt = np.asarray(t_meas, dtype=float) / per_tok
    per: dict[tuple, float] = {}
    for key in sorted(set(cfg), key=str):
        idx = [i for i, c in enumerate(cfg) if c == key and np.isfinite(mt[i])]
        if len(idx) < 2:
            continue
        cand = [i for i in idx if fits[i]] or idx
        pick = min(cand, key=lambda i: pt[i])
        per[key] = float(mt[pick] / min(mt[i] for i in idx) - 1.0)
    vals = np.array(list(per.values()))
    return {"configurations": len(per), "median": float(np.median(vals)) if vals.size else None,
            "within_5pct": float(np.mean(vals <= 0.05)) if vals.size else None,
            "per_configuration": {f"{k[0]} x {k[1]}": v for k, v in per.items()}}


@dataclass
class RunsFit:
    base: Any
    fitted: Any
    parameters: dict[str, dict[str, float]]       # name -> {before, after}
    runs: list[Run]
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    generation: str | None
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # what resolving the runs noted (prepare)
    base_path: str | None = None   # the base stack's file, when it was given as one (absolute)
    # each cross-validation fold: the configurations it held out and the values fitted without them
    fold_values: list[dict[str, Any]] = field(default_factory=list)

    def extends(self, out_dir: str | None = None) -> str:
        """What the written stack's ``extends:`` says: the base's name when it is a shipped stack;
        its file's path when it came from a file (a name would not load), relative to
        ``out_dir`` (the written file's folder: ``extends:`` paths resolve against the folder of
        the file that holds them), else absolute."""
        import os

        if self.base_path is None:
            return self.base.name
        if out_dir is None:
            return self.base_path
        rel = os.path.relpath(self.base_path, os.path.abspath(out_dir))
        # a bare 'name' without a folder or a YAML suffix would be read as a shipped name
        return rel if rel.endswith((".yaml", ".yml", ".json")) or os.sep in rel else self.base_path

    def stack_dict(self, name: str, out_dir: str | None = None) -> dict[str, Any]:
        """The stack written by --out: extends the base with the fitted values and a record
        (``out_dir``: the folder it is written to; see :meth:`extends`)."""
        out: dict[str, Any] = {"name": name, "extends": self.extends(out_dir),
                               "description": f"{self.base.name} calibrated on {len(self.runs)} measured runs"}
        for path, v in self.parameters.items():
            node = out
            parts = path.split(".")
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            old = self.base
            for p in parts:
                old = getattr(old, p)
            node[parts[-1]] = {**old, (self.generation or "default"): round(v["after"], 6)} if isinstance(old, dict) \
                else round(v["after"], 6)
        out["fitted_on"] = [f"{len(self.runs)} runs from {', '.join(self.files) or 'the API'}"]
        out["calibration"] = {
            "date": datetime.date.today().isoformat(),
            "method": "scipy.optimize.least_squares (trf, soft-L1 on log error, bounds, prior to the base values)",
            "files": list(self.files),
            "parameters": {k: {kk: round(vv, 6) for kk, vv in v.items()} for k, v in self.parameters.items()},
            "error": self.summary,
        }
        return out


def _intervals(runs, groups, stack, pred) -> list[Any]:
    """Each run's step-time interval (llmpar.evidence) for its evidence class under ``stack``."""
    from llmpar import evidence as EV

    group_of = {int(i): g for g in groups for i in np.unique(g.index)}
    out = []
    for i, r in enumerate(runs):
        g = group_of.get(i)
        out.append(None if g is None else EV.interval(
            EV.shipped_residuals(), "speed", EV.evidence_class(stack.name, g.hw.gpu.generation, g.model.is_moe,
                                                               g.dtype, float(pred.gpus[i]), float(r.layout["seq"]))))
    return out


def _rows(runs, pred_before, pred_after, t_meas, m_meas, cv_t=None, intervals=None) -> list[dict[str, Any]]:
    peak_before, peak_after = comparable_peak(runs, pred_before), comparable_peak(runs, pred_after)
    rows = []
    for i, r in enumerate(runs):
        row = {"source": r.source, "model": r.model, "status": r.status, "layout": dict(r.layout),
               "chosen": pred_after.pick[i], "tokens_per_step": float(pred_after.tokens_per_step[i]),
               "measured_step_time_s": float(t_meas[i]) if np.isfinite(t_meas[i]) else None,
               "predicted_step_time_s_before": float(pred_before.step_time_s[i]),
               "predicted_step_time_s_after": float(pred_after.step_time_s[i]),
               "measured_memory_bytes": float(m_meas[i]) if np.isfinite(m_meas[i]) else None,
               "predicted_memory_bytes_before": float(peak_before[i]),
               "predicted_memory_bytes_after": float(peak_after[i]),
               "predicted_fits_after": bool(pred_after.fits[i])}
        iv = intervals[i] if intervals is not None else None
        t = float(pred_after.step_time_s[i])
        row["predicted_step_time_s_interval"] = [t * iv.lo, t * iv.hi] if iv is not None and np.isfinite(t) else None
        row["interval_evidence"] = iv.evidence() if iv is not None else None
        if cv_t is not None:
            row["predicted_step_time_s_cv"] = float(cv_t[i]) if np.isfinite(cv_t[i]) else None
        rows.append(row)
    return rows


def speed_error(pred_t, t_meas):
    """Throughput error: predicted / measured tokens/s - 1 = t_measured / t_predicted - 1."""
    return t_meas / pred_t - 1.0


def memory_error(pred_m, m_meas):
    return pred_m / m_meas - 1.0


def _summary(runs, pred, t_meas, m_meas) -> dict[str, Any]:
    oom = np.array([r.status == "oom" for r in runs])
    ok_mem = np.array([r.status == "ok" for r in runs])
    verdicts = (ok_mem & pred.fits) | (oom & ~pred.fits)
    judged = ok_mem | oom
    return {"speed": error_stats(speed_error(pred.step_time_s, t_meas)),
            "memory": error_stats(memory_error(comparable_peak(runs, pred), m_meas)),
            "fits_agreement": float(np.mean(verdicts[judged])) if judged.any() else None,
            "regret": regret(runs, pred.step_time_s, t_meas, pred.fits, pred.tokens_per_step)}


def fit_runs(runs, stack, *, hardware: str | None = None, parameters: list[str] | None = None,
             folds: int = 5, models: dict | None = None, files: list[str] | None = None,
             check_only: bool = False, progress=None) -> RunsFit:
    """Fit ``parameters`` of ``stack`` (default: what the runs constrain) to ``runs``; report the
    in-sample and cross-validated errors and the planner's regret. ``check_only``: no fit.
    ``progress``: an optional ``progress(name, done, total)`` callback (the CLI's bar), called
    after the base prediction, the fit and each cross-validation fold."""
    tick = progress or (lambda name, done, total: None)
    from pathlib import Path

    from llmpar.specs import load_stack
    from llmpar.specs.registry import _looks_like_path

    base_path = str(Path(stack).resolve()) if isinstance(stack, (str, Path)) and _looks_like_path(str(stack)) \
        else None
    stack = load_stack(stack)
    notes: list[str] = []
    runs, groups = prepare(runs, hardware=hardware, models=models, zero_stages=stack.zero_stages,
                           pp_zero_stages=stack.pp_zero_stages,
                           schedules=stack.schedules, notes=notes)
    gens = {g.hw.gpu.generation for g in groups}
    if len(gens) > 1:
        raise UserError(f"the runs span several GPU generations ({', '.join(sorted(map(str, gens)))}): "
                        "calibrate one generation at a time (--only hardware=NAME keeps one profile's runs)")
    generation = gens.pop()
    names = list(parameters) if parameters is not None else default_parameters(runs)
    unknown = [n for n in names if n not in PARAMETERS]
    if unknown:
        raise UserError(f"cannot fit {', '.join(unknown)}; fittable: {', '.join(PARAMETERS)}")
    if not check_only and not any(r.has_speed or r.has_memory for r in runs):
        # no residual to fit: the "fitted" stack would be the base under another name
        counts = ", ".join(f"{sum(r.status == st for r in runs)} {st}" for st in ("ok", "oom", "crashed")
                           if any(r.status == st for r in runs))
        raise UserError(f"nothing to fit: none of the {len(runs)} runs ({counts}) has a measured speed or peak "
                        f"memory, or ran out of memory (--check reports the stack's predictions without a fit)")
    pred0 = predict(runs, groups, stack)
    n_cfg = len(set(configurations(runs)))
    steps = 1 if (check_only or not names) else 2 + (max(2, min(folds, n_cfg)) if n_cfg >= 2 and folds else 0)   # k below
    tick("predict", 1, steps)
    t_meas = measured_step_time(runs, pred0)
    check_physics(runs, pred0, t_meas, groups)
    m_meas = measured_memory(runs)
    use = np.ones(len(runs), dtype=bool)
    x0 = base_values(stack, names, generation)
    if check_only or not names:
        summ = {"before": _summary(runs, pred0, t_meas, m_meas)}
        return RunsFit(stack, stack, {}, runs, _rows(runs, pred0, pred0, t_meas, m_meas,
                                                     intervals=_intervals(runs, groups, stack, pred0)),
                       summ, generation, files or [],
                       notes, base_path)
    prob = _Problem(runs, groups, stack, names, generation, t_meas, m_meas, use)
    x = _solve(prob)
    fitted = stack_with(stack, dict(zip(names, x)), generation)
    pred1 = predict(runs, groups, fitted)
    tick("fit", 2, steps)
    # k-fold over configurations: each fold fitted without its configurations predicts them
    cfg = configurations(runs)
    keys = sorted(set(cfg), key=str)
    k = max(2, min(folds, len(keys))) if len(keys) >= 2 and folds else 0   # --folds 0: no cross-validation
    cv_t = np.full(len(runs), np.nan)
    cv_m = np.full(len(runs), np.nan)
    cv_fits = np.zeros(len(runs), dtype=bool)
    cv_a, cv_r = np.full(len(runs), np.nan), np.full(len(runs), np.nan)
    cv_a0, cv_r0 = np.full(len(runs), np.nan), np.full(len(runs), np.nan)
    fold_values: list[dict[str, Any]] = []
    for f in range(k):
        held = {key for j, key in enumerate(keys) if j % k == f}
        test = np.array([c in held for c in cfg])
        sub = _Problem(runs, groups, stack, names, generation, t_meas, m_meas, ~test)
        xf = _solve(sub, start=x)   # warm start from the full fit: same optimum basin, a third of the work
        pf = predict(runs, groups, stack_with(stack, dict(zip(names, xf)), generation))
        cv_t[test], cv_fits[test] = pf.step_time_s[test], pf.fits[test]
        cv_m[test], cv_a[test], cv_r[test] = pf.memory_bytes[test], pf.allocated_bytes[test], pf.reserved_bytes[test]
        cv_a0[test], cv_r0[test] = pf.first_allocated_bytes[test], pf.first_reserved_bytes[test]
        fold_values.append({"configurations": sorted([list(c) for c in held], key=str),
                            "values": {n: float(v) for n, v in zip(names, xf)}})
        tick(f"fold {f + 1}/{k}", 3 + f, steps)
    summ = {"before": _summary(runs, pred0, t_meas, m_meas), "after_in_sample": _summary(runs, pred1, t_meas, m_meas),
            "folds": k}
    if k:
        cvp = dataclasses.replace(pred1, step_time_s=cv_t, memory_bytes=cv_m, fits=cv_fits, allocated_bytes=cv_a,
                                  reserved_bytes=cv_r, first_allocated_bytes=cv_a0, first_reserved_bytes=cv_r0)
        summ["after_cross_validated"] = _summary(runs, cvp, t_meas, m_meas)
    params = {n: {"before": float(a), "after": float(b)} for n, a, b in zip(names, x0, x)}
    return RunsFit(stack, fitted, params, runs, _rows(runs, pred0, pred1, t_meas, m_meas, cv_t,
                                                      _intervals(runs, groups, fitted, pred1)), summ, generation,
                   files or [], notes, base_path, fold_values)


# ------------------------------------------------------------------- fit small, predict big

_SELECT = re.compile(r"^\s*(gpus|tp|pp|dp|cp|ep|zero|micro_batch|seq)\s*(<=|>=|<|>|==|=)\s*(\d+)\s*$")


def run_selector(text: str):
    """``'gpus<=16'`` -> a predicate on runs (layout key, comparison, integer): which runs a fit
    uses (``calibrate runs --train``); the others are held out and predicted."""
    m = _SELECT.match(str(text))
    if not m:
        raise UserError(f"--train {text!r}: expected KEY OP N with KEY one of gpus, tp, pp, dp, cp, ep, zero, "
                        f"micro_batch, seq and OP one of <=, >=, <, >, = (e.g. gpus<=16)")
    key, op, n = m.group(1), m.group(2), int(m.group(3))
    ops = {"<=": lambda a: a <= n, ">=": lambda a: a >= n, "<": lambda a: a < n, ">": lambda a: a > n,
           "==": lambda a: a == n, "=": lambda a: a == n}
    return lambda r: r.layout.get(key) is not None and ops[op](int(r.layout[key]))


def run_filter(text: str):
    """``'hardware=h100-sxm'``, ``'dtype=bf16'``, ``'model=NAME'`` or a numeric ``'gpus<=16'`` ->
    a predicate on runs (``calibrate runs --only``: which runs of the files to use at all)."""
    key, sep, value = str(text).partition("=")
    key, value = key.strip(), value.strip()
    if sep and key in ("hardware", "model", "dtype") and value and not value.startswith("="):
        if key == "dtype":
            return lambda r: str(r.layout.get("dtype", "bf16")) == value
        return lambda r: getattr(r, key) == value
    if _SELECT.match(str(text)):
        return run_selector(text)
    raise UserError(f"--only {text!r}: expected hardware=NAME, model=NAME, dtype=NAME or KEY OP N with KEY one of "
                    f"gpus, tp, pp, dp, cp, ep, zero, micro_batch, seq (e.g. gpus<=16)")


def healthy_runs(runs: list, fraction: float) -> list:
    """Runs that ran no slower than ``fraction`` of their configuration's (model x GPU count) best
    measured throughput, plus every run without a throughput: the fit's speed data without the
    pathological runs (a transport falling back, a hang) that no kernel or overlap value explains.
    They stay in every error figure."""
    runs = [as_run(r) for r in runs]
    cfg = configurations(runs)
    best: dict = {}
    for c, r in zip(cfg, runs):
        if r.tokens_per_s_per_gpu:
            best[c] = max(best.get(c, 0.0), r.tokens_per_s_per_gpu)
    return [r for c, r in zip(cfg, runs)
            if r.status != "ok" or not r.tokens_per_s_per_gpu or r.tokens_per_s_per_gpu >= fraction * best[c]]


def fastest_quarter(result: RunsFit) -> dict[str, Any]:
    """Per configuration (model x GPU count): the median |throughput error| over its fastest
    quarter of measured runs by tokens/s (the well-tuned ones a planner competes with), and the
    median over configurations."""
    cells: dict = {}
    for key, row in zip(configurations(result.runs), result.rows):
        t = row["measured_step_time_s"]
        if t is not None:
            # fastest = the least time per token (runs of a configuration may step different batches)
            cells.setdefault(key, []).append((t / row["tokens_per_step"], t / row["predicted_step_time_s_after"] - 1))
    per = {}
    for key, vals in sorted(cells.items(), key=str):
        vals.sort()
        per[f"{key[0]} x {key[1]}"] = float(np.median([abs(e) for _, e in vals[:max(1, len(vals) // 4)]]))
    vals = list(per.values())
    return {"per_configuration": per, "median": float(np.median(vals)) if vals else None,
            "max": max(vals) if vals else None}


def fit_and_hold_out(runs, stack, *, train=None, healthy: float | None = None, **kw) -> tuple[RunsFit, RunsFit | None]:
    """Fit on the runs ``train`` selects (all by default; minus the unhealthy ones with ``healthy``)
    and evaluate the fitted stack on the rest (held out: never seen by the fit). Returns the fit
    and the held-out evaluation (None when nothing is held out); the held-out summary gains
    ``fastest_quarter``."""
    runs = [as_run(r) for r in runs]
    chosen = [r for r in runs if train(r)] if train is not None else runs
    if not chosen:
        raise UserError("--train selects no run")
    fit_set = healthy_runs(chosen, healthy) if healthy else chosen
    result = fit_runs(fit_set, stack, **kw)
    held = [r for r in runs if train is not None and not train(r)]
    if not held:
        return result, None
    kw2 = {k: v for k, v in kw.items() if k in ("hardware", "models", "files")}
    ev = fit_runs(held, result.fitted, check_only=True, **kw2)
    ev.summary["before"]["fastest_quarter"] = fastest_quarter(ev)
    return result, ev
