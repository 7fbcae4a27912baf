"""``llmpar validate``: every shipped published run through the model a user would run.

The published runs are data (``validation/*.yaml``, shipped as ``llmpar/data/validation`` and found
through :func:`llmpar.specs.registry.data_dir`). Each file is read by
:func:`llmpar.calibrate.runs_io.read_runs` (validation/sources.py: names, paths, headers) and evaluated by :mod:`llmpar.calibrate.runs_predict`
(``runs_layouts.prepare`` / ``predict`` / ``measured_step_time``): the same ``cost/step`` code `llmpar step` and
the planner use, with the file's stack (or the one asked for), its hardware and the row's layout; a
knob the row leaves out (micro-batch, virtual stages, ZeRO stage, recompute) is searched and the
fastest value that fits kept, as ``calibrate runs`` does. There is no second evaluation path here:
this module only turns the predictions into the row's own metric and convention, and groups them.

Errors are ``predicted / published - 1`` in the row's metric (for a time, predicted time over
published time; for a throughput, predicted over published throughput). Nothing here prints.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmpar.evidence import evidence_class
from llmpar.validation.common import MEMORY_METRICS, SPEED_METRICS, validation_dir  # noqa: F401 (re-exported)
from llmpar.validation.sources import header_text, memo_key, read_source, resolve_source, source_names

DEFAULT_STACK = "megatron-core"
#: metric -> (what, unit of ``published`` / ``predicted`` in the JSON)
METRICS: dict[str, tuple[str, str]] = {
    "step_time_s": ("iteration time", "s"),
    "tokens_per_s_per_gpu": ("tokens/s per GPU", "tokens/s"),
    "tflops_per_gpu": ("TFLOP/s per GPU", "TFLOP/s"),
    "mfu": ("MFU", "fraction"),
    "peak_reserved_bytes": ("peak reserved memory", "bytes"),
    "peak_allocated_bytes": ("peak allocated memory", "bytes"),
    "fits": ("ran / did not run vs FITS / DOES NOT FIT", "verdict"),
}
#: how a FLOPs figure counts (the file's machine-readable ``flops_convention``)
FLOPS_CONVENTIONS = {
    "full": "model FLOPs (MFU convention), attention s^2 counted in full (causal mask not halved), recompute not counted",
    "causal": "model FLOPs (MFU convention), causal attention (s^2 halved), recompute not counted",
    "hardware": "hardware FLOPs (HFU convention: model + recompute forward, Narayanan 2021 eq. 3), attention s^2 in full",
}
MEMORY_CONVENTIONS = {
    "peak_reserved_bytes": "peak reserved (torch max_memory_reserved: the caching allocator's pool) vs llmpar's "
                           "allocator pool (allocated x (1 + allocator_overhead)); CUDA context and NCCL buffers "
                           "excluded on both sides; bytes (tables in GiB)",
    "peak_allocated_bytes": "peak allocated (torch max_memory_allocated) vs llmpar's allocated bytes; CUDA context, "
                            "NCCL buffers and allocator slack excluded on both sides; bytes (tables in GiB)",
}
FITS_CONVENTION = ("published status (ok = the run completed; oom = out of memory or crashed) vs llmpar's verdict "
                   "(allocator pool + CUDA context + NCCL buffers against the HBM capacity)")
SEARCHABLE = ("micro_batch", "virtual_stages", "zero", "recompute")


@dataclass
class SourceResult:
    """One source file's header (citation, what and how it compares) and how it was evaluated."""

    name: str
    citation: str
    url: str | None
    about: str
    hardware: str | None
    metric: str | None
    convention: str                  # the source's own words
    flops_convention: str
    file_stack: str | None           # the stack the file names
    stack: str                       # the stack evaluated with
    stack_fitted_on: list[str]
    stack_calibration: dict | None
    runs: int
    notes: list[str] = field(default_factory=list)
    left_out: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ValidationResult:
    rows: list[dict[str, Any]]
    groups: list[dict[str, Any]]
    sources: list[SourceResult]
    stack: str | None                # --stack, when every row was evaluated under it
    cross_validation: dict[str, Any] | None = None   # crossval.summary (None under --stack)

    def as_dict(self) -> dict[str, Any]:
        return {"cross_validation": self.cross_validation, "rows": self.rows, "groups": self.groups,
                "sources": [s.as_dict() for s in self.sources]}


# ------------------------------------------------------------------------------ evaluation

def _stack_for(file_stack: str | None, override: Any) -> tuple[Any, list[str]]:
    from llmpar.specs import load_stack
    from llmpar.specs.registry import shipped_names

    if override is not None:
        return load_stack(override), []
    if file_stack is None:
        return load_stack(DEFAULT_STACK), [f"the file names no stack; evaluated with {DEFAULT_STACK}, the default"]
    if file_stack not in shipped_names("stacks"):
        return load_stack(DEFAULT_STACK), [f"stack {file_stack!r} is not shipped; evaluated with {DEFAULT_STACK}, "
                                           f"the default (--stack NAME evaluates under another)"]
    return load_stack(file_stack), []


def _speed_metric(run) -> str | None:
    order = SPEED_METRICS
    if run.metric in order:
        order = (run.metric,) + tuple(k for k in order if k != run.metric)
    return next((k for k in order if getattr(run, k) is not None), None)


def _searched(run, stack) -> list[str]:
    lay = run.layout
    out = []
    for k in SEARCHABLE:
        if lay.get(k) is not None:
            continue
        if k == "virtual_stages" and (int(lay.get("pp", 1)) == 1 or lay.get("schedule") not in (None, "interleaved")):
            continue
        if k == "zero" and len(stack.zero_stages) < 2:
            continue
        out.append(k)
    return out


def _convention(metric: str, flops_convention: str, peak_dtype: str) -> str:
    if metric == "step_time_s":
        return "iteration (optimizer step) time in seconds, end to end"
    if metric == "tokens_per_s_per_gpu":
        return "training tokens per second per GPU (global batch x seq / step time / GPUs)"
    if metric == "tflops_per_gpu":
        return f"TFLOP/s per GPU of {FLOPS_CONVENTIONS[flops_convention]}"
    if metric == "mfu":
        what = "HFU" if flops_convention == "hardware" else "MFU"
        return f"{what} against the {peak_dtype} dense peak; {FLOPS_CONVENTIONS[flops_convention]}"
    if metric in MEMORY_CONVENTIONS:
        return MEMORY_CONVENTIONS[metric]
    return FITS_CONVENTION


def _stats(errors: list[float]) -> dict[str, float | None]:
    e = np.abs(np.array([x for x in errors if x is not None and math.isfinite(x)], dtype=float))
    if e.size == 0:
        return {"mean_abs_error": None, "max_abs_error": None, "median_abs_error": None}
    return {"mean_abs_error": float(np.mean(e)), "max_abs_error": float(np.max(e)),
            "median_abs_error": float(np.median(e))}


def evaluate_source(name: str, stack: Any = None, limit: int | None = None, configurations: set | None = None
                    ) -> tuple[SourceResult, list[dict[str, Any]]]:
    """One shipped source through calibrate/runs_predict.py; (its header, its rows). ``configurations``:
    only the runs of these (model, GPUs, hardware) configurations (calibrate.runs_report.configurations),
    as a cross-validation fold evaluates its held-out ones."""
    from llmpar.calibrate.runs_layouts import prepare
    from llmpar.calibrate.runs_predict import comparable_peak, measured_step_time, predict
    from llmpar.calibrate.runs_report import configurations as run_configurations

    path = resolve_source(name)
    read = read_source(path)
    head = {**header_text(path), **(read.files[0] if read.files else {})}
    runs_in = read.runs[:limit] if limit else read.runs
    if configurations is not None:
        runs_in = [r for r, c in zip(runs_in, run_configurations(runs_in)) if c in configurations]
    stk, notes = _stack_for(head.get("stack"), stack)
    src = _source_result(path, head, stk, notes, len(runs_in))
    runs, groups = prepare(runs_in, models=read.models, zero_stages=stk.zero_stages, schedules=stk.schedules,
                           pp_zero_stages=stk.pp_zero_stages)
    pred = predict(runs, groups, stk)
    t_meas = measured_step_time(runs, pred)
    peak = comparable_peak(runs, pred)      # the figure each measured peak is compared with
    judge_fits = any(r.status != "ok" for r in read.runs)   # the file lists runs that did not complete
    peaks: dict[tuple[str, str], float] = {}
    rows: list[dict[str, Any]] = []
    group_of = {int(i): g for g in groups for i in np.unique(g.index)}
    for i, r in enumerate(runs):
        config = _row_config(r, pred, i)
        gpus = config["gpus"]
        base = {"source": src.name, "row": r.row or r.source.rsplit(":", 1)[-1],
                "location": f"{path.name}:{r.source.rsplit(':', 1)[-1]}", "stack": stk.name, "status": r.status,
                "config": config, "searched": _searched(r, stk), "fits": bool(pred.fits[i]),
                "evidence_class": list(evidence_class(stk.name, group_of[i].hw.gpu.generation, group_of[i].model.is_moe,
                                                      config["dtype"], gpus, config["seq"]))}
        metric = _speed_metric(r) if r.status == "ok" else None
        if metric is not None and math.isfinite(t_meas[i]):
            rows.append(_speed_row(base, r, pred, i, metric, t_meas[i], peaks))
        if r.status == "ok":
            for metric in MEMORY_METRICS:
                published = getattr(r, metric)
                if published:
                    predicted = float(peak[i])     # reserved or allocated, as comparable_peak picks: same order
                    rows.append({**base, "metric": metric, "unit": "bytes", "published": float(published),
                                 "predicted": predicted, "error": predicted / float(published) - 1.0,
                                 "convention": _convention(metric, r.convention, r.mfu_peak_dtype)
                                 + ("; of world rank 0, i.e. pipeline stage 0, on both sides (memory_stage: first)"
                                    if r.memory_stage == "first" else "")})
                    break
        if judge_fits:
            rows.append({**base, "metric": "fits", "unit": "verdict", "published": "ok" if r.status == "ok" else "oom",
                         "predicted": "fits" if pred.fits[i] else "oom", "error": None,
                         "convention": FITS_CONVENTION})
    return src, rows


def _source_result(path, head: dict[str, Any], stk, notes: list[str], runs: int) -> SourceResult:
    """The source's header as read from its file, and the stack it is evaluated with."""
    flops_conv = str(head.get("flops_convention", "full"))
    return SourceResult(
        name=path.stem, citation=str(head.get("source") or path.stem), url=head.get("url"),
        about=" ".join(str(head.get("about", "")).split()), hardware=head.get("hardware"), metric=head.get("metric"),
        convention=str(head.get("convention", "")), flops_convention=flops_conv, file_stack=head.get("stack"),
        stack=stk.name, stack_fitted_on=list(stk.fitted_on), stack_calibration=stk.calibration,
        runs=runs, notes=notes, left_out=head.get("left_out"))


def _row_config(r, pred, i: int) -> dict[str, Any]:
    """The layout and settings run ``i`` was evaluated with (searched knobs as picked)."""
    pick = pred.pick[i]
    lay = r.layout
    gpus = int(pred.gpus[i])
    return {"model": r.model, "hardware": r.hardware, "gpus": gpus,
            **{k: int(lay.get(k, 1)) for k in ("tp", "pp")}, "dp": int(gpus // (int(lay.get("tp", 1))
                                                                           * int(lay.get("pp", 1))
                                                                           * int(lay.get("cp", 1)))),
            "cp": int(lay.get("cp", 1)), "ep": int(lay.get("ep", 1)),
            "etp": int(lay.get("etp") or lay.get("tp", 1)),
            "zero": pick["zero"], "recompute": pick["recompute"], "micro_batch": pick["micro_batch"],
            "global_batch": int(round(pred.tokens_per_step[i] / int(lay["seq"]))),
            "microbatches": pick["microbatches"], "seq": int(lay["seq"]),
            "virtual_stages": pick["virtual_stages"], "schedule": pick["schedule"], "sp": pick["sp"],
            "recompute_layers": pick["recompute_layers"], "offload_layers": pick.get("offload_layers", 0),
            "dtype": str(lay.get("dtype", "bf16")), "optimizer": str(lay.get("optimizer", "adam")),
            # settings the row states (null: the stack's)
            **{k: lay.get(k) for k in ("grad_dtype", "tp_overlap", "dp_overlap", "ep_overlap", "ep_dispatcher")}}


def _speed_row(base: dict[str, Any], r, pred, i: int, metric: str, t_measured, peaks: dict) -> dict[str, Any]:
    """Run ``i``'s speed row: the prediction in the run's own metric, its error, its measured MFU."""
    from llmpar.cost.flops import flops_utilization, per_gpu_rate
    from llmpar.specs import load_hardware

    gpus = base["config"]["gpus"]
    t = float(pred.step_time_s[i])
    flops = {"full": pred.model_flops[i], "causal": pred.causal_flops[i],
             "hardware": pred.hardware_flops[i]}[r.convention]
    if metric == "step_time_s":
        predicted = t
    elif metric == "tokens_per_s_per_gpu":
        predicted = float(per_gpu_rate(pred.tokens_per_step[i], t, gpus))
    elif metric == "tflops_per_gpu":
        predicted = float(per_gpu_rate(flops, t, gpus) / 1e12)
    else:
        key = (str(r.hardware), r.mfu_peak_dtype)
        if key not in peaks:
            peaks[key] = float(load_hardware(r.hardware).gpu.peak(r.mfu_peak_dtype))
        predicted = float(flops_utilization(flops, t, gpus, peaks[key]))
    published = float(getattr(r, metric))
    own_peak = (str(r.hardware), base["config"]["dtype"])
    if own_peak not in peaks:
        peaks[own_peak] = float(load_hardware(r.hardware).gpu.peak(base["config"]["dtype"]))
    return {**base, "metric": metric, "unit": METRICS[metric][1], "published": published,
            "predicted": predicted, "error": predicted / published - 1.0,
            "convention": _convention(metric, r.convention, r.mfu_peak_dtype),
            # the run's measured MFU as `llmpar step` states one (model FLOPs, attention in
            # full, against the peak of the run's dtype) and its tokens per GPU per step:
            # what the planner's plausibility checks compare with (llmpar.evidence)
            "measured_mfu": float(flops_utilization(pred.model_flops[i], t_measured, gpus,
                                                    peaks[own_peak])),
            "tokens_per_gpu_per_step": float(pred.tokens_per_step[i] / gpus)}


def agrees(row: dict[str, Any]) -> bool:
    """A FITS/OOM row: the run ran and llmpar says it fits, or it did not and llmpar says it does not."""
    return (row["published"] == "ok") == (row["predicted"] == "fits")


def group_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (source, metric, stack): rows, mean / max / median absolute error; for the FITS/OOM
    rows the agreement instead."""
    keys: list[tuple[str, str, str]] = []
    by: dict[tuple[str, str, str], list[dict]] = {}
    for r in rows:
        k = (r["source"], r["metric"], r["stack"])
        if k not in by:
            keys.append(k)
            by[k] = []
        by[k].append(r)
    out = []
    for k in keys:
        members = by[k]
        g: dict[str, Any] = {"source": k[0], "metric": k[1], "stack": k[2], "rows": len(members)}
        if k[1] == "fits":
            agree = [agrees(r) for r in members]
            g.update({"mean_abs_error": None, "max_abs_error": None, "median_abs_error": None,
                      "agreement": float(np.mean(agree)),
                      "predicted_oom_among_ok": sum(r["published"] == "ok" and r["predicted"] == "oom" for r in members),
                      "predicted_fits_among_oom": sum(r["published"] == "oom" and r["predicted"] == "fits"
                                                      for r in members),
                      "ok": sum(r["published"] == "ok" for r in members),
                      "oom": sum(r["published"] == "oom" for r in members)})
        else:
            g.update(_stats([r["error"] for r in members]))
        out.append(g)
    return out


def validate(source: str | list[str] | None = None, stack: str | None = None, limit: int | None = None,
             progress: Callable[[str, int, int], None] | None = None, cross_validate: bool = True,
             level: float = 0.8) -> ValidationResult:
    """Evaluate the shipped sources (all, or ``source``) under their stacks (or ``stack``).

    ``limit``: only the first N runs of each source. ``progress(name, done, total)`` is called
    before each source and once at the end. ``cross_validate`` (file stacks only): also predict
    each source leave-one-source-out and give every row its interval at ``level``
    (:mod:`llmpar.validation.crossval`); the result's ``cross_validation`` summarises them."""
    memo = memo_key(source, limit, cross_validate, level) if stack is None else None
    if memo is not None and memo in _MEMO:
        names = memo[0]
        if progress:
            progress("", len(names), len(names))
        return copy.deepcopy(_MEMO[memo])
    stack_obj = None
    if stack is not None:
        from llmpar.specs import load_stack

        stack_obj = load_stack(stack)           # unknown stack: one line, before any work
        stack = stack_obj.name                  # (a user's stack FILE is evaluated as loaded, not by name)
    if source is None:
        names = source_names()
    else:
        # a source named twice is evaluated once (reliability review, item 29: its rows counted twice)
        names = list(dict.fromkeys(resolve_source(s).stem for s in ([source] if isinstance(source, str) else source)))
    rows: list[dict[str, Any]] = []
    sources: list[SourceResult] = []
    for n, name in enumerate(names):
        if progress:
            progress(name, n, len(names))
        src, src_rows = evaluate_source(name, stack_obj, limit)
        if stack_obj is None and cross_validate:
            _cross_validate(name, src, src_rows, limit)
        sources.append(src)
        rows.extend(src_rows)
    if progress:
        progress("", len(names), len(names))
    cv = None
    if stack_obj is None and cross_validate:
        from llmpar.evidence import shipped_residuals
        from llmpar.validation import crossval

        evaluated = set(names)
        crossval.attach(rows, level, [r for r in shipped_residuals() if r.source not in evaluated])
        cv = crossval.summary(rows, level)
        cv["missing_sources"] = sorted({r["source"] for r in rows if r.get("cv_missing")})
    result = ValidationResult(rows, group_rows(rows), sources, stack, cv)
    if memo is not None:
        while len(_MEMO) >= MEMO_ENTRIES:   # the oldest goes first
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[memo] = copy.deepcopy(result)
    return result


# The last MEMO_ENTRIES validations of the shipped stacks, kept for the rest of the process while no
# shipped file they read has changed (validation/sources.py memo_key); a deep copy goes out.
MEMO_ENTRIES = 4
_MEMO: dict[tuple, ValidationResult] = {}


def _cross_validate(name: str, src: SourceResult, rows: list[dict[str, Any]], limit: int | None) -> None:
    """Give ``rows`` (one source's, evaluated as shipped) their leave-one-source-out prediction:
    ``cv_predicted``, ``cv_error`` (in the row's metric), ``cv_residual`` (ln measured/predicted)
    and ``cv_scheme``: "source" (every constant fitted on the source refitted without it),
    "configurations" (the source is its stack's only one: the fit's k-fold over configurations,
    or the full fit for rows it did not use), "none" (nothing was fitted on the source: out of
    sample as it stands). A fitted source the record lacks gets ``cv_missing`` and no figure."""
    from llmpar.specs import load_stack
    from llmpar.validation import crossval, fit_plans

    judged = [r for r in rows if crossval.kind_of(r["metric"])]
    if not judged:
        return
    scheme, evals = "none", [(None, rows)]
    if name in fit_plans.fitted_sources():
        record = fit_plans.load_record()
        held = (record or {}).get("held_out", {}).get(name)
        if not held or src.stack not in held.get("values", {}):
            for r in judged:
                r["cv_missing"] = True
            return
        scheme = held.get("scheme", "source")
        stk = fit_plans.apply_values(load_stack(src.stack), held["values"][src.stack])
        folds = [({tuple(c) for c in f["configurations"]}, f) for f in held.get("folds", [])]
        in_folds = set().union(*(c for c, _ in folds)) if folds else set()
        rest = {(r["config"]["model"], r["config"]["gpus"], r["config"]["hardware"]) for r in judged} - in_folds
        # each fold's stack on its own held-out configurations only; the full fit on the rest
        mine = {(r["config"]["model"], r["config"]["gpus"], r["config"]["hardware"]) for r in judged}
        evals = [(None, [] if folds and not rest else evaluate_source(name, stk, limit, rest if folds else None)[1])]
        for cfgs, f in folds:
            if cfgs & mine:
                fs = fit_plans.apply_values(stk, f["values"].get(src.stack, {}))
                evals.append((cfgs, evaluate_source(name, fs, limit, cfgs & mine)[1]))
    index = [(cfgs, {(r["location"], r["metric"]): r for r in ev}) for cfgs, ev in evals]
    for r in judged:
        key = (r["location"], r["metric"])
        cfg = (r["config"]["model"], r["config"]["gpus"], r["config"]["hardware"])
        c = next((by.get(key) for cfgs, by in index[1:] if cfg in cfgs), None) or index[0][1].get(key)
        if c is None or c["error"] is None or not math.isfinite(c["error"]) or c["error"] <= -1.0:
            continue
        r["cv_predicted"], r["cv_error"], r["cv_scheme"] = c["predicted"], c["error"], scheme
        r["cv_residual"] = crossval.residual_of(r["metric"], c["error"])
