"""FLOPs of a training step: per layer by component, per GEMM after the TP/CP split, and per
step (model FLOPs for MFU, hardware FLOPs for HFU). The papers' closed forms are in
cost/flops_papers.py.

Conventions (docs/flops.md):
- Matmul FLOPs only: an (m x k) @ (k x n) product costs 2·m·n·k (one multiply + one add).
  Biases, norms, softmax, activation functions, dropout and residual adds are O(s·h) element-wise
  work, left out here exactly as Narayanan et al. 2021 (App.) and Korthikanti et al. 2022 (§6,
  eq. 7) leave them out; their time is memory-bound and lives in ``cost/compute.py``.
- Backward = 2 x forward for every matmul (an input-gradient and a weight-gradient product of
  the same size; Narayanan et al. 2021 App., "the backward pass requires double the number of
  FLOPs"), so a step without recompute is 3 x forward.
- Attention core: per sequence and head, scores Q·K^T cost 2·s·s·d_qk and context P·V
  2·s·s·d_v. ``causal`` is the fraction of that s^2 work counted: 1.0 (:data:`CAUSAL_FULL`) is
  the papers' model-FLOPs convention (docs/architecture.md, FLOPs and MFU); a causal flash-attention kernel
  skips the masked blocks and does about half (:data:`CAUSAL_FLASH`, or
  :func:`causal_block_fraction` for a given block size), which is what the *time* model uses.
- MoE: balanced routing assumed (every expert receives tokens·top_k/E tokens on average).

Array-polymorphic in b, s, tp, cp, ep and the Parallel fields; model shapes are scalars from
:class:`~llmpar.specs.model.ModelSpec`.
"""

from __future__ import annotations

import numpy as np

from llmpar.cost.arrays import scalar_out as _out
from llmpar.cost.params import attention_head_dims, ffn_mats as _ffn_mats, is_moe_layer  # noqa: F401 (re-exported)
from llmpar.parallel import RECOMPUTE
from llmpar.specs.model import ModelSpec

CAUSAL_FULL = 1.0
CAUSAL_FLASH = 0.5

# GEMM names of the attention core: what selective recompute re-runs (Korthikanti 2022 §5).
ATTENTION_CORE = ("attn_scores", "attn_context")
RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL = (RECOMPUTE.index(r) for r in ("none", "selective", "full"))


def causal_block_fraction(s, block=128):
    """Fraction of the s x s score matrix a causal block-sparse kernel (flash attention) computes:
    with n = ceil(s/block) blocks per side it runs the n(n+1)/2 blocks on or below the diagonal,
    (n+1)/(2n) of n^2 (Dao 2023, FlashAttention-2 §3.1: "skip blocks ... fully masked").
    s = 8192, block 128: n = 64 -> 65/128 = 0.5078."""
    n = -(-np.asarray(s) // block)
    return _out((n + 1) / (2.0 * n))


def attention_fraction(model: ModelSpec, s, causal):
    """The fraction of a layer's s x s score work counted, averaged over the layers, when some
    layers attend through a sliding window (banded attention: gpt-oss alternates a 128-token band
    with dense layers, OpenAI 2025 gpt-oss model card §2.1; Beltagy et al. 2020 Longformer §3.1).
    A causal band of w keys per query holds w·s − w(w−1)/2 of the s² pairs (all of the causal
    triangle when s <= w); a windowed layer counts ``causal`` x band / (1/2), so the full-s²
    convention counts it twice as the causal one does, as for a dense layer. Flash kernels run the
    band in whole blocks (about (w + 128)/s of s² at w = 128): not modelled, the band being a few
    per cent of the dense layers' work. No window: ``causal`` unchanged."""
    if model.sliding_window is None:
        return causal
    w = float(model.sliding_window)
    s = np.asarray(s, dtype=float)
    band = np.where(s > w, (w * s - w * (w - 1.0) / 2.0) / (s * s), 0.5)
    windowed = np.minimum(causal, np.asarray(causal) * band / 0.5)
    f = model.sliding_window_share
    return _out((1.0 - f) * np.asarray(causal) + f * windowed)


def _is_moe(model: ModelSpec, moe) -> bool:
    return bool(model.moe is not None if moe is None else (moe and model.moe is not None))


# ---------------------------------------------------------------------------------------------
# Per-layer forward FLOPs by component (whole layer, no parallel split)
# ---------------------------------------------------------------------------------------------

def attention_flops(model: ModelSpec, b, s, causal=CAUSAL_FULL) -> dict:
    """Forward FLOPs of one layer's attention for b sequences of s tokens, by component.

    MHA/GQA (Vaswani 2017 §3.2; Ainslie 2023): qkv 2T·h·(a + 2·kv)·d, T = b·s tokens;
    scores 2·b·a·s²·d·causal; context 2·b·a·s²·d·causal; out 2T·a·d·h.
    MLA (DeepSeek-V2 arXiv:2405.04434 §2.1.2–2.1.3, eqs. 9–14, 37–40; training computes the
    up-projections explicitly): q_down 2T·h·r_q, q_up 2T·r_q·a·(d_nope + d_rope) (or q 2T·h·a·d_qk
    without query compression), kv_down 2T·h·(r_kv + d_rope) (the shared rotary key comes out of
    the same projection), kv_up 2T·r_kv·a·(d_nope + d_v), scores 2·b·a·s²·d_qk·causal, context
    2·b·a·s²·d_v·causal, out 2T·a·d_v·h.
    """
    h, a = model.hidden, model.heads
    T = b * s
    d_qk, d_v = attention_head_dims(model)
    core = 2.0 * b * a * s * s * attention_fraction(model, s, causal)   # sliding-window layers: their band
    out: dict = {}
    if model.mla is not None:
        mla = model.mla
        if mla.q_lora_rank is None:
            out["q"] = 2.0 * T * h * a * d_qk
        else:
            out["q_down"] = 2.0 * T * h * mla.q_lora_rank
            out["q_up"] = 2.0 * T * mla.q_lora_rank * a * d_qk
        out["kv_down"] = 2.0 * T * h * (mla.kv_lora_rank + mla.qk_rope_head_dim)
        out["kv_up"] = 2.0 * T * mla.kv_lora_rank * a * (mla.qk_nope_head_dim + d_v)
    else:
        out["qkv"] = 2.0 * T * h * (a + 2 * model.n_kv_heads) * d_qk
    out["attn_scores"] = core * d_qk
    out["attn_context"] = core * d_v
    out["attn_out"] = 2.0 * T * a * d_v * h
    return out


def mlp_flops(model: ModelSpec, b, s, moe=None) -> dict:
    """Forward FLOPs of one layer's FFN block for T = b·s tokens.

    Dense: mlp 2T·mats·h·f (mats = 2 GeLU, 3 SwiGLU).
    MoE (Fedus 2021; Mixtral, Jiang 2024 §2.1; DeepSeek-V3 §2.1.2): router 2T·h·E; experts
    2T·top_k·mats·h·f_e (each token through top_k experts of size f_e); shared_experts
    2T·n_shared·mats·h·f_e. ``moe=None``: an MoE layer if the model has experts.
    """
    h, mats = model.hidden, _ffn_mats(model)
    T = b * s
    if not _is_moe(model, moe):
        return {"mlp": 2.0 * T * mats * h * model.ffn_hidden}
    e = model.moe
    out = {
        "router": 2.0 * T * h * e.experts,
        "experts": 2.0 * T * e.top_k * mats * h * e.expert_ffn_hidden,
    }
    if e.shared_experts:
        out["shared_experts"] = 2.0 * T * e.shared_experts * mats * h * e.expert_ffn_hidden
    return out


def layer_flops(model: ModelSpec, b, s, moe=None, causal=CAUSAL_FULL) -> dict:
    """Forward FLOPs of one transformer layer by component (attention + FFN block)."""
    return {**attention_flops(model, b, s, causal), **mlp_flops(model, b, s, moe)}


def layer_forward_flops(model: ModelSpec, b, s, moe=None, causal=CAUSAL_FULL):
    """Sum of :func:`layer_flops`."""
    return _out(sum(layer_flops(model, b, s, moe, causal).values()))


def head_flops(model: ModelSpec, b, s):
    """LM head (logits) forward: 2·b·s·h·V (the product is done whether or not the weight is tied;
    the embedding lookup is not a matmul)."""
    return _out(2.0 * b * s * model.hidden * model.vocab)


def forward_flops_per_sequence(model: ModelSpec, s, causal=CAUSAL_FULL):
    """Whole-model forward FLOPs for one sequence of s tokens: dense layers + MoE layers + LM head,
    and each multi-token-prediction module (DeepSeek-V3 §2.2): a block like the last one, its
    projection M (2h -> h: 2·2h·h per token) and the shared head once more."""
    dense = model.dense_layers * layer_forward_flops(model, 1, s, moe=False, causal=causal)
    moe = model.moe_layers * layer_forward_flops(model, 1, s, moe=True, causal=causal) if model.moe else 0.0
    mtp = 0.0
    if model.mtp_layers:
        last_moe = is_moe_layer(model, model.layers - 1)
        mtp = model.mtp_layers * (layer_forward_flops(model, 1, s, moe=last_moe, causal=causal)
                                  + gemm_flops(mtp_projection_gemms(model, 1, s)) + head_flops(model, 1, s))
    return _out(dense + moe + head_flops(model, 1, s) + mtp)


#: the GEMMs (names of :func:`layer_gemms`) each Megatron-Core recompute module re-runs in the
#: backward (TransformerConfig.recompute_modules): core_attn the attention core; mla_up_proj the
#: MLA up-projections; mlp the dense MLP; moe the router, experts and shared experts; shared_experts
#: those alone. layernorm and moe_act re-run element-wise ops only (cost/step.py _layer_compute).
MODULE_GEMMS = {
    "core_attn": ATTENTION_CORE,
    "mla_up_proj": ("q_up", "kv_up"),
    "mlp": ("mlp_up", "mlp_down"),
    "moe": ("router", "expert_up", "expert_down", "shared_up", "shared_down"),
    "shared_experts": ("shared_up", "shared_down"),
    "layernorm": (),
    "moe_act": (),
}


def selective_fractions(model: ModelSpec, moe: bool, policy="attention-core",
                        attention: str = "flash") -> dict[str, float]:
    """Fraction of each GEMM of :func:`layer_gemms` that selective recompute re-runs in backward.

    attention-core (Korthikanti 2022 §5, Megatron): the attention core, nothing else.
    A tuple of Megatron-Core recompute modules (``Settings.selective_policy``): the GEMMs of
    those modules (:data:`MODULE_GEMMS`) that this layer kind has.
    torchtitan-op (torchtitan's op-level SAC, :func:`llmpar.cost.activations.torchtitan_op_sac_terms`):
    every second aten.mm of a block re-runs — wk (of the fused qkv GEMM the share kv/(a+2kv)), wo,
    and w3 (half of the fused gate+up GEMM) for SwiGLU, or w2 for a GeLU MLP; SDPA's output is
    saved, so the attention core does not re-run. Where the op set does not apply (MoE or MLA
    layers, eager attention: :func:`llmpar.cost.activations.op_sac_applies`) the attention core."""
    from llmpar.cost.activations import op_sac_applies

    if isinstance(policy, tuple):
        names = {g[0] for g in layer_gemms(model, 1, 1, moe=moe)}
        return {n: 1.0 for mod in policy for n in MODULE_GEMMS[mod] if n in names}
    if policy == "attention-core" or not op_sac_applies(model, moe, attention):
        return {name: 1.0 for name in ATTENTION_CORE}
    a, kv = model.heads, model.n_kv_heads
    swiglu = model.ffn_type == "swiglu"
    return {"qkv": kv / (a + 2 * kv), "attn_out": 1.0,
            "mlp_up": 0.5 if swiglu else 0.0, "mlp_down": 0.0 if swiglu else 1.0}


def recompute_flops_per_sequence(model: ModelSpec, s, recompute, causal=CAUSAL_FULL, policy="attention-core",
                                 attention="flash", full_fraction=1.0):
    """Extra forward FLOPs that activation recomputation re-runs, per sequence (the LM head is
    never recomputed). selective: what the stack's policy re-runs (:func:`selective_fractions`:
    every layer's attention core, Korthikanti 2022 §5, or torchtitan's every-second-matmul); full:
    every layer's whole forward (Chen et al. 2016; Narayanan 2021 eq. 3's fourth forward pass), or
    ``full_fraction`` of the layers (:func:`llmpar.cost.pipeline.full_recompute_fraction`).
    ``recompute``: code into :data:`llmpar.parallel.RECOMPUTE`, may be an array."""
    rec = np.asarray(recompute)

    def selective(moe: bool):
        frac = selective_fractions(model, moe, policy, attention)
        return gemm_flops([(n, m, nn, k, c * frac.get(n, 0.0))
                           for n, m, nn, k, c in layer_gemms(model, 1, s, moe=moe, causal=causal)])

    sel = model.dense_layers * np.asarray(selective(False))
    if model.moe:
        sel = sel + model.moe_layers * np.asarray(selective(True))
    full = np.asarray(full_fraction) * (forward_flops_per_sequence(model, s, causal) - head_flops(model, 1, s))
    return _out(np.where(rec == RECOMPUTE_FULL, full, np.where(rec == RECOMPUTE_SELECTIVE, sel, 0.0)))


# ---------------------------------------------------------------------------------------------
# Per step: model FLOPs (MFU numerator) and hardware FLOPs (HFU numerator)
# ---------------------------------------------------------------------------------------------

def model_flops_per_step(model: ModelSpec, par, causal=CAUSAL_FULL):
    """Model FLOPs of one optimizer step: 3 x forward (forward + backward = 2 x forward) over the
    global batch B = m·b·dp sequences of par.seq tokens. ``causal``: the fraction of attention's
    s² work counted — 1.0 is the papers' MFU convention ("full"); 0.5 counts what a causal model
    needs ("causal", which cannot exceed what a causal kernel executes). With 1.0 and a GPT block
    this is Korthikanti 2022 eq. 7 exactly: 72·B·s·L·h²·(1 + s/(6h) + V/(12·h·L)). MoE: only the
    routed experts a token goes through."""
    B = par.microbatches * par.micro_batch * par.dp
    return _out(3.0 * B * forward_flops_per_sequence(model, par.seq, causal))


def finetune_flops_per_sequence(model: ModelSpec, s, settings, causal=CAUSAL_FULL):
    """What LoRA / QLoRA need per sequence (cost/finetune.py): the forward F, the backward's input
    gradients only through the frozen linears and head (F less the attention core: dX = dY W^T,
    one GEMM where full training does two; Hu et al. 2021 §4.1), the attention core's backward as
    in full training (2 x its forward: it has no weights), and the adapters' forward + backward
    (3 x 2 r (d_in + d_out) per adapted matrix and token). Full training is 3F; this is
    2F + core + 3A, with A the adapters' forward."""
    from llmpar.cost import finetune as FT

    fwd = forward_flops_per_sequence(model, s, causal)
    att = attention_flops(model, 1, s, causal)
    core = model.layers * (att["attn_scores"] + att["attn_context"])
    adapters = s * (model.dense_layers * FT.adapter_flops_per_token(model, False, settings.lora_targets,
                                                                    settings.lora_rank)
                    + model.moe_layers * FT.adapter_flops_per_token(model, True, settings.lora_targets,
                                                                    settings.lora_rank))
    return _out(2.0 * fwd + core + 3.0 * adapters)


def training_flops_per_step(model: ModelSpec, par, settings, causal=CAUSAL_FULL):
    """:func:`model_flops_per_step`, or under ``--finetune lora|qlora`` the global batch times
    :func:`finetune_flops_per_sequence` (the FLOPs the method needs: its MFU numerator)."""
    if getattr(settings, "finetune", "full") == "full":
        return model_flops_per_step(model, par, causal)
    B = par.microbatches * par.micro_batch * par.dp
    return _out(B * finetune_flops_per_sequence(model, par.seq, settings, causal))


def hardware_flops_per_step(model: ModelSpec, par, causal=CAUSAL_FULL, policy="attention-core", attention="flash",
                            settings=None):
    """Hardware FLOPs of one step: model FLOPs + the forward work recompute really re-runs
    (selective: the stack's ``policy``, :func:`selective_fractions`; full: every layer's forward), with ``causal`` the fraction
    of the s² work the attention kernel executes (1.0 for an unmasked/eager kernel; a causal
    flash kernel's block fraction). With full recompute, causal = 1.0 and a GPT block this is
    Narayanan 2021 eq. 3: 96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h)). (Korthikanti's eq. 8 counts more
    for selective recompute; see :func:`~llmpar.cost.flops_papers.korthikanti_eq8_flops`.)"""
    B = par.microbatches * par.micro_batch * par.dp
    from llmpar.cost.pipeline import full_recompute_fraction

    share = full_recompute_fraction(model.layers, par.pp, par.virtual_stages, par.recompute_layers)
    extra = recompute_flops_per_sequence(model, par.seq, par.recompute, causal, policy, attention, share)
    base = (training_flops_per_step(model, par, settings, causal) if settings is not None
            else model_flops_per_step(model, par, causal))
    return _out(base + B * np.asarray(extra))


def per_gpu_rate(per_step, step_time_s, gpus):
    """A per-step amount (tokens or FLOPs) as a rate per GPU: amount / (step time · GPUs) —
    tokens/s per GPU and FLOP/s per GPU, the throughput figures papers and benchmarks publish
    (Narayanan 2021 Table 1 quotes TFLOP/s per GPU; NeMo's tables tokens/s per GPU)."""
    return _out(np.asarray(per_step) / (np.asarray(step_time_s) * gpus))


def step_time_at_rate(per_step, rate_per_gpu, gpus):
    """The inverse of :func:`per_gpu_rate`: the step time at which ``per_step`` is done at
    ``rate_per_gpu`` on each of ``gpus`` GPUs — how a published tokens/s, TFLOP/s or MFU
    (rate = MFU · peak) becomes the step time llmpar is fitted and checked against."""
    return _out(np.asarray(per_step) / (np.asarray(rate_per_gpu) * gpus))


def flops_utilization(flops_per_step, step_time_s, gpus, peak_flops):
    """MFU (with model FLOPs) or HFU (with hardware FLOPs): FLOPs / (time · gpus · peak)
    (Chowdhery et al. 2022, PaLM, App. B; Korthikanti 2022 §6 for HFU)."""
    return _out(per_gpu_rate(flops_per_step, step_time_s, gpus) / peak_flops)


# ---------------------------------------------------------------------------------------------
# GEMMs per layer per micro-batch on one GPU, after the TP and CP split
# ---------------------------------------------------------------------------------------------

def layer_gemms(model: ModelSpec, b, s, tp=1, cp=1, *, moe=None, ep=1, etp=None, causal=CAUSAL_FLASH) -> list:
    """The forward GEMMs of one layer for one micro-batch on one GPU: (name, m, n, k, count),
    an (m x k) @ (k x n) product done ``count`` times; FLOPs = 2·m·n·k·count. m, n, k and count
    may be arrays (b, s, tp, cp, ep arrays). Backward: the same GEMMs twice (input and weight
    gradient); selective recompute re-runs the :data:`ATTENTION_CORE` ones.

    Split (Megatron-LM, Shoeybi 2019 §3; Korthikanti 2022 §4.2; context parallelism splits the
    sequence): T = b·s/cp tokens on this GPU. Column-parallel (QKV, FFN up) split n by tp;
    row-parallel (attention out, FFN down) split k by tp; with sequence parallelism the GEMMs still
    see all T tokens (gathered before, reduce-scattered after).
    - attention core as batched GEMMs per (sequence, local head): scores m = s/cp queries,
      n = s keys, k = d_qk; context m = s/cp, n = d_v, k = s; count = b·(a/tp)·causal (the
      causal fraction of key blocks actually computed: 0.5 flash default, 1.0 in full).
      With cp, each GPU's queries attend to all s keys (load-balanced causal split).
    - MLA (Megatron-Core MultiLatentAttention): q_down and kv_down are replicated on every TP
      rank ("duplicated"), so each rank pays them in full; q_up/kv_up are column-parallel.
    - MoE, balanced routing: each of the E/ep experts on this GPU receives
      m = ep·T·top_k/E tokens; expert FFNs are split by expert-TP = tp; count = E/ep. With MoE
      parallel folding (``etp`` < tp; Liu et al. 2025, arXiv:2504.14960 §3) the EP group also
      spans TP ranks, each dispatching its own T/tp (sequence-parallel) tokens, and an expert's
      FFN is split over etp ranks that gather their tokens: m = ep·(T/tp)·etp·top_k/E, width
      f_e/etp (the same FLOPs per GPU; other GEMM shapes). The router
      (h x E) runs on T/tp tokens (sequence-parallel). Shared experts are one dense FFN of size
      n_shared·f_e on all T tokens.
    GEMM FLOPs summed over the tp·cp GPUs equal :func:`layer_flops` with the same ``causal``,
    except MLA's replicated down-projections.
    """
    h, a, kv = model.hidden, model.heads, model.n_kv_heads
    d_qk, d_v = attention_head_dims(model)
    T = b * s / cp
    heads = a / tp
    gemms = []
    if model.mla is not None:
        mla = model.mla
        if mla.q_lora_rank is None:
            gemms.append(("q", T, a * d_qk / tp, h, 1))
        else:
            gemms.append(("q_down", T, mla.q_lora_rank, h, 1))
            gemms.append(("q_up", T, a * d_qk / tp, mla.q_lora_rank, 1))
        gemms.append(("kv_down", T, mla.kv_lora_rank + mla.qk_rope_head_dim, h, 1))
        gemms.append(("kv_up", T, a * (mla.qk_nope_head_dim + d_v) / tp, mla.kv_lora_rank, 1))
    else:
        gemms.append(("qkv", T, (a + 2 * kv) * d_qk / tp, h, 1))
    causal = attention_fraction(model, s, causal)   # sliding-window layers count their band
    gemms.append(("attn_scores", s / cp, s, d_qk, b * heads * causal))
    gemms.append(("attn_context", s / cp, d_v, s, b * heads * causal))
    gemms.append(("attn_out", T, h, a * d_v / tp, 1))

    mats = _ffn_mats(model)
    up = mats - 1  # GeLU: fc1 h->f; SwiGLU: fused gate+up h->2f
    if not _is_moe(model, moe):
        f = model.ffn_hidden
        gemms.append(("mlp_up", T, up * f / tp, h, 1))
        gemms.append(("mlp_down", T, h, f / tp, 1))
        return gemms
    e = model.moe
    fe = e.expert_ffn_hidden
    etp = tp if etp is None else etp
    tokens_per_expert = ep * (T / tp) * etp * e.top_k / e.experts
    local_experts = e.experts / ep
    gemms.append(("router", T / tp, e.experts, h, 1))
    gemms.append(("expert_up", tokens_per_expert, up * fe / etp, h, local_experts))
    gemms.append(("expert_down", tokens_per_expert, h, fe / etp, local_experts))
    if e.shared_experts:
        fs = e.shared_experts * fe
        gemms.append(("shared_up", T, up * fs / tp, h, 1))
        gemms.append(("shared_down", T, h, fs / tp, 1))
    return gemms


def head_gemms(model: ModelSpec, b, s, tp=1, cp=1) -> list:
    """The LM head on the last stage: logits (T x h) @ (h x V/tp), vocab-parallel (Megatron)."""
    return [("lm_head", b * s / cp, model.vocab / tp, model.hidden, 1)]


def mtp_projection_gemms(model: ModelSpec, b, s, tp=1, cp=1) -> list:
    """A multi-token-prediction module's projection M (DeepSeek-V3 §2.2): [norm(h); norm(emb)]
    (2h) @ (2h x h/tp), column-parallel: 2·2h·h FLOPs per token."""
    return [("mtp_proj", b * s / cp, model.hidden / tp, 2 * model.hidden, 1)]


def gemm_flops(gemms) -> float:
    """Sum of 2·m·n·k·count over a GEMM list (array-polymorphic)."""
    return _out(sum(2.0 * m * n * k * c for _, m, n, k, c in gemms))


def recompute_gemms(gemms, recompute, fractions=None) -> list:
    """The GEMMs recompute re-runs in forward, as counts scaled by the fraction re-run
    (``recompute`` may be an array): full = all of them, selective = ``fractions`` (name ->
    fraction, :func:`selective_fractions`; None = the attention core, :data:`ATTENTION_CORE`),
    none = 0."""
    rec = np.asarray(recompute)
    frac = {name: 1.0 for name in ATTENTION_CORE} if fractions is None else fractions
    out = []
    for name, m, n, k, c in gemms:
        on = np.where(rec == RECOMPUTE_FULL, 1.0, np.where(rec == RECOMPUTE_SELECTIVE, frac.get(name, 0.0), 0.0))
        out.append((name, m, n, k, _out(c * on)))
    return out
