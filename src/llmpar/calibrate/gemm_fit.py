"""The fit of the profile's GEMM efficiency curve to measured matmuls (split from ``gemm``).

The curve itself lives in ONE place, :func:`llmpar.cost.compute.gemm_efficiency`, with its
parameters in :class:`llmpar.specs.hardware.GemmEfficiency`. The fit here is generic: it fits every
float field of ``GemmEfficiency`` (bounds from the field's constraints, :func:`curve_parameters`) by
least squares on the relative error (``scipy.optimize.least_squares`` from several starts, some from
a seeded ``differential_evolution``; :func:`fit_curve`), evaluating the curve through that function
(:func:`efficiency_curve`). If the lead changes the curve's form, only those two places change.
:mod:`llmpar.calibrate.gemm` measures and writes the profile (docs/calibration.md, section 3).

scipy is imported inside the fit (``llmpar --help`` stays cheap). Nothing here prints.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from llmpar.errors import UserError

RANDOM_SEED = 20240605   # the global phase of fit_curve is seeded: same measurements, same curve
DE_GENERATIONS = 100     # differential evolution generations (fit_curve's global phase)
DE_POP_PER_PARAM = 10    # its population per curve parameter
DE_POLISH = 3            # local descents from its best members


def curve_parameters() -> tuple[list[str], dict[str, tuple[float, float]]]:
    """Names and (lower, upper) bounds of the efficiency curve's parameters: the float fields of
    :class:`GemmEfficiency` and their pydantic constraints."""
    from llmpar.specs.hardware import GemmEfficiency

    names, bounds = [], {}
    for name, info in GemmEfficiency.model_fields.items():
        if info.annotation is not float:
            continue
        lo, hi = -math.inf, math.inf
        for c in info.metadata:
            if getattr(c, "gt", None) is not None:
                lo = float(c.gt) + 1e-12
            if getattr(c, "ge", None) is not None:
                lo = float(c.ge)
            if getattr(c, "lt", None) is not None:
                hi = float(c.lt) - 1e-12
            if getattr(c, "le", None) is not None:
                hi = float(c.le)
        names.append(name)
        bounds[name] = (lo, hi)
    return names, bounds


def efficiency_curve(params: dict[str, float], m, n, k):
    """The profile's efficiency curve at ``params`` — evaluated by the ONE definition,
    :func:`llmpar.cost.compute.gemm_efficiency` (hook: change the curve there, not here)."""
    from llmpar.cost.compute import gemm_efficiency
    from llmpar.specs.hardware import GemmEfficiency

    shim = SimpleNamespace(gpu=SimpleNamespace(gemm=GemmEfficiency.model_construct(**params)))
    return gemm_efficiency(shim, np.asarray(m, dtype=float), np.asarray(n, dtype=float), np.asarray(k, dtype=float))



class _CurveFit:
    """The least-squares problem of :func:`fit_curve`: the measurements, the parameters' box in
    transformed units u, and the cost and one local descent in u."""

    def __init__(self, names, bounds, m, n, k, y, curve):
        self.names, self.m, self.n, self.k, self.y, self.curve = names, m, n, k, y, curve
        self.lo = np.array([bounds[x][0] for x in names])
        self.hi = np.array([bounds[x][1] for x in names])
        # the box of u: logit +-30 where both bounds are finite, else lo + exp(u) for u in [-50, 50]
        self.ulo = np.where(np.isfinite(self.hi), -30.0, -50.0)
        self.uhi = -self.ulo

    # Parameters differ by many decades (an efficiency ~0.8, a dimension ~100, a FLOP count ~1e9):
    # fit u with p = lo + exp(u) (lower bound only) or lo + (hi - lo) * sigmoid(u) (both bounds).
    def to_p(self, u):
        """Parameter values of a point u of the box."""
        lo, hi = self.lo, self.hi
        u = np.clip(u, -700, 700)
        both = np.isfinite(hi)
        return np.where(both, lo + (hi - lo) / (1 + np.exp(-u)), np.where(np.isfinite(lo), lo, 0.0) + np.exp(u))

    def to_u(self, p):
        """The point u of the box of parameter values p (the inverse of :meth:`to_p`)."""
        lo, hi = self.lo, self.hi
        p = np.asarray(p, dtype=float)
        both = np.isfinite(hi)
        span = np.where(both, hi - lo, 1.0)
        x = np.clip((p - lo) / span, 1e-9, 1 - 1e-9)
        return np.where(both, np.log(x / (1 - x)), np.log(np.maximum(p - np.where(np.isfinite(lo), lo, 0.0), 1e-300)))

    def resid(self, p):
        """Relative error of the curve at parameter values p, one per measurement."""
        return self.curve(dict(zip(self.names, p)), self.m, self.n, self.k) / self.y - 1.0

    def cost(self, U):
        """Sum of squared residuals for each row of U (S x parameters): the curve evaluated once for
        all rows where it is array-polymorphic in its parameters (cost.compute's is), else row by row."""
        m, n, k, y = self.m, self.n, self.k, self.y
        P = self.to_p(np.atleast_2d(U))
        try:
            r = self.curve({x: P[:, j:j + 1] for j, x in enumerate(self.names)}, m[None, :], n[None, :],
                           k[None, :]) / y - 1.0
            r = np.broadcast_to(r, (P.shape[0], y.size))
        except (TypeError, ValueError):
            r = np.array([self.resid(p) for p in P])
        c = np.sum(r**2, axis=1)
        return np.where(np.isfinite(c), c, np.inf)

    def solve(self, u0):
        """One local descent: scipy's trust-region reflective least squares in u, within the box."""
        from scipy.optimize import least_squares

        u0 = np.clip(u0, self.ulo, self.uhi)
        if not np.isfinite(self.cost(u0)[0]):
            return u0, math.inf
        res = least_squares(lambda u: self.resid(self.to_p(u)), u0, method="trf", bounds=(self.ulo, self.uhi),
                            x_scale=1.0, ftol=1e-12, xtol=1e-12, gtol=1e-12, max_nfev=300)
        return res.x, float(self.cost(res.x)[0])


def fit_curve(m, n, k, eff, start: dict[str, float] | None = None,
              curve: Callable[..., Any] = efficiency_curve) -> tuple[dict[str, float], dict[str, float]]:
    """Least squares on relative error, sum((curve(p; m, n, k) / eff - 1)^2), within the parameters'
    bounds (in transformed parameters u: logit where both bounds are finite, log above a lower bound).

    ``scipy.optimize.least_squares`` (trust-region reflective, box bounds on u) descends from the
    start values, from a data-driven guess, from starts that try a parameter at its lower bound over
    a few decades, and from the best members of a seeded ``differential_evolution`` over the box those
    starts span; the lowest cost wins. Seeded and single-threaded: same measurements, same curve.
    Returns (params, quality)."""
    names, bounds = curve_parameters()
    m, n, k, y = (np.asarray(v, dtype=float) for v in (m, n, k, eff))
    if y.size < len(names):
        raise UserError(f"need at least {len(names)} GEMM measurements to fit {', '.join(names)}; got {y.size}")
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise UserError("GEMM efficiencies must be positive and finite")
    prob = _CurveFit(names, bounds, m, n, k, y, curve)
    U0 = [prob.to_u(np.array([s0[x] for x in names])) for s0 in _starts(names, bounds, start, m, n, k, y)]
    U0 += _de_members(prob, U0)
    best = (U0[0], math.inf)
    for u0 in U0:                           # the lowest cost wins, the earliest start on a tie
        got = prob.solve(u0)
        if got[1] < best[1]:
            best = got
    p = prob.to_p(best[0])
    rel = prob.resid(p)
    params = {x: float(v) for x, v in zip(names, p)}
    quality = {"rms_rel_error": float(np.sqrt(np.mean(rel**2))), "max_rel_error": float(np.max(np.abs(rel))),
               "samples": int(y.size)}
    return params, quality


def _starts(names, bounds, start, m, n, k, y) -> list[dict[str, float]]:
    """The local starts: the given (or default) values and a data-driven guess, each with the
    parameters at their lower bound tried over a few decades."""
    from llmpar.specs.hardware import GemmEfficiency

    defaults = {x: float(GemmEfficiency.model_fields[x].default) for x in names}
    base = dict(defaults, **{x: v for x, v in (start or {}).items() if x in defaults})
    # a data-driven variant: the largest efficiency seen, the median smallest dimension, the median FLOPs
    d = np.minimum(np.minimum(m, n), k)
    guess = dict(base)
    guess.update({"max_efficiency": min(float(y.max()) * 1.1, bounds.get("max_efficiency", (0, 1))[1]),
                  "half_dim": float(np.median(d)) / 4, "half_flops": float(np.median(2 * m * n * k)) / 100})
    guess = {x: guess[x] for x in names}
    starts = []
    for s0 in (base, guess):
        # parameters at their lower bound (e.g. a default of 0) are tried over a few decades
        at_bound = [x for x in names if s0[x] <= bounds[x][0] + 1e-12]
        if not at_bound:
            starts.append(s0)
        for dec in (1e0, 1e3, 1e6, 1e9, 1e12):
            if at_bound:
                starts.append({**s0, **{x: bounds[x][0] + dec for x in at_bound}})
    return starts


def _de_members(prob: _CurveFit, U0: list[np.ndarray]) -> list[np.ndarray]:
    """The global phase: the best members of a seeded differential evolution over the box the
    starts span; they are descended from like the other starts."""
    from scipy.optimize import differential_evolution   # lazily: `llmpar --help` stays cheap

    # global phase: a seeded differential evolution over the box the starts span (+- 5 in u: x/÷ 150
    # around them), no polish, one process; its best members are starts like the others
    pts = np.array(U0)
    dlo, dhi = np.maximum(pts.min(axis=0) - 5.0, prob.ulo), np.minimum(pts.max(axis=0) + 5.0, prob.uhi)
    de = differential_evolution(lambda U: prob.cost(U.T), list(zip(dlo, dhi)), seed=RANDOM_SEED, strategy="rand1bin",
                                maxiter=DE_GENERATIONS, popsize=DE_POP_PER_PARAM, tol=0.0, polish=False,
                                x0=np.clip(U0[0], dlo, dhi), vectorized=True, updating="deferred", workers=1)
    pop = getattr(de, "population", None)
    return [de.x] if pop is None else [pop[i] for i in np.argsort(de.population_energies, kind="stable")[:DE_POLISH]]
