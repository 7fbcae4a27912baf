"""One transformer layer's compute pieces, per micro-batch on one GPU of the critical stage.

The parts :func:`llmpar.cost.step._layer_compute` adds up (docs/time-model.md, step 1 of
cost/step.py's module doc): the layer's GEMMs after the TP/CP/EP split (cost/flops.py
``layer_gemms``) timed by cost/compute.py, what selective recompute and the recompute modules
re-run, the LoRA adapters' paths and QLoRA's dequantisation (cost/finetune.py), and the per-layer
mix of dense and MoE layers. Array-polymorphic, as cost/step.py.
"""

from __future__ import annotations

import numpy as np

from llmpar.cost import compute, flops
from llmpar.parallel import RECOMPUTE, Parallel, Settings
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec

REC_NONE, REC_SELECTIVE, REC_FULL = (RECOMPUTE.index(r) for r in ("none", "selective", "full"))


def split_layer_gemms(model: ModelSpec, par: Parallel, moe: bool, causal):
    """(attention-core GEMMs, linear GEMMs) of one layer and micro-batch after the TP/CP/EP split
    (cost/flops.py ``layer_gemms``)."""
    gemms = flops.layer_gemms(model, par.micro_batch, par.seq, par.tp, par.cp, moe=moe, ep=par.ep,
                              etp=par.expert_tp, causal=causal)
    core = [g for g in gemms if g[0] in flops.ATTENTION_CORE]
    return core, [g for g in gemms if g[0] not in flops.ATTENTION_CORE]


def layer_parts(model: ModelSpec, hw: Hardware, par: Parallel, settings: Settings, moe: bool):
    """Per layer, per micro-batch, one GPU: forward time of the linear GEMMs, forward and backward
    time of the attention core, and the FP8 cast bytes forward and backward (cost/compute.py)."""
    stack = settings.stack
    att = stack.kernels.attention
    skip = att.causal_skip and settings.attention == "flash"
    causal = flops.causal_block_fraction(par.seq) if skip else flops.CAUSAL_FULL
    core, linear = split_layer_gemms(model, par, moe, causal)
    g_lin, cast_f, cast_b = compute.linear_gemms_time(hw, stack, settings.dtype, linear)
    core_f, core_b = compute.attention_core_time(hw, stack, settings.dtype, core)
    # what selective recompute re-runs under the stack's policy (flops.selective_fractions): the
    # attention core (core_sel), or torchtitan's every second matmul (g_sel; op = 1: the layer's
    # element-wise ops re-run too)
    policy = settings.selective_policy
    frac = flops.selective_fractions(model, moe, policy, settings.attention)
    # op = 1: torchtitan's op-level SAC re-runs the layer's element-wise ops as well (recompute
    # modules price theirs apart: module_elementwise_time)
    op = 0.0 if isinstance(policy, tuple) or set(frac) == set(flops.ATTENTION_CORE) else 1.0
    rerun = [(n, m, nn, k, c * frac[n]) for n, m, nn, k, c in linear if frac.get(n, 0.0)]
    g_sel = compute.linear_gemms_time(hw, stack, settings.dtype, rerun)[0] if rerun else 0.0
    core_sel = core_f * frac.get(flops.ATTENTION_CORE[0], 0.0)
    return g_lin, core_f, core_b, cast_f, cast_b, g_sel, core_sel, op


def module_elementwise_time(model, hw, par, settings, frac_moe):
    """Element-wise work the recompute modules of ``settings.selective_policy`` redo per layer and
    micro-batch: each tensor a module dropped (norm outputs, the MLA up-projections' RoPE, the
    SwiGLU outputs; cost/activations.py ``module`` tags, the attention core's own aside) is
    rebuilt by reading an input about its size and writing it again: 2 x its bytes through HBM
    (an estimate; a SwiGLU reads two inputs). The GEMMs they re-run are in g_sel."""
    from llmpar.cost import activations as A

    drop = A.dropped_modules(settings.selective_policy) - {"core_attn"}

    def dropped(moe_layer):
        return sum(np.asarray(A.term_bytes(t, par), dtype=float)
                   for t in A.stack_activation_terms(model, moe_layer, settings) if t.module in drop)

    b_dense = dropped(False)
    b_moe = dropped(True) if model.moe is not None else b_dense
    return compute.memory_bound_time(hw, 2.0 * ((1.0 - frac_moe) * b_dense + frac_moe * b_moe))


def mix_layers(frac_moe, dense, moe):
    """Per-layer average of dense and MoE layer quantities by their share of the layers."""
    return tuple((1 - frac_moe) * d + frac_moe * m for d, m in zip(dense, moe))


def adapter_time(model, hw, par, settings, e, frac_moe):
    """(forward, backward) time of one layer's LoRA adapter paths, one micro-batch
    (cost/finetune.py): FLOPs at the peak (backward 2x) plus bytes at HBM bandwidth."""
    from llmpar.cost import finetune as FT

    T = np.asarray(par.micro_batch, dtype=float) * np.asarray(par.seq, dtype=float)
    r, tg = settings.lora_rank, settings.lora_targets

    def mix(fn, **kw):
        return ((1.0 - frac_moe) * fn(model, False, tg, r, **kw)
                + frac_moe * (fn(model, True, tg, r, **kw) if model.moe else 0.0))

    t_fl = T * mix(FT.adapter_flops_per_token) / hw.gpu.peak(settings.dtype)
    fwd = t_fl + compute.memory_bound_time(hw, T * mix(FT.adapter_bytes_per_token, e=e))
    bwd = 2.0 * t_fl + compute.memory_bound_time(hw, T * mix(FT.adapter_bytes_per_token, e=e, backward=True))
    return fwd, bwd


def dequant_time(model, hw, settings, frac_moe):
    """QLoRA: one pass of dequantising a layer's NF4 linear weights to 16 bits (0 under LoRA)."""
    if settings.finetune != "qlora":
        return 0.0
    from llmpar.cost import finetune as FT

    lin = sum(i * o * c for _, i, o, c in FT.linear_shapes(model, False))
    if model.moe:
        lin = (1.0 - frac_moe) * lin + frac_moe * sum(i * o * c for _, i, o, c in FT.linear_shapes(model, True))
    return compute.memory_bound_time(hw, lin * (FT.NF4_BYTES + 2.0))
