"""Fit an engine's achieved fractions and fixed costs to published (or your own) serving runs,
and measure the fit honestly: leave one source out (docs/serving.md, Evidence).

Parameters (:data:`PARAMS`): ``kernels.decode_bandwidth``, ``kernels.gemm_efficiency``,
``overhead.per_step_s``, ``overhead.per_request_s`` and ``overhead.per_seq_s``, one value each
for every GPU generation; and ``kernels.decode_bandwidth`` of its own for each GPU generation
other than Hopper (or, without Hopper rows, the most common) that has at least
:data:`MIN_GENERATION_ROWS` rows (AMD's ROCm
kernels reach a different share of HBM3 than NVIDIA's: the measured runs say how much), pulled
to the shared value. Loss: scipy's least_squares
(trf, soft-L1 on the log residuals of every figure a row publishes), each source weighing the
same, with a weak pull to the engine's prior (σ = 0.5 in log units for fractions, 5 ms for times).

Leave-one-source-out: each source of an engine is predicted by the engine refitted without it; an
engine with one source is predicted by its prior, and says so. The prior of a shipped engine in
scripts/fit_engines.py is what the other engines measured (:func:`cross_engine_prior`); PRIORS
(hand-set) start that first stage and every ``calibrate serve`` fit.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from llmpar.cost import serving_load as load
from llmpar.cost.serving_capacity import kv_capacity, max_concurrency
from llmpar.cost.serving_finite import finite_rate
from llmpar.serving.published import ServingRow, engine_of, load_kwargs, predict, residuals

#: (section, field, lower, upper, prior sigma); fractions in log space, times linear
PARAMS = (("kernels", "decode_bandwidth", 0.3, 1.0, 0.5), ("kernels", "gemm_efficiency", 0.3, 1.0, 0.5),
          ("overhead", "per_step_s", 0.0, 0.05, 0.005), ("overhead", "per_request_s", 0.0, 0.5, 0.005),
          ("overhead", "per_seq_s", 0.0, 0.001, 0.0001))


MIN_GENERATION_ROWS = 2


def at_bounds(values) -> dict[str, str]:
    """{parameter: "lower" | "upper"} for each fitted PARAMS value on (within 1e-6 of the range
    of) one of its bounds: the fit wanted to go further, so the value is a bound, not an estimate
    (another term is missing, or the deployment given is not the one that ran)."""
    vals, _ = unpack_fit(values)
    out = {}
    for (_, name, lo, hi, _), v in zip(PARAMS, vals):
        tol = 1e-6 * (hi - lo)
        if v <= lo + tol:
            out[name] = "lower"
        elif v >= hi - tol:
            out[name] = "upper"
    return out


def unpack_fit(values):
    """A fit result: a list (PARAMS only) or {"values": [...], "by_gen": {generation: bandwidth}}."""
    if isinstance(values, dict):
        return list(values["values"]), dict(values.get("by_gen") or {})
    return list(values), {}


def with_params(engine, values) -> Any:
    """A copy of ``engine`` with PARAMS set to ``values`` (a list, one per parameter, or a fit
    result with per-generation decode bandwidths)."""
    vals, by_gen = unpack_fit(values)
    parts = {"kernels": {}, "overhead": {}}
    for (section, name, *_), v in zip(PARAMS, vals):
        parts[section][name] = float(v)
    if by_gen:
        parts["kernels"]["decode_bandwidth"] = {"default": parts["kernels"]["decode_bandwidth"],
                                                **{g: float(v) for g, v in by_gen.items()}}
    return engine.model_copy(update={
        "kernels": engine.kernels.model_copy(update=parts["kernels"]),
        "overhead": engine.overhead.model_copy(update=parts["overhead"])})


#: the shipped engines' hand-set priors: where a fit starts and what it is pulled to in the first
#: stage of scripts/fit_engines.py (the second stage uses :func:`cross_engine_prior`) and in
#: ``calibrate serve``, so refitting never starts from its own previous answer and a held-out source
#: never leaks in through the prior
PRIORS = {"vllm": [0.85, 0.85, 0.001, 0.005, 0.0], "sglang": [0.85, 0.85, 0.0005, 0.005, 0.0],
          "trtllm": [0.85, 0.85, 0.0003, 0.002, 0.0]}


def prior_values(engine, generation: str | None = None) -> list[float]:
    """PRIORS for a shipped engine, else the engine file's own values (a user's profile)."""
    from llmpar.specs.stack import per_gen

    if engine.name in PRIORS and engine.extends is None:
        return list(PRIORS[engine.name])
    return [per_gen(getattr(getattr(engine, section), name), generation) for section, name, *_ in PARAMS]


_SPECS: dict[tuple[str, str], Any] = {}


def _specs(row: ServingRow):
    """The row's (model, hardware): its own where it carries them, else loaded by name once."""
    from llmpar.specs.registry import load_hardware, load_model

    if row.specs is not None:
        return row.specs
    key = (row.model, row.hardware)
    if key not in _SPECS:
        _SPECS[key] = (load_model(row.model), load_hardware(row.hardware))
    return _SPECS[key]


def _vector_key(row: ServingRow):
    kind = next(iter(row.load))
    if kind not in ("offline", "concurrency", "rate") or (kind == "rate" and str(row.load["rate"]).lower() == "inf"):
        return None
    name = {"rate": "finite" if row.requests else "rate", "offline": "offline"}.get(kind, "closed")
    return (name, row.model, row.hardware, row.tp, row.pp, row.ep, row.weights, row.kv_dtype, row.gpus)


def predict_many(rows: list[ServingRow], engine) -> list[dict[str, float] | None]:
    """:func:`predict` for many rows; offline and closed-loop rows of one deployment at once (the
    same closed-loop formula on arrays: cost/serving_load.py is array-polymorphic)."""
    out: list[dict[str, float] | None] = [None] * len(rows)
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        key = _vector_key(r)
        if key is None:
            try:
                out[i] = predict(r, engine, _specs(r))
            except Exception:   # noqa: BLE001 - a row the model cannot express is left unpredicted
                out[i] = None
        else:
            groups[key].append(i)
    for key, idx in groups.items():
        r0 = rows[idx[0]]
        model, hw = _specs(r0)
        replicas = r0.replicas
        cap = kv_capacity(model, hw, engine, tp=r0.tp, pp=r0.pp, weights=r0.weights, kv_dtype=r0.kv_dtype)
        if not cap["fits"]:
            continue
        isl = np.array([rows[i].isl for i in idx], dtype=float)
        osl = np.array([rows[i].osl for i in idx], dtype=float)
        per_replica = np.array([float(list(rows[i].load.values())[0]) for i in idx], dtype=float) / replicas
        limit = np.broadcast_to(np.asarray(max_concurrency(cap, model, isl + osl), dtype=float), isl.shape)
        dep = {"tp": r0.tp, "pp": r0.pp, "ep": r0.ep, "weights": r0.weights, "kv_dtype": r0.kv_dtype}
        budget = int(cap["max_num_batched_tokens"])
        if key[0] == "rate":   # Poisson arrivals: every rate of the deployment in one grid (serving_load.open_loop)
            f = load.open_loop(model, hw, engine, dep, isl, osl, per_replica, np.maximum(limit, 1.0), budget)
        elif key[0] == "finite":   # N requests at a rate: the run in time (serving_finite.finite_rate)
            count = np.array([rows[i].requests for i in idx], dtype=float) / replicas
            f = finite_rate(model, hw, engine, dep, isl, osl, per_replica, count, np.maximum(limit, 1.0), budget)
        elif key[0] == "offline":
            f = load.offline(model, hw, engine, dep, isl, osl, per_replica, np.maximum(limit, 1.0), budget)
        else:
            f = load.closed_loop(model, hw, engine, dep, isl, osl, per_replica, np.maximum(limit, 1.0), budget)
        f = {k: np.broadcast_to(np.asarray(v, dtype=float), isl.shape) for k, v in f.items()}
        X = np.asarray(f["requests_per_s"], dtype=float) * replicas
        for j, i in enumerate(idx):
            if limit[j] < 1:
                continue
            out[i] = {"output_tokens_per_s": X[j] * osl[j], "total_tokens_per_s": X[j] * (isl[j] + osl[j]),
                      "requests_per_s": X[j], "ttft_s": float(np.asarray(f["ttft_s"])[j]),
                      "tpot_s": float(np.asarray(f["tpot_s"])[j]), "e2e_s": float(np.asarray(f["e2e_s"])[j]),
                      "itl_median_s": float(np.asarray(f.get("itl_median_s", f["tpot_s"]))[j])}
    return out


def row_residuals(rows, engine) -> list[dict[str, float]]:
    return [residuals(r, p) for r, p in zip(rows, predict_many(rows, engine))]


def _loss_vector(rows, engine, values, prior, gens=()):
    n = len(PARAMS)
    fitted = {"values": list(values[:n]), "by_gen": dict(zip(gens, values[n:]))}
    res = row_residuals(rows, with_params(engine, fitted))
    counts: dict[str, int] = defaultdict(int)
    for r, x in zip(rows, res):
        counts[r.source] += len(x)
    vec = []
    for r, x in zip(rows, res):
        w = 1.0 / math.sqrt(max(counts[r.source], 1))
        vec.extend(w * v for v in x.values())
        if not x:   # a row that no longer fits counts as a large miss
            vec.append(2.0 / math.sqrt(max(counts[r.source], 1)))
    for (section, name, lo, hi, sigma), v, p in zip(PARAMS, values, prior):
        vec.append((math.log(v / p) if section == "kernels" else (v - p)) / sigma * 0.1)
    for v in values[n:]:   # a generation's bandwidth is pulled to the shared one
        vec.append(math.log(v / values[0]) / 0.5 * 0.1)
    return np.array(vec)


def _own_generations(rows) -> list[str]:
    """Generations other than the most common that have MIN_GENERATION_ROWS rows (sorted)."""
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        counts[_specs(r)[1].gpu.generation] += 1
    if not counts:
        return []
    # the shared value stands for Hopper where Hopper rows exist (most published runs, and what a
    # generation without its own value falls back to), else for the most common generation
    common = "hopper" if "hopper" in counts else max(sorted(counts), key=lambda g: counts[g])
    return sorted(g for g, c in counts.items() if g != common and c >= MIN_GENERATION_ROWS)


def fit(rows: list[ServingRow], engine, generation: str | None = None, prior: list[float] | None = None
        ) -> dict[str, Any]:
    """Least-squares values of PARAMS for ``rows`` (all predicted with ``engine``), and the decode
    bandwidth of each generation of its own: {"values": [...], "by_gen": {generation: value}}.
    ``prior``: the values the fit is pulled to and starts from (default :func:`prior_values`)."""
    from scipy.optimize import least_squares

    prior = list(prior) if prior is not None else prior_values(engine, generation)
    gens = _own_generations(rows)
    lo = [p[2] for p in PARAMS] + [PARAMS[0][2]] * len(gens)
    hi = [p[3] for p in PARAMS] + [PARAMS[0][3]] * len(gens)
    start = prior + [prior[0]] * len(gens)
    x0 = [min(max(v, lo_ + 1e-9), hi_ - 1e-9) for v, lo_, hi_ in zip(start, lo, hi)]
    sol = least_squares(lambda v: _loss_vector(rows, engine, v, prior, gens), x0, bounds=(lo, hi), loss="soft_l1",
                        f_scale=0.2, diff_step=1e-3, max_nfev=80)
    n = len(PARAMS)
    return {"values": [float(v) for v in sol.x[:n]], "by_gen": {g: float(v) for g, v in zip(gens, sol.x[n:])}}


def engine_rows(rows: list[ServingRow], name: str) -> list[ServingRow]:
    """The rows an engine ``name`` is fitted on: those measured on it, from files that do not say
    ``fit: false`` (rows of an 'other' engine, and evidence-only files, are never fitted; they are
    predicted out of sample under the engine's in-sample fit: :func:`predict_loso`)."""
    return [r for r in rows if r.engine == name and r.fitted]


def cross_engine_prior(name: str, fits: dict[str, dict[str, Any] | None]) -> list[float] | None:
    """The prior of engine ``name`` from the other engines' in-sample fits (``fits``: engine ->
    fit, each made with the hand priors, PRIORS): the geometric mean of their kernel fractions and
    the mean of their host costs, one value per PARAMS entry (per-generation bandwidths left out).
    The engines run the same kernels' physics on the same GPUs and pay per-step host work of the
    same kind (scheduling, sampling, detokenising), so what the others measured is a better prior
    than a guess; none of their rows is one of ``name``'s, so a held-out source of ``name`` never
    reaches its own prior (docs/serving.md, Evidence). None without another engine's fit."""
    others = [f for n, f in sorted(fits.items()) if n != name and f]
    if not others:
        return None
    out = []
    for i, (section, *_rest) in enumerate(PARAMS):
        vals = [unpack_fit(f)[0][i] for f in others]
        out.append(float(np.exp(np.mean(np.log(vals)))) if section == "kernels" else float(np.mean(vals)))
    return out


def leave_one_source_out(rows: list[ServingRow], engine, prior: list[float] | None = None) -> dict[str, Any]:
    """{"prior": values, "in_sample": values, "folds": {source: values or None (prior: the only
    source)}}; ``prior`` as :func:`fit` (default :func:`prior_values`)."""
    mine = engine_rows(rows, engine.name)
    sources = sorted({r.source for r in mine})
    prior = list(prior) if prior is not None else prior_values(engine)
    record: dict[str, Any] = {"params": [f"{s}.{n}" for s, n, *_ in PARAMS], "sources": sources, "prior": prior,
                              "in_sample": fit(mine, engine, prior=prior) if mine else None, "folds": {}}
    for s in sources:
        rest = [r for r in mine if r.source != s]
        record["folds"][s] = fit(rest, engine, prior=prior) if rest else None
    return record


# how predict_loso predicted a source: its engine refitted without it, the engine's prior (it was the
# engine's only source), or the in-sample fit of an engine never fitted on it ('other', `fit: false`)
# (short ids: they are JSON keys of `validate --serving --json`'s figures_by_scheme, and a key is
# snake_case; SCHEME_WORDS says each in words for the tables)
SCHEME_HELD_OUT = "source"
SCHEME_PRIOR = "prior"
SCHEME_NOT_FITTED = "not_fitted"
SCHEME_WORDS = {SCHEME_HELD_OUT: "its engine refitted without it", SCHEME_PRIOR: "prior (the engine's only source)",
                SCHEME_NOT_FITTED: "out of sample (engine not fitted on it)"}


def predict_loso(rows: list[ServingRow], engines: dict[str, Any], record: dict[str, Any]):
    """Residuals of every row under leave-one-source-out: each row's engine refitted without its
    source (the prior where its source was the engine's only one; an 'other' engine's rows are
    out of sample as they stand, under the in-sample vllm fit). Returns [(row, residuals, scheme)]."""
    out = []
    by_engine_source: dict[tuple[str, str], list[ServingRow]] = defaultdict(list)
    for r in rows:
        by_engine_source[(engine_of(r), r.source)].append(r)
    for (name, source), group in sorted(by_engine_source.items()):
        rec = record.get(name) or {}
        base = engines[name]
        folds = rec.get("folds", {})
        if source in folds:
            vals = folds[source]
            scheme = SCHEME_HELD_OUT if vals is not None else SCHEME_PRIOR
            eng = with_params(base, vals if vals is not None else (rec.get("prior") or prior_values(base)))
        else:
            vals = rec.get("in_sample")
            eng = with_params(base, vals) if vals is not None else base
            scheme = SCHEME_NOT_FITTED
        for row, res in zip(group, row_residuals(group, eng)):
            out.append((row, res, scheme))
    return out


__all__ = ["PARAMS", "SCHEME_HELD_OUT", "SCHEME_NOT_FITTED", "SCHEME_PRIOR", "SCHEME_WORDS", "cross_engine_prior", "fit", "leave_one_source_out", "predict_loso", "predict_many", "row_residuals", "with_params",
           "load_kwargs"]
