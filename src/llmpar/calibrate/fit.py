"""Fit the collective model's latency and bandwidth to nccl-tests measurements.

``llmpar calibrate fit LOG... --hardware BASE --out my-cluster.yaml``.

What is fitted (docs/calibration.md, section 5; docs/collectives.md, "Fit parameters"): per
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

The parameters and their transforms live in :mod:`llmpar.calibrate.fit_params`, the group
shape of a log in :mod:`llmpar.calibrate.placement`, the search in :mod:`llmpar.calibrate.fit_search`
(how: least squares on the relative time error, soft-L1 beyond 5 %, a weak ridge towards the base
values, weight ``PRIOR``, from a portfolio of seeded starts; its module docstring says more).

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

import datetime
import hashlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmpar.calibrate.fit_params import FRACTION_CAP, FRACTIONS, fit_fields, resolved, to_u, with_params
from llmpar.calibrate.fit_search import Problem, solve
from llmpar.calibrate.placement import Placement, error_summary, place, predict
from llmpar.errors import UserError

PRIOR = 1e-4            # ridge weight per parameter (transformed units) for the tier a log fixes
PRIOR_SECONDARY = 1e-2  # ... for a scale-up tier fitted from multi-domain logs only


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
                u0.append(float(to_u(f, base[f])))
                weights.append(w)
        prob = Problem(hw=h, collective=collective, placements=logs, names=names, u0=np.asarray(u0),
                        weights=np.asarray(weights))
        n_rows = int(np.asarray(prob.measured).size)
        if n_rows < 2:
            # reliability review, item 10: one row "fitted" five parameters at 0.0 % error; one
            # message size cannot tell a latency from a bandwidth
            raise UserError(f"{', '.join(dict.fromkeys(p.label for p in logs))}: {n_rows} {collective} row cannot "
                            f"determine {', '.join(primary + secondary)}'s latency and bandwidth apart: measure a size "
                            "sweep (nccl-tests -b 8 -e 8G -f 2)")
        blocks = [[i for i, (t, _) in enumerate(names) if t == tname] for tname in primary + secondary]
        u, _ = solve(prob, blocks)
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
    return {k: (_seconds(v) if k.endswith("latency") else float(f"{min(v, FRACTION_CAP):.6g}")) for k, v in fs.items()}


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
    placements = [place(log, base_hw, algorithm, strict_gpu=True) for log in logs]
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
