"""Leave-one-source-out: each published source predicted by stack constants fitted without it.

A source some stack was fitted on (:func:`llmpar.validation.fit_plans.fitted_sources`) is evaluated
under its stack with the values the record ``validation/loso-fits.json`` holds for it: every plan
that used the source, refitted without it (``python scripts/fit_stacks.py --loso``). Every other
source is out of sample as it stands. The result per row is the cross-validated prediction, its
residual and its interval from the *other* sources' residuals (:mod:`llmpar.evidence`), so the
interval coverage measured here is honest too.

Errors here are in one sense for every speed metric: predicted throughput over measured throughput
minus 1, i.e. ``t_measured / t_predicted - 1`` (positive: llmpar faster than the run, optimistic);
for memory predicted peak over measured peak minus 1 (positive: llmpar holds more). Nothing here
prints.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from llmpar import evidence as EV
from llmpar.validation.common import MEMORY_METRICS, SPEED_METRICS

SCHEME = "leave-one-source-out"


def kind_of(metric: str) -> str | None:
    return "speed" if metric in SPEED_METRICS else ("memory" if metric in MEMORY_METRICS else None)


def residual_of(metric: str, error: float) -> float:
    """ln(measured / predicted) of the step time (speed) or the peak (memory), from a row's
    ``error`` = predicted / published - 1 in its own metric."""
    ratio = 1.0 + error                     # predicted / published
    if metric in ("step_time_s",) + MEMORY_METRICS:
        return -math.log(ratio)             # time or bytes: measured / predicted = 1 / ratio
    return math.log(ratio)                  # a throughput: predicted / measured = t_meas / t_pred


def attach(rows: list[dict[str, Any]], level: float = EV.DEFAULT_LEVEL, others=()) -> None:
    """Give every cross-validated speed/memory row its interval from the other sources' residuals
    (theirs in ``rows``, and ``others``: residuals of sources not evaluated in this run, e.g. the
    shipped ones under ``validate --source``): ``cv_interval`` (ratio bounds and evidence) and
    ``cv_covered`` (the measurement inside)."""
    res = [EV.Residual(r["source"], kind_of(r["metric"]), tuple(r["evidence_class"]), r["cv_residual"])
           for r in rows if r.get("cv_residual") is not None] + list(others)
    index = _Index(res)
    for r in rows:
        if r.get("cv_residual") is None:
            continue
        iv = index.interval(kind_of(r["metric"]), tuple(r["evidence_class"]), level, r["source"])
        r["cv_interval"] = {"ratio": [iv.lo, iv.hi], **iv.evidence()}
        r["cv_covered"] = bool(math.log(iv.lo) - 1e-12 <= r["cv_residual"] <= math.log(iv.hi) + 1e-12)


class _Index:
    """Residuals grouped by class prefix and source: the interval of a query without one source,
    as :func:`llmpar.evidence.interval` computes it, without rescanning every residual."""

    def __init__(self, residuals: list[EV.Residual]):
        self.by: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in residuals:
            for d in range(len(r.key) + 1):
                self.by[(r.kind,) + r.key[:d]][r.source].append(r.value)

    def interval(self, kind: str, key: tuple[str, ...], level: float, exclude: str | None) -> EV.Interval:
        for depth in range(len(key), -1, -1):
            cell = self.by.get((kind,) + key[:depth], {})
            vals = [v for s, vs in cell.items() if s != exclude for v in vs]
            if len(vals) >= EV.MIN_ROWS or depth == 0:
                if not vals:
                    return EV.Interval(level, 0.5, 2.0, key, (), 0, 0)
                w = [1.0 / len(vs) for s, vs in cell.items() if s != exclude for _ in vs]
                lo, hi = EV.interval_from(vals, level, len(key) - depth, np.array(w))
                return EV.Interval(level, lo, hi, key, key[:depth], len(vals),
                                   sum(1 for s, vs in cell.items() if s != exclude and vs))
        raise AssertionError("unreachable")


def _figures(e: np.ndarray, w: np.ndarray, covered: np.ndarray | None, speed: bool) -> dict[str, Any]:
    return {"median_abs_error": float(EV.weighted_quantile(np.abs(e), w, 0.5)),
            "mean_abs_error": float(np.sum(w * np.abs(e)) / np.sum(w)),
            "signed_median_error": float(EV.weighted_quantile(e, w, 0.5)),
            # speed: predicted faster than measured; memory: predicted below the measured peak
            "optimistic_share": float(np.sum(w * ((e > 0) if speed else (e < 0))) / np.sum(w)),
            "interval_coverage": float(np.sum(w * covered) / np.sum(w)) if covered is not None else None}


def _stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one set of cross-validated rows (errors in the module's one sense), each
    source weighing the same; ``rows_pooled``: the same with every row weighing the same."""
    if not rows:
        none = dict.fromkeys(("median_abs_error", "mean_abs_error", "signed_median_error", "optimistic_share",
                              "interval_coverage"))
        return {"rows": 0, "sources": 0, **none, "rows_pooled": dict(none)}
    speed = kind_of(rows[0]["metric"]) == "speed"
    e = np.array([math.exp(r["cv_residual"]) - 1.0 if speed else math.exp(-r["cv_residual"]) - 1.0 for r in rows])
    cov = np.array([r["cv_covered"] for r in rows], dtype=float) if all("cv_covered" in r for r in rows) else None
    w = EV.source_weights(r["source"] for r in rows)
    return {"rows": int(e.size), "sources": len({r["source"] for r in rows}), **_figures(e, w, cov, speed),
            "rows_pooled": _figures(e, np.ones_like(e), cov, speed)}


def summary(rows: list[dict[str, Any]], level: float = EV.DEFAULT_LEVEL) -> dict[str, Any]:
    """The top-level ``cross_validation`` block of ``validate --json``: speed figures overall,
    per stack and per source; the same for memory under ``memory``."""
    out: dict[str, Any] = {"scheme": SCHEME, "level": level,
                           "weighting": "each source weighs 1 (each of its n rows 1/n); rows_pooled: each row 1",
                           "error": "predicted throughput / measured - 1 (t_measured / t_predicted - 1): "
                                    "positive is optimistic (llmpar faster than the run)"}
    for kind in ("speed", "memory"):
        rs = [r for r in rows if r.get("cv_residual") is not None and kind_of(r["metric"]) == kind]
        block = _stats(rs)
        block["rows_by_scheme"] = {k: sum(r.get("cv_scheme") == k for r in rs)
                                   for k in ("source", "configurations", "none")}
        block["per_stack"] = {s: _stats([r for r in rs if r["stack"] == s]) for s in sorted({r["stack"] for r in rs})}
        block["per_source"] = {s: {**{k: v for k, v in _stats([r for r in rs if r["source"] == s]).items()
                                      if k != "rows_pooled"},
                                   "scheme": next(r["cv_scheme"] for r in rs if r["source"] == s)}
                               for s in sorted({r["source"] for r in rs})}
        for v in block["per_stack"].values():
            v.pop("rows_pooled", None)
        if kind == "speed":
            out.update(block)
        else:
            block["error"] = "predicted peak / measured - 1: negative is optimistic (llmpar holds less)"
            out["memory"] = block
    return out


def residual_records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The residuals ``validation/residuals.json`` ships: one per cross-validated row."""
    out = []
    for r in rows:
        if r.get("cv_residual") is None:
            continue
        rec = {"source": r["source"], "row": r["row"], "kind": kind_of(r["metric"]), "class": r["evidence_class"],
               "residual": round(float(r["cv_residual"]), 6)}
        if "measured_mfu" in r:
            rec["measured_mfu"] = round(r["measured_mfu"], 5)
            rec["tokens_per_gpu_per_step"] = round(r["tokens_per_gpu_per_step"], 3)
        out.append(rec)
    return out
