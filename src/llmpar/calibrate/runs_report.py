"""What ``llmpar calibrate runs`` reports of a stack on measured runs: errors, regret, rows.

Each run's configuration (model x GPU count x hardware: the unit of cross-validation), the error
statistics of speed and memory, the planner's regret per configuration, each run's step-time
interval and its report row (docs/calibrate-runs.md; the keys: docs/json.md). Nothing here prints.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmpar.calibrate.runs_layouts import Run
from llmpar.calibrate.runs_predict import comparable_peak


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


def step_intervals(runs, groups, stack, pred) -> list[Any]:
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


def result_rows(runs, pred_before, pred_after, t_meas, m_meas, cv_t=None, intervals=None) -> list[dict[str, Any]]:
    """Each run's report row: measured and predicted (before and after) step time and memory."""
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


def result_summary(runs, pred, t_meas, m_meas) -> dict[str, Any]:
    """The speed and memory errors, FITS/OOM agreement and regret of ``pred`` on the runs."""
    oom = np.array([r.status == "oom" for r in runs])
    ok_mem = np.array([r.status == "ok" for r in runs])
    verdicts = (ok_mem & pred.fits) | (oom & ~pred.fits)
    judged = ok_mem | oom
    return {"speed": error_stats(speed_error(pred.step_time_s, t_meas)),
            "memory": error_stats(memory_error(comparable_peak(runs, pred), m_meas)),
            "fits_agreement": float(np.mean(verdicts[judged])) if judged.any() else None,
            "regret": regret(runs, pred.step_time_s, t_meas, pred.fits, pred.tokens_per_step)}

