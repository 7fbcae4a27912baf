"""Pipeline in-flight counts and stage spans: which layers a stage holds and how many
micro-batches of activations it keeps at its peak (docs/memory.md, Pipeline).

Sources: Korthikanti et al. 2022 (arXiv:2205.05198) §4.2.3; Narayanan et al. 2021
(arXiv:2104.04473) §2.2; Qi et al. 2023 (zero bubble) §3.1; DeepSeek-V3 report Table 2;
Llama 3 (arXiv:2407.21783) §3.3.2 for uneven stages. Array-polymorphic.
"""

from __future__ import annotations

import numpy as np

from llmpar.cost.arrays import scalar_out as _out
from llmpar.cost.pipeline import (
    DUALPIPE,
    GPIPE,
    INTERLEAVED,
    first_stage_layers,
    in_flight_microbatches,
    last_stage_layers,
    stage_layers,
)
from llmpar.specs.model import ModelSpec



def in_flight_on_stage(schedule, pp, m, v, stage):
    """Micro-batches (of one stage's layers) whose activations stage ``stage`` holds at its peak.

    Stage 0 is :func:`llmpar.cost.pipeline.in_flight_microbatches`. Later stages warm up less:
    1F1B and ZB-H1 stage i holds min(p − i, m) (Narayanan 2021 §2.2.1; Qi 2023 §3.1);
    interleaved stage i holds (2(p−i−1) + (v−1)p + 1) chunks of L/(pv) layers = p + (p−1−2i)/v
    micro-batches (Megatron-LM's warm-up count; = Korthikanti's p(1 + (p−1)/(pv)) at i = 0);
    GPipe m on every stage; DualPipe p + 1 on every device (DeepSeek-V3 Table 2). With pp = 1
    one micro-batch is alive at a time whatever the schedule.
    """
    s = np.asarray(schedule)
    p = np.asarray(pp, dtype=float)
    m_ = np.asarray(m, dtype=float)
    v_ = np.asarray(v, dtype=float)
    i = np.asarray(stage, dtype=float)
    first = np.asarray(in_flight_microbatches(schedule, pp, m, v), dtype=float)
    one_f_one_b = np.minimum(p - i, m_)
    interleaved = np.minimum(p + (p - 1.0 - 2.0 * i) / v_, m_)
    later = np.where(s == GPIPE, m_, np.where(s == INTERLEAVED, interleaved,
                                              np.where(s == DUALPIPE, first, one_f_one_b)))
    out = np.where(i == 0, first, later)
    return _out(np.where(p == 1, 1.0, out))


def logits_in_flight(schedule, pp, m):
    """Micro-batches whose logits the last stage holds: the last virtual stage runs each
    micro-batch's backward right after its forward (1F1B family, interleaved, DualPipe) -> 1;
    GPipe runs all m forwards first -> m (with pp > 1)."""
    return _out(np.where((np.asarray(schedule) == GPIPE) & (np.asarray(pp) > 1), np.asarray(m, dtype=float), 1.0))


def stage_span(layers: int, pp, stage):
    """(first layer index, layer count) of pipeline stage ``stage``.

    First and last stage sizes come from :mod:`llmpar.cost.pipeline` (Llama 3 §3.3.2: the
    shortfall p·ceil(L/p) − L is taken from the last, then the first stage, then the middle).
    Middle stages: the ceil(L/p)-layer stages first, then the short ones, so stage 1 is the
    middle stage with the most layers *and* the most micro-batches in flight (the worst case).
    """
    p = np.asarray(pp)
    i = np.asarray(stage)
    c = np.asarray(stage_layers(layers, pp))
    first = np.asarray(first_stage_layers(layers, pp))
    last = np.asarray(last_stage_layers(layers, pp))
    d = p * c - layers
    heavy_mid = (p - 2) - np.maximum(d - 2, 0)
    k = np.maximum(i - 1, 0)
    start_mid = first + np.minimum(k, heavy_mid) * c + np.maximum(k - heavy_mid, 0) * (c - 1)
    n_mid = np.where(k < heavy_mid, c, c - 1)
    start = np.where(i == 0, 0, np.where(i == p - 1, layers - last, start_mid))
    n = np.where(i == 0, first, np.where(i == p - 1, last, n_mid))
    return _out(start), _out(n)


def _dense_in_span(model: ModelSpec, start, n):
    """How many of the layers [start, start + n) have a dense FFN (all of them for a dense model).
    Slots L .. L+D-1 are the multi-token-prediction modules' blocks (``model.mtp_layers``), of the
    last layer's kind."""
    if not model.moe:
        return n
    cnt = np.zeros_like(np.asarray(n))
    dense = set(model.moe.dense_layers)
    if model.mtp_layers and (model.layers - 1) in dense:
        dense |= set(range(model.layers, model.layers + model.mtp_layers))
    for d in sorted(dense):
        cnt = cnt + ((np.asarray(start) <= d) & (d < np.asarray(start) + np.asarray(n)))
    return _out(cnt)



def first_moe_middle_stage(model: ModelSpec, pp):
    """The first middle stage holding none of a dense-first MoE model's dense layers (DeepSeek-V3:
    layers 0-2 dense), or None when the model has no such prefix. Where stage 1 still holds dense
    layers (lighter than MoE ones), this stage, with the most micro-batches in flight among the
    all-MoE middle stages, can be the most loaded one (DeepSeek-V3 at pp 32: stage 1 holds layers
    1-2, stage 2 the first MoE ones): the first stage i >= 1 whose :func:`stage_span` starts at or
    after the prefix's length, at most p - 2. Found per distinct pp (a planner chunk holds a few)."""
    moe = model.moe
    if moe is None or not moe.dense_layers:
        return None
    k = len(set(moe.dense_layers))
    if sorted(set(moe.dense_layers)) != list(range(k)):
        return None   # not a prefix (interleaved dense layers): stage 1 stands for the middle stages
    L = model.layers + model.mtp_layers
    p = np.asarray(pp)

    def first_at(q: int) -> int:
        for i in range(1, max(q - 1, 1)):
            if int(stage_span(L, q, i)[0]) >= k:
                return i
        return max(min(1, q - 1), q - 2) if q > 2 else 0
    values, inverse = np.unique(p, return_inverse=True)
    return _out(np.array([first_at(int(q)) for q in values])[inverse].reshape(p.shape))


def candidate_stages(pp, model: ModelSpec | None = None):
    """The stages that can be the most loaded (the others never exceed one of them):
    0 (embedding, most micro-batches in flight), 1 (the busiest middle stage: most layers and
    most in flight among middle stages), p−1 (LM head, logits), and the centre device
    p/2 − 1 (under DualPipe it may pair two full middle stages; it is needed without DualPipe too:
    leaving it out of the non-DualPipe layouts changed the memory verdict of 9,974 DeepSeek-V3
    layouts on 2,048 GPUs, checked 2026-12-02: at pp 32 stage 1 holds layers 1-2, both dense, the
    centre only MoE layers)."""
    p = np.asarray(pp)
    out = [np.zeros_like(p), np.minimum(1, p - 1), p - 1, np.maximum(p // 2 - 1, 0)]
    extra = first_moe_middle_stage(model, p) if model is not None else None
    if extra is not None:
        out.append(np.asarray(extra) + 0 * p)   # and, for a dense-first MoE model, its first all-MoE middle stage
    return out
