"""Fit the collective model's latency and bandwidth to nccl-tests measurements.

``llmpar calibrate fit LOG... --hardware BASE --out my-cluster.yaml``.

What is fitted (docs/calibration.md, section 4; docs/collectives.md, "Fit parameters"): per
collective and per tier crossed, the parameters of :mod:`llmpar.cost.collectives` that a profile
may state for a tier:

* ``latency``, ``ll128_latency``, ``simple_latency`` - alpha per step for NCCL's three protocols
  (the small sizes fix them: LL at the smallest, LL128 in the middle, Simple where large sizes bend);
* ``efficiency`` - beta = bandwidth x efficiency (the largest sizes fix it);
* ``ll_efficiency``, ``ll128_efficiency`` - the bandwidth of the LL / LL128 protocol relative to
  Simple's. NCCL picks the protocol by size, so these are the *size-dependent efficiency*: where
  one line does not fit all sizes, the middle sizes run on another protocol at another bandwidth.
  (A smooth ramp S/(S + S_half) would add nothing: it is algebraically a latency.)
* ``inr_latency``, ``inr_efficiency`` - NVLS / SHARP, on tiers that have in-network reduction.

How: least squares on the *relative* error of time, r_i = predicted_i / measured_i - 1, so a
1 us error at 8 bytes weighs what a 1 ms error at 1 GB weighs, with a soft-L1 loss beyond 5 %
(one odd row - the 1 GB dip of a published GB200 log - counts like one row, not its square), in
transformed parameters (log for latencies, logit for efficiencies in (0, 1)), and a weak ridge
towards the base values (weight ``PRIOR``): a parameter the data do not constrain (the LL128
latency of a log that never runs LL128) stays at its base value instead of wandering.
The objective is piecewise - NCCL's (algorithm, protocol) choice flips as the parameters move -
so it has local minima. scipy.optimize does the work (imported inside the fit, so that
``llmpar --help`` does not load it): ``least_squares`` (trust-region reflective, box bounds base
+- LOCAL_SPAN in transformed units, scipy's soft-L1 loss on the time rows) descends from the base
values (enough when the model can reproduce the data exactly), then from structured starts
(latencies scaled to the smallest size, efficiencies to the largest, the optimum of the >= 64 MiB
and >= 1 MiB rows alone) and from the best members of a seeded ``differential_evolution``
(polish off, one process); every start gets a short descent, the lowest few a full one, and the
lowest objective wins. Seeded, one thread of control, ties to the earliest start: same logs, same
profile - and a search thorough enough that other seeds, or data moved by 1e-9, land in the same
basin (tests/test_calibrate_fit.py).
The prediction is :func:`llmpar.cost.collectives.collective_time` itself, evaluated for a whole
population, or all columns of a Jacobian, at once (it is array-polymorphic in the tier fields
too; checked once against one call per vector) - there is no second copy of the time formula here.

Tiers: a log inside one scale-up domain (one DGX node; one NVL72 rack) fixes that domain's tier;
a log across domains fixes the scale-out tier, with the scale-up tier taken from the single-domain
logs of the same collective. Without such logs the scale-up tier is fitted from the multi-domain
logs too, under a stronger ridge (``PRIOR_SECONDARY``) - and the record says so.

The profile written ``extends:`` the base; each fitted tier gets ``collectives: {<name>: {...}}``
with every fit parameter of each measured collective, and the tier's own fields take the values
of the primary collective (all_reduce when measured, else the one with the most rows), which the
model then uses for the collectives that were not measured. A ``calibration.collectives`` block
records the files (with sha256), the date, the parameters before and after, and the fit quality.

Nothing here prints.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmpar.cost.collective_params import PROTO_BW, algorithms_for, tier_params
from llmpar.cost.collectives import collective_time
from llmpar.errors import UserError

FIT_FIELDS = ("latency", "ll128_latency", "simple_latency", "efficiency", "ll_efficiency", "ll128_efficiency")
INR_FIELDS = ("inr_latency", "inr_efficiency")
FRACTIONS = frozenset({"efficiency", "ll_efficiency", "ll128_efficiency", "inr_efficiency"})  # in (0, 1)
PRIOR = 1e-4            # ridge weight per parameter (transformed units) for the tier a log fixes
PRIOR_SECONDARY = 1e-2  # ... for a scale-up tier fitted from multi-domain logs only
MIB = float(1 << 20)
SIZE_BANDS = {"ge_1MB": MIB, "ge_64MB": 64 * MIB}   # 1 MB and 64 MB as nccl-tests' powers of two
_FRACTION_CAP = 1.0 - 1e-9
ROBUST_SCALE = 0.05     # relative error beyond which a row's loss grows linearly (soft-L1)
RANDOM_SEED = 20240605  # the global phase is seeded: the same logs give the same profile
SPAN = 5.0              # global search box: base +- 5 in transformed units (latency x/÷ 150)
LOCAL_SPAN = 10.0       # the local solver's box: base +- 10 (latency x/÷ 22000; efficiency 0.8 -> 0.9999)
JAC_STEP = 1e-6         # central-difference step of the Jacobian, transformed units
LS_TOL = 1e-8           # least_squares ftol, xtol and gtol (scipy's defaults)
GENERATIONS = 600       # differential evolution generations (see _de_starts). 300 left two near-equal
                        # basins to the seed: log 11 fitted 2.35 % or 2.92 % (5 of 32 seeds), log 09
                        # 1.5 % or 3.5 %, log 10 2.5 % or 3.4 %; at 600 every seed tried gave the same
POP_PER_PARAM = 8       # population per fitted parameter
EXACT_RMS = 1e-3        # rms relative error that ends the search at once (nccl-tests prints ~4 digits)
POLISH = 6              # local descents from the best points of the global phase
SHORT_NFEV = 15         # evaluations of the short descent from every start
FINALISTS = 3           # starts whose short descent ended lowest, descended in full


# ----------------------------------------------------------------------------- placement

@dataclass
class Placement:
    """One parsed table, placed on the profile: which group shape and which tiers it measures."""

    file: str
    label: str                      # file, plus the table number when a file holds several
    collective: str
    ranks: int
    nodes: int
    members_per_node: int           # k: group members per scale-up domain (llmpar.cost.collectives)
    domains: int                    # scale-up domains the group spans
    intra_tier: str                 # the scale-up tier the group uses inside a domain
    tier: str                       # the tier this log fixes: intra_tier, or the scale-out tier
    sizes: np.ndarray
    times: np.ndarray               # seconds, out-of-place block (in-place where only that exists)
    notes: list[str] = field(default_factory=list)
    algorithm: str | None = None    # the algorithm the log was forced to (NCCL_ALGO); None = NCCL's choice

    @property
    def multi_domain(self) -> bool:
        return self.domains > 1


def _gpu_family(name: str) -> str:
    """'H100-SXM5-80GB' -> 'H100' (the token that names the chip)."""
    return str(name).upper().replace("NVIDIA", "").strip().split("-")[0].split()[0] if str(name).strip() else ""


def _samples(log) -> tuple[np.ndarray, np.ndarray, list[str]]:
    notes: list[str] = []
    sizes, times = [], []
    dropped = 0
    for r in log.usable_rows():
        m = r.measurement("out_of_place")
        t = m.time_s
        if m.cputime:
            # -C 1: the time column is CPU time; algbw was computed from the GPU time
            if m.algbw_GBps >= 10.0:
                t = r.size_bytes / (m.algbw_GBps * 1e9)
            else:
                dropped += 1
                continue
        sizes.append(float(r.size_bytes))
        times.append(t)
    if dropped:
        notes.append(f"{dropped} rows with CPU time (-C 1) and algbw < 10 GB/s skipped: GPU time not recoverable")
    if log.flagged_rows:
        notes.append(f"{len(log.flagged_rows)} rows flagged #wrong > 0 not used")
    return np.asarray(sizes), np.asarray(times), notes


def place(log, hw, algorithm: str | None = None) -> Placement:
    """Group shape of a parsed log on ``hw``: ranks, members per scale-up domain, tier fixed.

    Nodes map to scale-up domains through the profile: ``nvlink_domain / gpus_per_node`` nodes per
    domain (1 on a DGX, 18 on GB200 NVL72), so 8 GB200 GPUs on 2 trays are one NVLink domain.
    ``algorithm``: the log was measured with ``NCCL_ALGO=<it>``; the model is then held to it.
    """
    label = log.file + (f" (table {log.section + 1})" if log.section else "")
    if not log.collective:
        raise UserError(f"{label}: cannot tell which collective this log measures; pass --collective")
    if not log.ranks:
        raise UserError(f"{label}: cannot tell the number of ranks; pass --ranks")
    if log.ranks < 2:
        raise UserError(f"{label}: {log.ranks} rank: no link is crossed, nothing to fit or check")
    notes: list[str] = []
    nodes = log.nodes
    if not nodes:
        nodes = max(1, math.ceil(log.ranks / hw.gpus_per_node))
        notes.append(f"node count not in the log: assuming {nodes} ({hw.gpus_per_node} GPUs per node of {hw.name}); "
                     "pass --nodes")
    if log.gpu and _gpu_family(hw.gpu.name) and _gpu_family(hw.gpu.name) not in str(log.gpu).upper():
        notes.append(f"log GPU {log.gpu!r} is not the profile's {hw.gpu.name!r}")
    domain = hw.nvlink_domain
    nodes_per_domain = max(1, domain // hw.gpus_per_node)
    domains = max(math.ceil(nodes / nodes_per_domain), math.ceil(log.ranks / domain))
    k = max(1, math.ceil(log.ranks / domains))
    inner = hw.tiers[:-1] or hw.tiers[-1:]
    intra = next((t for t in inner if t.domain_size is None or k <= t.domain_size), inner[-1])
    tier = hw.tiers[-1] if domains > 1 else intra
    if algorithm is not None:   # "" is a typo, refused by normalize_algorithm, not "none given"
        from llmpar.cost.collective_params import normalize_algorithm

        algorithm = normalize_algorithm(algorithm, log.collective)
    sizes, times, more = _samples(log)
    if sizes.size == 0:
        raise UserError(f"{label}: no usable rows (all flagged, empty or zero-sized)")
    pl = Placement(file=log.file, label=label, collective=log.collective, ranks=int(log.ranks), nodes=int(nodes),
                   members_per_node=int(k), domains=int(domains), intra_tier=intra.name, tier=tier.name,
                   sizes=sizes, times=times, notes=notes + more, algorithm=algorithm)
    if algorithm and not np.all(np.isfinite(predict(hw, pl, sizes[:1]))):
        raise UserError(f"{label}: algorithm {algorithm} is not available to {log.collective} over {pl.ranks} GPUs "
                        f"({pl.members_per_node} per domain) on {hw.name}")
    return pl


def predict(hw, pl: Placement, sizes=None):
    """Model time (s) of the placement's rows on ``hw`` (through cost.collectives)."""
    s = pl.sizes if sizes is None else sizes
    return np.asarray(collective_time(hw, pl.collective, s, pl.ranks, pl.members_per_node, algorithm=pl.algorithm),
                      dtype=float)


def error_summary(sizes, errors) -> dict[str, float | None]:
    """Median and maximum |error| for sizes >= 1 MB and >= 64 MB (None where no row qualifies)."""
    sizes = np.asarray(sizes, dtype=float)
    err = np.abs(np.asarray(errors, dtype=float))
    out: dict[str, float | None] = {}
    for band, lo in SIZE_BANDS.items():
        sel = err[sizes >= lo]
        out[f"median_abs_error_{band}"] = float(np.median(sel)) if sel.size else None
        out[f"max_abs_error_{band}"] = float(np.max(sel)) if sel.size else None
    return out


# ----------------------------------------------------------------------------- parameters

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
    return {k: min(v, _FRACTION_CAP) if k in FRACTIONS else v for k, v in vals.items()}


def _to_u(name: str, value):
    v = np.asarray(value, dtype=float)
    if name in FRACTIONS:
        v = np.clip(v, 1e-9, _FRACTION_CAP)
        return np.log(v / (1.0 - v))
    return np.log(np.maximum(v, 1e-15))


def _to_p(name: str, u):
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


# ----------------------------------------------------------------------------- least squares

@dataclass
class _Problem:
    hw: Any
    collective: str
    placements: list[Placement]
    names: list[tuple[str, str]]      # (tier, field)
    u0: np.ndarray                    # base values, transformed
    weights: np.ndarray               # ridge weight per parameter
    batched: bool = True

    def __post_init__(self):
        # Evaluate every Jacobian column in one call when cost.collectives is array-polymorphic in
        # the tier fields too (it is written to be); check once against one call per vector.
        U = np.vstack([self.u0, self.u0 + 0.05])
        try:
            fast = self.times(U)
        except Exception:
            fast = None
        self.batched = False
        slow = self.times(U)
        self.batched = fast is not None and fast.shape == slow.shape and bool(np.allclose(fast, slow, rtol=1e-12))

    @property
    def measured(self) -> np.ndarray:
        return np.concatenate([p.times for p in self.placements])

    def params(self, u) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for (tier, name), x in zip(self.names, u):
            out.setdefault(tier, {})[name] = _to_p(name, x)
        return out

    def times(self, U) -> np.ndarray:
        """Predicted times for parameter vectors U (m x n): an m x rows array."""
        U = np.atleast_2d(U)
        if self.batched:
            try:
                h = with_params(self.hw, self.collective, self.params(U.T[:, :, None]))
                out = np.concatenate([np.broadcast_to(predict(h, p, p.sizes[None, :]), (U.shape[0], p.sizes.size))
                                      for p in self.placements], axis=1)
                return out
            except Exception:          # a model change that is not array-polymorphic in tier fields
                self.batched = False
        rows = []
        for u in U:
            h = with_params(self.hw, self.collective, self.params(u))
            rows.append(np.concatenate([predict(h, p) for p in self.placements]))
        return np.asarray(rows)

    def residuals(self, U) -> np.ndarray:
        """Rows: the relative time error of every measured row, then the ridge, sqrt(w) (u - u0).
        The robust loss is applied by the solver (:func:`_loss`), not here."""
        U = np.atleast_2d(U)
        rel = self.times(U) / self.measured[None, :] - 1.0
        ridge = np.sqrt(self.weights)[None, :] * (U - self.u0[None, :])
        return np.concatenate([rel, ridge], axis=1)

    def objective(self, U) -> np.ndarray:
        """The cost each parameter vector of U (m x n) is judged by - twice scipy's ``cost`` of
        :func:`_least_squares` - with inf where the model is not finite."""
        R = self.residuals(U)
        m = self.measured.size
        z = (R[:, :m] / ROBUST_SCALE) ** 2
        c = ROBUST_SCALE**2 * np.sum(2.0 * (np.sqrt(1.0 + z) - 1.0), axis=1) + np.sum(R[:, m:] ** 2, axis=1)
        return np.where(np.isfinite(c), c, np.inf)

    def jacobian(self, u) -> np.ndarray:
        """Central differences in the transformed parameters, every column in one batched call."""
        n = u.size
        E = JAC_STEP * np.eye(n)
        R = self.residuals(np.vstack([u[None, :] + E, u[None, :] - E]))
        return ((R[:n] - R[n:]) / (2.0 * JAC_STEP)).T

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The box of the local solver: base +- LOCAL_SPAN in transformed units."""
        return self.u0 - LOCAL_SPAN, self.u0 + LOCAL_SPAN


def _loss(rows: int):
    """scipy's ``soft_l1``, rho(z) = 2 (sqrt(1 + z) - 1), on the ``rows`` time rows (quadratic within
    ~ROBUST_SCALE of relative error, linear beyond: an odd row weighs like one row, not its square);
    the ridge rows after them stay quadratic (rho(z) = z). A callable is how ``least_squares`` takes a
    loss that differs by row; it is called with z = (f / f_scale)^2 and returns (rho, rho', rho'')."""

    def rho(z):
        out = np.empty((3, z.size))
        t = 1.0 + z[:rows]
        out[0, :rows] = 2.0 * (np.sqrt(t) - 1.0)
        out[1, :rows] = t**-0.5
        out[2, :rows] = -0.5 * t**-1.5
        out[0, rows:] = z[rows:]
        out[1, rows:] = 1.0
        out[2, rows:] = 0.0
        return out

    return rho


def _least_squares(prob: _Problem, u, max_nfev: int = 100) -> tuple[np.ndarray, float]:
    """One local descent: ``scipy.optimize.least_squares`` (trust-region reflective, box bounds
    base +- LOCAL_SPAN in transformed units) on :meth:`_Problem.residuals` with the soft-L1 loss of
    :func:`_loss`. Returns the point and its :meth:`_Problem.objective` (inf where u is unusable)."""
    from scipy.optimize import least_squares

    lo, hi = prob.bounds
    u = np.clip(np.asarray(u, dtype=float), lo, hi)
    c0 = float(prob.objective(u)[0])
    if not np.isfinite(c0):
        return u, math.inf
    res = least_squares(lambda x: prob.residuals(x)[0], u, jac=prob.jacobian, bounds=(lo, hi), method="trf",
                        loss=_loss(prob.measured.size), f_scale=ROBUST_SCALE, x_scale=1.0,
                        ftol=LS_TOL, xtol=LS_TOL, gtol=LS_TOL, max_nfev=max_nfev)
    c = float(prob.objective(res.x)[0])
    return (res.x, c) if c <= c0 else (u, c0)


def _de_starts(prob: _Problem, count: int) -> list[np.ndarray]:
    """Starts from a global phase: ``scipy.optimize.differential_evolution`` (Storn & Price 1997)
    over the box base +- SPAN in transformed units, seeded, the base values in its first population,
    no polish (:func:`_least_squares` polishes), one process; the ``count`` best of its final
    population. The whole population is judged in one batched model call per generation."""
    from scipy.optimize import differential_evolution

    lo, hi = prob.u0 - SPAN, prob.u0 + SPAN
    res = differential_evolution(lambda U: prob.objective(U.T), list(zip(lo, hi)), seed=RANDOM_SEED, strategy="rand1bin",
                                 maxiter=GENERATIONS, popsize=POP_PER_PARAM, tol=0.0, polish=False,
                                 init="latinhypercube", x0=prob.u0, vectorized=True, updating="deferred", workers=1)
    pop = getattr(res, "population", None)
    if pop is None:
        return [np.asarray(res.x)]
    order = np.argsort(res.population_energies, kind="stable")
    return [np.asarray(pop[i]) for i in order[:count]]


def _structured_starts(prob: _Problem) -> list[np.ndarray]:
    """Starts that follow the physics: the base values; latencies scaled to the smallest measured
    size and efficiencies to the largest ("small sizes fix alpha, large sizes fix beta"); and the
    optimum of the rows >= 64 MiB, then >= 1 MiB, alone (the bandwidth regime settled first)."""
    meas = prob.measured
    pred0 = prob.times(prob.u0)[0]
    sizes = np.concatenate([p.sizes for p in prob.placements])
    small, large = np.argmin(sizes), np.argmax(sizes)
    lat_scale = float(np.clip(meas[small] / pred0[small], 1e-3, 1e3))
    eff_scale = float(np.clip(pred0[large] / meas[large], 1e-3, 1e3))
    starts: list[np.ndarray] = []
    for ls, es in ((lat_scale, eff_scale), (lat_scale, 1.0), (1.0, eff_scale), (10.0, 0.6)):
        u = prob.u0.copy()
        for i, (_, name) in enumerate(prob.names):
            value = _to_p(name, u[i])
            if name.endswith("latency"):
                u[i] = _to_u(name, value * ls)
            elif name in ("efficiency", "inr_efficiency"):
                u[i] = _to_u(name, min(value * es, 0.999))
        if not any(np.allclose(u, s) for s in starts + [prob.u0]):
            starts.append(u)
    for lo in (64 * MIB, MIB):
        sub = [dataclasses.replace(p, sizes=p.sizes[p.sizes >= lo], times=p.times[p.sizes >= lo])
               for p in prob.placements]
        sub = [p for p in sub if p.sizes.size]
        count = sum(p.sizes.size for p in sub)
        if 3 <= count < meas.size:
            part = _Problem(hw=prob.hw, collective=prob.collective, placements=sub, names=prob.names,
                            u0=prob.u0, weights=prob.weights)
            starts.append(_least_squares(part, prob.u0.copy())[0])
    return starts


def _solve(prob: _Problem, blocks: list[list[int]] | None = None) -> tuple[np.ndarray, float]:
    """Block by block (the tier the logs fix, then a scale-up tier fitted alongside), each from
    local starts with the other blocks held; then all parameters together with :func:`_portfolio`,
    the block-wise point among its starts."""
    if not blocks or len(blocks) == 1:
        return _portfolio(prob)
    u = prob.u0.copy()
    for block in blocks:
        rest = [i for i in range(u.size) if i not in block]
        held: dict[str, dict[str, Any]] = {}
        for (t, f), x in zip([prob.names[i] for i in rest], u[rest]):
            held.setdefault(t, {})[f] = _to_p(f, x)
        sub = _Problem(hw=with_params(prob.hw, prob.collective, held), collective=prob.collective,
                       placements=prob.placements, names=[prob.names[i] for i in block], u0=prob.u0[block],
                       weights=prob.weights[block])
        u[block] = _portfolio(sub, global_phase=False)[0]
    return _portfolio(prob, extra=[u])


def _portfolio(prob: _Problem, extra: list[np.ndarray] = (), global_phase: bool = True) -> tuple[np.ndarray, float]:
    """A local descent (:func:`_least_squares`) from the base values - enough for data the model
    reproduces exactly. Otherwise the objective is piecewise (NCCL's choice of algorithm and
    protocol switches as the parameters move) with several local minima, so a portfolio: descents
    from ``extra``, from the structured starts and from the best points of a seeded differential
    evolution (:func:`_de_starts`); the lowest objective wins (the earliest start on a tie).
    Seeded and single-threaded: same logs, same profile."""
    best = _least_squares(prob, prob.u0.copy())
    rel = prob.residuals(best[0])[0, :prob.measured.size]
    if np.sqrt(np.mean(rel**2)) < EXACT_RMS:       # the data reproduced to their printed digits: nothing left to find
        return best
    starts = list(extra) + _structured_starts(prob)
    if global_phase:
        starts += _de_starts(prob, POLISH)
    # a short descent from every start, then a full one from the FINALISTS best of them
    short = [_least_squares(prob, u, max_nfev=SHORT_NFEV) for u in starts]
    order = sorted(range(len(short)), key=lambda i: short[i][1])
    for i in order[:FINALISTS]:
        got = _least_squares(prob, short[i][0])
        if got[1] < best[1]:
            best = got
    return best


# ----------------------------------------------------------------------------- the fit

@dataclass
class FitGroup:
    """One least-squares problem: one collective, the tiers it fixed, from which logs."""

    collective: str
    tiers: list[str]                        # the tiers these logs measure
    files: list[str]
    before: dict[str, dict[str, float]]     # tier -> field -> base value
    after: dict[str, dict[str, float]]      # tier -> field -> fitted value
    rms_rel_error: float
    max_rel_error: float
    samples: int
    notes: list[str] = field(default_factory=list)
    alongside: list[str] = field(default_factory=list)   # scale-up tiers left free without a log of their own

    def to_dict(self) -> dict[str, Any]:
        def clean(d):
            return {t: {k: float(f"{v:.6g}") for k, v in fs.items()} for t, fs in d.items()}

        return {"collective": self.collective, "tiers": self.tiers, "alongside": self.alongside, "files": self.files,
                "before": clean(self.before), "after": clean(self.after),
                "rms_rel_error": round(self.rms_rel_error, 6), "max_rel_error": round(self.max_rel_error, 6),
                "samples": self.samples, "notes": self.notes}


@dataclass
class FitResult:
    base: str
    hardware: Any                      # the fitted Hardware (as loaded from the profile)
    base_hardware: Any
    placements: list[Placement]
    groups: list[FitGroup]
    primary: str
    files: list[dict[str, Any]]        # per file: sha256, shape, before/after quality
    date: str
    profile: dict[str, Any]            # the YAML document (without the name)

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base, "hardware": self.hardware.name, "primary_collective": self.primary, "date": self.date,
                "fits": [g.to_dict() for g in self.groups], "files": self.files}


def _sha256(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _fit_collective(hw, collective: str, pls: list[Placement], measured: set[str] = frozenset()
                    ) -> tuple[dict[str, dict[str, float]], list[FitGroup]]:
    """Fit one collective: single-domain logs fix their scale-up tier, then multi-domain logs fix
    the scale-out tier (and the scale-up tier too where neither a single-domain log here nor an
    earlier fit recorded in the base profile, ``measured``, did)."""
    tiers = {t.name: t for t in hw.tiers}
    values: dict[str, dict[str, float]] = {}
    groups: list[FitGroup] = []
    stages: list[tuple[list[Placement], list[str], list[str]]] = []   # (logs, primary tiers, secondary tiers)
    single = [p for p in pls if not p.multi_domain]
    multi = [p for p in pls if p.multi_domain]
    for tname in dict.fromkeys(p.tier for p in single):
        stages.append(([p for p in single if p.tier == tname], [tname], []))
    if multi:
        fixed = {p.tier for p in single} | set(measured)
        # a scale-up tier carries bytes only where a group has k > 1 members in a domain
        secondary = [t for t in dict.fromkeys(p.intra_tier for p in multi if p.members_per_node > 1)
                     if t not in fixed and t != multi[0].tier]
        stages.append((multi, [multi[0].tier], secondary))
    for logs, primary, secondary in stages:
        names, u0, weights = [], [], []
        h = with_params(hw, collective, values) if values else hw
        for tname, w in [(t, PRIOR) for t in primary] + [(t, PRIOR_SECONDARY) for t in secondary]:
            base = resolved(tiers[tname], collective)
            for f in fit_fields(tiers[tname], collective):
                names.append((tname, f))
                u0.append(float(_to_u(f, base[f])))
                weights.append(w)
        prob = _Problem(hw=h, collective=collective, placements=logs, names=names, u0=np.asarray(u0),
                        weights=np.asarray(weights))
        n_rows = int(np.asarray(prob.measured).size)
        if n_rows < 2:
            # reliability review, item 10: one row "fitted" five parameters at 0.0 % error; one
            # message size cannot tell a latency from a bandwidth
            raise UserError(f"{', '.join(dict.fromkeys(p.label for p in logs))}: {n_rows} {collective} row cannot "
                            f"determine {', '.join(primary + secondary)}'s latency and bandwidth apart: measure a size "
                            "sweep (nccl-tests -b 8 -e 8G -f 2)")
        blocks = [[i for i, (t, _) in enumerate(names) if t == tname] for tname in primary + secondary]
        u, _ = _solve(prob, blocks)
        fitted = {t: {k: float(v) for k, v in fs.items()} for t, fs in prob.params(u).items()}
        rel = prob.times(u)[0] / prob.measured - 1.0
        rms = float(np.sqrt(np.mean(rel**2)))
        if not np.isfinite(rms) or rms > MAX_FIT_RMS:
            raise UserError(f"{', '.join(dict.fromkeys(p.label for p in logs))}: the best fit of {collective} on "
                            f"{', '.join(primary)} is {rms:.3g} off (rms relative time error): these measurements do "
                            "not describe this link (impossible times, or another cluster than --hardware); nothing "
                            "written")
        notes = []
        if n_rows < len(names):
            notes.append(f"{n_rows} rows for {len(names)} parameters: the base profile's values (the priors) decide "
                         "what the rows cannot, so the in-sample error says little; a longer size sweep pins them")
        if secondary:
            notes.append(f"{', '.join(secondary)} fitted from multi-domain logs only (no single-domain {collective} log): "
                         "measure one node to pin it")
        for t, fs in fitted.items():
            for f, v in fs.items():
                if f in FRACTIONS and v > 0.995:
                    notes.append(f"{t}.{f} at its bound 1: the logs are faster than the base profile's line rate allows "
                                 f"(is --hardware {hw.name} this cluster?)")
        groups.append(FitGroup(
            collective=collective, tiers=primary, alongside=secondary, files=list(dict.fromkeys(p.label for p in logs)),
            before={t: {f: resolved(tiers[t], collective)[f] for f in fit_fields(tiers[t], collective)} for t in fitted},
            after=fitted, rms_rel_error=float(np.sqrt(np.mean(rel**2))), max_rel_error=float(np.max(np.abs(rel))),
            samples=int(rel.size), notes=notes))
        for t, fs in fitted.items():
            values.setdefault(t, {}).update(fs)
    return values, groups


def _seconds(v: float) -> str:
    return f"{v * 1e6:.6g} us"


def _yaml_values(fs: dict[str, float]) -> dict[str, Any]:
    return {k: (_seconds(v) if k.endswith("latency") else float(f"{min(v, _FRACTION_CAP):.6g}")) for k, v in fs.items()}


#: a fit whose rms relative time error is beyond this (100 %) describes nothing; refused
MAX_FIT_RMS = 1.0


def fit(logs, hardware: str, *, out_name: str | None = None, algorithm: str | None = None) -> FitResult:
    """Fit ``hardware`` (a profile name or YAML path) to parsed logs (:class:`ParsedLog`).

    ``algorithm``: the logs were measured with ``NCCL_ALGO`` forced to it (e.g. ``ring`` to see
    the links rather than NCCL's choice); the model is held to the same algorithm while fitting.
    """
    from llmpar.specs import load_hardware

    if not logs:
        raise UserError("no logs given")
    base_hw = load_hardware(hardware)
    placements = [place(log, base_hw, algorithm) for log in logs]
    by_coll: dict[str, list[Placement]] = {}
    for p in placements:
        by_coll.setdefault(p.collective, []).append(p)
    primary = "all_reduce" if "all_reduce" in by_coll else max(by_coll, key=lambda c: sum(p.sizes.size for p in by_coll[c]))
    # a calibrated base: what an earlier fit measured (e.g. NVLink from one node) stays fixed here
    earlier = (base_hw.calibration or {}).get("collectives") or {}
    earlier_fits = [f for f in earlier.get("fits", []) if isinstance(f, dict)]
    fitted: dict[str, dict[str, dict[str, float]]] = {}
    groups: list[FitGroup] = []
    for c in [primary] + sorted(c for c in by_coll if c != primary):
        measured = {t for f in earlier_fits if f.get("collective") == c for t in f.get("tiers", [])}
        fitted[c], g = _fit_collective(base_hw, c, by_coll[c], measured)
        groups.extend(g)
    redone = {(g.collective, t) for g in groups for t in g.tiers}
    inherited = [{**f, "inherited": True} for f in earlier_fits
                 if not any((f.get("collective"), t) in redone for t in f.get("tiers", []))]

    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    extends = hardware
    if str(hardware).endswith((".yaml", ".yml", ".json")) or "/" in str(hardware):
        extends = str(Path(hardware).resolve())
    tier_docs = []
    for t in base_hw.tiers:
        per = {c: _yaml_values(v[t.name]) for c, v in fitted.items() if t.name in v}
        if not per:
            continue
        doc: dict[str, Any] = {"name": t.name}
        if primary in per:
            doc.update(per[primary])
        doc["collectives"] = per
        tier_docs.append(doc)

    files = []
    for p in placements:
        files.append({"file": p.label, "sha256": _sha256(p.file), "collective": p.collective, "ranks": p.ranks,
                      "nodes": p.nodes, "members_per_node": p.members_per_node, "domains": p.domains, "tier": p.tier,
                      "rows": int(p.sizes.size), "notes": p.notes})
    name = out_name or f"{base_hw.name}-calibrated"
    profile = {
        "name": name,
        "extends": extends,
        "description": f"{base_hw.name} with the collective model fitted to nccl-tests logs by llmpar calibrate fit",
        "tiers": tier_docs,
        "calibration": {"collectives": {
            "tool": "llmpar calibrate fit",
            "date": date,
            "base": base_hw.name,
            "method": "least squares on relative time error (soft-L1 beyond 5 %), out-of-place times",
            "algorithm": placements[0].algorithm or "as NCCL chooses",
            "primary_collective": primary,
            "files": files,
            "fits": [g.to_dict() for g in groups] + inherited,
        }},
    }
    hw = _load_profile(profile)
    for f, p in zip(files, placements):
        f["before"] = _rounded(error_summary(p.sizes, predict(base_hw, p) / p.times - 1.0))
        f["after"] = _rounded(error_summary(p.sizes, predict(hw, p) / p.times - 1.0))
    return FitResult(base=str(hardware), hardware=hw, base_hardware=base_hw, placements=placements, groups=groups,
                     primary=primary, files=files, date=date, profile=profile)


def _rounded(d: dict[str, float | None]) -> dict[str, float | None]:
    return {k: (None if v is None else round(v, 6)) for k, v in d.items()}


def profile_yaml(profile: dict[str, Any]) -> str:
    import yaml

    return ("# Written by `llmpar calibrate fit`: the base profile with the collective model fitted to\n"
            "# nccl-tests measurements (see calibration.collectives for the files and the fit quality).\n"
            + yaml.safe_dump(profile, sort_keys=False, width=120))


def _load_profile(profile: dict[str, Any]):
    """The profile as every command will load it (extends resolved, validated)."""
    from llmpar.specs import load_hardware

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{profile['name']}.yaml"
        path.write_text(profile_yaml(profile))
        return load_hardware(str(path))


def write_profile(result: FitResult, out: str | Path) -> Path:
    from llmpar.outputs import write_spec

    out = Path(out)
    result.profile["name"] = out.stem
    # as every other --out: the folder must exist (nothing is created behind the user's back);
    # written only once it loads, atomically (llmpar.outputs)
    return write_spec(out, profile_yaml(result.profile), "hardware")
