"""Pipeline parallelism: schedules, in-flight micro-batches, stage sizes and bubbles.

Every function here is array-polymorphic: the schedule code, pp, m and v may be Python numbers
or numpy arrays (one entry per candidate layout), so ``llmpar step`` and ``llmpar plan`` use the
same formulas. Schedules are integer codes, indices into :data:`llmpar.parallel.SCHEDULES`.

Notation (DESIGN.md): p pipeline stages, m micro-batches per step, v virtual stages (model
chunks per device, interleaved schedule only). Sources are given beside each formula and in
docs/pipeline.md.
"""

from __future__ import annotations

import numpy as np

from llmpar.parallel import SCHEDULES

GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB_H1, DUALPIPE = (SCHEDULES.index(s) for s in (
    "gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe"))


def _out(x):
    """0-d numpy results back to Python numbers, so scalar callers get scalars."""
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return x.item()
    if isinstance(x, np.generic):
        return x.item()
    return x


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

def stage_layers(layers, pp):
    """Transformer layers on the most-loaded stage: ceil(L/p).

    Uneven splits are valid (Llama 3, arXiv:2407.21783 §3.3.2: 126 layers on 16 stages, the
    first and last stages one layer short -> 8 on the busiest stage)."""
    L = np.asarray(layers)
    p = np.asarray(pp)
    return _out(-(-L // p))


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
