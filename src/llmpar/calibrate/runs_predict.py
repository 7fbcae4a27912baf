"""Every measured run through ``cost/step`` under a stack, and each run's measured figures.

:func:`predict` evaluates each run's candidate layouts (one array call of
:func:`llmpar.cost.step.step_time` per :class:`~llmpar.calibrate.runs_layouts.RunGroup`) and keeps
the fastest that fits; :func:`measured_step_time` turns whichever speed figure a run gives into a
step time, :func:`check_physics` refuses one faster than the GPUs can compute, and
:func:`comparable_peak` picks the predicted figure a measured peak is compared with
(docs/calibrate-runs.md, "How the fit works"). Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmpar.calibrate.runs_record import CONVENTIONS
from llmpar.calibrate.runs_layouts import Run, RunGroup
from llmpar.calibrate.runs_parameters import PARAMETERS
from llmpar.cost.flops import step_time_at_rate
from llmpar.errors import UserError


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


def predict(runs: list[Run], groups: list[RunGroup], stack) -> Predictions:
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


def check_physics(runs: list[Run], pred: Predictions, t_meas: np.ndarray, groups: list[RunGroup]) -> None:
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


# a measured step this many times the base stack's prediction (or this many times faster) is a unit
# or transcription error, or a broken run, far more often than physics: llmpar's largest
# leave-one-source-out miss on a published run is about 2x (docs/validation.md, nemo-2511-h100's
# 101 %), save the playbook grid's broken runs (up to 71x slower than predicted: what
# --drop-slower-than is for); a millisecond column read as seconds is 1000x
FAR_OFF = 20.0


def far_off_speeds(runs: list[Run], pred: Predictions, t_meas: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(mask of runs whose measured step is FAR_OFF from the prediction, a note for each naming the
    row and the likely cause; newcomer review: an 8,050 s step, a typo for 8.05, read as a 49,298 %
    error with no word). The runs stay in the fit (its soft-L1 loss bounds their weight)."""
    pt = np.asarray(pred.step_time_s, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(np.isfinite(t_meas) & (pt > 0), t_meas / pt, 1.0)
    far = (ratio > FAR_OFF) | (ratio < 1.0 / FAR_OFF)
    notes = []
    for i in np.flatnonzero(far):
        r = ratio[i]
        how = f"{r:,.0f}x the predicted {pt[i]:.4g} s" if r > 1 else f"1/{1 / r:,.0f} of the predicted {pt[i]:.4g} s"
        notes.append(f"{runs[i].source}: the measured step {t_meas[i]:.4g} s is {how}, more than {FAR_OFF:g}x off: check "
                     "the unit (milliseconds in a seconds column?) and the layout; a broken run is best left out "
                     "(--drop-slower-than, --only)")
    return far, notes


def measured_memory(runs: list[Run]) -> np.ndarray:
    return np.array([(r.peak_reserved_bytes or r.peak_allocated_bytes or np.nan) if r.status == "ok" else np.nan
                     for r in runs], dtype=float)
