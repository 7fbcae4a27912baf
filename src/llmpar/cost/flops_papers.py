"""The papers' closed forms for training FLOPs (GPT blocks: f = 4h, MHA, matmul FLOPs only).

Narayanan et al. 2021 eq. 3, Korthikanti et al. 2022 eqs. 7 and 8, PaLM's 6N + 12·L·H·Q·T with N
the activated matmul weights per token. The general counts of :mod:`llmpar.cost.flops` are
checked against them (docs/flops.md, "The papers' closed forms"; tests/test_flops.py); nothing
in the time model uses them. Array-polymorphic in B, s, L, h, V.
"""

from __future__ import annotations

import numpy as np

from llmpar.cost.arrays import scalar_out as _out
from llmpar.cost.flops import CAUSAL_FULL, attention_fraction, head_flops, layer_flops
from llmpar.cost.params import attention_head_dims
from llmpar.specs.model import ModelSpec


def narayanan_eq3_flops(B, s, L, h, V):
    """Narayanan et al. 2021 (arXiv:2104.04473) App., eq. 3: FLOPs per iteration with full
    activation recomputation (4 forward-equivalents for the layers, 3 for the LM head):
    96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h))."""
    return _out(96.0 * B * s * L * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * L * h)))


def korthikanti_eq7_flops(B, s, L, h, V):
    """Korthikanti et al. 2022 (arXiv:2205.05198) §6, eq. 7, model FLOPs per iteration:
    72·B·s·L·h²·(1 + s/(6h) + V/(12·h·L))."""
    return _out(72.0 * B * s * L * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * h * L)))


def korthikanti_eq8_flops(B, s, L, h, V):
    """Korthikanti et al. 2022 §6, eq. 8, hardware FLOPs with selective recompute:
    72·B·s·L·h²·(1 + s/(3h) + V/(12·h·L)). It adds 12·B·s²·L·h, three times the attention
    core's forward 4·B·s²·L·h that selective recompute re-runs; use it only to compare with
    figures computed with it (docs/architecture.md)."""
    return _out(72.0 * B * s * L * h * h * (1.0 + s / (3.0 * h) + V / (12.0 * h * L)))


def matmul_params_per_token(model: ModelSpec) -> int:
    """N of PaLM's 6N: the weights of every matmul one token goes through — attention
    projections, the dense FFN or the router + top_k routed + shared experts, and the LM head
    (V·h, counted even when tied). Not counted: the embedding lookup, norms, biases, and the
    routed experts a token is not sent to (so for MoE this is the *activated* count)."""
    per_layer_dense = sum(layer_flops(model, 1, 1, moe=False, causal=0.0).values())
    per_layer_moe = sum(layer_flops(model, 1, 1, moe=True, causal=0.0).values()) if model.moe else 0
    total = model.dense_layers * per_layer_dense + model.moe_layers * per_layer_moe + head_flops(model, 1, 1)
    return int(round(total / 2.0))


def palm_flops_per_token(model: ModelSpec, s):
    """Chowdhery et al. 2022 (PaLM) App. B: 6·N + 12·L·H·Q·T per token (H heads of width Q,
    T = sequence), N = :func:`matmul_params_per_token` (activated, non-embedding, LM head
    included). The attention term generalises to 6·L·s·a·(d_qk + d_v) (MLA: 192 + 128), which is
    12·L·h·s when a·d = h; sliding-window layers count their band (:func:`attention_fraction`).
    Equals 3 x :func:`forward_flops_per_sequence` / s."""
    d_qk, d_v = attention_head_dims(model)
    att = 6.0 * model.layers * np.asarray(s) * model.heads * (d_qk + d_v) * attention_fraction(model, s, CAUSAL_FULL)
    return _out(6.0 * matmul_params_per_token(model) + att)
