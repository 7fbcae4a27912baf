"""The planner: enumerate the space, evaluate every candidate through ``llmpar.cost``, rank.

Pipeline (all on numpy arrays, one entry per candidate):

1. :func:`llmpar.planner.space.enumerate_space` — every layout of the GPUs, minus those that break a
   divisibility, batch, schedule or convention rule (counted per reason).
2. :func:`llmpar.cost.memory.memory_per_gpu` on all of them — the same function ``llmpar
   memory`` and ``llmpar step`` call; layouts whose most-loaded stage does not fit are rejected
   ("memory") and not timed.
3. :func:`llmpar.cost.step.step_time` on the ones that fit — the same function ``llmpar step``
   calls, so a plan's numbers are ``step``'s numbers for that layout (tests check it to 1e-12).
4. Rank by the objective: step time (the batch is fixed, so this is also tokens/s) or memory per
   GPU. Exact ties are broken by memory (time), then by the simpler layout (smaller cp, ep, v,
   ZeRO stage, recompute) — a tie-break only; no preference enters the ranking otherwise.

Nothing here prints; :mod:`llmpar.cli.plan_cmd` renders the :class:`PlanResult`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from llmpar import evidence as EV
from llmpar import inputs
from llmpar.cost.runtime import fits_with_margin, verdict_name
from llmpar.errors import CheckFailed, UserError
from llmpar.parallel import (
    DEFAULT_BATCH_TOKENS, MAX_BATCH, MAX_GPUS, MAX_SEQ, MAX_TOKENS_PER_STEP, RECOMPUTE, SCHEDULES, Parallel,
    Settings, default_global_batch, flag, positive_int, fraction, whole, default_seq
)
from llmpar.layout import check_optimizer_offload, check_settings, seq_note
from llmpar.planner import knobs as K
from llmpar.planner import space as SP
from llmpar.results import MEMORY_COMPONENTS, Comparison, PlanResult, PlanRow, SpaceSummary, num, step_numbers

#: the most rows a plan lists: each row is a full step result (its JSON ~10 kB), and rendering
#: 100,000 of them took 39 s where the search takes 0.1 s (reliability review, item 13)
MAX_TOP = 1000
DEFAULT_MODEL = "llama-3-70b"
DEFAULT_HARDWARE = "h100-sxm"
OBJECTIVES = ("time", "memory")


class NoLayout(CheckFailed):
    """No layout of this GPU count passes the divisibility/batch/schedule rules: a valid request
    with nothing feasible (exit 1 in `plan`; a row that says why in `sweep`). ``rejected``:
    candidates per reason (None for a fixed degree that cannot divide the GPUs)."""

    def __init__(self, message: str, rejected: dict[str, int] | None = None):
        super().__init__(message)
        self.rejected = rejected


class FixConflict(UserError):
    """A degree fixed with --fix cannot divide the GPU count: bad input in `plan` (exit 2); in
    `sweep`, where the count varies, a row that says why."""

    rejected = None


# the additive parts of a row's total memory (total = their sum), as "why #1 beats #N" names them
MEMORY_LABELS = {"weights_bytes": "weights", "gradients_bytes": "gradients", "optimizer_bytes": "optimizer",
                 "activations_bytes": "activations", "buffers_bytes": "buffers",
                 "allocator_overhead_bytes": "allocator", "runtime_bytes": "runtime"}


# ------------------------------------------------------------------------------------ search

def _pick(d: dict, idx) -> dict:
    return {k: (np.asarray(v)[idx] if np.ndim(v) else v) for k, v in d.items()}


#: candidates whose memory is evaluated at once: the arrays of a chunk stay in the CPU caches and
#: their buffers are reused chunk after chunk (one 1.9 M-candidate pass spent most of its time
#: faulting in fresh pages); the same formula, the same numbers (docs/planner.md, Speed)
CHUNK = 1 << 17
#: what every candidate keeps beyond the chunk (the rejection counts and the nothing-fits message)
_KEEP_ALL = ("total_bytes", "capacity_bytes", "runtime_bytes", "host_bytes")


def _memory_in_chunks(model, hw, par: Parallel, settings, reserve, margin: float, n: int):
    """``cost.memory.memory_per_gpu`` over the candidates CHUNK at a time: ({"fit": the full result
    for the candidates that fit (HBM and host), "all": _KEEP_ALL for every candidate}, hbm, host)."""
    from llmpar.cost.memory import memory_per_gpu

    fit_parts, all_parts, hbm_parts, host_parts = [], {k: [] for k in _KEEP_ALL}, [], []
    for start in range(0, max(n, 1), CHUNK):
        stop = min(n, start + CHUNK)
        sub = SP.subset(par, slice(start, stop)) if n > CHUNK else par
        m = memory_per_gpu(model, hw, sub, settings, reserve)
        shape = (stop - start,)
        hbm = np.broadcast_to(np.asarray(fits_with_margin(m["total_bytes"], m["capacity_bytes"], margin), dtype=bool),
                              shape)
        host = np.broadcast_to(np.asarray(m["host_fits"], dtype=bool), shape)
        for k in _KEEP_ALL:
            all_parts[k].append(np.broadcast_to(np.asarray(m[k], dtype=float), shape))
        fit_parts.append(_pick(m, np.flatnonzero(hbm & host)))
        hbm_parts.append(hbm)
        host_parts.append(host)
    fit = {k: (np.concatenate([np.broadcast_to(np.asarray(p[k]), np.shape(p["total_bytes"])) for p in fit_parts])
               if any(np.ndim(p[k]) for p in fit_parts) else fit_parts[0][k]) for k in fit_parts[0]}
    return ({"fit": fit, "all": {k: np.concatenate(v) for k, v in all_parts.items()}},
            np.concatenate(hbm_parts), np.concatenate(host_parts))


def _order(objective: str, t, mem, par: Parallel) -> np.ndarray:
    """Candidates best first; exact ties broken by the other objective, then the simpler layout."""
    primary, secondary = (t, mem) if objective == "time" else (mem, t)
    keys = (par.recompute, par.zero, par.virtual_stages, par.ep, par.cp, secondary, primary)
    return np.lexsort(keys)


# Layouts within this fraction of the fastest recommendable one's step time are ranked by how
# robust they are, not by their predicted time: fewer moving parts first (no activation offload,
# no context parallelism, fewer parallel dimensions > 1), then the faster. 2 % is below every
# published source's leave-one-source-out median error (docs/validation.md) and above the 0.2-0.9 %
# margins the planner used to present as wins (issue 23); docs/planner.md, "Ranking under uncertainty".
RANK_TOLERANCE = 0.02


def robust_order(order: np.ndarray, t, total, par: Parallel, tight, tolerance: float = RANK_TOLERANCE
                 ) -> tuple[np.ndarray, int]:
    """``order`` (best time first, exact ties adjacent) re-ranked for a recommendation: TIGHT
    candidates (``tight``: within the stack's memory uncertainty of the HBM) after every other
    one; among the others, those within ``tolerance`` of the fastest by robustness (no offload,
    cp 1, fewer parallel dimensions > 1), then time. Exact ties move together, ranked by their
    first (simplest) member. Returns (order, size of that band)."""
    tight = np.broadcast_to(np.asarray(tight, dtype=bool), np.shape(t))
    ok = order[~tight[order]]
    demoted = order[tight[order]]
    if ok.size == 0:
        return order, 0
    n_band = int(np.count_nonzero(t[ok] <= t[ok[0]] * (1.0 + tolerance)))
    band = ok[:n_band]
    groups = _tie_groups(band, t, total)
    heads = np.array([band[a] for a in groups.starts[:-1]])

    def each(x):
        return np.broadcast_to(np.asarray(x), np.shape(t))[heads]

    dims = sum((each(getattr(par, k)) > 1).astype(int) for k in ("tp", "pp", "cp", "ep"))
    rank = np.lexsort((t[heads], dims, each(par.cp) > 1, each(par.offload_layers) > 0))
    moved = np.concatenate([band[groups.starts[g]:groups.starts[g + 1]] for g in rank])
    return np.concatenate([moved, ok[n_band:], demoted]), n_band


# Two layouts tie when their step times and their memory agree to this relative tolerance: the same
# numbers up to floating-point rounding of different but equivalent formula paths.
TIE_RTOL = 1e-12


class _TieGroups:
    """``order`` cut into runs of exact ties (equal step time and equal memory), best first.
    Group ``r`` is sliced out only when asked for (the planner needs a handful of the tens of
    thousands: slicing them all cost more than the search)."""

    def __init__(self, order: np.ndarray, t, mem):
        self.order = order
        if order.size == 0:
            self.starts = np.zeros(1, dtype=np.int64)
            return
        to, mo = t[order], mem[order]
        same = (np.isclose(to[1:], to[:-1], rtol=TIE_RTOL, atol=0.0)
                & np.isclose(mo[1:], mo[:-1], rtol=TIE_RTOL, atol=0.0))
        self.starts = np.concatenate(([0], np.flatnonzero(~same) + 1, [order.size]))

    def __len__(self) -> int:
        return self.starts.size - 1

    def __getitem__(self, r: int) -> np.ndarray:
        return self.order[self.starts[r]:self.starts[r + 1]]

    def sizes(self) -> np.ndarray:
        return np.diff(self.starts)


def _tie_groups(order: np.ndarray, t, mem) -> _TieGroups:
    return _TieGroups(order, t, mem)


def _row(rank, model, hw, settings, par, out, mem, i, group=None, evidence=None) -> PlanRow:
    """Row ``i`` of the candidates; ``evidence``: (interval, plausibility base) of the plan's class."""
    f = lambda x: float(np.asarray(x)[i])  # noqa: E731
    max_b = float(mem["max_micro_batch"][i])
    memory = {k: f(mem[k]) for k in MEMORY_COMPONENTS}
    memory.update({"capacity_bytes": f(mem["capacity_bytes"]), "fits": bool(mem["fits"][i]),
                   "max_micro_batch": None if max_b == float("inf") else int(max_b),
                   "params_per_gpu": num(f(mem["params_per_gpu"])), "stage": int(mem["stage"][i]),
                   "host_bytes": f(mem["host_bytes"]),
                   "verdict": str(verdict_name(int(np.asarray(mem["verdict_code"])[i])))})
    numbers = step_numbers(out, i)
    interval = plaus = None
    if evidence is not None:
        iv, base = evidence
        interval = EV.speed_json(iv, numbers["step_time_s"], numbers["tokens_per_s"], numbers["mfu"],
                                 mfu_cap=hw.gpu.gemm.max_efficiency)
        if base is not None:
            plaus = {**base, "above_published": bool(numbers["mfu_full_attention"] / iv.hi > base["best_published_mfu"])}
    return PlanRow(
        rank=rank, model=model.name, hardware=hw.name, parallel=par.take(i), settings=settings,
        **numbers, interval=interval, plausibility=plaus,
        memory=memory, equivalent=[par.take(int(j)) for j in (group if group is not None else ())[1:]],
    )


def _layout_text(par: Parallel) -> str:
    d = par.as_dict()
    sched = d["schedule"] + (f" v={d['virtual_stages']}" if d["virtual_stages"] > 1 else "")
    return (f"zero={d['zero']}, recompute={d['recompute']}, tp={d['tp']}, pp={d['pp']}, dp={d['dp']}, cp={d['cp']}, "
            f"ep={d['ep']}" + (f", etp={d['etp']}" if d["etp"] != d["tp"] else "")
            + f", sp={'on' if d['sp'] else 'off'}, micro_batch={d['micro_batch']}, schedule={sched}"
            + (f", offload_layers={d['offload_layers']}" if d.get("offload_layers") else ""))


def _nothing_valid(cand: SP.Candidates, spec: SP.SpaceSpec, model) -> NoLayout:
    """A valid request with no runnable layout is a check that failed (exit 1, like "nothing fits"),
    not bad input (issue 9, item 6): one line, the rules that rejected the layouts, most first."""
    hits = {k: v for k, v in cand.rejected.items() if v}
    if not cand.total:
        return NoLayout(f"no layout of {spec.gpus:,} GPUs is left by --fix/--allow/--max-tp (nothing to search)", hits)
    why = "; ".join(f"{SP.REASONS[k]}: {v:,}" for k, v in sorted(hits.items(), key=lambda kv: -kv[1]))
    return NoLayout(f"no layout of {spec.gpus:,} GPUs can run {model.name} with global batch {spec.global_batch:,} "
                    f"and seq {spec.seq:,}: every one of the {cand.total:,} candidates breaks a rule - {why}", hits)


def _nothing_fits(model, mem, par: Parallel, units: str, margin: float = 0.0) -> CheckFailed:
    from llmpar.units import unit_scale

    scale, unit = unit_scale(units)
    tot = np.asarray(mem["total_bytes"], dtype=float)
    # the smallest total; among equal ones (e.g. ZeRO stages at dp = 1) name the most sharded
    i = int(np.lexsort((-np.asarray(par.recompute), -np.asarray(par.zero), tot))[0])
    cap = float(np.asarray(mem["capacity_bytes"])[i])
    run = float(np.asarray(mem["runtime_bytes"])[i])
    # the runtime (CUDA context + NCCL buffers) is part of the total; "reserved" is the allocator's
    # pool, not a reserve held back from the HBM (main printed it as "the reserve", larger than the HBM)
    rule = f" with --margin {margin:g} (total x {1 + margin:g} must be within the HBM)" if margin else ""
    return CheckFailed(
        f"no layout fits{rule}: smallest memory needed {tot[i] / scale:.1f} {unit} (of which runtime, CUDA context + "
        f"NCCL buffers, {run / scale:.1f} {unit}) > {cap / scale:.1f} {unit} of HBM per GPU at {_layout_text(par.take(i))}"
    )


def _offload_would_fit(model, hw, cand, settings, reserve, margin: float) -> str:
    """When nothing fits: the offload settings (not searched: they are settings, docs/planner.md)
    under which some of the same candidates would, each evaluated by the same memory function,
    as a clause to add to the refusal ('' when none would, or the stack and hardware allow none)."""
    from llmpar.layout import check_optimizer_offload, optimizer_offload_violations, param_offload_violations

    tries = []
    if settings.optimizer_offload < 1.0:
        tries.append(("--optimizer-offload 1", {"optimizer_offload": 1.0}))
    if settings.stack.param_offloading is True and settings.finetune == "full" and not settings.param_offload:
        tries.append(("--param-offload", {"param_offload": True}))
        tries.append(("--param-offload --optimizer-offload 1", {"param_offload": True, "optimizer_offload": 1.0}))
    out = []
    for flag_text, change in tries:
        try:
            s2 = settings.changed(**change)
            check_optimizer_offload(hw, s2)       # the hardware states the host fields it needs
        except UserError:
            continue
        zero = np.asarray(cand.par.zero)
        ok = ~np.asarray(optimizer_offload_violations(s2, zero) | param_offload_violations(s2, zero), dtype=bool)
        if not ok.any():
            continue
        _, hbm, host = _memory_in_chunks(model, hw, cand.par, s2, reserve, margin, cand.size)
        n = int(np.count_nonzero(hbm & host & ok))
        if n:
            out.append(f"with {flag_text}, {n:,} of these layouts fit")
            break                                 # the first (the least) change that does
    return ("; " + "; ".join(out) + ": plan with it (docs/memory.md, Optimizer and Parameter offload)") if out else ""


def compare(a: PlanRow, b: PlanRow, objective: str) -> Comparison:
    if objective == "time":
        terms = [(k, a.breakdown_s[k], b.breakdown_s[k]) for k in a.breakdown_s]
        margin = b.step_time_s - a.step_time_s
    else:
        terms = [(label, a.memory[k], b.memory[k]) for k, label in MEMORY_LABELS.items()]
        margin = b.memory_bytes - a.memory_bytes
    terms = sorted([t for t in terms if t[1] != t[2]], key=lambda t: -abs(t[2] - t[1]))
    da, db = a.parallel.as_dict(), b.parallel.as_dict()
    knobs = [(k, da[k], db[k]) for k in da if da[k] != db[k]]
    return Comparison(winner=a, other=b, objective=objective, margin=margin, terms=terms, knobs=knobs)


def search(model, hw, settings: Settings, spec: SP.SpaceSpec, *, reserve=None, objective: str = "time",
           top: int = 10, pareto: bool = False, explain_rank: int = 2, units: str = "gb",
           margin: float | None = None, keep_points: bool = False, level: float = EV.DEFAULT_LEVEL
           ) -> dict[str, Any]:
    """Enumerate, evaluate through ``llmpar.cost`` and rank (see the module doc).

    ``margin``: a candidate is feasible when total * (1 + margin) <= HBM
    (:func:`llmpar.cost.runtime.fits_with_margin`, the rule ``llmpar memory`` states); 0 keeps
    every candidate whose total fits and ranks by the objective alone. None (the default) keeps
    them too, but recommends (:func:`robust_order`): TIGHT candidates (within the stack's
    memory.uncertainty of the HBM; counted in ``space.tight``) are listed after every other one,
    and with the time objective the candidates within RANK_TOLERANCE of the fastest are ranked
    by robustness. ``level``: the intervals' level (:mod:`llmpar.evidence`).

    Returns a dict with plans (one row per group of exact ties), pareto, comparison, space
    (SpaceSummary). Raises CheckFailed (exit 1) when no layout passes the divisibility/batch/schedule
    rules or none fits in memory.
    """
    from llmpar.cost.step import step_time

    t0 = time.perf_counter()
    cand = SP.enumerate_space(model, spec, settings)
    if cand.size == 0:
        raise _nothing_valid(cand, spec, model)
    mem, hbm, host = _memory_in_chunks(model, hw, cand.par, settings, reserve, margin or 0.0, cand.size)
    fits = hbm & host
    n_fit = int(np.count_nonzero(fits))
    rejected = dict(cand.rejected)
    rejected["memory"] = int(np.count_nonzero(~hbm))
    rejected["host_memory"] = int(np.count_nonzero(hbm & ~host))
    if n_fit == 0 and hbm.any():
        h = float(np.min(np.asarray(mem["all"]["host_bytes"], dtype=float)[hbm]))
        raise CheckFailed(f"every layout that fits in HBM offloads more activations than {hw.name}'s host memory "
                          f"holds: at least {h / 1e9:,.1f} GB per GPU against host_memory_per_gpu "
                          + (f"{hw.host_memory_per_gpu / 1e9:,.1f} GB" if hw.host_memory_per_gpu else "(not stated)"))
    if n_fit == 0:
        exc = _nothing_fits(model, mem["all"], cand.par, units, margin or 0.0)
        raise CheckFailed(str(exc) + _offload_would_fit(model, hw, cand, settings, reserve, margin or 0.0))
    idx = np.flatnonzero(fits)
    par = SP.subset(cand.par, idx)
    mem = mem["fit"]
    out = step_time(model, hw, par, settings, with_memory=False)
    t = np.asarray(out["step_time_s"], dtype=float)
    total = np.asarray(mem["total_bytes"], dtype=float)
    order = _order(objective, t, total, par)
    n_band = 0
    if margin is None:
        tight = np.asarray(mem["verdict_code"]) == 1
        if objective == "time":
            order, n_band = robust_order(order, t, total, par, tight)
        else:
            order = np.concatenate([order[~np.broadcast_to(tight, t.shape)[order]],
                                    order[np.broadcast_to(tight, t.shape)[order]]])
    groups = _tie_groups(order, t, total)   # one row per group of exact ties
    # the plan's evidence class: one interval for every candidate (the class depends on the stack,
    # the GPU, the model, the dtype, the GPU count and the sequence, all fixed in one plan)
    iv = EV.interval(EV.shipped_residuals(), "speed", EV.evidence_class(
        EV.stack_class(settings), hw.gpu.generation, model.is_moe, settings.dtype, spec.gpus, spec.seq), level)
    base = EV.plausibility(0.0, iv, hw.gpu.generation, model.is_moe, settings.dtype, gpus=spec.gpus)
    if base is not None:
        base.pop("above_published")
    t1 = float(t[order[0]])
    # layouts whose intervals overlap #1's: t * lo <= t1 * hi (one class: the same ratio bounds)
    within = int(np.count_nonzero(t * iv.lo <= t1 * iv.hi)) - 1

    def row(r):
        return _row(r + 1, model, hw, settings, par, out, mem, int(groups[r][0]), groups[r], (iv, base))

    rows = [row(r) for r in range(min(top, len(groups)))]
    comparison = None
    if explain_rank > len(groups) and explain_rank != 2:
        raise UserError(f"--explain-rank {explain_rank}: only {len(groups)} distinct layouts fit "
                        f"({n_fit} layouts, exact ties grouped)")
    if len(groups) >= 2:
        n = explain_rank
        other = rows[n - 1] if n <= len(rows) else row(n - 1)
        comparison = compare(rows[0], other, objective)
    frontier = points = None
    if pareto or keep_points:
        # time-memory frontier: walk by time (then memory); keep each layout that needs less
        # memory than every faster one
        by_time = np.lexsort((total, t))
        run_min = np.minimum.accumulate(total[by_time])
        keep = np.ones(by_time.size, dtype=bool)
        keep[1:] = total[by_time][1:] < run_min[:-1]
    if keep_points:
        on_frontier = np.zeros(t.size, dtype=bool)
        on_frontier[by_time[keep]] = True
        each = lambda x: np.broadcast_to(np.asarray(x), t.shape).copy()  # noqa: E731 - a knob fixed by --fix is a scalar
        points = {"step_time_s": t, "memory_bytes": total, "tp": each(par.tp), "pp": each(par.pp),
                  "schedule": each(par.schedule), "frontier": on_frontier, "best": int(groups[0][0])}
    if pareto:
        rank_of = np.empty(order.size, dtype=np.int64)
        rank_of[order] = np.repeat(np.arange(1, len(groups) + 1), groups.sizes())
        frontier = [_row(int(rank_of[i]), model, hw, settings, par, out, mem, int(i), None, (iv, base))
                    for i in by_time[keep]]
    n_tight = int(np.count_nonzero(np.asarray(mem["verdict_code"]) == 1))   # mem is the feasible subset here
    summary = SpaceSummary(candidates=cand.total, feasible=n_fit, rejected=rejected, memory_evaluated=cand.size,
                           step_evaluated=n_fit, search_s=time.perf_counter() - t0, tight=n_tight,
                           margin=margin or 0.0, recommended=margin is None, within_error=within,
                           robust_band=n_band, rank_tolerance=RANK_TOLERANCE)
    return {"plans": rows, "pareto": frontier, "comparison": comparison, "space": summary, "points": points,
            "interval": iv,
            "capacity_bytes": float(np.asarray(mem["capacity_bytes"]).flat[0]),
            "reserved_bytes": float(np.asarray(mem["reserved_bytes"]).flat[0])}


# -------------------------------------------------------------------------------------- API

_LAYOUT_KNOBS = {"tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp", "ep": "ep", "etp": "etp", "zero": "zero", "sp": "sp",
                 "recompute": "recompute", "micro_batch": "micro_batch", "schedule": "schedule",
                 "virtual_stages": "virtual_stages", "offload_layers": "offload_layers"}


def _as_specs(value, what: str) -> list[str]:
    """--fix/--allow given as a string, a list of strings, or a dict {knob: value(s)}."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            if isinstance(v, (list, tuple, set)):
                v = ",".join(_knob_text(x, k) for x in v)
            else:
                v = _knob_text(v, k)
            out.append(f"{k}={v}")
        return out
    if not isinstance(value, (list, tuple, set)) or not all(isinstance(v, str) for v in value):
        example = "'tp=8,pp=4'" if what == "fix" else "['zero=0,1,3']"
        raise UserError(f"{what} must be a string such as {example}, a list of such strings, or a dict "
                        f"{{knob: value{'s' if what == 'allow' else ''}}}, got {value!r}")
    return list(value)


def _knob_text(x, key: str = "") -> str:
    if isinstance(x, bool):
        return "on" if x else "off"
    if isinstance(x, (float, np.floating)):
        return str(whole(x, key or "value"))   # the API's rule for integers: 8.0 is 8, 8.5 and nan are refused
    return str(x)


def _layout_keyword(key: str, value) -> str:
    """A layout keyword of plan() (``tp=8``, ``sp=False``, ``recompute="full"``) as --fix text, by
    the API's rules (docs/api.md): sp a bool, recompute and schedule a name, any other knob a whole
    number (parallel.whole)."""
    if key == "sp":
        return _knob_text(flag(value, "sp"))
    if key in ("recompute", "schedule"):
        if not isinstance(value, str):
            names = RECOMPUTE if key == "recompute" else SCHEDULES
            raise UserError(f"{key} must be one of {', '.join(names)}, got {value!r}")
        return value
    return str(whole(value, key))


def _pos(value, what: str, hi: int | None = None, required: bool = False):
    if value is None and required:
        raise UserError(f"{what.replace('-', '_')} must be a positive integer, got None")
    value = positive_int(value, what, hi)   # the API's one rule for integers (parallel.whole), then the bounds
    return None if value is None else int(value)


#: the counts --min-gpus tries, in order: powers of two from one GPU (a node's count and its
#: multiples are powers of two on every shipped profile)
MIN_GPUS_TRIED = tuple(2 ** k for k in range(0, 21))


def _smallest(args: dict) -> PlanResult:
    """plan(min_gpus=True): the plan at the smallest count of MIN_GPUS_TRIED at which some layout
    fits (every rule and the memory), with the counts that did not in its assumptions."""
    kw = {k: v for k, v in args.items() if k not in ("min_gpus", "layout", "gpus")}
    kw.update(args["layout"])
    if args["gpus"] is not None:
        raise UserError("--min-gpus searches the GPU count: leave out --gpus")
    failed: list[str] = []
    for n in MIN_GPUS_TRIED:
        try:
            r = plan(gpus=n, **kw)
        except FixConflict as exc:
            failed.append(f"{n}: {exc}")
            continue
        except CheckFailed as exc:
            failed.append(f"{n}: {str(exc).split(':')[0]}")
            continue
        r.assumptions.insert(0, f"--min-gpus: {n:,} GPUs is the smallest count (of 1, 2, 4, ...) at which a layout "
                                "fits" + (f"; {', '.join(x.split(':')[0] for x in failed)} did not" if failed else ""))
        return r
    raise CheckFailed(f"no count up to {MIN_GPUS_TRIED[-1]:,} GPUs trains {args['model']} "
                      f"({failed[-1] if failed else 'no layout'})")


def plan(
    model=None,
    *,
    gpus: int | None = None,
    hardware=None,
    seq: int | None = None,
    global_batch: int | None = None,
    tokens_per_batch: int | None = None,
    microbatches: int | None = None,
    top: int = 10,
    objective: str = "time",
    fix=None,
    allow=None,
    max_tp: int | None = None,
    pareto: bool = False,
    explain_rank: int = 2,
    dtype: str = "bf16",
    optimizer: str = "adam",
    grad_dtype: str | None = None,
    convention: str = "llmpar",
    attention: str | None = None,
    reserve=None,
    hf: str | None = None,
    dp_overlap: float | None = None,
    tp_overlap: float | None = None,
    ep_overlap: float | None = None,
    ep_dispatcher: str | None = None,
    recompute_modules: str | list | None = None,
    rank_order: str | None = None,
    stack=None,
    units: str = "gb",
    tokens=None,
    pue=None,
    gpu_hour_price=None,
    power_per_gpu=None,
    failure_rate=None,
    restart_time=None,
    checkpoint_bandwidth=None,
    checkpoint=None,
    margin: float | None = None,
    keep_points: bool = False,
    interval_level=None,
    min_gpus: bool = False,
    finetune: str | None = None,
    lora_rank: int | None = None,
    lora_targets: str | None = None,
    optimizer_offload: float | str | None = None,
    param_offload: bool | None = None,
    **layout,
) -> PlanResult:
    """Search the layouts of ``gpus`` GPUs for ``model`` and rank them (issue 4).

    ``fix``: knobs held at one value — ``"tp=8,pp=16"`` or ``{"tp": 8, "pp": 16}``; the common
    layout keywords (``tp=8``, ``zero=1``, ``recompute="selective"``, ...) do the same.
    ``allow``: sets of values to search — ``["zero=0,1,3", "recompute=none,selective"]`` or
    ``{"zero": (0, 1, 3)}``. ``objective``: "time" (step time; the batch is fixed, so also
    tokens/s) or "memory" (memory per GPU). ``dp_overlap``, ``tp_overlap``, ``ep_overlap``, ``rank_order``: as in
    ``llmpar step`` (:class:`llmpar.parallel.Settings`). Returns a :class:`PlanResult`; raises
    :class:`~llmpar.errors.UserError` for bad input, :class:`~llmpar.errors.CheckFailed` when no
    layout passes the divisibility rules (:class:`NoLayout`) or none fits in memory (a valid
    request, nothing feasible). ``tokens`` (``"15T"``), ``pue``, ``gpu_hour_price``,
    ``power_per_gpu``: days, GPU-hours, energy and cost to train that budget with plan #1
    (:func:`llmpar.cost.training.estimate`), in ``PlanResult.training``. ``margin``: keep only
    candidates whose total memory * (1 + margin) fits the HBM (e.g. the stack's
    memory.uncertainty, 0.05, drops every TIGHT one) and rank by the objective alone; not given,
    TIGHT candidates are listed after the others and near-ties go to the more robust layout
    (:func:`search`, docs/planner.md); ``space.tight`` counts the TIGHT ones kept.
    ``interval_level`` (default 0.8): the level of every row's ``interval`` (:mod:`llmpar.evidence`).
    """
    if min_gpus:
        return _smallest(dict(locals()))
    from llmpar.cost import training as TR
    from llmpar.cost.memory import check_convention

    t_start = time.perf_counter()
    defaults: list[str] = []
    notes: list[str] = []
    unknown = set(layout) - set(_LAYOUT_KNOBS)
    if unknown:
        raise UserError(f"plan() got unknown option(s): {', '.join(sorted(unknown))}")
    if objective not in OBJECTIVES:
        raise UserError(f"unknown objective {objective!r}; choose one of: {', '.join(OBJECTIVES)}")
    if gpus is None:
        raise UserError("--gpus is required: the number of GPUs to plan for")
    gpus = _pos(gpus, "gpus", MAX_GPUS)
    top = _pos(top, "top", MAX_TOP, required=True)
    max_tp = _pos(max_tp, "max-tp")
    explain_rank = _pos(explain_rank, "explain-rank", required=True)
    margin = _margin(margin)
    level = EV.level_value(interval_level)
    pareto, keep_points = flag(pareto, "pareto", False), flag(keep_points, "keep_points", False)
    dp_overlap, tp_overlap, ep_overlap = (fraction(dp_overlap, "dp_overlap"), fraction(tp_overlap, "tp_overlap"),
                                          fraction(ep_overlap, "ep_overlap"))
    if explain_rank < 2:
        raise UserError("--explain-rank must be 2 or more (it explains why #1 beats #N)")

    if model is None and hf is None:
        model = DEFAULT_MODEL
        defaults.append(f"model {DEFAULT_MODEL}")
    spec_model, alias = inputs.load_model_spec(model, hf)
    if alias:
        notes.append(f"model {alias} -> {spec_model.name}")
    if hardware is None:
        hardware = DEFAULT_HARDWARE
        defaults.append(f"hardware {DEFAULT_HARDWARE}")
    hw = inputs.load_hardware_spec(hardware)
    reserve_bytes = inputs.parse_reserve(reserve, hw)
    settings = inputs.make_settings(spec_model, dtype=dtype, optimizer=optimizer, grad_dtype=grad_dtype,
                                    convention=convention, attention=attention, dp_overlap=dp_overlap,
                                    tp_overlap=tp_overlap, ep_overlap=ep_overlap, ep_dispatcher=ep_dispatcher,
                                    recompute_modules=recompute_modules, rank_order=rank_order,
                                    stack=stack, finetune=finetune, lora_rank=lora_rank, lora_targets=lora_targets,
                                    optimizer_offload=optimizer_offload, param_offload=param_offload)
    check_optimizer_offload(hw, settings)
    check_settings(hw, settings)   # the rule memory and step apply (layout.resolve)
    notes.append(inputs.stack_note(settings))
    for note in (inputs.generation_note(hw, settings), inputs.moe_cost_note(spec_model, hw, settings),
                 inputs.fabric_note(hw, gpus)):
        if note:
            notes.append(note)
    if convention == "deepspeed":
        check_convention(settings, 2)   # its optimizer rule; ZeRO stages are masked per candidate

    seq, global_batch, microbatches = resolve_batch(spec_model, seq, global_batch, tokens_per_batch, microbatches,
                                             defaults, notes)
    allowed = _knob_values(fix, allow, layout)
    _check_fixed_degrees(allowed, gpus, spec_model, max_tp, global_batch)
    v_vals, s_vals = allowed.get("virtual_stages"), allowed.get("schedule")
    if v_vals and s_vals and min(v_vals) > 1 and SCHEDULES.index("interleaved") not in [int(s) for s in s_vals]:
        # contradictory input, as `step` says it (reliability review, item 27: plan exited 1, "nothing left")
        raise UserError(f"--fix/--allow virtual_stages={','.join(str(int(v)) for v in v_vals)} needs the interleaved "
                        f"schedule, and schedule={','.join(SCHEDULES[int(s)] for s in s_vals)} leaves it out")
    if recompute_modules is not None and "recompute" in allowed and RECOMPUTE.index("selective") not in [
            int(x) for x in allowed["recompute"]]:
        # memory and step refuse the same (api.memory): the modules only say what selective re-runs
        raise UserError("--recompute-modules names what selective recompute re-runs: the recompute values held "
                        "by --fix/--allow/--recompute leave selective out")
    if "schedule" not in allowed:
        # say which pipeline schedules were searched, and why not the others (the stack's list)
        left = [SCHEDULES[x] for x in SP.DEFAULT_SCHEDULES if SCHEDULES[x] not in settings.stack.schedules]
        if left:
            notes.append(f"pipeline schedules searched: those stack {settings.stack.name} implements "
                         f"({', '.join(x for x in settings.stack.schedules if x != 'gpipe')}); not "
                         f"{', '.join(left)} (--allow schedule=NAME to add one)")
    train_in = TR.parse_inputs(tokens, pue, gpu_hour_price, power_per_gpu, failure_rate, restart_time,
                               checkpoint_bandwidth, checkpoint)

    # activation offloading is searched where the framework has it and the hardware states its host link
    offload = (settings.stack.activation_offloading and hw.host_bandwidth is not None
               and hw.host_memory_per_gpu is not None)
    if "offload_layers" in allowed and any(allowed["offload_layers"]) and hw.host_bandwidth is None:
        raise UserError(f"offload_layers needs the hardware's host_bandwidth (the CPU-GPU link); {hw.name} states none")
    spec = SP.SpaceSpec(gpus=gpus, seq=seq, global_batch=global_batch, allowed=allowed, max_tp=max_tp,
                        microbatches=microbatches, offload=offload or "offload_layers" in allowed)
    found = search(spec_model, hw, settings, spec, reserve=reserve_bytes, objective=objective, top=top,
                   pareto=pareto, explain_rank=explain_rank, units=units, margin=margin, keep_points=keep_points,
                   level=level)
    if (support := inputs.stack_support_note(settings, found["plans"][0].parallel)) is not None:
        notes.append("plan #1: " + support)   # a --fix/--allow outside the framework's stages or schedules
    best_off = int(found["plans"][0].parallel.offload_layers)
    if best_off:
        host = float(found["plans"][0].memory.get("host_bytes", 0.0))
        notes.append(f"plan #1 offloads {best_off} layers' activations to host memory over {hw.name}'s host link "
                     f"({hw.host_bandwidth / hw.gpus_per_host_link / 1e9:g} GB/s per GPU and direction: the raw link "
                     f"rate{f' shared by {hw.gpus_per_host_link} GPUs' if hw.gpus_per_host_link > 1 else ''}, so the "
                     f"copy time is a lower bound; {host / 1e9:,.1f} GB per GPU of its "
                     f"{hw.host_memory_per_gpu / 1e9:,.0f} GB host memory); --fix offload_layers=0 ranks without "
                     "offloading (docs/planner.md)")
    best = found["plans"][0]
    notes.extend(evidence_notes(found["interval"], best, found["space"], gpus, global_batch * seq))
    training = None
    if train_in["tokens"] is not None:
        training = TR.estimate(hw, tokens=train_in["tokens"], tokens_per_s=best.tokens_per_s, gpus=gpus,
                               tokens_per_step=global_batch * seq, pue=train_in["pue"],
                               gpu_hour_price=train_in["gpu_hour_price"], power_per_gpu_w=train_in["power_per_gpu_w"],
                               checkpoint_bytes=TR.checkpoint_bytes_of(spec_model, settings), train_in=train_in)
        training["interval"] = EV.speed_json(found["interval"], best.step_time_s, best.tokens_per_s, best.mfu,
                                             training, hw.gpu.gemm.max_efficiency)
    return PlanResult(
        model=spec_model.name, model_requested=alias, hardware=hw.name, gpus=gpus, seq=seq, global_batch=global_batch,
        objective=objective, settings=settings, capacity_bytes=found["capacity_bytes"],
        reserved_bytes=found["reserved_bytes"], plans=found["plans"], space=found["space"],
        elapsed_s=time.perf_counter() - t_start, defaults_used=defaults, assumptions=notes,
        pareto=found["pareto"], comparison=found["comparison"], training=training, points=found["points"],
    )


def evidence_notes(iv, best: PlanRow, space: SpaceSummary, gpus: int, tokens_per_step: int) -> list[str]:
    """What the plan's evidence says about its #1: how many layouts are within model error, an
    MFU above every published run of its class, a batch below every published run's tokens per GPU."""
    out = []
    ev = iv.evidence()
    band = f"{iv.level * 100:.0f} %"
    if space.within_error:
        out.append(f"{space.within_error:,} other layout{'s' * (space.within_error != 1)} within model error of #1 "
                   f"(their {band} intervals overlap #1's: step time x {iv.lo:.2f}-{iv.hi:.2f}, from "
                   f"{ev['rows']} published rows of {ev['used_class']}"
                   + (", extrapolated)" if ev["extrapolated"] else ")"))
    if space.recommended and space.robust_band > 1:
        out.append(f"{space.robust_band:,} layouts within {space.rank_tolerance * 100:g} % of the fastest are ranked by "
                   "robustness (no offload, no CP, fewer parallel dimensions), then time; TIGHT layouts are listed "
                   "after every other one (--margin 0 ranks by predicted time alone)")
    if (note := EV.implausible_note(best.mfu_full_attention, best.plausibility, "plan #1's MFU")) is not None:
        out.append(note)
    floor = EV.min_published_tokens_per_gpu()
    per_gpu = tokens_per_step / gpus
    if floor is not None and per_gpu < floor:
        out.append(f"batch: {per_gpu:,.0f} tokens per GPU per step is below every published run (the fewest: "
                   f"{floor:,.0f}); the figures are extrapolated there - --tokens-per-batch "
                   f"{int(floor * gpus):,} or more matches the published runs")
    return out


def resolve_batch(model, seq, global_batch, tokens_per_batch, microbatches, defaults, notes) -> tuple[int, int, int | None]:
    """Sequence length, global batch (sequences) and micro-batch count of the plan, with the
    defaults of docs/architecture.md (seq = min(8192, model max); 4,194,304 tokens / seq sequences) and the
    bounds of what llmpar models; what was assumed goes into ``defaults`` / ``notes``. `sweep`
    resolves its one batch for every GPU count with it too."""
    if seq is None:
        seq = default_seq(model)
        defaults.append(f"seq {seq}")
    else:
        seq = _pos(seq, "seq", MAX_SEQ)
        if (note := seq_note(model, seq)) is not None:
            notes.append(note)
    global_batch = _pos(global_batch, "global-batch", MAX_BATCH)
    tokens_per_batch = _pos(tokens_per_batch, "tokens-per-batch", MAX_TOKENS_PER_STEP)
    if tokens_per_batch is not None:
        if tokens_per_batch % seq:
            raise UserError(f"--tokens-per-batch {tokens_per_batch:,} is not a multiple of the sequence length {seq}")
        if global_batch is not None and global_batch != tokens_per_batch // seq:
            raise UserError(f"--global-batch {global_batch} disagrees with --tokens-per-batch {tokens_per_batch:,} / "
                            f"seq {seq} = {tokens_per_batch // seq}")
        global_batch = tokens_per_batch // seq
    microbatches = _pos(microbatches, "microbatches", MAX_BATCH)
    if global_batch is None:
        global_batch, capped = default_global_batch(seq)
        defaults.append(f"global batch {global_batch} sequences = {DEFAULT_BATCH_TOKENS:,} tokens / seq {seq}"
                        if global_batch * seq == DEFAULT_BATCH_TOKENS else capped or
                        f"global batch {global_batch} sequences ({global_batch * seq:,} tokens, the nearest to "
                        f"{DEFAULT_BATCH_TOKENS:,})")
    if global_batch * seq > MAX_TOKENS_PER_STEP:
        raise UserError(f"{global_batch:,} sequences x {seq:,} tokens per step is beyond what llmpar models "
                        f"(at most {MAX_TOKENS_PER_STEP:,} tokens)")
    return seq, global_batch, microbatches


def _knob_values(fix, allow, layout) -> dict:
    """knob -> the values to search: --allow sets, narrowed by --fix and the layout keywords."""
    fixed = K.parse_assignments(_as_specs(fix, "fix"), "fix")
    for key, value in layout.items():
        if value is None:
            continue
        k = K.knob_name(key)
        vals = K.parse_values(k, _layout_keyword(k, value))
        if k in fixed and fixed[k] != vals:
            raise UserError(f"--{key.replace('_', '-')} {value} contradicts --fix {k}={fixed[k][0]}")
        fixed[k] = vals
    allowed = K.parse_assignments(_as_specs(allow, "allow"), "allow")
    for k, vals in fixed.items():
        if k in allowed and not set(vals) <= set(allowed[k]):
            raise UserError(f"--fix {k}={K.show_values(k, vals)} is outside --allow {k}={K.show_values(k, allowed[k])}")
        allowed[k] = vals
    return allowed


def _margin(value) -> float | None:
    """--margin as a fraction in [0, 1): 0.1 or "10%"; None (not given): the recommending default."""
    if value is None:
        return None
    text = str(value).strip()
    try:
        m = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise UserError(f"--margin must be a fraction such as 0.1 or a percentage such as 10%, got {value!r}") from None
    if not 0.0 <= m < 1.0:
        raise UserError(f"--margin must be at least 0 and below 1 (100 %), got {value!r}")
    return m


def _check_fixed_degrees(allowed: dict, gpus: int, model, max_tp, global_batch: int | None = None) -> None:
    """Fixed degrees that cannot work whatever else is chosen: one clear line (exit 2)."""
    one = {k: v[0] for k, v in allowed.items() if len(v) == 1 and k in ("tp", "pp", "dp", "cp")}
    for k, v in one.items():
        if gpus % v:
            raise FixConflict(f"--fix {k}={v} does not divide --gpus {gpus}")
    prod = 1
    for v in one.values():
        prod *= v
    if gpus % prod:
        raise FixConflict(f"--fix {', '.join(f'{k}={v}' for k, v in one.items())}: the product {prod} does not "
                          f"divide --gpus {gpus}")
    if len(one) == 4 and prod != gpus:
        raise FixConflict(f"--fix tp*pp*dp*cp = {prod} but --gpus is {gpus}")
    if "tp" in one and max_tp is not None and one["tp"] > max_tp:
        raise UserError(f"--fix tp={one['tp']} exceeds --max-tp {max_tp}")
    ep = allowed.get("ep")
    if ep and len(ep) == 1 and ep[0] > 1 and model.moe is None:
        raise UserError(f"--fix ep={ep[0]}: {model.name} has no experts")
    etp = allowed.get("etp")
    if etp and model.moe is None:
        raise UserError(f"--etp / etp={','.join(map(str, etp))}: {model.name} has no experts")
    if "tp" in one and (model.heads % one["tp"] or model.n_kv_heads % one["tp"]):
        raise UserError(f"--fix tp={one['tp']} does not divide the {model.heads} heads / {model.n_kv_heads} KV heads "
                        f"of {model.name}")
    if "pp" in one and one["pp"] > model.layers:
        raise UserError(f"--fix pp={one['pp']} exceeds the {model.layers} layers of {model.name}")
    off = allowed.get("offload_layers")
    if off and 0 not in off:
        # Megatron-Core's rules for CPU offloading (layout.resolve refuses the same for `llmpar step`)
        pp_fixed, rec = allowed.get("pp"), allowed.get("recompute")
        if pp_fixed and 1 not in pp_fixed:
            raise FixConflict(f"offload_layers={','.join(map(str, off))} needs pp 1 (Megatron-Core: no CPU offloading "
                              f"with pipeline parallelism), but pp is held at {','.join(map(str, pp_fixed))}")
        if rec and RECOMPUTE.index("none") not in rec:
            raise FixConflict("offload_layers needs recompute none (Megatron-Core: no CPU offloading with activation "
                              "recomputation), but recompute is held at " + ",".join(RECOMPUTE[r] for r in rec))
    b = allowed.get("micro_batch")
    per = one.get("dp", 1) * (b[0] if b and len(b) == 1 else 1)
    if global_batch is not None and ("dp" in one or (b and len(b) == 1)) and global_batch % per:
        # options that contradict each other are bad input, not a search that found nothing
        raise UserError(f"global batch {global_batch:,} is not divisible by the fixed micro_batch*dp = {per}")


__all__ = ["Comparison", "FixConflict", "NoLayout", "PlanResult", "PlanRow", "SpaceSummary", "compare", "plan", "search"]
