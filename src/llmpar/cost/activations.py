"""Saved activations as tables of named terms (docs/memory.md, Activations).

A term is one tensor a layer saves for its backward, per token: Korthikanti et al. 2022's
§4.1 accounting generalised to Llama blocks, MoE and MLA (the ``fused`` Megatron/TE set), and
the PyTorch-eager set (:mod:`llmpar.cost.activations_eager`). The tables aggregate into a few
per-token sums that the vectorised core multiplies by b·s/c and divides by t. The first and last
pipeline stages' own terms (token ids, logits, ...) are cost/activations_ends.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from llmpar.cost.arrays import scalar_out as _out
from llmpar.cost.states import FP8_TILE_BYTES
from llmpar.parallel import Parallel
from llmpar.specs.model import ModelSpec

from llmpar.cost.act_term import SRC_KORTH, ActTerm  # noqa: F401 (one saved tensor: its own room)
SRC_FLASH = "Dao et al. 2022 (FlashAttention, arXiv:2205.14135) §3.1: saves O and the softmax statistics"
SRC_SWIGLU = "Shazeer 2020 (arXiv:2002.05202) eq. 6; Megatron-LM bias_swiglu saves [gate, up]"
SRC_MOE = "Lepikhin et al. 2020 (GShard); Megatron-Core MoE alltoall dispatcher (tokens gathered over TP, k copies per token)"
SRC_MLA = "DeepSeek-V2 (arXiv:2405.04434) §2.1.2-2.1.3; Megatron-Core MLA (down-projections replicated over TP)"


CHECKPOINT_SOURCE = "Korthikanti et al. 2022 §5 / Table 2 (full recompute keeps the layer input, 2sbh)"


def checkpoint_term(model: ModelSpec) -> ActTerm:
    """Full recompute: only the layer input survives (Table 2: 2sbh; with SP, Megatron keeps the
    sequence-parallel shard, 2sbh/t)."""
    return ActTerm("layer input (full-recompute checkpoint)", 2.0, model.hidden, "h",
                   tp=False, sp=True, selective=True, source=CHECKPOINT_SOURCE)


def _attention_dims(model: ModelSpec) -> dict[str, int]:
    a = model.heads
    if model.mla is not None:
        mla = model.mla
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        return {"q": a * qk, "k": a * qk, "v": a * mla.v_head_dim, "o": a * mla.v_head_dim}
    d, kv = model.d_head, model.n_kv_heads
    return {"q": a * d, "k": kv * d, "v": kv * d, "o": a * d}


SRC_TITAN_SAC = ("torchtitan parallelize_llama.py (9dec370) op-level SAC: _save_list = {aten.mm, SDPA flash/efficient, "
                 "reduce_scatter, abs, max}; 'Saves output of all compute ops, except every second mm' (mm count "
                 "per block and pass); torch.utils.checkpoint.create_selective_checkpoint_contexts")


def op_sac_applies(model: ModelSpec, moe_layer: bool, attention: str) -> bool:
    """Whether torchtitan's op-level SAC set (:func:`torchtitan_op_sac_terms`) describes this layer:
    a dense, non-MLA block with a fused SDPA kernel — the Llama block torchtitan wraps. MoE and MLA
    layers (not in torchtitan 9dec370) and the eager 'standard' attention keep the attention-core
    selective set."""
    return not (moe_layer and model.moe) and model.mla is None and attention == "flash"


def torchtitan_op_sac_terms(model: ModelSpec) -> list[ActTerm]:
    """What one Llama block saves under torchtitan's op-level selective activation checkpointing
    (``activation_checkpoint.mode = selective``, ``selective_ac_option = op``, its default).

    The policy saves the outputs of aten.mm, SDPA and reduce_scatter, "except every second mm",
    counting mm calls per block in forward order: wq (1), wk (2), wv (3), wo (4), then w1 (5),
    w3 (6), w2 (7) for SwiGLU (``w2(silu(w1 x) * w3 x)``) or w1 (5), w2 (6) for a GeLU MLP. Saved:
    the checkpoint's input (the layer input), wq's and wv's outputs, SDPA's output and its fp32
    logsumexp, w1's output and, for SwiGLU, w2's (under TP its local partial sums: h per token on
    every rank). Everything else — norms, RoPE, silu·mul, wk, wo, w3 (GeLU: w2) — re-runs in
    backward (:func:`llmpar.cost.flops.recompute_gemms`). Under TP the saved reduce-scatter
    outputs (≤ 2h/t per token) are not counted. Matmul outputs are bf16 also with float8
    (torchao's float8 linear dispatches aten.mm on its tensor subclass; the policy counts it).
    """
    h, a = model.hidden, model.heads
    dims = _attention_dims(model)
    f = model.ffn_hidden
    T = [
        ActTerm("layer input (SAC checkpoint input)", 2.0, h, "h", tp=False, sp=True, selective=True,
                source=SRC_TITAN_SAC, only_selective=True),
        ActTerm("wq output (matmul 1, saved)", 2.0, dims["q"], "a·d", tp=True, sp=False, selective=True,
                source=SRC_TITAN_SAC, only_selective=True),
        ActTerm("wv output (matmul 3, saved)", 2.0, dims["v"], "kv·d", tp=True, sp=False, selective=True,
                source=SRC_TITAN_SAC, only_selective=True),
        ActTerm("SDPA output (saved)", 2.0, dims["o"], "a·d", tp=True, sp=False, selective=True,
                source=SRC_TITAN_SAC, only_selective=True),
        ActTerm("SDPA logsumexp (fp32, saved with its output)", 4.0, a, "a", tp=True, sp=False, selective=True,
                source=SRC_TITAN_SAC + "; " + SRC_FLASH, only_selective=True),
        ActTerm("w1 output (matmul 5, saved)", 2.0, f, "f", tp=True, sp=False, selective=True,
                source=SRC_TITAN_SAC, only_selective=True),
    ]
    if model.ffn_type == "swiglu":
        T.append(ActTerm("w2 output (matmul 7, saved; local partial sums under TP)", 2.0, h, "h", tp=False, sp=False,
                         selective=True, source=SRC_TITAN_SAC, only_selective=True))
    return T


SRC_FP8_CACHE = ("DeepSeek-V3 (arXiv:2412.19437) §3.3.3 'Low-Precision Activation': the inputs of the MoE SwiGLU "
                 "are cached in FP8 with the fine-grained (1x128 tile) quantization, the output recomputed")


def dropped_modules(policy: tuple) -> set:
    """The term tags a Megatron-Core recompute-module list drops: ``moe`` (the whole MoE layer,
    normal checkpointing) takes its shared experts and expert activations with it."""
    drop = set(policy)
    if "moe" in drop:
        drop |= {"shared_experts", "moe_act"}
    return drop


EXPERT_OUTPUTS_TERM = "expert outputs (for the routing-weight gradient)"


def stack_activation_terms(model: ModelSpec, moe_layer: bool, settings) -> list[ActTerm]:
    """:func:`activation_terms` with the saved set of ``settings.stack`` (memory.activations,
    memory.norm_kernel): the fused Megatron/TE set, or the PyTorch-eager one. With
    ``memory.selective_recompute = torchtitan-op`` the selective set is torchtitan's op-level SAC
    (:func:`torchtitan_op_sac_terms`) where it applies (:func:`op_sac_applies`): the stack's own
    terms stay the no-recompute set, and only the policy's terms are kept under selective."""
    mem = settings.stack.memory
    terms = activation_terms(model, moe_layer, settings.attention, settings.dtype,
                             saved=mem.activations, norm_kernel=mem.norm_kernel)
    if settings.dtype == "fp8" and settings.stack.kernels.fp8.cache_swiglu_input_fp8:
        # DeepSeek-V3 §3.3.3: the MoE SwiGLU's input cached in FP8, 1x128 tiles with an fp32 scale
        # each: 1 + 4/128 = 1.03125 B per element (the output is recomputed: recompute module moe_act)
        terms = [replace(t, coef=FP8_TILE_BYTES, source=SRC_FP8_CACHE)
                 if t.name == "experts gate and up outputs (SwiGLU input)" else t for t in terms]
    if mem.moe_probs_in_activation:
        # Megatron-Core's grouped experts apply the routing weights inside the activation
        # (experts.py TEGroupedMLP: weighted_bias_swiglu_impl(..., permuted_probs)) and the
        # all-to-all dispatcher's combine unpermutes without probs (token_dispatcher.py
        # combine_postprocess): the weights' gradient comes from the activation's own backward, on
        # its saved input, so the experts' outputs are not kept
        terms = [t for t in terms if t.name != EXPERT_OUTPUTS_TERM]
    policy = settings.selective_policy
    if isinstance(policy, tuple):
        # Megatron-Core --recompute-modules: selective keeps every term no listed module drops
        drop = dropped_modules(policy)
        return [replace(t, selective=t.module not in drop) for t in terms]
    if policy == "torchtitan-op" and op_sac_applies(model, moe_layer, settings.attention):
        terms = [replace(t, selective=False) for t in terms] + torchtitan_op_sac_terms(model)
    return terms


def activation_terms(model: ModelSpec, moe_layer: bool, attention: str, dtype: str = "bf16", *,
                     saved: str = "fused", norm_kernel: str | None = None) -> list[ActTerm]:
    """The tensors one transformer layer saves for backward, as named terms.

    GPT block (LayerNorm, GeLU 4h, dropout, standard attention) reproduces Korthikanti Table 2:
    attention 11sbh + 5as²b, MLP 19sbh, norms 4sbh = sbh(34 + 5as/h). Llama blocks: RMSNorm,
    SwiGLU (gate and up outputs 4sbf, product 2sbf), GQA's smaller K and V, no dropout; flash
    attention drops the s² terms and keeps only the softmax statistics (fp32, per query and
    head). MoE blocks: router probabilities, k dispatched copies per token through experts of
    size expert_ffn, shared experts. MLA: the compressed latents and the decompressed K/V.
    With ``dtype='fp8'`` the inputs of linear layers are saved in fp8 (1 byte), as Transformer
    Engine does; everything else stays 16-bit.

    ``saved='eager'``: the PyTorch-eager set of the same block (:mod:`llmpar.cost.activations_eager`);
    ``norm_kernel`` overrides the norms' set alone (None: as ``saved``).
    """
    if saved == "eager" or norm_kernel == "eager":
        from llmpar.cost.activations_eager import eager_terms

        fused = activation_terms(model, moe_layer, attention, dtype)
        return eager_terms(fused, model, block=saved == "eager", norms=(norm_kernel or saved) == "eager")
    g = 1.0 if dtype == "fp8" else 2.0     # bytes of a saved linear-layer input
    gsrc = SRC_KORTH + ("; fp8 GEMM input (Transformer Engine)" if dtype == "fp8" else "")
    norm = "LayerNorm" if model.norm == "layernorm" else "RMSNorm"
    return (_attention_block_terms(model, attention, g, gsrc, norm)
            + _mlp_block_terms(model, moe_layer, g, gsrc, norm))


def _attention_block_terms(model: ModelSpec, attention: str, g: float, gsrc: str, norm: str) -> list[ActTerm]:
    """The attention block's saved tensors: norm input, projection inputs, Q/K/V, the softmax's."""
    h, a = model.hidden, model.heads
    std = attention == "standard"
    drop = bool(model.dropout)
    dims = _attention_dims(model)
    T: list[ActTerm] = []
    add = T.append
    add(ActTerm(f"{norm} 1 input", 2.0, h, "h", tp=False, sp=True, selective=True))
    if model.mla is None:
        add(ActTerm("QKV projection input", g, h, "h", tp=False, sp=True, selective=True, source=gsrc,
                    module="layernorm"))
    else:
        T += _mla_latent_terms(model, g, gsrc)
    qsrc = SRC_KORTH if model.mla is None else SRC_MLA
    up = "mla_up_proj" if model.mla is not None else None     # MLA's Q, K, V are the up-projections' outputs
    add(ActTerm("Q", 2.0, dims["q"], "a·d", tp=True, sp=False, selective=True, source=qsrc, module=up))
    add(ActTerm("K", 2.0, dims["k"], "kv·d" if model.mla is None else "a·d", tp=True, sp=False, selective=True,
                source=qsrc, module=up))
    add(ActTerm("V", 2.0, dims["v"], "kv·d" if model.mla is None else "a·d_v", tp=True, sp=False, selective=True,
                source=qsrc, module=up))
    if std:
        add(ActTerm("softmax output (QKᵀ scores)", 2.0, a, "a·s", tp=True, sp=False, selective=False, s2=True,
                    module="core_attn"))
        if drop:
            add(ActTerm("attention-dropout mask", 1.0, a, "a·s", tp=True, sp=False, selective=False, s2=True,
                        module="core_attn"))
            add(ActTerm("attention-dropout output", 2.0, a, "a·s", tp=True, sp=False, selective=False, s2=True,
                        module="core_attn"))
    else:
        add(ActTerm("softmax statistics (fp32 logsumexp)", 4.0, a, "a", tp=True, sp=False, selective=False,
                    source=SRC_FLASH, module="core_attn"))
    add(ActTerm("attention output (output-projection input)", g, dims["o"], "a·d", tp=True, sp=False,
                selective=True, source=gsrc if std else gsrc + "; " + SRC_FLASH))
    if drop:
        add(ActTerm("attention residual dropout mask", 1.0, h, "h", tp=False, sp=True, selective=True))
    if model.sandwich_norms:    # Gemma 2/3 post_attention_layernorm: saves the attention output it normalises
        add(ActTerm(f"{norm} post-attention input", 2.0, h, "h", tp=False, sp=True, selective=True))
    return T


def _mla_latent_terms(model: ModelSpec, g: float, gsrc: str) -> list[ActTerm]:
    """MLA's down-projection input and its compressed query and KV latents (before and after their norms)."""
    h = model.hidden
    mla = model.mla
    T = [ActTerm("MLA down-projection input", g, h, "h", tp=False, sp=True, selective=True, source=gsrc,
                 module="layernorm")]
    if mla.q_lora_rank is not None:
        T.append(ActTerm("MLA query latent c_Q (norm input)", 2.0, mla.q_lora_rank, "d_c'", tp=False, sp=False,
                         selective=True, source=SRC_MLA))
        T.append(ActTerm("MLA query latent, normalised (up-projection input)", g, mla.q_lora_rank, "d_c'",
                         tp=False, sp=False, selective=True, source=SRC_MLA))
    T.append(ActTerm("MLA KV latent c_KV + rope key (norm input)", 2.0, mla.kv_lora_rank + mla.qk_rope_head_dim,
                     "d_c+d_R", tp=False, sp=False, selective=True, source=SRC_MLA))
    T.append(ActTerm("MLA KV latent, normalised (up-projection input)", g, mla.kv_lora_rank, "d_c",
                     tp=False, sp=False, selective=True, source=SRC_MLA))
    return T


def _ffn_terms(model: ModelSpec, g: float, label: str, f: int, unit: str, mult: int = 1, src: str = SRC_KORTH,
               module=None, act=None) -> list[ActTerm]:
    """An FFN's two saved tensors: SwiGLU's input (gate and up) and output, or GeLU's input and output."""
    # module: the recompute module that drops the whole FFN (mlp, moe, shared_experts); act: the
    # one that drops only the activation's output (moe_act for the routed experts)
    if model.ffn_type == "swiglu":
        return [ActTerm(f"{label} gate and up outputs (SwiGLU input)", 2.0, 2 * f * mult, f"2{unit}",
                        tp=True, sp=False, selective=True, source=SRC_SWIGLU if src == SRC_KORTH else src,
                        module=module),
                ActTerm(f"{label} SwiGLU output (down-projection input)", g, f * mult, unit,
                        tp=True, sp=False, selective=True, source=SRC_SWIGLU if src == SRC_KORTH else src,
                        module=act or module)]
    return [ActTerm(f"{label} GeLU input (FC1 output)", 2.0, f * mult, unit, tp=True, sp=False, selective=True,
                    source=src, module=module),
            ActTerm(f"{label} GeLU output (FC2 input)", g, f * mult, unit, tp=True, sp=False, selective=True,
                    source=src, module=act or module)]


def _mlp_block_terms(model: ModelSpec, moe_layer: bool, g: float, gsrc: str, norm: str) -> list[ActTerm]:
    """The MLP (or MoE) block's saved tensors: norm input, router and dispatch, the FFNs'."""
    h = model.hidden
    drop = bool(model.dropout)
    T: list[ActTerm] = []
    add = T.append
    add(ActTerm(f"{norm} 2 input", 2.0, h, "h", tp=False, sp=True, selective=True))
    if moe_layer and model.moe:
        moe = model.moe
        k = moe.top_k
        # the MoE layer's input (the pre-MLP norm's output) is the moe module's checkpoint input
        add(ActTerm("router and dispatch input", g, h, "h", tp=False, sp=True, selective=True, source=SRC_MOE,
                    module="layernorm"))
        add(ActTerm("router probabilities (fp32)", 4.0, moe.experts, "E", tp=False, sp=True, selective=True,
                    source=SRC_MOE, module="moe"))
        add(ActTerm(f"expert inputs ({k} dispatched copies per token)", g, k * h, "k·h", tp=False, sp=False,
                    selective=True, source=SRC_MOE, etp=True, module="moe"))
        T += _ffn_terms(model, g, "experts", moe.expert_ffn_hidden, "k·f_e", k, SRC_MOE, module="moe", act="moe_act")
        add(ActTerm(EXPERT_OUTPUTS_TERM, 2.0, k * h, "k·h", tp=False, sp=True,
                    selective=True, source=SRC_MOE, module="moe"))
        if moe.shared_experts:
            T += _ffn_terms(model, g, "shared experts", moe.shared_experts * moe.expert_ffn_hidden, "f_s", 1, SRC_MOE,
                            module="shared_experts")
    else:
        add(ActTerm("MLP input (FC1 input)", g, h, "h", tp=False, sp=True, selective=True, source=gsrc,
                    module="layernorm"))
        T += _ffn_terms(model, g, "MLP", model.ffn_hidden, "f", module="mlp")
    if drop:
        add(ActTerm("MLP residual dropout mask", 1.0, h, "h", tp=False, sp=True, selective=True))
    if model.sandwich_norms:    # Gemma 2/3 post_feedforward_layernorm: saves the MLP output it normalises
        add(ActTerm(f"{norm} post-MLP input", 2.0, h, "h", tp=False, sp=True, selective=True))
    return T


@dataclass(frozen=True)
class ActCoeffs:
    """Per-token byte sums of a term table by how they split: the vectorised form of the table."""

    rep: float
    sp: float
    tp: float
    sel_rep: float
    sel_sp: float
    sel_tp: float
    s2: float
    ckpt_rep: float
    ckpt_sp: float
    ex: float = 0.0          # expert-TP-gathered terms (ActTerm.etp): x etp/t
    sel_ex: float = 0.0


def aggregate(terms: list[ActTerm], ckpt: ActTerm) -> ActCoeffs:
    def total(pred):
        return float(sum(t.per_token for t in terms if pred(t)))

    def total_none(pred):
        return total(lambda t: not t.only_selective and pred(t))

    return ActCoeffs(
        rep=total_none(lambda t: not t.s2 and not t.tp and not t.sp and not t.etp),
        sp=total_none(lambda t: not t.s2 and not t.tp and t.sp),
        tp=total_none(lambda t: not t.s2 and t.tp),
        sel_rep=total(lambda t: t.selective and not t.s2 and not t.tp and not t.sp and not t.etp),
        sel_sp=total(lambda t: t.selective and not t.s2 and not t.tp and t.sp),
        sel_tp=total(lambda t: t.selective and not t.s2 and t.tp),
        s2=total_none(lambda t: t.s2),
        ckpt_rep=ckpt.per_token if not ckpt.sp else 0.0,
        ckpt_sp=ckpt.per_token if ckpt.sp else 0.0,
        ex=total_none(lambda t: t.etp),
        sel_ex=total(lambda t: t.selective and t.etp),
    )


def _split(par: Parallel):
    t = np.asarray(par.tp, dtype=float)
    sp_div = np.where(np.asarray(par.sp, dtype=bool), t, 1.0)
    return t, sp_div


def _tokens(par: Parallel):
    """Tokens of one micro-batch on one GPU: b · s/c (context parallelism divides the sequence)."""
    return np.asarray(par.micro_batch, dtype=float) * np.asarray(par.seq, dtype=float) / np.asarray(par.cp, dtype=float)


def layer_activation_bytes(c: ActCoeffs, par: Parallel, recompute=None):
    """Bytes one layer keeps for one micro-batch on one GPU (Korthikanti 2022 Table 2, generalised).

    none:      b·s/c · (rep + sp/t_sp + tp/t + ex·etp/t) + b·s/c · s · s2/t
    selective: b·s/c · (sel_rep + sel_sp/t_sp + sel_tp/t + sel_ex·etp/t)
    full:      b·s/c · (ckpt_rep + ckpt_sp/t_sp)
    with t_sp = t when sequence parallelism is on, else 1, and etp the expert-TP degree (= t
    unless MoE parallel folding sets it).
    """
    t, sp_div = _split(par)
    tok = _tokens(par)
    s = np.asarray(par.seq, dtype=float)
    ex = np.asarray(par.expert_tp, dtype=float) / t
    none = tok * (c.rep + c.sp / sp_div + c.tp / t + c.ex * ex) + tok * s * c.s2 / t
    sel = tok * (c.sel_rep + c.sel_sp / sp_div + c.sel_tp / t + c.sel_ex * ex)
    full = tok * (c.ckpt_rep + c.ckpt_sp / sp_div)
    rec = np.asarray(par.recompute if recompute is None else recompute)
    return _out(np.where(rec == 0, none, np.where(rec == 1, sel, full))), _out(none)


def term_bytes(term: ActTerm, par: Parallel):
    """Bytes of one term for one layer and one micro-batch on one GPU."""
    t, sp_div = _split(par)
    div = t if term.tp else (sp_div if term.sp else 1.0)
    x = _tokens(par) * term.per_token / div
    if term.s2:
        x = x * np.asarray(par.seq, dtype=float)
    if term.only_tp:
        x = x * (np.asarray(par.tp) > 1)
    if term.etp:
        x = x * np.asarray(par.expert_tp, dtype=float) / t
    return _out(x)
