"""The planner's search space: every layout of N GPUs as numpy arrays, and the constraints that
reject some of them, counted per reason.

A candidate is one value of each knob of :class:`llmpar.parallel.Parallel`:

* degrees tp, cp, pp over the divisors of the GPU count (tp at most the head count, cp at most
  the sequence), dp = gpus / (tp·cp·pp) derived; ep (MoE models only) over the divisors of the
  GPU count up to the expert count;
* micro-batch b over the divisors of the global batch up to :data:`MAX_MICRO_BATCH`;
* pipeline schedule and virtual stages: with pp > 1 each allowed schedule (v = 1), and the
  interleaved schedule with every v >= 2 that divides the layers per stage ceil(L/pp)
  (Megatron-LM splits a stage into v equal chunks); with pp = 1 there is no pipeline and one
  schedule entry stands for all of them;
* ZeRO stage, recompute (none/selective/full), and SP on/off (only with tp > 1: at tp = 1 SP
  does not exist); full recompute of every layer and of about 1/4, 1/2 and 3/4 of each pipeline
  chunk's layers (Megatron-Core's block method, ``recompute_layers``; :data:`PARTIAL_FULL`), each
  distinct count once;
* activation offloading (Megatron-Core ``cpu_offloading_num_layers``, ``offload_layers``) of
  about 1/4, 1/2 and 3/4 of the layers (:data:`OFFLOAD_SHARES`), each distinct count once, where
  Megatron-Core allows it: pp = 1, no recompute, fewer layers than the model has, and hardware
  that states its CPU-GPU link (``host_bandwidth``; :attr:`SpaceSpec.offload`).

The constraints are :func:`llmpar.layout.layout_violations` — the very masks
:func:`llmpar.layout.check_layout` raises on for one layout — and
:func:`llmpar.cost.pipeline.schedule_feasible` (the mask of :func:`check_schedule`); the tests
sample layouts and check that the planner and ``check_layout``/``check_schedule`` agree. Each rejected
candidate is counted once, under the first reason it fails, in the order of :data:`REASONS`.
Memory (the last reason) is evaluated in :mod:`llmpar.planner.search` through
:func:`llmpar.cost.memory.memory_per_gpu`.

Nothing here computes a cost: that is :mod:`llmpar.cost`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np


from llmpar.cost import memory as M
from llmpar.cost import pipeline
from llmpar.layout_settings import finetune_layout_violations, optimizer_offload_violations, param_offload_violations
from llmpar.errors import UserError
from llmpar.parallel import RECOMPUTE, SCHEDULES, Parallel, Settings
from llmpar.layout import layout_violations, stack_violations
from llmpar.specs.model import ModelSpec

INTERLEAVED = SCHEDULES.index("interleaved")
MAX_MICRO_BATCH = 16
# Schedules searched by default: Megatron-LM's 1F1B and interleaved 1F1B, ZB-H1 (Qi et al. 2023)
# and DualPipe (DeepSeek-V3). GPipe is never faster than 1F1B and holds more activations; it is
# searched only when asked for (--allow schedule=gpipe).
DEFAULT_SCHEDULES = tuple(SCHEDULES.index(s) for s in ("1f1b", "interleaved", "zb-h1", "dualpipe"))

# reason key -> what it means (in the order candidates are tested)
from llmpar.planner.reasons import REASONS  # noqa: E402  (SP.REASONS: the planner's rejection keys)

# the rules of layout.layout_violations checked per degree row (tp, cp, pp, ep), in REASONS order
_DEGREE_RULES = ("tp_heads", "pp_layers", "cp_seq", "ep", "etp")


# ------------------------------------------------------------------------------- the space

@dataclass
class SpaceSpec:
    """What to search: the job (gpus, seq, global batch) and the allowed values of each knob
    (None = the default range). ``microbatches``: keep only layouts with that m."""

    gpus: int
    seq: int
    global_batch: int
    allowed: dict[str, tuple] = field(default_factory=dict)
    max_tp: int | None = None
    microbatches: int | None = None
    # activation offloading is searched (the stack implements it and the hardware states its CPU-GPU
    # link, or --fix/--allow offload_layers= names counts)
    offload: bool = False


@dataclass
class Candidates:
    """Layouts that passed every constraint but memory (``par`` holds arrays), and the count of
    the rejected ones per reason."""

    par: Parallel
    total: int                       # every candidate enumerated
    rejected: dict[str, int]
    # the rules that reject every candidate they were applied to on their own (degree rules over
    # every row of degrees, knob rules over every candidate those left): refusals.nothing_valid
    universal: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return int(np.size(self.par.tp))


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def subset(par: Parallel, idx) -> Parallel:
    """The candidates ``idx`` (index array or boolean mask) of an array layout."""
    return Parallel(**{f.name: (v[idx] if isinstance(v := getattr(par, f.name), np.ndarray) else v)
                       for f in fields(Parallel)})


def _allowed(spec: SpaceSpec, key, default):
    vals = spec.allowed.get(key)
    if vals is None:
        return list(default)
    return [v for v in vals]


# shares of a pipeline chunk's layers that partial full recompute is searched at (round(q x
# layers per chunk), at least 1, fewer than all, each count once)
PARTIAL_FULL = (0.25, 0.5, 0.75)
_FULL = RECOMPUTE.index("full")


# shares of the layers activation offloading is searched at (round(q x layers), at least 1, fewer
# than all, each count once): NeMo 25.11's GB200 / GB300 Llama-3 70B recipes offload 40 and 20 of
# 80 layers (Megatron-Bridge 5776a6d90, validation/nemo-2511-gb200.yaml)
OFFLOAD_SHARES = (0.25, 0.5, 0.75)
_NONE = RECOMPUTE.index("none")


def offload_counts(spec: SpaceSpec, layers: int) -> tuple[list[int], bool]:
    """(layer counts offloading is searched at, whether no offloading is searched too).
    ``--allow/--fix offload_layers=`` names the counts; otherwise :data:`OFFLOAD_SHARES` of the
    layers when the hardware states its host link, none when it does not."""
    given = spec.allowed.get("offload_layers")
    if given is None:
        if not spec.offload:
            return [], True
        return sorted({min(max(int(round(q * layers)), 1), layers - 1) for q in OFFLOAD_SHARES} - {0}), True
    counts = sorted(n for n in given if n > 0)
    for n in counts:
        if n >= layers:
            raise UserError(f"offload_layers={n} must be below the model's {layers} layers")
    if counts and not spec.offload:
        raise UserError("offload_layers needs the hardware's host_bandwidth (the CPU-GPU link); this profile "
                        "states none")
    return counts, 0 in given


def _recompute_options(rs, offloads=(), plain=True) -> list[tuple[int, float, int]]:
    """(recompute code, share q, offloaded layers) entries: q = 0 is the mode as is (full: every
    layer); offloading N layers goes with no recompute. ``plain``: the entries without offloading
    (False when --fix offload_layers=N asks for offloading only)."""
    out = ([(r, 0.0, 0) for r in rs] + ([(_FULL, q, 0) for q in PARTIAL_FULL] if _FULL in rs else [])) if plain else []
    return out + ([(_NONE, 0.0, n) for n in offloads] if _NONE in rs else [])


def _partial_layers(q, L, pp, v):
    """(N, keep): recompute_layers for share q of a chunk of ceil(L/pp)/v layers, and whether the
    candidate is distinct (N below a whole chunk and not the count of the next smaller share)."""
    per_chunk = pipeline.chunk_layers(L, pp, v)
    n = np.asarray(pipeline.partial_recompute_layers(q, per_chunk))
    idx = np.searchsorted(np.asarray(PARTIAL_FULL), q)                # position of q among the shares
    prev_q = np.asarray((0.0,) + PARTIAL_FULL)[idx]                    # the next smaller share (0: none)
    n_prev = np.asarray(pipeline.partial_recompute_layers(prev_q, per_chunk))
    keep = (q == 0) | ((n < per_chunk) & (n != n_prev))
    return n, keep


def _n_recompute(rs, L, pp, v) -> int:
    """Distinct recompute/offload options at this (pp, v): what the candidates of one knob row
    count (offloading exists at pp = 1 only, as in Megatron-Core)."""
    q = np.asarray([q for _, q, _ in rs], dtype=float)
    off = np.asarray([n for _, _, n in rs], dtype=np.int64)
    return int(np.count_nonzero(_partial_layers(q, L, pp, v)[1] & ((off == 0) | (pp == 1))))


def _sched_pairs(spec: SpaceSpec, model: ModelSpec, pp: int, scheds, user_v) -> list[tuple[int, int]]:
    """(schedule, v) entries searched at this pp (see the module doc)."""
    per_stage = pipeline.stage_layers(model.layers, pp)
    non_inter = [s for s in scheds if s != INTERLEAVED]
    if pp == 1:
        # no pipeline: the schedule does not matter; one entry (v = 1) stands for all of them
        if non_inter and (user_v is None or 1 in user_v):
            pref = SCHEDULES.index("1f1b")
            return [(pref if pref in non_inter else non_inter[0], 1)]
        if INTERLEAVED in scheds:  # only interleaving asked for: it cannot run (pp = 1)
            return [(INTERLEAVED, v) for v in (user_v or (2,)) if v >= 2] or [(INTERLEAVED, 2)]
        return []
    out = []
    for s in scheds:
        if s == INTERLEAVED:
            vs = [v for v in user_v if v >= 2] if user_v is not None else [
                v for v in divisors(per_stage) if v >= 2]
            out += [(s, v) for v in vs]
        elif user_v is None or 1 in user_v:
            out.append((s, 1))
    return out


@dataclass
class _Ranges:
    """The values each knob is searched at (before the rules), and the (schedule, v) entries per pp."""

    tps: list
    cps: list
    pps: list
    eps: list
    etps: list
    dps: tuple | None
    bs: list
    zs: list
    rs: list
    sps: list
    pairs_by_pp: dict


def _ranges(model: ModelSpec, spec: SpaceSpec, settings: Settings) -> _Ranges:
    """Each knob's values: its default range (divisors, the stack's stages and schedules), narrowed by --fix/--allow."""
    G, S, B = spec.gpus, spec.seq, spec.global_batch
    L = model.layers
    divs = divisors(G)
    heads = model.heads
    tp_cap = min(heads, spec.max_tp or heads)
    tps = [d for d in divs if d <= tp_cap]
    cps = [d for d in divs if d <= S]
    pps = list(divs)
    if model.moe is not None:
        eps = [d for d in divs if d <= model.moe.experts]
    else:
        eps = [1]
    tps = [t for t in tps if t in _allowed(spec, "tp", tps)]
    cps = [c for c in cps if c in _allowed(spec, "cp", cps)]
    pps = [p for p in pps if p in _allowed(spec, "pp", pps)]
    eps = [e for e in eps if e in _allowed(spec, "ep", eps)]
    # expert-TP: 0 = tp (Megatron-Core's default); with a stack that folds (moe_folding) also 1,
    # the value Megatron-Bridge's MoE recipes use; --fix/--allow etp= names the values instead
    default_etps = (0, 1) if settings.stack.moe_folding else (0,)
    etps = list(spec.allowed.get("etp", default_etps)) if model.moe is not None else [0]
    dps = spec.allowed.get("dp")
    bs = [d for d in divisors(B) if d <= MAX_MICRO_BATCH] if "micro_batch" not in spec.allowed else list(
        spec.allowed["micro_batch"])
    zs = _allowed(spec, "zero", tuple(settings.stack.zero_stages))   # the stages the framework implements
    offloads, plain = offload_counts(spec, L)
    rs = _recompute_options(_allowed(spec, "recompute", range(len(RECOMPUTE))), offloads, plain)
    sps = _allowed(spec, "sp", (False, True))
    # the schedules the framework implements (stack.schedules), unless the user named some
    stack_scheds = {SCHEDULES.index(x) for x in settings.stack.schedules}
    scheds = _allowed(spec, "schedule", tuple(x for x in DEFAULT_SCHEDULES if x in stack_scheds)
                      or tuple(sorted(stack_scheds)))
    user_v = spec.allowed.get("virtual_stages")
    pairs_by_pp = {p: _sched_pairs(spec, model, p, scheds, user_v) for p in pps}
    return _Ranges(tps=tps, cps=cps, pps=pps, eps=eps, etps=etps, dps=dps, bs=bs, zs=zs, rs=rs, sps=sps,
                   pairs_by_pp=pairs_by_pp)


def _degree_rows(G: int, L: int, rg: _Ranges) -> tuple[list, list, list]:
    """Every row of degrees (tp, cp, dp, ep, etp, pp) with its (pp, SP options) key and its count of knob combinations."""
    rows, keys, knobs = [], [], []
    n_rec: dict[tuple[int, int], int] = {}    # (pp, v) -> distinct recompute options: the same for every tp, cp

    def n_recompute(pp, v):
        if (pp, v) not in n_rec:
            n_rec[pp, v] = _n_recompute(rg.rs, L, pp, v)
        return n_rec[pp, v]

    for tp in rg.tps:
        sp_opts = rg.sps
        if tp == 1:   # SP at tp 1 is no SP: one entry, off unless only "on" was asked for (then rule sp_tp)
            sp_opts = [False] if False in rg.sps else [True]
        for cp in rg.cps:
            for pp in rg.pps:
                if G % (tp * cp * pp):
                    continue
                dp = G // (tp * cp * pp)
                if rg.dps is not None and dp not in rg.dps:
                    continue
                pairs = rg.pairs_by_pp[pp]
                n_knobs = len(rg.bs) * len(rg.zs) * len(sp_opts) * sum(n_recompute(pp, v) for _, v in pairs)
                if n_knobs == 0:
                    continue
                for ep in rg.eps:
                    for etp in sorted({0 if e == tp else e for e in rg.etps}):   # etp = tp is the default, once
                        rows.append((tp, cp, dp, ep, etp, pp))
                        keys.append((pp, tuple(sp_opts)))
                        knobs.append(n_knobs)
    return rows, keys, knobs


def _degree_survivors(model: ModelSpec, S: int, rows, keys, knobs, rejected: dict, universal: list) -> dict[tuple, list]:
    """The degree rows that pass the degree rules, grouped by (pp, SP options); the others counted in
    ``rejected``; a rule that every row breaks is added to ``universal``."""
    groups: dict[tuple, list[tuple[int, int, int, int, int]]] = {}   # (pp, SP options) -> rows (tp, cp, dp, ep, etp)
    if rows:
        d = np.asarray(rows, dtype=np.int64)
        bad = layout_violations(model, Parallel(tp=d[:, 0], pp=d[:, 5], dp=d[:, 2], cp=d[:, 1], ep=d[:, 3],
                                                etp=d[:, 4], seq=S), only=_DEGREE_RULES)
        n = np.asarray(knobs, dtype=np.int64)
        alive = np.ones(len(d), dtype=bool)
        universal.extend(r for r in _DEGREE_RULES if np.all(np.asarray(bad[r], dtype=bool)))
        for r in _DEGREE_RULES:          # the first rule a row breaks is its reason
            hit = alive & np.asarray(bad[r], dtype=bool)
            rejected[r] += int(n[hit].sum())
            alive &= ~hit
        for i in np.flatnonzero(alive):
            groups.setdefault(keys[i], []).append(rows[i][:5])
    return groups


def _knob_violations(model: ModelSpec, spec: SpaceSpec, settings: Settings, cols: dict) -> tuple[dict, np.ndarray]:
    """The knob-level rules over every expanded candidate, in REASONS order: (reason -> mask, microbatches m)."""
    S, B = spec.seq, spec.global_batch
    tp, cp, pp, dp = cols["tp"], cols["cp"], cols["pp"], cols["dp"]
    b, sched, v, sp, zero = cols["micro_batch"], cols["schedule"], cols["virtual_stages"], cols["sp"], cols["zero"]
    per = b * dp
    m = B // per
    # the knob-level rules (the degree-level ones were masked above, per row of degrees)
    rules = layout_violations(model, Parallel(tp=tp, pp=pp, dp=dp, cp=cp, ep=cols["ep"], etp=cols["etp"], zero=zero, sp=sp,
                                              seq=S, virtual_stages=v, schedule=sched),
                               only=("sp_seq", "sp_tp", "virtual_stages", "schedule_pp"))
    bad = {
        "batch": (B % per != 0) | ((m != spec.microbatches) if spec.microbatches else False),
        "sp_seq": rules["sp_seq"],
        "sp_tp": rules["sp_tp"],
        "schedule": ~np.asarray(pipeline.schedule_feasible(sched, pp, np.maximum(m, 1), v), dtype=bool)
                    | rules["virtual_stages"] | rules["schedule_pp"],
        "convention": ~np.broadcast_to(np.asarray(M.convention_allows(settings, zero), dtype=bool), zero.shape),
        "stack": np.broadcast_to(np.logical_or.reduce([np.asarray(m, dtype=bool) for m in stack_violations(
            settings.stack, Parallel(pp=pp, zero=zero)).values()]), zero.shape),   # every rule of the stack
        "finetune": np.broadcast_to(np.asarray(finetune_layout_violations(settings.finetune, tp, pp, cp, cols["ep"]),
                                               dtype=bool), zero.shape),
        "optimizer_offload": np.broadcast_to(np.asarray(optimizer_offload_violations(settings, zero), dtype=bool),
                                             zero.shape),
        "param_offload": np.broadcast_to(np.asarray(param_offload_violations(settings, zero), dtype=bool), zero.shape),
    }
    return bad, m


def enumerate_space(model: ModelSpec, spec: SpaceSpec, settings: Settings) -> Candidates:
    """Every candidate layout of ``spec``; returns those that pass the divisibility, batch,
    schedule and convention constraints (memory is the search's job) and the rejection counts."""
    G, S = spec.gpus, spec.seq
    L = model.layers
    rg = _ranges(model, spec, settings)
    rejected = {r: 0 for r in REASONS}

    # ---- degrees (a few thousand rows), rejected rows counted with all their knobs; the degree
    # rules of layout.layout_violations (the function check_layout uses), applied to all rows at once
    rows, keys, knobs = _degree_rows(G, L, rg)
    total = int(sum(knobs))
    universal: list[str] = []
    groups = _degree_survivors(model, S, rows, keys, knobs, rejected, universal)
    if not groups:
        return Candidates(par=_empty(S), total=total, rejected=rejected, universal=tuple(universal))
    cols = _expand_all(groups, rg)

    # ---- knob-level constraints, in order
    bad, m = _knob_violations(model, spec, settings, cols)
    pp, v = cols["pp"], cols["virtual_stages"]
    # partial full recompute that comes to the same layer count as another entry is not a
    # candidate of its own (it is in neither the total nor a rejection count)
    n_rec, distinct = _partial_layers(cols["rq"], L, pp, v)
    distinct &= (cols["off"] == 0) | (pp == 1)        # offloading: pp = 1 only (not a candidate elsewhere)
    alive = distinct.copy()
    if alive.any():
        universal.extend(r for r, mask in bad.items() if np.all(np.asarray(mask, dtype=bool)[distinct]))
    for reason, mask in bad.items():
        hit = alive & mask
        rejected[reason] += int(np.count_nonzero(hit))
        alive &= ~hit
    idx = np.flatnonzero(alive)
    par = Parallel(
        tp=cols["tp"][idx], pp=pp[idx], dp=cols["dp"][idx], cp=cols["cp"][idx], ep=cols["ep"][idx],
        etp=cols["etp"][idx], zero=cols["zero"][idx], sp=cols["sp"][idx], recompute=cols["recompute"][idx],
        micro_batch=cols["micro_batch"][idx], microbatches=m[idx], seq=S,
        schedule=cols["schedule"][idx], virtual_stages=v[idx], recompute_layers=n_rec[idx], offload_layers=cols["off"][idx],
    )
    return Candidates(par=par.shared_as_scalars(), total=total, rejected=rejected, universal=tuple(universal))


_DEGREES = ("tp", "cp", "dp", "ep", "etp")


def _knob_product(bs, pairs, zs, rs, sps) -> dict[str, np.ndarray]:
    """The knob product of one degree group (micro-batch x schedule pair x ZeRO x recompute x SP),
    one entry per combination, in the order the candidates take it."""
    grids = np.meshgrid(np.arange(len(bs)), np.arange(len(pairs)), np.asarray(zs), np.arange(len(rs)),
                        np.asarray(sps, dtype=bool), indexing="ij")
    bi, pi, z, ri, s = (g.ravel() for g in grids)
    pr = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return {
        "micro_batch": np.asarray(bs, dtype=np.int64)[bi], "schedule": pr[pi, 0], "virtual_stages": pr[pi, 1],
        "zero": z.astype(np.int64), "recompute": np.asarray([c for c, _, _ in rs], dtype=np.int64)[ri],
        "rq": np.asarray([q for _, q, _ in rs], dtype=float)[ri], "off": np.asarray([n for _, _, n in rs], dtype=np.int64)[ri],
        "sp": s,
    }


def _expand_all(groups, rg) -> dict[str, np.ndarray]:
    """Every group's degree rows (tp, cp, dp, ep, etp of one pp) x its knob product, as columns
    (groups in order, rows outer, knobs inner). Each column is allocated once and every group
    written into its slice, rows broadcast along the knobs and knobs along the rows: no per-group
    arrays to repeat, tile and concatenate (the DeepSeek-V3/2048 space is 1.9 M rows x 14 columns)."""
    parts = [(pp, np.asarray(rows, dtype=np.int64), _knob_product(rg.bs, rg.pairs_by_pp[pp], rg.zs, rg.rs, sp_opts))
             for (pp, sp_opts), rows in groups.items()]
    total = sum(rows.shape[0] * kn["micro_batch"].size for _, rows, kn in parts)
    names = ("tp", "cp", "pp", "dp", "ep", "etp", "micro_batch", "schedule", "virtual_stages", "zero", "recompute",
             "rq", "off", "sp")
    kinds = {"rq": float, "sp": bool}
    cols = {k: np.empty(total, dtype=kinds.get(k, np.int64)) for k in names}
    at = 0
    for pp, rows, kn in parts:
        n, k = rows.shape[0], kn["micro_batch"].size
        sl = slice(at, at + n * k)
        for j, name in enumerate(_DEGREES):
            cols[name][sl].reshape(n, k)[:] = rows[:, j][:, None]
        cols["pp"][sl] = pp
        for name, x in kn.items():
            cols[name][sl].reshape(n, k)[:] = x[None, :]
        at += n * k
    return cols


def _empty(seq) -> Parallel:
    e = np.zeros(0, dtype=np.int64)
    return Parallel(tp=e, pp=e, dp=e, cp=e, ep=e, etp=e, zero=e, sp=np.zeros(0, dtype=bool), recompute=e, micro_batch=e,
                    microbatches=e, seq=e + seq, schedule=e, virtual_stages=e, recompute_layers=e, offload_layers=e)
