"""Fit a stack to measured training runs: ``llmpar calibrate runs FILE... --stack BASE``.

What is fitted (docs/calibrate-runs.md): a small, bounded set of the
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

Here: the fit itself (:func:`fit_runs`, its result :class:`RunsFit`). The runs and their
candidate layouts are in :mod:`llmpar.calibrate.runs_layouts`, the fittable parameters in
:mod:`~llmpar.calibrate.runs_parameters`, the predictions and measured figures in
:mod:`~llmpar.calibrate.runs_predict`, the errors, regret and rows in
:mod:`~llmpar.calibrate.runs_report`, and fitting on some runs to predict the others in
:mod:`~llmpar.calibrate.runs_holdout`.

Nothing here prints.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmpar.calibrate.runs_layouts import Run, RunGroup, prepare
from llmpar.calibrate.runs_parameters import (FP8_DEFAULT, MEMORY_DEFAULT, PARAMETERS, SPEED_DEFAULT, base_values,
                                              stack_with)
from llmpar.calibrate.runs_predict import (Predictions, check_physics, comparable_peak, far_off_speeds, measured_memory,
                                           measured_step_time, predict)
from llmpar.calibrate.runs_report import configurations, result_rows, result_summary, step_intervals
from llmpar.errors import UserError

PRIOR_WEIGHT = 0.05      # residual units per prior-scale of departure from the base value
SOFT_L1_SCALE = 0.05     # log-error beyond which the loss grows linearly (one odd run is one run)


# ---------------------------------------------------------------------------------- fitting

@dataclass
class _Problem:
    runs: list[Run]
    groups: list[RunGroup]
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


# ------------------------------------------------------------------------------ the result

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


def fit_runs(runs, stack, *, hardware: str | None = None, parameters: list[str] | None = None,
             folds: int = 5, models: dict | None = None, files: list[str] | None = None,
             check_only: bool = False, progress=None) -> RunsFit:
    """Fit ``parameters`` of ``stack`` (default: what the runs constrain) to ``runs``; report the
    in-sample and cross-validated errors and the planner's regret. ``check_only``: no fit.
    ``progress``: an optional ``progress(name, done, total)`` callback (the CLI's bar), called
    after the base prediction, the fit and each cross-validation fold."""
    tick = progress or (lambda name, done, total: None)
    from llmpar.specs import load_stack

    base_path = _base_path(stack)
    stack = load_stack(stack)
    notes: list[str] = []
    runs, groups = prepare(runs, hardware=hardware, models=models, zero_stages=stack.zero_stages,
                           pp_zero_stages=stack.pp_zero_stages,
                           schedules=stack.schedules, notes=notes)
    generation = _one_generation(groups)
    names = _fit_names(runs, parameters, check_only)
    pred0 = predict(runs, groups, stack)
    n_cfg = len(set(configurations(runs)))
    steps = 1 if (check_only or not names) else 2 + (max(2, min(folds, n_cfg)) if n_cfg >= 2 and folds else 0)   # k below
    tick("predict", 1, steps)
    t_meas = measured_step_time(runs, pred0)
    check_physics(runs, pred0, t_meas, groups)
    # a step far off the prediction is named (a unit error, or a broken run); it stays in the fit,
    # whose soft-L1 loss bounds its weight: the playbook's slow runs are real and teach the
    # per-micro-batch and p2p costs (validation/fit_plans.py, nanotron)
    notes.extend(far_off_speeds(runs, pred0, t_meas)[1])
    m_meas = measured_memory(runs)
    use = np.ones(len(runs), dtype=bool)
    x0 = base_values(stack, names, generation)
    if check_only or not names:
        summ = {"before": result_summary(runs, pred0, t_meas, m_meas)}
        return RunsFit(stack, stack, {}, runs, result_rows(runs, pred0, pred0, t_meas, m_meas,
                                                           intervals=step_intervals(runs, groups, stack, pred0)),
                       summ, generation, files or [],
                       notes, base_path)
    prob = _Problem(runs, groups, stack, names, generation, t_meas, m_meas, use)
    x = _solve(prob)
    fitted = stack_with(stack, dict(zip(names, x)), generation)
    pred1 = predict(runs, groups, fitted)
    tick("fit", 2, steps)
    k, cvp, fold_values = _cross_validate(prob, x, pred1, folds, tick, steps)
    summ = {"before": result_summary(runs, pred0, t_meas, m_meas),
            "after_in_sample": result_summary(runs, pred1, t_meas, m_meas), "folds": k}
    if k:
        summ["after_cross_validated"] = result_summary(runs, cvp, t_meas, m_meas)
    params = {n: {"before": float(a), "after": float(b)} for n, a, b in zip(names, x0, x)}
    return RunsFit(stack, fitted, params, runs, result_rows(runs, pred0, pred1, t_meas, m_meas, cvp.step_time_s,
                                                            step_intervals(runs, groups, fitted, pred1)),
                   summ, generation, files or [], notes, base_path, fold_values)


def _base_path(stack) -> str | None:
    """The base stack's file (absolute) when ``stack`` names one; None for a shipped name or a Stack."""
    from pathlib import Path

    from llmpar.specs.registry import looks_like_path

    return str(Path(stack).resolve()) if isinstance(stack, (str, Path)) and looks_like_path(str(stack)) \
        else None


def _one_generation(groups: list[RunGroup]) -> str | None:
    """The one GPU generation the runs' hardware shares (a fit calibrates one at a time)."""
    gens = {g.hw.gpu.generation for g in groups}
    if len(gens) > 1:
        raise UserError(f"the runs span several GPU generations ({', '.join(sorted(map(str, gens)))}): "
                        "calibrate one generation at a time (--only hardware=NAME keeps one profile's runs)")
    return gens.pop()


def _fit_names(runs: list[Run], parameters: list[str] | None, check_only: bool) -> list[str]:
    """The parameters to fit (default: what the runs constrain), checked; refused with nothing to fit."""
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
    return names


def _cross_validate(prob: _Problem, x, pred1: Predictions, folds: int, tick,
                    steps: int) -> tuple[int, Predictions, list[dict[str, Any]]]:
    """(folds, the cross-validated predictions, each fold's configurations and values): k-fold over
    configurations, each fold fitted without its configurations predicting them."""
    runs, names = prob.runs, prob.names
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
        sub = _Problem(runs, prob.groups, prob.stack, names, prob.generation, prob.t_meas, prob.m_meas, ~test)
        xf = _solve(sub, start=x)   # warm start from the full fit: same optimum basin, a third of the work
        pf = predict(runs, prob.groups, stack_with(prob.stack, dict(zip(names, xf)), prob.generation))
        cv_t[test], cv_fits[test] = pf.step_time_s[test], pf.fits[test]
        cv_m[test], cv_a[test], cv_r[test] = pf.memory_bytes[test], pf.allocated_bytes[test], pf.reserved_bytes[test]
        cv_a0[test], cv_r0[test] = pf.first_allocated_bytes[test], pf.first_reserved_bytes[test]
        fold_values.append({"configurations": sorted([list(c) for c in held], key=str),
                            "values": {n: float(v) for n, v in zip(names, xf)}})
        tick(f"fold {f + 1}/{k}", 3 + f, steps)
    cvp = dataclasses.replace(pred1, step_time_s=cv_t, memory_bytes=cv_m, fits=cv_fits, allocated_bytes=cv_a,
                              reserved_bytes=cv_r, first_allocated_bytes=cv_a0, first_reserved_bytes=cv_r0)
    return k, cvp, fold_values
