"""Pipeline parallelism: schedules, in-flight micro-batches, stage sizes and bubbles.

Every function here is array-polymorphic: the schedule code, pp, m and v may be Python numbers
or numpy arrays (one entry per candidate layout), so ``llmpar step`` and ``llmpar plan`` use the
same formulas. Schedules are integer codes, indices into :data:`llmpar.parallel.SCHEDULES`.
The list-scheduling simulation ``llmpar bubble`` draws is :mod:`llmpar.cost.pipeline_sim`.

Notation (docs/architecture.md): p pipeline stages, m micro-batches per step, v virtual stages (model
chunks per device, interleaved schedule only). Sources are given beside each formula and in
docs/pipeline.md.
"""

from __future__ import annotations

import numpy as np

from llmpar.cost.arrays import scalar_out as _out
from llmpar.parallel import SCHEDULES
from llmpar.layout import chunk_layers, stage_layers  # noqa: F401 (stage arithmetic: the layout's home)

GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB_H1, DUALPIPE = (SCHEDULES.index(s) for s in (
    "gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe"))


def p2p_overlap(overlap_pp: float, pp_schedules, schedule):
    """The share of the pipeline's p2p sends hidden behind compute under ``schedule`` (a code or an
    array of codes): the stack's overlap.pp under the schedules it achieves it on
    (overlap.pp_schedules; None = all), 0 (blocking send/recv) under the others. Megatron-Core
    overlaps p2p only in the interleaved schedule: forward_backward_pipelining_without_interleaving
    raises "Non-interleaved pipeline parallelism does not support overlapping p2p communication",
    and megatron/training/arguments.py sets overlap_p2p_comm False without a virtual pipeline size
    (NVIDIA/Megatron-LM, megatron/core/pipeline_parallel/schedules.py)."""
    if pp_schedules is None:
        return overlap_pp
    codes = [SCHEDULES.index(s) for s in pp_schedules]
    on = np.isin(np.asarray(schedule), codes)
    return _out(np.where(on, overlap_pp, 0.0))


# ---------------------------------------------------------------------------------------------
# Activation memory: how many micro-batches' activations stage 1 holds at its peak
# ---------------------------------------------------------------------------------------------

def in_flight_microbatches(schedule, pp, m, v=1):
    """Micro-batches whose activations the first stage holds at its peak, in units of
    "one micro-batch through one stage's layers" (multiply by :func:`stage_layers` and the
    per-layer activation to get bytes).

    - GPipe: all m forwards run before any backward -> m (Huang et al. 2019, §2.3).
    - 1F1B (PipeDream-Flush): stage 1 runs p warm-up forwards before its first backward ->
      min(p, m) (Narayanan et al. 2021, §2.2.1; Korthikanti et al. 2022, §4.2.3).
    - Interleaved 1F1B with v chunks: min(p, m)·(1 + (p−1)/(p·v)) (Korthikanti et al. 2022,
      §4.2.3: "the total activation memory ... multiplied by 1 + (p−1)/(p·m)", their m is our v).
    - ZB-H1: same peak as 1F1B (Qi et al. 2023, §3.1: "ZB-H1 ... the same peak memory as 1F1B").
    - DualPipe: p + 1 (DeepSeek-V3 technical report, Table 2, "Activation: PP+1"), capped at m.
      DualPipe also holds 2x parameters (two stages per device); see :func:`parameter_copies`.
    """
    m_ = np.asarray(m, dtype=float)
    p_ = np.asarray(pp, dtype=float)
    v_ = np.asarray(v, dtype=float)
    s = np.asarray(schedule)
    one_f_one_b = np.minimum(p_, m_)
    interleaved = one_f_one_b * (1.0 + (p_ - 1.0) / (p_ * v_))
    dualpipe = np.minimum(p_ + 1.0, m_)
    out = np.where(s == GPIPE, m_,
          np.where(s == INTERLEAVED, interleaved,
          np.where(s == DUALPIPE, dualpipe, one_f_one_b)))
    return _out(out)


def parameter_copies(schedule):
    """Model-stage parameter copies per device: 2 for DualPipe (DeepSeek-V3 report, Table 2,
    "Parameter 2x": each device holds stage i and stage p−1−i), else 1."""
    return _out(np.where(np.asarray(schedule) == DUALPIPE, 2, 1))


# ---------------------------------------------------------------------------------------------
# Stage sizes (uneven stages allowed: Llama-3.1-405B 126 layers on pp=16, DeepSeek-V3 61 on 16)
# ---------------------------------------------------------------------------------------------

def dualpipe_paired_share(pp, m):
    """The share of DualPipe's forward (and backward) chunks that run as an overlapped F&B pair on
    the device with the most unpaired ones, devices 0 and p-1 (deepseek-ai/DualPipe ``DualPipe.step``;
    :func:`llmpar.cost.pipeline_sim._order_dualpipe` is the same order). Only a pair hides its
    all-to-alls behind the other chunk's compute (DeepSeek-V3 §3.2.1); the warm-up and cool-down
    chunks run alone. On the device with half-rank hr the pairs are step 4's 2(m/2 - p + hr + 1)
    and step 5's p/2 - hr - 1, less the middle devices' first main step, which the code does not
    overlap; of its m forwards, at hr = 0: m - 3p/2 + 1 pairs (p >= 4), m - 3 at p = 2 (both
    devices are middle ones). p = 16, m = 120 (DeepSeek-V3's layout): 97 of 120. Array-polymorphic."""
    p = np.asarray(pp, dtype=float)
    mm = np.maximum(np.asarray(m, dtype=float), 1.0)
    pairs = mm - 1.5 * p + 1.0 - np.where(p == 2, 1.0, 0.0)
    return _out(np.clip(pairs / mm, 0.0, 1.0))


def ep_paired_share(schedule, pp, m, v=1):
    """The share of a schedule's forward (and backward) chunks that run paired with a chunk of the
    other direction on its least-paired device, rank 0: all that an EP all-to-all overlap which
    hides one direction's transfers behind the other's compute can hide (--ep-overlap, the stack's
    overlap.ep; DualPipe's F&B pairs). Megatron-Core's --overlap-moe-expert-parallel-comm
    (pipeline_parallel/combined_1f1b.py): without pipelining the first forward runs alone and
    the other m - 1 pair with a backward; with interleaving, rank 0's warm-up of 2(p-1) + (v-1)p
    forwards plus the one extra forward the overlap schedules (schedules.py
    get_pp_rank_microbatches) run alone and the m·v - that others pair; 1F1B: its warm-up of p - 1
    and the extra one, m - p of m (Megatron-Core asks for interleaving when pp > 1); ZB-H1 as 1F1B;
    GPipe runs all forwards before any backward: none; DualPipe: :func:`dualpipe_paired_share`.
    Array-polymorphic."""
    s = np.asarray(schedule)
    p = np.asarray(pp, dtype=float)
    vv = np.where(s == INTERLEAVED, np.asarray(v, dtype=float), 1.0)
    chunks = np.maximum(np.asarray(m, dtype=float) * vv, 1.0)
    # rank 0's warm-up forwards (interleaved: 2(p-1) + (v-1)p; 1F1B: p-1) and the extra forward
    alone = np.where(s == INTERLEAVED, 2.0 * (p - 1.0) + (vv - 1.0) * p, p - 1.0) + 1.0
    megatron = np.clip((chunks - alone) / chunks, 0.0, 1.0)
    out = np.where(s == DUALPIPE, dualpipe_paired_share(pp, m), np.where(s == GPIPE, 0.0, megatron))
    return _out(out)


def partial_recompute_layers(share, per_chunk):
    """``--recompute-layers`` N for a share of a chunk's ``per_chunk`` layers: round(share·per_chunk)
    (half to even), at least 1; 0 for share 0 (every layer: plain full recompute). The planner's
    and ``calibrate runs``' partial-recompute grids both go through it. Array-polymorphic."""
    q = np.asarray(share, dtype=float)
    return _out(np.where(q > 0, np.maximum(1, np.rint(q * np.asarray(per_chunk))), 0).astype(np.int64))


def offload_kept_share(layers, offload_layers):
    """Share of a (pp = 1) model's saved activations in HBM at the peak when the first N layers'
    are offloaded to host memory: (L - N + min(N, 1)) / L (cost/memory.py, activation offloading)."""
    n = np.asarray(offload_layers, dtype=float)
    return _out((layers - n + np.minimum(n, 1.0)) / layers)


def full_recompute_fraction(layers, pp, virtual_stages, recompute_layers):
    """Share of a stage's layers that full recompute re-runs: Megatron-Core's
    ``--recompute-granularity full --recompute-method block --recompute-num-layers N`` checkpoints
    the first N layers of each pipeline chunk (L/(p·v) layers on the busiest stage) and runs the
    others without recompute (megatron/core/transformer/transformer_block.py, _checkpointed_forward).
    N = 0 means every layer (the default, and what `--recompute full` means without N):
    fraction = min(N·v / ceil(L/p), 1), or 1 for N = 0. Array-polymorphic."""
    n = np.asarray(recompute_layers, dtype=float)
    per_chunk = np.asarray(chunk_layers(layers, pp, virtual_stages), dtype=float)
    return _out(np.where(n > 0, np.minimum(n / np.maximum(per_chunk, 1.0), 1.0), 1.0))


def fp8_bf16_layers(settings) -> tuple[int, int]:
    """(start, end): the layers the stack's FP8 recipe keeps in BF16 at the model's start and end
    (kernels.fp8.bf16_layers_at_start / _at_end; Megatron-Core --first-last-layers-bf16) when the
    run is ``--dtype fp8``, else (0, 0)."""
    if settings.dtype != "fp8":
        return 0, 0
    rec8 = settings.stack.kernels.fp8
    return rec8.bf16_layers_at_start, rec8.bf16_layers_at_end


def bf16_boundary_layers(layers, pp, start, end):
    """(first stage's, last stage's) transformer layers that run in BF16 under an FP8 recipe with
    ``start`` / ``end`` boundary layers: the first ``start`` layers of the model sit on stage 0
    (its first chunk under interleaving) and the last ``end`` on stage p-1, capped at those stages'
    layer counts (first/last_stage_layers); with pp = 1 every one is on the one
    stage (returned as the first). Array-polymorphic."""
    p = np.asarray(pp)
    n_first = np.asarray(first_stage_layers(layers, pp))
    n_last = np.asarray(last_stage_layers(layers, pp))
    single = p == 1
    first = np.where(single, np.minimum(start + end, layers), np.minimum(start, n_first))
    last = np.where(single, 0, np.minimum(end, n_last))
    return first, last


def _deficit(layers, pp):
    """d = p·ceil(L/p) − L: layers the stages are short of a full ceil(L/p) each (0 <= d < p)."""
    L = np.asarray(layers)
    p = np.asarray(pp)
    return p * (-(-L // p)) - L


def last_stage_layers(layers, pp):
    """Transformer layers on the last stage (which also runs the LM head and the loss).

    Convention (Llama 3 §3.3.2): the shortfall d = p·ceil(L/p) − L is taken first from the
    end stages, one layer each, the last stage first (it carries the LM head), then from middle
    stages. So the last stage has ceil(L/p) − min(d, 1) layers. 126 on 16: 7."""
    c = np.asarray(stage_layers(layers, pp))
    return _out(c - np.minimum(_deficit(layers, pp), 1))


def first_stage_layers(layers, pp):
    """Transformer layers on the first stage (which also holds the embedding).

    Same convention as :func:`last_stage_layers`: ceil(L/p) − min(max(d − 1, 0), 1).
    126 on 16 (d = 2): 7; 61 on 16 (d = 3): 3; 80 on 8 (d = 0): 10."""
    c = np.asarray(stage_layers(layers, pp))
    d = _deficit(layers, pp)
    return _out(c - np.minimum(np.maximum(d - 1, 0), 1))


# ---------------------------------------------------------------------------------------------
# Bubbles and pipeline step time
# ---------------------------------------------------------------------------------------------
#
# Times are per micro-batch on one pipeline stage (the most loaded one: the step is paced by
# the slowest stage). t_fwd covers the stage's forward (all v chunks of it for interleaving),
# t_bwd its *full* backward: input gradient B plus weight gradient W.
#
#   ideal  = m·(t_fwd + t_bwd)                      (no pipeline: the stage is never idle)
#   total  = ideal + bubble
#   bubble over ideal      = bubble / ideal          ((p−1)/m for GPipe and 1F1B)
#   bubble fraction of step = bubble / total         ((p−1)/(m+p−1) for GPipe and 1F1B)

UNIT_F, UNIT_B_INPUT, UNIT_W = 1.0, 1.0, 1.0
"""Unit chunk times behind the unitless ratios: F = B(input) = W (Qi et al. 2023, §2: T_F ≈ T_B ≈ T_W
for a transformer layer), so a full backward is 2F (Narayanan et al. 2021, §3.5: backward ≈ 2× forward)."""


def pipeline_time(t_fwd, t_bwd, pp, m, schedule, v=1, t_w=None, t_fb=None):
    """(total, bubble) seconds of one pipeline flush, from per-micro-batch per-stage times.

    - GPipe (Huang et al. 2019 §2.3) and 1F1B (Narayanan et al. 2021 §2.2, "PipeDream-Flush"):
      bubble = (p−1)(t_fwd + t_bwd); DeepSeek-V3 Table 2 writes (PP−1)(F+B) with B the full
      backward, docs/architecture.md (p−1)(F+B+W) with B the input gradient only.
    - Interleaved 1F1B with v chunks (Narayanan et al. 2021 §2.2.2): bubble = (p−1)(t_fwd + t_bwd)/v.
    - ZB-H1 (Qi et al. 2023 §3.1): bubble = (p−1)(F + B − W) with per-stage F, B (input grad)
      and W (weight grad), B = t_bwd − t_w. The paper's figure assumes W ≤ min(F, B); beyond
      that the F or B chain through the stages dominates, and with m < p only m micro-batches
      can overlap. The simulated ZB-H1 schedule (:func:`~llmpar.cost.pipeline_sim.timeline`) gives
      exactly (p − m')(F + B) + (m' − 1)·max(F + B − W, F, B), m' = min(m, p),
      which is the paper's formula for m >= p and W <= min(F, B).
    - DualPipe (DeepSeek-V3 report §3.2.1, Table 2): bubble = (p/2 − 1)(F&B + B_full − 3W) with
      B_full = t_bwd the *full* backward chunk (the report's B; docs/architecture.md's (F&B + B − 3W) uses
      the same letter) and F&B the time of one overlapped forward+backward pair, by default
      t_fwd + t_bwd (the overlap hides communication, not compute). Requires p even and m >= 2p.
      DualPipe's own op order (deepseek-ai/DualPipe ``dualpipe.py`` ``DualPipe.step``), simulated
      by :func:`~llmpar.cost.pipeline_sim.timeline`, idles exactly that long wherever
      F&B + B_full − 3W >= 2F, i.e. with F&B = F + B_full, wherever 2·B_input − W >= F
      (transformer layers: backward ≈ 2x forward);
      below it the forward chain through the device pairs dominates and the simulated bubble is
      (p/2 − 1)·2F. So, with the default F&B: bubble = (p/2 − 1)·max(F&B + B_full − 3W, 2F),
      exact for any F and B when W = B_input (this function's default t_w = t_bwd/2; checked on
      735 (p, m, F, B) cases and by a property test, tests/test_pipeline.py). With W far from
      B_input other chains can bind (F = 1, B_input = 0.5, W = 0.25: 0.25 more per device pair).
      A caller's ``t_fb`` (a faster pair, which the simulation cannot check) gets the report's
      formula as printed.

    t_w defaults to t_bwd/2 (input- and weight-gradient GEMMs have the same FLOPs). Negative
    bubbles (W larger than the formulas allow) are clipped to 0. Array-polymorphic.
    """
    F = np.asarray(t_fwd, dtype=float)
    Bf = np.asarray(t_bwd, dtype=float)
    W = Bf / 2.0 if t_w is None else np.asarray(t_w, dtype=float)
    Bi = Bf - W
    FB = F + Bf if t_fb is None else np.asarray(t_fb, dtype=float)
    p = np.asarray(pp, dtype=float)
    m_ = np.asarray(m, dtype=float)
    v_ = np.asarray(v, dtype=float)
    s = np.asarray(schedule)

    flush = (p - 1.0) * (F + Bf)                                   # GPipe, 1F1B
    interleaved = flush / v_                                       # Narayanan 2021 §2.2.2
    mp = np.minimum(m_, p)
    zb = (p - mp) * (F + Bi) + (mp - 1.0) * np.maximum(np.maximum(F + Bi - W, F), Bi)   # Qi 2023 §3.1
    # DeepSeek-V3 Table 2; with the default F&B bounded below by the forward chain DualPipe's own
    # order runs into (docstring)
    per_pair = FB + Bf - 3.0 * W if t_fb is not None else np.maximum(FB + Bf - 3.0 * W, 2.0 * F)
    dual = np.maximum((p / 2.0 - 1.0) * per_pair, 0.0)

    bubble = np.where(s == INTERLEAVED, interleaved,
             np.where(s == ZB_H1, zb,
             np.where(s == DUALPIPE, dual, flush)))
    total = m_ * (F + Bf) + bubble
    return _out(total), _out(bubble)


def _unit_bubble(schedule, pp, m, v):
    """(ideal, bubble) of one stage with the unit chunk times of :data:`UNIT_F` etc."""
    v_ = np.asarray(v, dtype=float)
    s = np.asarray(schedule)
    # per-stage times: v chunks of F = 1 and B_full = 2 for interleaving, one chunk otherwise
    chunks = np.where(s == INTERLEAVED, v_, 1.0)
    t_f = UNIT_F * chunks
    t_b = (UNIT_B_INPUT + UNIT_W) * chunks
    total, bubble = pipeline_time(t_f, t_b, pp, m, schedule, v, t_w=UNIT_W * chunks)
    return np.asarray(total) - np.asarray(bubble), np.asarray(bubble)


def bubble_over_ideal(schedule, pp, m, v=1):
    """Bubble time divided by the ideal (bubble-free) compute time of a step.

    GPipe/1F1B: (p−1)/m (Huang 2019; Narayanan 2021 §2.2.1); interleaved: (p−1)/(v·m)
    (Narayanan 2021 §2.2.2); ZB-H1: (p−1)/(3m) for m >= p; DualPipe: (p−2)/(3m). The last two
    depend on the chunk times: they use F = B = W (:data:`UNIT_F`)."""
    ideal, bubble = _unit_bubble(schedule, pp, m, v)
    return _out(bubble / ideal)


def bubble_fraction_of_step(schedule, pp, m, v=1):
    """Bubble time as a fraction of the whole step (ideal + bubble): GPipe/1F1B (p−1)/(m+p−1),
    interleaved (p−1)/(v·m+p−1); same unit chunk times as :func:`bubble_over_ideal`.

    The seeds' naive layer split (no micro-batching, m = 1) is (p−1)/p of the step."""
    ideal, bubble = _unit_bubble(schedule, pp, m, v)
    return _out(bubble / (ideal + bubble))


def schedule_feasible(schedule, pp, m, v=1):
    """Boolean mask of layouts the schedule can run (the planner masks; the CLI explains why
    with :func:`check_schedule`). Interleaved (Megatron-LM): p >= 2, v >= 2 and m a multiple of p.
    DualPipe (deepseek-ai/DualPipe): p even, m even and m >= 2p. Others: always."""
    p = np.asarray(pp)
    m_ = np.asarray(m)
    v_ = np.asarray(v)
    s = np.asarray(schedule)
    ok_inter = (p >= 2) & (v_ >= 2) & (m_ % p == 0)
    ok_dual = (p % 2 == 0) & (m_ % 2 == 0) & (m_ >= 2 * p)
    ok_other = v_ == 1
    return _out(np.where(s == INTERLEAVED, ok_inter, np.where(s == DUALPIPE, ok_dual, ok_other)))


def check_schedule(schedule: int, pp: int, m: int, v: int = 1) -> None:
    """Raise UserError (one line) if the schedule cannot run this (scalar) layout."""
    from llmpar.errors import UserError

    name = SCHEDULES[int(schedule)]
    if pp < 1:
        raise UserError(f"--pp must be a positive integer, got {pp}")
    if m < 1:
        raise UserError(f"--microbatches must be a positive integer, got {m}")
    if v < 1:
        raise UserError(f"--virtual-stages must be a positive integer, got {v}")
    if schedule == INTERLEAVED:
        if pp < 2:
            raise UserError("the interleaved schedule needs --pp of at least 2")
        if v < 2:
            raise UserError("the interleaved schedule needs --virtual-stages of at least 2")
        if m % pp:
            raise UserError(
                f"the interleaved schedule needs --microbatches to be a multiple of --pp "
                f"(Megatron-LM's interleaved 1F1B), got m={m}, pp={pp}"
            )
    elif v != 1:
        raise UserError(f"--virtual-stages {v} needs --schedule interleaved (got {name})")
    if schedule == DUALPIPE:
        if pp % 2:
            raise UserError(f"DualPipe needs an even --pp (it folds the pipeline in two), got {pp}")
        if m % 2 or m < 2 * pp:
            raise UserError(f"DualPipe needs an even --microbatches of at least 2*pp = {2 * pp}, got {m}")

