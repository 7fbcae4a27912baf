"""Fit small, predict big: which runs a ``llmpar calibrate runs`` fit uses, and the held-out rest.

:func:`run_selector` / :func:`run_filter` read ``--train`` / ``--only``, :func:`healthy_runs` drops
the pathological runs (``--drop-slower-than``), and :func:`fit_and_hold_out` fits on the chosen runs
and predicts the others with the fitted stack, with :func:`fastest_quarter`'s figure
(docs/calibrate-runs.md, "Worked example"). Nothing here prints.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from llmpar.calibrate.runs import RunsFit, fit_runs
from llmpar.calibrate.runs_layouts import as_run
from llmpar.calibrate.runs_report import configurations
from llmpar.errors import UserError

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
