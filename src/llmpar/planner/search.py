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

This module holds the two entry points, :func:`search` (a space already read) and :func:`plan` (the
API's keywords: :mod:`llmpar.planner.request` reads them), and their stages; the evaluation is
:mod:`llmpar.planner.evaluate`, the order :mod:`llmpar.planner.ranking`, the refusals
:mod:`llmpar.planner.refusals`. Nothing here prints; :mod:`llmpar.cli.plan_cmd` renders the
:class:`PlanResult`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from llmpar import evidence as EV
from llmpar import inputs
from llmpar.errors import CheckFailed, UserError
from llmpar.parallel import Parallel, Settings, flag
from llmpar.planner import ranking as RK
from llmpar.planner import space as SP
from llmpar.planner.evaluate import Shown, memory_in_chunks
from llmpar.planner.families import Families
from llmpar.planner.arguments import FixConflict
from llmpar.planner.refusals import NoLayout, host_memory_exceeded, nothing_fits, nothing_valid, offload_would_fit
from llmpar.planner.request import PlanRequest, read_request
from llmpar.results_plan import Comparison, PlanResult, PlanRow, SpaceSummary


# ------------------------------------------------------------------------------------ search

def search(model, hw, settings: Settings, spec: SP.SpaceSpec, *, reserve=None, objective: str = "time",
           top: int = 10, pareto: bool = False, explain_rank: int = 2, units: str = "gb",
           margin: float | None = None, keep_points: bool = False, level: float = EV.DEFAULT_LEVEL
           ) -> dict[str, Any]:
    """Enumerate, evaluate through ``llmpar.cost`` and rank (see the module doc).

    ``margin``: a candidate is feasible when total * (1 + margin) <= HBM
    (:func:`llmpar.cost.runtime.fits_with_margin`, the rule ``llmpar memory`` states); 0 keeps
    every candidate whose total fits and ranks by the objective alone. None (the default) keeps
    them too, but recommends (:func:`llmpar.planner.ranking.robust_order`): TIGHT candidates (within the stack's
    memory.uncertainty of the HBM; counted in ``space.tight``) are listed after every other one,
    and with the time objective the candidates within RANK_TOLERANCE of the fastest are ranked
    by robustness. ``level``: the intervals' level (:mod:`llmpar.evidence`).

    Returns a dict with plans (one row per group of exact ties), pareto, comparison, space
    (SpaceSummary). Raises CheckFailed (exit 1) when no layout passes the divisibility/batch/schedule
    rules or none fits in memory.
    """
    t0 = time.perf_counter()
    cand = SP.enumerate_space(model, spec, settings)
    if cand.size == 0:
        raise nothing_valid(cand, spec, model)
    fit, par, n_fit, rejected = _fitting(model, hw, settings, cand, reserve, margin, units)
    t, total = fit["step_time_s"], fit["total_bytes"]
    order, n_band = _ranked(objective, margin, t, total, par, fit)
    groups = RK.TieGroups(order, t, total)   # exact ties share a group
    fams = Families(groups, par)              # one row per layout: groups differing only in v fold
    iv, base = _plan_evidence(model, hw, settings, spec, level)
    t1 = float(t[order[0]])
    # layouts whose intervals overlap #1's: t * lo <= t1 * hi (one class: the same ratio bounds)
    within = int(np.count_nonzero(t * iv.lo <= t1 * iv.hi)) - 1
    shown = Shown(model, hw, settings, par, reserve, (iv, base))
    heads = fams.take(max(top, explain_rank, 2))
    n_rows = min(top, len(heads))
    frontier = points = None
    if pareto or keep_points:
        by_time, keep = RK.frontier(t, total)
    # the layouts shown, evaluated in full in one call: the rows, #explain_rank, the frontier
    shown.prepare([groups[g][0] for g in heads[:max(n_rows, explain_rank)]] + (list(by_time[keep]) if pareto else []))

    def row(r):
        g = heads[r]
        out = shown.row(r + 1, int(groups[g][0]), groups[g])
        out.variants = [_variant(par, t, total, int(groups[h][0])) for h in fams.variants[g]]
        return out

    rows = [row(r) for r in range(n_rows)]
    comparison = _comparison(rows, row, len(heads), objective, explain_rank, n_fit)
    if keep_points:
        points = _points(t, total, par, by_time[keep], groups)
    if pareto:
        rank_of = np.empty(order.size, dtype=np.int64)
        rank_of[order] = np.repeat(fams.rank_of_groups(), groups.sizes())
        frontier = [shown.row(int(rank_of[i]), int(i)) for i in by_time[keep]]
    n_tight = int(np.count_nonzero(np.asarray(fit["verdict_code"]) == 1))   # fit is the feasible subset here
    summary = SpaceSummary(candidates=cand.total, feasible=n_fit, rejected=rejected, memory_evaluated=cand.size,
                           step_evaluated=n_fit, search_s=time.perf_counter() - t0, tight=n_tight,
                           margin=margin or 0.0, recommended=margin is None, within_error=within,
                           robust_band=n_band, rank_tolerance=RK.RANK_TOLERANCE)
    return {"plans": rows, "pareto": frontier, "comparison": comparison, "space": summary, "points": points,
            "interval": iv,
            "capacity_bytes": float(np.asarray(fit["capacity_bytes"]).flat[0]),
            "reserved_bytes": float(np.asarray(fit["reserved_bytes"]).flat[0])}


def _fitting(model, hw, settings, cand: SP.Candidates, reserve, margin, units) -> tuple[dict, Parallel, int, dict]:
    """(what ranking needs of the candidates that fit, with their step times; those candidates;
    their count; rejections per reason with memory's); refuses when none fits."""
    mem, hbm, host = memory_in_chunks(model, hw, cand.par, settings, reserve, margin or 0.0, cand.size, timed=True)
    fits = hbm & host
    n_fit = int(np.count_nonzero(fits))
    rejected = dict(cand.rejected)
    rejected["memory"] = int(np.count_nonzero(~hbm))
    rejected["host_memory"] = int(np.count_nonzero(hbm & ~host))
    if n_fit == 0 and hbm.any():
        raise host_memory_exceeded(hw, mem["all"]["host_bytes"], hbm)
    if n_fit == 0:
        exc = nothing_fits(model, mem["all"], cand.par, units, margin or 0.0)
        raise CheckFailed(str(exc) + offload_would_fit(model, hw, cand, settings, reserve, margin or 0.0))
    return mem["fit"], SP.subset(cand.par, mem["fit"]["index"]), n_fit, rejected


def _ranked(objective: str, margin, t, total, par: Parallel, mem: dict) -> tuple[np.ndarray, int]:
    """(the order, best first; the size of the robustness band): by the objective, or recommending when no --margin."""
    order = RK.objective_order(objective, t, total, par)
    n_band = 0
    if margin is None:
        tight = np.asarray(mem["verdict_code"]) == 1
        if objective == "time":
            order, n_band = RK.robust_order(order, t, total, par, tight)
        else:
            order = RK.tight_last(order, t, tight)
    return order, n_band


def _plan_evidence(model, hw, settings: Settings, spec: SP.SpaceSpec, level: float):
    """(the interval, the plausibility base) of the plan's evidence class, one for every candidate."""
    # the plan's evidence class: one interval for every candidate (the class depends on the stack,
    # the GPU, the model, the dtype, the GPU count and the sequence, all fixed in one plan)
    iv = EV.interval(EV.shipped_residuals(), "speed", EV.evidence_class(
        EV.stack_class(settings), hw.gpu.generation, model.is_moe, settings.dtype, spec.gpus, spec.seq), level)
    base = EV.plausibility(0.0, iv, hw.gpu.generation, model.is_moe, settings.dtype, gpus=spec.gpus)
    if base is not None:
        base.pop("above_published")
    return iv, base


def _variant(par: Parallel, t, total, i: int) -> dict[str, Any]:
    """One folded layout of a row: its schedule depth, step time and memory (PlanRow.variants)."""
    from llmpar.parallel import SCHEDULES

    def at(x):
        return np.asarray(x).flat[i] if np.ndim(x) else x

    return {"schedule": SCHEDULES[int(at(par.schedule))], "virtual_stages": int(at(par.virtual_stages)),
            "step_time_s": float(t[i]), "memory_bytes": float(total[i])}


def _comparison(rows: list[PlanRow], row, n_heads: int, objective: str, explain_rank: int,
                n_fit: int) -> Comparison | None:
    """Why #1 beats #explain_rank (None with one distinct layout); UserError when that rank does not
    exist. ``n_heads``: the rows found (at least explain_rank, or every row there is)."""
    comparison = None
    if explain_rank > n_heads and explain_rank != 2:
        raise UserError(f"--explain-rank {explain_rank}: only {n_heads} distinct layouts fit "
                        f"({n_fit} layouts; exact ties and interleaving depths grouped)")
    if n_heads >= 2:
        n = explain_rank
        other = rows[n - 1] if n <= len(rows) else row(n - 1)
        comparison = RK.compare(rows[0], other, objective)
    return comparison


def _points(t, total, par: Parallel, on: np.ndarray, groups: RK.TieGroups) -> dict:
    """Every feasible layout's time and memory (the plot's points), the frontier ``on`` marked, #1's index."""
    on_frontier = np.zeros(t.size, dtype=bool)
    on_frontier[on] = True
    each = lambda x: np.broadcast_to(np.asarray(x), t.shape).copy()  # noqa: E731 - a knob fixed by --fix is a scalar
    return {"step_time_s": t, "memory_bytes": total, "tp": each(par.tp), "pp": each(par.pp),
            "schedule": each(par.schedule), "frontier": on_frontier, "best": int(groups[0][0])}


# -------------------------------------------------------------------------------------- API

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
    # a flag is True or False: min_gpus="no" (or nan, or 2) had been taken as True (parallel.flag)
    if flag(min_gpus, "min_gpus", default_none=False):
        return _smallest(dict(locals()))
    t_start = time.perf_counter()
    req = read_request(dict(locals()))
    found = search(req.model, req.hw, req.settings, req.space, reserve=req.reserve, **req.search_options)
    req.notes.extend(_found_notes(req, found))
    return _result(req, found, t_start)


def _found_notes(req: PlanRequest, found: dict) -> list[str]:
    """What the search found that the plan's assumptions say: a #1 outside the stack, its offloading, its evidence."""
    out = []
    best, hw = found["plans"][0], req.hw
    if (support := inputs.stack_support_note(req.settings, best.parallel)) is not None:
        out.append("plan #1: " + support)   # a --fix/--allow outside the framework's stages or schedules
    best_off = int(best.parallel.offload_layers)
    if best_off:
        host = float(best.memory.get("host_bytes", 0.0))
        out.append(f"plan #1 offloads {best_off} layers' activations to host memory over {hw.name}'s host link "
                   f"({hw.host_bandwidth / hw.gpus_per_host_link / 1e9:g} GB/s per GPU and direction: the raw link "
                   f"rate{f' shared by {hw.gpus_per_host_link} GPUs' if hw.gpus_per_host_link > 1 else ''}, so the "
                   f"copy time is a lower bound; {host / 1e9:,.1f} GB per GPU offloaded in all, of its "
                   f"{hw.host_memory_per_gpu / 1e9:,.0f} GB host memory); --fix offload_layers=0 ranks without "
                   "offloading (docs/planner.md)")
    sp = req.space
    out.extend(evidence_notes(found["interval"], best, found["space"], sp.gpus, sp.global_batch * sp.seq))
    return out


def _training(req: PlanRequest, found: dict) -> dict | None:
    """Days, GPU-hours, energy and cost to train ``tokens`` (cost.training), with its interval, for
    every row shown (``PlanRow.training``; newcomer review: only plan #1 had them); #1's is returned
    for ``PlanResult.training``. None without --tokens."""
    from llmpar.cost import training as TR

    train_in, hw, sp = req.train_in, req.hw, req.space
    if train_in["tokens"] is None:
        return None
    checkpoint = TR.checkpoint_bytes_of(req.model, req.settings)
    for row in found["plans"]:
        training = TR.estimate(hw, tokens=train_in["tokens"], tokens_per_s=row.tokens_per_s, gpus=sp.gpus,
                               tokens_per_step=sp.global_batch * sp.seq, pue=train_in["pue"],
                               gpu_hour_price=train_in["gpu_hour_price"], power_per_gpu_w=train_in["power_per_gpu_w"],
                               checkpoint_bytes=checkpoint, train_in=train_in)
        training["interval"] = EV.speed_json(found["interval"], row.step_time_s, row.tokens_per_s, row.mfu,
                                             training, hw.gpu.gemm.max_efficiency)
        row.training = training
    return found["plans"][0].training


def _result(req: PlanRequest, found: dict, t_start: float) -> PlanResult:
    """The plan's result object (:class:`llmpar.results_plan.PlanResult`), its training estimate included."""
    training = _training(req, found)
    sp = req.space
    return PlanResult(
        model=req.model.name, model_requested=req.alias, hardware=req.hw.name, gpus=sp.gpus, seq=sp.seq,
        global_batch=sp.global_batch, objective=req.search_options["objective"], settings=req.settings,
        capacity_bytes=found["capacity_bytes"], reserved_bytes=found["reserved_bytes"], plans=found["plans"],
        space=found["space"], elapsed_s=time.perf_counter() - t_start, defaults_used=req.defaults,
        assumptions=req.notes, pareto=found["pareto"], comparison=found["comparison"], training=training,
        points=found["points"], generation=req.hw.gpu.generation,
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
    if (note := EV.implausible_note(best.mfu_full_attention, best.plausibility, "plan #1's MFU",
                                     best.step_time_s)) is not None:
        out.append(note)
    floor = EV.min_published_tokens_per_gpu()
    per_gpu = tokens_per_step / gpus
    if floor is not None and per_gpu < floor:
        out.append(f"batch: {per_gpu:,.0f} tokens per GPU per step is below every published run (the fewest: "
                   f"{floor:,.0f}); the figures are extrapolated there - --tokens-per-batch "
                   f"{int(floor * gpus):,} or more matches the published runs")
    return out



__all__ = ["Comparison", "FixConflict", "NoLayout", "PlanResult", "PlanRow", "SpaceSummary", "plan", "search"]
