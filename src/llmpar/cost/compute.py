"""Time of the work a GPU does: matmuls (roofline with a shape-dependent efficiency) and
memory-bound element-wise ops (bytes moved at achieved HBM bandwidth).

Everything here is array-polymorphic: GEMM dimensions, byte counts and degrees may be numpy
arrays (one entry per candidate layout).

Sources
- Roofline: Williams, Waterman & Patterson, "Roofline", CACM 2009: time = max(FLOPs/peak,
  bytes/bandwidth); for the large GEMMs of LLM training the FLOP side dominates.
- GEMM efficiency curve (DESIGN.md, GEMM efficiency): achieved/peak saturates with the smallest GEMM
  dimension; best-shape bf16 matmuls reach ~87 % of peak on A100 and ~80 % on H100 (ml-engineering
  MAMF measurements, in ../shared/validation/public.yaml). Parameters live in the hardware profile
  (``gpu.gemm``) so ``llmpar calibrate gemm`` can replace them.
- Element-wise traffic of a transformer block: see :func:`layer_elementwise_bytes`.
"""

from __future__ import annotations

import numpy as np

from llmpar.specs.hardware import Hardware


def gemm_efficiency(hw: Hardware, m, n, k, count=1):
    """Achieved/peak for ``count`` (m x k) @ (k x n) matmuls issued as one launch (a batched or
    grouped GEMM):  e_max * d/(d + d_half) * F/(F + F_half),  d = min(m, n, k), F = 2*m*n*k*count.

    d/(d + d_half) is a smooth stand-in for the roofline's memory side: the arithmetic intensity of
    a GEMM grows with its smallest dimension (Williams et al. 2009); F/(F + F_half) turns a fixed
    per-launch cost t0 = F_half/(peak*e_max) into an efficiency. Parameters: hardware profile
    ``gpu.gemm`` (DESIGN.md, GEMM efficiency)."""
    g = hw.gpu.gemm
    d = np.minimum(np.minimum(m, n), k)
    work = 2.0 * m * n * k * count
    return g.max_efficiency * d / (d + g.half_dim) * work / (work + g.half_flops)


def gemm_time(hw: Hardware, dtype: str, m, n, k, count=1):
    """Seconds for ``count`` matmuls of shape (m, n, k) in one launch: 2*m*n*k*count / (peak * eff)."""
    flops = 2.0 * m * n * k * count
    return flops / (hw.gpu.peak(dtype) * gemm_efficiency(hw, m, n, k, count))


def memory_bound_time(hw: Hardware, nbytes):
    """Seconds to move ``nbytes`` through HBM at the achieved bandwidth (datasheet x efficiency)."""
    return nbytes / (hw.gpu.memory_bandwidth * hw.gpu.memory_efficiency)


def layer_elementwise_bytes(model, b, s, tp, sp, cp=1, attention: str = "flash", dtype_bytes: float = 2.0):
    """HBM bytes moved by the memory-bound ops of one transformer layer, forward, per GPU.

    Counted per op as (bytes read + bytes written), one pass each, with Megatron's fusions
    (bias+GeLU, bias+dropout+residual-add, scale+mask+softmax) — the same op list as the activation
    terms of Korthikanti et al. 2022 §4.1, read here as traffic instead of storage:

    T = b*s/cp tokens on this GPU; e = bytes per element; ops on the residual stream (norms,
    dropout, residual adds) are split by tp only under sequence parallelism (else every TP rank
    repeats them); ops inside attention/MLP are split by tp.

    GPT block (layernorm, GeLU, dropout):
      2 x layernorm         2 * (T*h*e read + T*h*e written)
      2 x bias-dropout-add  2 * (2*T*h*e read + T*h*e written + T*h mask byte)
      bias-GeLU             T*f/tp*e read + T*f/tp*e written
      standard attention    scale-mask-softmax 2*e and dropout (2*e + 1) per score element,
                            b*(a/tp)*(s/cp)*s scores   (flash attention keeps them on chip)
    Llama block (RMSNorm, SwiGLU, no dropout, RoPE):
      2 x RMSNorm 4*T*h*e; 2 x residual add 6*T*h*e; SwiGLU T*f/tp*3e; RoPE 2e*T*(a+kv)*d/tp
    MoE layers replace the dense FFN traffic with top_k tokens through experts of size f_e (and the
    shared experts), plus the permute/unpermute copies 2 * 2*T*top_k*h*e.
    Backward moves about twice the forward traffic (reads output grads and saved inputs, writes
    input grads): step.py applies that factor.
    """
    h = model.hidden
    T = b * s / cp
    e = dtype_bytes
    resid_split = np.where(sp, tp, 1)
    drop = 1.0 if model.dropout else 0.0
    # residual-stream ops: 2 norms + 2 (bias-)(dropout-)residual adds
    stream = (2 * 2 * T * h * e + 2 * (3 * T * h * e + drop * T * h)) / resid_split
    # MLP activation function
    if model.moe is not None:
        moe = model.moe
        f_e = moe.expert_ffn_hidden
        act_per_token = (3 * e if model.ffn_type == "swiglu" else 2 * e) * (moe.top_k * f_e + moe.shared_experts * f_e)
        permute = 2 * 2 * T * moe.top_k * h * e
        moe_ffn = T * act_per_token / tp + permute
        dense_ffn = T * (3 * e if model.ffn_type == "swiglu" else 2 * e) * model.ffn_hidden / tp
        frac_moe = model.moe_layers / model.layers
        ffn = frac_moe * moe_ffn + (1 - frac_moe) * dense_ffn
    else:
        ffn = T * (3 * e if model.ffn_type == "swiglu" else 2 * e) * model.ffn_hidden / tp
    rope = 0.0
    if model.position == "rope":
        rope = 2 * e * T * (model.heads + model.n_kv_heads) * model.d_head / tp
    scores = 0.0
    if attention == "standard":
        scores = b * (model.heads / tp) * (s / cp) * s * (2 * e + drop * (2 * e + 1))
    return stream + ffn + rope + scores
