"""The serving block of `llmpar validate`: published serving figures against llmpar's, measured
leave-one-source-out (docs/serving.md, Evidence; docs/validation.md).

Figures per kind (throughput, TPOT, TTFT), each source weighing the same: median |error| (as a
ratio: e^|r| − 1), signed median (positive: llmpar optimistic), share of figures predicted
optimistic, and how often the 80 % interval built from the *other* sources' residuals covers the
measurement.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from llmpar.evidence import DEFAULT_LEVEL, Residual, source_weights, weighted_quantile
from llmpar.serving import evidence

LOSO_FILE = "serving-loso.json"


def _key(row, specs: dict | None = None) -> tuple[str, ...]:
    """The row's evidence class; ``specs`` memoises (generation, is MoE) per (hardware, model)."""
    from llmpar.specs.registry import load_hardware, load_model

    specs = {} if specs is None else specs
    names = (row.hardware, row.model)
    if names not in specs:
        specs[names] = (load_hardware(row.hardware).gpu.generation, load_model(row.model).moe is not None)
    generation, moe = specs[names]
    return evidence.serve_class(row.engine, generation, moe, row.weights, row.tp * row.pp)


def residual_records(results) -> list[Residual]:
    """One Residual per published figure from predict_loso's [(row, residuals, scheme)]."""
    out = []
    specs: dict = {}
    for row, res, _scheme in results:
        key = _key(row, specs)
        for name, value in res.items():
            out.append(Residual(row.source, evidence.KINDS[name], key, float(value)))
    return out


def summary(records: list[Residual], level: float = DEFAULT_LEVEL) -> dict[str, Any]:
    """Per kind: figures, sources, source-weighted median |error|, signed median, optimistic share,
    interval coverage (leave-one-source-out intervals)."""
    out: dict[str, Any] = {}
    for name, kind in evidence.KINDS.items():
        rs = [r for r in records if r.kind == kind]
        if not rs:
            continue
        v = np.array([r.value for r in rs])
        w = source_weights(r.source for r in rs)
        covered = []
        for r in rs:
            iv = evidence.interval(records, kind, r.key, level, exclude_source=r.source)
            covered.append(math.log(iv.lo) <= r.value <= math.log(iv.hi))
        cov = np.array(covered, dtype=float)
        out[name] = {"figures": len(rs), "sources": len({r.source for r in rs}),
                     "median_abs_error": float(math.exp(weighted_quantile(np.abs(v), w, 0.5)) - 1.0),
                     "signed_median": float(math.exp(weighted_quantile(v, w, 0.5)) - 1.0),
                     "optimistic_share": float(np.sum(w * (v > 0)) / np.sum(w)),
                     "interval_coverage": float(np.sum(w * cov) / np.sum(w)), "level": level,
                     # every figure weighing the same (dominated by the largest sources)
                     "rows_pooled_median_abs_error": float(math.exp(np.median(np.abs(v))) - 1.0),
                     "rows_pooled_signed_median": float(math.exp(np.median(v)) - 1.0)}
    return out


def per_source(records: list[Residual]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        d = out.setdefault(r.source, {})
        d.setdefault(r.kind.removeprefix("serve_"), []).append(r.value)
    return {s: {k: {"figures": len(v), "median_abs_error": float(math.exp(np.median(np.abs(v))) - 1.0),
                    "signed_median": float(math.exp(np.median(v)) - 1.0)} for k, v in d.items()}
            for s, d in sorted(out.items())}


def load_record() -> dict[str, Any]:
    from llmpar.specs.registry import data_dir

    try:
        return json.loads((data_dir("validation") / LOSO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


# The last block computed, kept for the rest of the process while no shipped file it reads has
# changed (the README, docs/serving.md and the evidence tests ask for the same one); a deep copy
# goes out.
_MEMO: dict[tuple, dict[str, Any]] = {}


def validate_block(level: float = DEFAULT_LEVEL) -> dict[str, Any]:
    """The ``serving`` object of ``validate --json``: LOSO figures from the stored fit record."""
    import copy

    from llmpar.specs.reading import shipped_files_state

    key = (float(level), shipped_files_state())
    if key not in _MEMO:
        block = _validate_block(level)
        _MEMO.clear()
        _MEMO[key] = block
    return copy.deepcopy(_MEMO[key])


def _validate_block(level: float) -> dict[str, Any]:
    from llmpar.serving.fit import predict_loso
    from llmpar.serving.published import ENGINES, shipped_rows
    from llmpar.specs.registry import load_engine

    rows = shipped_rows()
    record = load_record()
    engines = {n: load_engine(n) for n in ENGINES}
    results = predict_loso(rows, engines, record.get("engines", {}))
    records = residual_records(results)
    schemes: dict[str, int] = {}
    per = per_source(records)
    for row, res, scheme in results:
        schemes[scheme] = schemes.get(scheme, 0) + len(res)
        if row.source in per:             # how each source was predicted (one scheme per source)
            per[row.source].setdefault("scheme", scheme)
    return {"scheme": "leave-one-source-out", "rows": len(rows), "sources": len({r.source for r in rows}),
            "figures_by_scheme": schemes, "cross_validation": summary(records, level),
            "per_source": per}
