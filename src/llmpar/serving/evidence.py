"""How far off a serving prediction may be: the residuals of published serving runs.

The same rule as training (:mod:`llmpar.evidence`, docs/validation.md "Intervals"), on the
serving residuals ``validation/serving-residuals.json`` that ``scripts/fit_engines.py`` writes
from leave-one-source-out predictions of ``validation/serving/`` (docs/serving.md, Evidence):

* one residual per published figure, ln(measured / predicted) for times (TTFT, TPOT) and
  ln(predicted / measured) for throughput — positive where llmpar was optimistic;
* kinds ``serve_throughput``, ``serve_tpot``, ``serve_ttft``;
* evidence class: engine x GPU generation x dense/MoE x weight precision x replica size (GPUs);
  a class with fewer than MIN_ROWS residuals falls back to its parent, widened per dropped
  dimension, and says it extrapolated.
"""

from __future__ import annotations

from typing import Any

from llmpar.evidence import DEFAULT_LEVEL, Residual, class_label, interval, read_residuals

DIMENSIONS = ("engine", "generation", "moe", "weights", "gpus")
KINDS = {"throughput": "serve_throughput", "tpot": "serve_tpot", "ttft": "serve_ttft"}
RESIDUALS_FILE = "serving-residuals.json"


def weights_class(weights: str) -> str:
    w = str(weights)
    return "16-bit" if w in ("bf16", "fp16") else ("8-bit" if w in ("fp8", "int8") else "4-bit")


def gpus_band(gpus: float) -> str:
    return "1 GPU" if gpus <= 1 else ("2-8 GPUs" if gpus <= 8 else ">8 GPUs")


def serve_class(engine: str, generation: str | None, moe: bool, weights: str, gpus: float) -> tuple[str, ...]:
    return (str(engine), str(generation or "unknown generation"), "moe" if moe else "dense", weights_class(weights),
            gpus_band(gpus))


def shipped_residuals() -> tuple[Residual, ...]:
    """The serving residuals recorded in validation/serving-residuals.json (llmpar.evidence's reader)."""
    return read_residuals(RESIDUALS_FILE)


def intervals(key: tuple[str, ...], level: float = DEFAULT_LEVEL, residuals=None) -> dict[str, Any]:
    """Ratio bands per figure for a query of class ``key``: {figure: Interval}."""
    pool = list(shipped_residuals() if residuals is None else residuals)
    return {name: interval(pool, kind, key, level) for name, kind in KINDS.items()}


def interval_json(iv, value: float, optimistic_high: bool) -> dict[str, Any]:
    """A figure's band: for times the measured value lies in value x [lo, hi]; for throughput
    (residual = ln(predicted / measured)) in value / [hi, lo]."""
    if optimistic_high:   # times: residual ln(measured/predicted)
        low, high = value * iv.lo, value * iv.hi
    else:
        low, high = value / iv.hi, value / iv.lo
    out = {"level": iv.level, "low": low, "high": high}
    out.update(iv.evidence())
    if iv.rows == 0:
        out["note"] = "no published serving run of this kind: a stated x0.5 .. x2 band"
    return out


__all__ = ["DIMENSIONS", "KINDS", "serve_class", "intervals", "interval_json", "class_label", "shipped_residuals"]
