"""Time of the work a GPU does: matmuls (roofline with a shape-dependent efficiency) and
memory-bound element-wise ops (bytes moved at achieved HBM bandwidth).

Everything here is array-polymorphic: GEMM dimensions, byte counts and degrees may be numpy
arrays (one entry per candidate layout).

Sources
- Roofline: Williams, Waterman & Patterson, "Roofline", CACM 2009: time = max(FLOPs/peak,
  bytes/bandwidth); for the large GEMMs of LLM training the FLOP side dominates.
- GEMM efficiency curve (docs/architecture.md, GEMM efficiency): achieved/peak saturates with the smallest GEMM
  dimension; best-shape bf16 matmuls reach ~87 % of peak on A100 and ~80 % on H100 (ml-engineering
  MAMF measurements: S. Bekman, Machine Learning Engineering Open Book, "Maximum Achievable Matmul FLOPS"). Parameters live in the hardware profile
  (``gpu.gemm``) so ``llmpar calibrate gemm`` can replace them.
- Element-wise traffic of a transformer block: see :func:`layer_elementwise_bytes`.
"""

from __future__ import annotations

import numpy as np

from llmpar.specs.hardware import Hardware
from llmpar.specs.stack import per_gen


def gemm_efficiency(hw: Hardware, m, n, k, count=1):
    """Achieved/peak for ``count`` (m x k) @ (k x n) matmuls issued as one launch (a batched or
    grouped GEMM):  e_max * d/(d + d_half) * F/(F + F_half),  d = min(m, n, k), F = 2*m*n*k*count.

    d/(d + d_half) is a smooth stand-in for the roofline's memory side: the arithmetic intensity of
    a GEMM grows with its smallest dimension (Williams et al. 2009); F/(F + F_half) turns a fixed
    per-launch cost t0 = F_half/(peak*e_max) into an efficiency. Parameters: hardware profile
    ``gpu.gemm`` (docs/architecture.md, GEMM efficiency)."""
    g = hw.gpu.gemm
    d = np.minimum(np.minimum(m, n), k)
    work = 2.0 * m * n * k * count
    return g.max_efficiency * d / (d + g.half_dim) * work / (work + g.half_flops)


def gemm_time(hw: Hardware, dtype: str, m, n, k, count=1, factor=1.0):
    """Seconds for ``count`` matmuls of shape (m, n, k) in one launch:
    2*m*n*k*count / (peak * eff * factor); ``factor`` is the stack's achieved fraction of the
    hardware's GEMM curve (:func:`gemm_factor`)."""
    flops = 2.0 * m * n * k * count
    return flops / (hw.gpu.peak(dtype) * gemm_efficiency(hw, m, n, k, count) * factor)


# The layer GEMMs of cost/flops.py layer_gemms / head_gemms by the FP8 recipe's names
# (Transformer Engine runs its Linear modules in FP8; docs/stacks.md, "kernels.fp8").
FP8_GEMM_GROUPS = {
    "qkv": ("qkv", "q", "q_down", "q_up", "kv_down", "kv_up"),
    "proj": ("attn_out",),
    "fc1": ("mlp_up", "shared_up"),
    "fc2": ("mlp_down", "shared_down"),
    "experts": ("expert_up", "expert_down"),
    "lm_head": ("lm_head",),
}


def gemm_factor(hw: Hardware, stack) -> float:
    """The stack's achieved fraction of the hardware GEMM curve for this GPU generation
    (``kernels.gemm_efficiency``: sustained clocks under the power cap, interference from the
    communication kernels; docs/stacks.md)."""
    return per_gen(stack.kernels.gemm_efficiency, hw.gpu.generation)


def fp8_gemm_names(stack) -> set[str]:
    """GEMM names (cost/flops.py) that run in FP8 under the stack's recipe."""
    return {name for group in stack.kernels.fp8.gemms for name in FP8_GEMM_GROUPS[group]}


def linear_gemms_time(hw: Hardware, stack, dtype: str, gemms):
    """Forward time of the non-attention GEMMs of a layer (or the LM head), and the HBM bytes of
    the FP8 casts around them, forward and backward.

    With ``dtype='fp8'`` the GEMMs of the recipe (``kernels.fp8.gemms``) run at the FP8 peak times
    the shape efficiency times ``kernels.fp8.gemm_efficiency`` (an FP8 GEMM reaches a smaller
    fraction of its twice-as-high peak: its operands still stream through the same HBM/SMEM path;
    Transformer Engine FP8 GEMM benchmarks); the others run in BF16. Each FP8 GEMM casts its
    activation operand in forward (m*k elements) and its output gradient in backward (m*n
    elements), ``cast_bytes_per_element`` HBM bytes each (TE cast-transpose: read 2 B, write 1 B;
    the amax reduction is fused). Returns (forward_s, cast_bytes_fwd, cast_bytes_bwd).
    """
    g = gemm_factor(hw, stack)
    fp8 = dtype == "fp8"
    names = fp8_gemm_names(stack) if fp8 else set()
    rel = per_gen(stack.kernels.fp8.gemm_efficiency, hw.gpu.generation)
    cast = stack.kernels.fp8.cast_bytes_per_element
    t, cast_f, cast_b = 0.0, 0.0, 0.0
    for name, m, n, k, c in gemms:
        if name in names:
            t = t + gemm_time(hw, "fp8", m, n, k, c, g * rel)
            cast_f = cast_f + cast * m * k * c
            cast_b = cast_b + cast * m * n * c
        else:
            t = t + gemm_time(hw, "bf16" if dtype == "fp8" else dtype, m, n, k, c, g)
    return t, cast_f, cast_b


def attention_core_time(hw: Hardware, stack, dtype: str, core_gemms):
    """Forward and backward time of the attention core (QK^T, softmax, PV) of one layer.

    - ``eager`` kernel: the two batched GEMMs on the GEMM curve (x the stack's GEMM factor);
      backward = 2 x forward (input- and weight-side products); the s^2 softmax/dropout traffic is
      counted with the element-wise ops (:func:`layer_elementwise_bytes`, attention='standard').
    - fused kernels (flash-2/3, cuDNN, SDPA): FLOPs / (BF16 peak x the kernel's own achieved
      fraction, per GPU generation); backward does 2.5 x the forward FLOPs (5 matmuls against 2,
      recomputing P: Dao 2023, FlashAttention-2 §3.1-3.2) at ``backward_efficiency``.
    ``core_gemms`` carry the causal fraction the kernel computes in their counts.
    Returns (forward_s, backward_s).
    """
    att = stack.kernels.attention
    if att.kernel == "eager":
        g = gemm_factor(hw, stack)
        dt = "bf16" if dtype == "fp8" else dtype
        t = sum(gemm_time(hw, dt, m, n, k, c, g) for _, m, n, k, c in core_gemms)
        return t, 2.0 * t
    flops = sum(2.0 * m * n * k * c for _, m, n, k, c in core_gemms)
    peak = hw.gpu.peak("bf16" if dtype == "fp8" else dtype)
    e_fwd, e_bwd = attention_efficiency(hw, stack)
    return flops / (peak * e_fwd), 2.5 * flops / (peak * e_bwd)


def attention_efficiency(hw: Hardware, stack):
    """The fused attention kernel's achieved fractions of the dense peak, (forward, backward): the
    stack's value for this GPU generation, capped at the GPU's best measured GEMM fraction
    (``gpu.gemm.max_efficiency``, MAMF). A fused kernel runs its QK^T and PV products on the same
    matrix units as a GEMM, with softmax work between them, so it cannot beat the best plain GEMM
    (FlashAttention-3 reaches 740 of H100's 989 TFLOP/s forward, below its MAMF 794.5: Shah et al.
    2024 §4.1; ml-engineering MAMF table). The cap binds where a stack's value, often a default,
    exceeds a GPU's MAMF: among the shipped profiles only MI300X/MI325X (0.511/0.600 against the
    0.6 forward default)."""
    att, gen, cap = stack.kernels.attention, hw.gpu.generation, hw.gpu.gemm.max_efficiency
    return min(per_gen(att.forward_efficiency, gen), cap), min(per_gen(att.backward_efficiency, gen), cap)


def memory_bound_time(hw: Hardware, nbytes):
    """Seconds to move ``nbytes`` through HBM at the achieved bandwidth (datasheet x efficiency)."""
    return nbytes / (hw.gpu.memory_bandwidth * hw.gpu.memory_efficiency)


def layer_elementwise_bytes(model, b, s, tp, sp, cp=1, attention: str = "flash", dtype_bytes: float = 2.0, etp=None):
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
    shared experts), plus the permute/unpermute copies 2 * 2*T*top_k*h*e (x etp/tp: under MoE
    parallel folding each expert-TP group permutes the tokens it gathered, etp/tp of them).
    Backward moves about twice the forward traffic (reads output grads and saved inputs, writes
    input grads): step.py applies that factor.
    """
    h = model.hidden
    T = b * s / cp
    e = dtype_bytes
    resid_split = np.where(sp, tp, 1)
    drop = 1.0 if model.dropout else 0.0
    # residual-stream ops: 2 norms (4 with sandwich norms: Gemma 2/3) + 2 (bias-)(dropout-)residual adds
    norms = 4 if model.sandwich_norms else 2
    stream = (norms * 2 * T * h * e + 2 * (3 * T * h * e + drop * T * h)) / resid_split
    # MLP activation function
    if model.moe is not None:
        moe = model.moe
        f_e = moe.expert_ffn_hidden
        act_per_token = (3 * e if model.ffn_type == "swiglu" else 2 * e) * (moe.top_k * f_e + moe.shared_experts * f_e)
        permute = 2 * 2 * T * moe.top_k * h * e * (tp if etp is None else etp) / tp
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
