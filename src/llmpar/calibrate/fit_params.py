"""The collective model's fit parameters of one tier (split from ``fit``).

What is fitted (docs/calibration.md, section 5; docs/collectives.md, "Fit parameters"): the
parameters of :mod:`llmpar.cost.collectives` that a profile may state for a tier, per collective
(:data:`FIT_FIELDS`, and :data:`INR_FIELDS` on tiers with in-network reduction); their values as
the model resolves them (:func:`resolved`); the transforms the search works in (:func:`to_u`,
:func:`to_p`: log for latencies, logit for efficiencies in (0, 1)); and a profile with given values
substituted (:func:`with_params`, array values allowed).

Nothing here prints.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmpar.cost.collective_params import PROTO_BW, algorithms_for, tier_params

FIT_FIELDS = ("latency", "ll128_latency", "simple_latency", "efficiency", "ll_efficiency", "ll128_efficiency")
INR_FIELDS = ("inr_latency", "inr_efficiency")
FRACTIONS = frozenset({"efficiency", "ll_efficiency", "ll128_efficiency", "inr_efficiency"})  # in (0, 1)
FRACTION_CAP = 1.0 - 1e-9


def fit_fields(tier, collective: str) -> tuple[str, ...]:
    """The fit parameters of ``tier`` that can matter for ``collective``."""
    names = FIT_FIELDS
    inr_algos = {"nvls", "nvls_tree", "collnet"} & set(algorithms_for(collective))
    if tier.in_network_reduction and inr_algos:
        names = names + INR_FIELDS
    return names


def resolved(tier, collective: str) -> dict[str, float]:
    """Every fit parameter of ``tier`` as the model uses it for ``collective`` (defaults filled in)."""
    p = tier_params(tier, collective)
    ratio = p["proto_bw"]
    vals = {
        "latency": float(p["alpha"][0]), "ll128_latency": float(p["alpha"][1]), "simple_latency": float(p["alpha"][2]),
        "efficiency": float(p["beta"] / tier.bandwidth),
        "ll_efficiency": float(ratio[0] * PROTO_BW["ring"][0]), "ll128_efficiency": float(ratio[1] * PROTO_BW["ring"][1]),
        "inr_latency": float(p["inr_latency"]), "inr_efficiency": float(p["beta_inr"] / tier.bandwidth),
    }
    return {k: min(v, FRACTION_CAP) if k in FRACTIONS else v for k, v in vals.items()}


def to_u(name: str, value):
    """A parameter value in the units the search works in: logit for a fraction, log otherwise."""
    v = np.asarray(value, dtype=float)
    if name in FRACTIONS:
        v = np.clip(v, 1e-9, FRACTION_CAP)
        return np.log(v / (1.0 - v))
    return np.log(np.maximum(v, 1e-15))


def to_p(name: str, u):
    """The inverse of :func:`to_u`: the parameter value of a transformed one."""
    u = np.clip(np.asarray(u, dtype=float), -700.0, 700.0)
    if name in FRACTIONS:
        return 1.0 / (1.0 + np.exp(-u))
    return np.exp(u)


def with_params(hw, collective: str, params: dict[str, dict[str, Any]]):
    """``hw`` with ``params`` ({tier name: {field: value}}) as the tiers' values for ``collective``.

    Values may be numpy arrays (the fitter evaluates every Jacobian column in one call).
    """
    from llmpar.specs.hardware import TierFit

    tiers = []
    for t in hw.tiers:
        if t.name in params:
            over = dict(t.collectives or {})
            old = over.get(collective)
            merged = {**(old.model_dump(exclude_none=True) if old is not None else {}), **params[t.name]}
            over[collective] = TierFit.model_construct(**merged)
            t = t.model_copy(update={"collectives": over})
        tiers.append(t)
    return hw.model_copy(update={"tiers": tiers})
