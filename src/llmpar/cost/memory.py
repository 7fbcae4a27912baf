"""Per-GPU memory: model states, activations, KV cache, and whether it fits (docs/memory.md).

Two layers, as DESIGN.md asks ("every number can show its work"):

* a vectorised core — :func:`memory_per_gpu`, :func:`inference_memory_per_gpu`,
  :func:`model_states_for_count` — numbers only, array-polymorphic in every degree and knob of a
  :class:`~llmpar.parallel.Parallel` (the planner passes numpy arrays of candidate layouts);
* an explain layer — :func:`memory_terms`, :func:`memory_per_stage`, :func:`activation_terms` —
  for one scalar layout: every term with its bytes, formula, substituted values and source.
  The explain layer calls the same private helpers as the core, so the two cannot disagree
  (tests check that the terms add up to the core's components).

Sources (each formula below names its own, and docs/memory.md derives them):

* Model states: Rajbhandari et al. 2019, "ZeRO", arXiv:1910.02054, §3.1 (2 + 2 + K bytes per
  parameter, K = 12 for mixed-precision Adam) and §5 (P_os, P_os+g, P_os+g+p), Fig. 1, Table 1.
* TP/PP sharding: Shoeybi et al. 2019, "Megatron-LM", arXiv:1909.08053, §3 (column/row-parallel
  matrices, vocab-parallel embedding); Narayanan et al. 2021, arXiv:2104.04473, §2.2-2.3.
  Megatron conventions (fp32 main grads, distributed optimizer, tied embedding copy on the last
  stage): NVIDIA/Megatron-LM megatron/training/theoretical_memory_usage.py.
* DeepSpeed conventions: deepspeed/runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs
  and stage3.py estimate_zero3_model_states_mem_needs (non-offload branches).
* Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  Models", arXiv:2205.05198, §4.1 (per-layer terms), §4.2 (TP, SP), §5 (selective recompute),
  Table 2, §4.3 (pipeline: first stage holds p micro-batches; extra terms for embedding/logits).
* Flash attention: Dao et al. 2022, arXiv:2205.14135, §3.1 (saves O and the softmax statistics
  m, l per query and head, not the s x s matrices).
* fp8: NVIDIA Transformer Engine (fp8_autocast keeps the high-precision weights and caches fp8
  copies of linear weights between micro-batches: row-wise and, on Hopper, the transposed copy).
* KV cache: Pope et al. 2022, "Efficiently Scaling Transformer Inference", arXiv:2211.05102, §2;
  MLA's compressed cache: DeepSeek-V2, arXiv:2405.04434, §2.1.2 and Table 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmpar.cost.arrays import scalar_out as _out
from llmpar.cost import params as P
from llmpar.cost.params import _mlp_bias, _out_bias, _linear
from llmpar.cost.pipeline import (
    DUALPIPE,
    GPIPE,
    INTERLEAVED,
    first_stage_layers,
    in_flight_microbatches,
    last_stage_layers,
    stage_layers,
)
from llmpar.errors import UserError
from llmpar.parallel import Parallel, Settings
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec

# ------------------------------------------------------------------------------------ sources
SRC_ZERO = "Rajbhandari et al. 2019 (ZeRO, arXiv:1910.02054) §3.1, §5, Fig. 1"
SRC_MEGATRON_TP = "Shoeybi et al. 2019 (Megatron-LM, arXiv:1909.08053) §3"
SRC_MEGATRON_PP = "Narayanan et al. 2021 (arXiv:2104.04473) §2.2; Megatron-LM theoretical_memory_usage.py"
SRC_MEGATRON_CONV = "Megatron-LM megatron/training/theoretical_memory_usage.py (18 B/param; 6 + 12/d with the distributed optimizer)"
SRC_DS2 = "DeepSpeed stage_1_and_2.py estimate_zero2_model_states_mem_needs: 2Ψ + 18Ψ/N"
SRC_DS3 = "DeepSpeed stage3.py estimate_zero3_model_states_mem_needs: 4·largest_layer + 18Ψ/N"
SRC_KORTH = "Korthikanti et al. 2022 (arXiv:2205.05198) §4.1, Table 2"
SRC_KORTH_PP = "Korthikanti et al. 2022 §4.2.3 (first stage holds p micro-batches; interleaving ×(1+(p-1)/(pv)))"
SRC_KORTH_EXTRA = "Korthikanti et al. 2022 §4.3 (embedding dropout, final norm, output layer, fp32 logits)"
SRC_FLASH = "Dao et al. 2022 (FlashAttention, arXiv:2205.14135) §3.1: saves O and the softmax statistics"
SRC_SWIGLU = "Shazeer 2020 (arXiv:2002.05202) eq. 6; Megatron-LM bias_swiglu saves [gate, up]"
SRC_MOE = "Lepikhin et al. 2020 (GShard); Megatron-Core MoE alltoall dispatcher (tokens gathered over TP, k copies per token)"
SRC_MLA = "DeepSeek-V2 (arXiv:2405.04434) §2.1.2-2.1.3; Megatron-Core MLA (down-projections replicated over TP)"
SRC_KV = "Pope et al. 2022 (arXiv:2211.05102) §2: KV cache = 2·L·kv_heads·d_head·T·B·bytes"
SRC_KV_MLA = "DeepSeek-V2 (arXiv:2405.04434) §2.1.2, Table 1: cache (d_c + d_h^R) per token per layer"
SRC_TE_FP8 = "NVIDIA Transformer Engine fp8_autocast: bf16 primary weights + cached fp8 weight and transpose"
SRC_ZERO3_BUF = "PyTorch FSDP / DeepSpeed ZeRO-3: one layer gathered + one prefetched; its full gradient before reduce-scatter"
SRC_RESERVE = "hardware profile 'reserve' (CUDA context, NCCL buffers, allocator fragmentation) or --reserve"


# =========================================================================== bytes per parameter

OPTIMIZER_BYTES = {
    # Adam/AdamW: fp32 master weight + first moment m + second moment v (ZeRO §3.1, K = 12)
    "adam": 12.0,
    "adamw": 12.0,
    # SGD with momentum: fp32 master weight + momentum
    "sgd": 8.0,
    # 8-bit Adam (Dettmers et al. 2021, arXiv:2110.02861): fp32 master (4) + m and v in 8 bits (1 + 1)
    "adam-8bit": 6.0,
}
OPTIMIZER_DOC = {
    "adam": "fp32 master 4 + m 4 + v 4", "adamw": "fp32 master 4 + m 4 + v 4",
    "sgd": "fp32 master 4 + momentum 4", "adam-8bit": "fp32 master 4 + 8-bit m 1 + 8-bit v 1",
}
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 2.0}   # fp8 training keeps bf16 primary weights (TE)
FP8_CACHE_BYTES = 2.0      # TE fp8 copy of each linear weight + its transpose (Hopper TN-only fp8 GEMMs)
INFERENCE_WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}  # serving fp8 checkpoints store 1 B/param
KV_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
GRAD_BYTES = {"bf16": 2.0, "fp32": 4.0}


@dataclass(frozen=True)
class BytesPerParam:
    """Bytes per parameter of each model-state copy (ZeRO §3.1's 2 + 2 + K, generalised).

    ``gradients`` may be an array (the DeepSpeed convention counts 6 B under ZeRO-2 and 4 B under
    ZeRO-3). ``fp8_cache`` applies to linear-layer weights only.
    """

    weights: float
    gradients: Any
    optimizer: float
    fp8_cache: float
    convention: str
    describe: dict[str, str] = field(default_factory=dict)


def bytes_per_param(settings: Settings, zero=0) -> BytesPerParam:
    """Bytes per parameter for weights, gradients and optimizer states (docs/memory.md table).

    llmpar (default): weights 2 (bf16/fp16; fp8 keeps bf16 primaries and adds a 2-byte fp8 cache
    of linear weights, as Transformer Engine does), gradients per ``--grad-dtype`` (2 or 4),
    optimizer per ``--optimizer`` (adam/adamw 12, sgd 8, adam-8bit 6). 2 + 2 + 12 = 16 (ZeRO §3.1).
    megatron: fp32 main gradients (4): 2 + 4 + 12 = 18 (theoretical_memory_usage.py).
    deepspeed: DeepSpeed's estimators: ZeRO-2 2 + (2 + 4 + 4 + 8)/N = 2 + 18/N, split here as
    weights 2, gradients 6 (bf16 + fp32), optimizer 12 (fp32 master + m + v); ZeRO-3 18/N split
    as weights 2, gradients 4 (fp32), optimizer 12 (plus 4·largest layer, see model states).
    """
    conv = settings.convention
    w = WEIGHT_BYTES[settings.dtype]
    fp8 = FP8_CACHE_BYTES if settings.dtype == "fp8" else 0.0
    k = OPTIMIZER_BYTES[settings.optimizer]
    if conv == "megatron":
        g = 4.0
        gdoc = "fp32 main gradients 4 (Megatron)"
    elif conv == "deepspeed":
        g = _out(np.where(np.asarray(zero) >= 3, 4.0, 6.0))
        k = 12.0
        gdoc = "ZeRO-2: bf16 2 + fp32 4; ZeRO-3: fp32 4 (DeepSpeed estimators)"
    else:
        g = GRAD_BYTES[settings.grad_dtype]
        gdoc = f"{settings.grad_dtype} gradients {g:g}"
    wdoc = f"{settings.dtype} weights {w:g}"
    if fp8:
        wdoc += f" + fp8 copy and transpose of linear weights {fp8:g} (Transformer Engine)"
    return BytesPerParam(
        weights=w, gradients=g, optimizer=k, fp8_cache=fp8, convention=conv,
        describe={"weights": wdoc, "gradients": gdoc,
                  "optimizer": f"{settings.optimizer}: {OPTIMIZER_DOC[settings.optimizer]} = {k:g}"
                  if conv != "deepspeed" else "fp32 master 4 + Adam m, v 8 = 12 (DeepSpeed)"},
    )


def convention_allows(settings: Settings, zero):
    """Mask of ZeRO stages a convention defines: megatron 0 and 1, deepspeed 2 and 3, llmpar all."""
    z = np.asarray(zero)
    if settings.convention == "megatron":
        return _out(z <= 1)
    if settings.convention == "deepspeed":
        return _out(z >= 2)
    return _out(np.ones_like(z, dtype=bool))


def check_convention(settings: Settings, zero: int) -> None:
    """One-line UserError for (convention, zero, optimizer) combinations a convention does not define."""
    if settings.convention == "megatron" and int(zero) > 1:
        raise UserError(
            f"--convention megatron covers ZeRO 0 (18 B/param) and 1 (distributed optimizer, 6 + 12/d), "
            f"not --zero {int(zero)}; use --convention llmpar or deepspeed"
        )
    if settings.convention == "deepspeed":
        if int(zero) < 2:
            raise UserError(
                f"--convention deepspeed reproduces DeepSpeed's ZeRO-2/3 estimators only, not --zero {int(zero)}; "
                "use --zero 2 or 3, or --convention llmpar"
            )
        if settings.optimizer not in ("adam", "adamw"):
            raise UserError(f"--convention deepspeed assumes Adam (its estimators count 12 B of optimizer state), "
                            f"not --optimizer {settings.optimizer}")


# ================================================================= parameters per GPU (sharding)

def _tp_replicated_attention(model: ModelSpec) -> int:
    """Attention parameters that Megatron replicates over TP ranks instead of splitting.

    Row-parallel output bias (added after the all-reduce, Shoeybi 2019 §3); MLA's down-projections
    W_DQ, W_DKV(+W_KR) and their norms (Megatron-Core MLA builds them as duplicated linears).
    Norms of width h are counted separately (norm_params_per_layer).
    """
    h = model.hidden
    rep = h if _out_bias(model) else 0
    if model.mla is not None:
        mla = model.mla
        if mla.q_lora_rank is not None:
            rep += _linear(h, mla.q_lora_rank, model.linear_bias or model.qkv_bias) + P.norm_params(model, mla.q_lora_rank)
        rep += _linear(h, mla.kv_lora_rank + mla.qk_rope_head_dim, model.linear_bias or model.qkv_bias)
        rep += P.norm_params(model, mla.kv_lora_rank)
    return rep


def _row_bias(model: ModelSpec) -> int:
    """The row-parallel (second/down) FFN bias, replicated over TP; 0 without FFN biases."""
    return model.hidden if _mlp_bias(model) else 0


@dataclass(frozen=True)
class LayerShard:
    """Parameters of one transformer layer held by one GPU after TP/EP (before ZeRO).

    ``dense``/``moe``: non-expert parameters of a dense / MoE layer; ``experts``: routed-expert
    parameters of a MoE layer (sharded by ep x expert-TP); ``*_linear``: the part in linear
    layers (for the fp8 weight cache). Values may be arrays (one per candidate tp/ep).
    """

    dense: Any
    moe: Any
    experts: Any
    dense_linear: Any
    moe_linear: Any
    experts_linear: Any


def layer_shard(model: ModelSpec, par: Parallel) -> LayerShard:
    """Megatron sharding of one layer (Shoeybi 2019 §3): QKV/FC1 column-parallel and proj/FC2
    row-parallel split by t with their column biases; norms, row biases and MLA down-projections
    replicated. MoE: routed experts split over ep ranks and expert-TP = t; shared experts like a
    dense FFN; router replicated."""
    t = np.asarray(par.tp, dtype=float)
    ep = np.asarray(par.ep, dtype=float)
    attn = P.attention_params(model)
    attn_rep = _tp_replicated_attention(model)
    norms = P.norm_params_per_layer(model)
    attn_gpu = (attn - attn_rep) / t + attn_rep
    mlp = P.dense_mlp_params(model)
    mlp_gpu = (mlp - _row_bias(model)) / t + _row_bias(model)
    dense = attn_gpu + mlp_gpu + norms
    moe = np.zeros_like(t)
    experts = np.zeros_like(t)
    moe_lin = np.zeros_like(t)
    exp_lin = np.zeros_like(t)
    if model.moe:
        shared = P.shared_expert_params(model)
        shared_rep = model.moe.shared_experts * _row_bias(model)
        shared_gpu = (shared - shared_rep) / t + shared_rep
        router = P.router_params(model)
        moe = attn_gpu + shared_gpu + router + norms
        one = P.expert_params(model)
        experts = model.moe.experts * ((one - _row_bias(model)) / t + _row_bias(model)) / ep
        moe_lin = attn_gpu + shared_gpu
        exp_lin = experts
    return LayerShard(
        dense=_out(dense), moe=_out(moe), experts=_out(experts),
        dense_linear=_out(attn_gpu + mlp_gpu), moe_linear=_out(moe_lin), experts_linear=_out(exp_lin),
    )


def _word_embedding(model: ModelSpec) -> int:
    """V x h word embedding (the vocab-parallel part); the rest of embedding_params are positions."""
    return model.vocab * model.hidden


def embedding_shard(model: ModelSpec, par: Parallel):
    """First stage: vocab-parallel word embedding V·h/t (Shoeybi 2019 §3) + learned positions (replicated)."""
    word = _word_embedding(model)
    pos = P.embedding_params(model) - word
    return _out(word / np.asarray(par.tp, dtype=float) + pos)


def head_shard(model: ModelSpec, par: Parallel):
    """Last stage: LM head V·h/t (vocab-parallel) + final norm; tied embeddings get a copy of the
    word embedding on the last stage when pp > 1 (Megatron keeps one there and all-reduces its
    gradient with the first stage), and are counted once when pp = 1."""
    t = np.asarray(par.tp, dtype=float)
    p = np.asarray(par.pp)
    head = P.head_params(model)
    tied_copy = np.where((p > 1) & bool(model.tied_embeddings), _word_embedding(model), 0)
    return _out((head + tied_copy) / t + P.final_norm_params(model))


def largest_layer_params(model: ModelSpec, par: Parallel):
    """DeepSpeed's ``largest_layer_params``: the largest single module's own parameters (the
    word embedding or LM head for every shipped model), ÷ t for a TP shard."""
    h = model.hidden
    cands = [_word_embedding(model), h * model.ffn_hidden, model.heads * model.d_head * h]
    if model.moe:
        cands.append(h * model.moe.expert_ffn_hidden)
    if model.mla is not None:
        mla = model.mla
        cands.append(model.heads * mla.v_head_dim * h)
        cands.append((mla.q_lora_rank or h) * model.heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim))
    return _out(max(cands) / np.asarray(par.tp, dtype=float))


# ======================================================================== pipeline stage layout

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
    """How many of the layers [start, start + n) have a dense FFN (all of them for a dense model)."""
    if not model.moe:
        return n
    cnt = np.zeros_like(np.asarray(n))
    for d in sorted(set(model.moe.dense_layers)):
        cnt = cnt + ((np.asarray(start) <= d) & (d < np.asarray(start) + np.asarray(n)))
    return _out(cnt)


# =============================================================================== activations

@dataclass(frozen=True)
class ActTerm:
    """One tensor a layer saves for its backward, per token (Korthikanti 2022 §4.1 style).

    bytes per layer per micro-batch = coef · dim · b · (s/c) [· s for s² terms] ÷ t if ``tp``
    (÷ t if ``sp`` and sequence parallelism is on). ``selective``: kept under selective
    recompute (Korthikanti §5 recomputes the attention core: the s² terms and softmax stats).
    """

    name: str
    coef: float          # bytes per element
    dim: int             # elements per token (s² terms: per token per key position)
    unit: str            # symbolic per-token size: 'h', 'f', 'a·d', 'a·s', ...
    tp: bool
    sp: bool
    selective: bool
    s2: bool = False
    source: str = SRC_KORTH

    @property
    def per_token(self) -> float:
        return self.coef * self.dim


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


def activation_terms(model: ModelSpec, moe_layer: bool, attention: str, dtype: str = "bf16") -> list[ActTerm]:
    """The tensors one transformer layer saves for backward, as named terms.

    GPT block (LayerNorm, GeLU 4h, dropout, standard attention) reproduces Korthikanti Table 2:
    attention 11sbh + 5as²b, MLP 19sbh, norms 4sbh = sbh(34 + 5as/h). Llama blocks: RMSNorm,
    SwiGLU (gate and up outputs 4sbf, product 2sbf), GQA's smaller K and V, no dropout; flash
    attention drops the s² terms and keeps only the softmax statistics (fp32, per query and
    head). MoE blocks: router probabilities, k dispatched copies per token through experts of
    size expert_ffn, shared experts. MLA: the compressed latents and the decompressed K/V.
    With ``dtype='fp8'`` the inputs of linear layers are saved in fp8 (1 byte), as Transformer
    Engine does; everything else stays 16-bit.
    """
    h, a = model.hidden, model.heads
    std = attention == "standard"
    drop = bool(model.dropout)
    dims = _attention_dims(model)
    g = 1.0 if dtype == "fp8" else 2.0     # bytes of a saved linear-layer input
    gsrc = SRC_KORTH + ("; fp8 GEMM input (Transformer Engine)" if dtype == "fp8" else "")
    norm = "LayerNorm" if model.norm == "layernorm" else "RMSNorm"
    T: list[ActTerm] = []
    add = T.append
    # --- attention block
    add(ActTerm(f"{norm} 1 input", 2.0, h, "h", tp=False, sp=True, selective=True))
    if model.mla is None:
        add(ActTerm("QKV projection input", g, h, "h", tp=False, sp=True, selective=True, source=gsrc))
    else:
        mla = model.mla
        add(ActTerm("MLA down-projection input", g, h, "h", tp=False, sp=True, selective=True, source=gsrc))
        if mla.q_lora_rank is not None:
            add(ActTerm("MLA query latent c_Q (norm input)", 2.0, mla.q_lora_rank, "d_c'", tp=False, sp=False,
                        selective=True, source=SRC_MLA))
            add(ActTerm("MLA query latent, normalised (up-projection input)", g, mla.q_lora_rank, "d_c'",
                        tp=False, sp=False, selective=True, source=SRC_MLA))
        add(ActTerm("MLA KV latent c_KV + rope key (norm input)", 2.0, mla.kv_lora_rank + mla.qk_rope_head_dim,
                    "d_c+d_R", tp=False, sp=False, selective=True, source=SRC_MLA))
        add(ActTerm("MLA KV latent, normalised (up-projection input)", g, mla.kv_lora_rank, "d_c",
                    tp=False, sp=False, selective=True, source=SRC_MLA))
    qsrc = SRC_KORTH if model.mla is None else SRC_MLA
    add(ActTerm("Q", 2.0, dims["q"], "a·d", tp=True, sp=False, selective=True, source=qsrc))
    add(ActTerm("K", 2.0, dims["k"], "kv·d" if model.mla is None else "a·d", tp=True, sp=False, selective=True, source=qsrc))
    add(ActTerm("V", 2.0, dims["v"], "kv·d" if model.mla is None else "a·d_v", tp=True, sp=False, selective=True, source=qsrc))
    if std:
        add(ActTerm("softmax output (QKᵀ scores)", 2.0, a, "a·s", tp=True, sp=False, selective=False, s2=True))
        if drop:
            add(ActTerm("attention-dropout mask", 1.0, a, "a·s", tp=True, sp=False, selective=False, s2=True))
            add(ActTerm("attention-dropout output", 2.0, a, "a·s", tp=True, sp=False, selective=False, s2=True))
    else:
        add(ActTerm("softmax statistics (fp32 logsumexp)", 4.0, a, "a", tp=True, sp=False, selective=False,
                    source=SRC_FLASH))
    add(ActTerm("attention output (output-projection input)", g, dims["o"], "a·d", tp=True, sp=False,
                selective=True, source=gsrc if std else gsrc + "; " + SRC_FLASH))
    if drop:
        add(ActTerm("attention residual dropout mask", 1.0, h, "h", tp=False, sp=True, selective=True))
    # --- MLP / MoE block
    add(ActTerm(f"{norm} 2 input", 2.0, h, "h", tp=False, sp=True, selective=True))
    swiglu = model.ffn_type == "swiglu"

    def ffn_terms(label: str, f: int, unit: str, mult: int = 1, src: str = SRC_KORTH):
        if swiglu:
            add(ActTerm(f"{label} gate and up outputs (SwiGLU input)", 2.0, 2 * f * mult, f"2{unit}",
                        tp=True, sp=False, selective=True, source=SRC_SWIGLU if src == SRC_KORTH else src))
            add(ActTerm(f"{label} SwiGLU output (down-projection input)", g, f * mult, unit,
                        tp=True, sp=False, selective=True, source=SRC_SWIGLU if src == SRC_KORTH else src))
        else:
            add(ActTerm(f"{label} GeLU input (FC1 output)", 2.0, f * mult, unit, tp=True, sp=False, selective=True,
                        source=src))
            add(ActTerm(f"{label} GeLU output (FC2 input)", g, f * mult, unit, tp=True, sp=False, selective=True,
                        source=src))

    if moe_layer and model.moe:
        moe = model.moe
        k = moe.top_k
        add(ActTerm("router and dispatch input", g, h, "h", tp=False, sp=True, selective=True, source=SRC_MOE))
        add(ActTerm("router probabilities (fp32)", 4.0, moe.experts, "E", tp=False, sp=True, selective=True,
                    source=SRC_MOE))
        add(ActTerm(f"expert inputs ({k} dispatched copies per token)", g, k * h, "k·h", tp=False, sp=False,
                    selective=True, source=SRC_MOE))
        ffn_terms("experts", moe.expert_ffn_hidden, "k·f_e", k, SRC_MOE)
        add(ActTerm("expert outputs (for the routing-weight gradient)", 2.0, k * h, "k·h", tp=False, sp=True,
                    selective=True, source=SRC_MOE))
        if moe.shared_experts:
            ffn_terms("shared experts", moe.shared_experts * moe.expert_ffn_hidden, "f_s", 1, SRC_MOE)
    else:
        add(ActTerm("MLP input (FC1 input)", g, h, "h", tp=False, sp=True, selective=True, source=gsrc))
        ffn_terms("MLP", model.ffn_hidden, "f")
    if drop:
        add(ActTerm("MLP residual dropout mask", 1.0, h, "h", tp=False, sp=True, selective=True))
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


def aggregate(terms: list[ActTerm], ckpt: ActTerm) -> ActCoeffs:
    def total(pred):
        return float(sum(t.per_token for t in terms if pred(t)))

    return ActCoeffs(
        rep=total(lambda t: not t.s2 and not t.tp and not t.sp),
        sp=total(lambda t: not t.s2 and not t.tp and t.sp),
        tp=total(lambda t: not t.s2 and t.tp),
        sel_rep=total(lambda t: t.selective and not t.s2 and not t.tp and not t.sp),
        sel_sp=total(lambda t: t.selective and not t.s2 and not t.tp and t.sp),
        sel_tp=total(lambda t: t.selective and not t.s2 and t.tp),
        s2=total(lambda t: t.s2),
        ckpt_rep=ckpt.per_token if not ckpt.sp else 0.0,
        ckpt_sp=ckpt.per_token if ckpt.sp else 0.0,
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

    none:      b·s/c · (rep + sp/t_sp + tp/t) + b·s/c · s · s2/t
    selective: b·s/c · (sel_rep + sel_sp/t_sp + sel_tp/t)
    full:      b·s/c · (ckpt_rep + ckpt_sp/t_sp)
    with t_sp = t when sequence parallelism is on, else 1.
    """
    t, sp_div = _split(par)
    tok = _tokens(par)
    s = np.asarray(par.seq, dtype=float)
    none = tok * (c.rep + c.sp / sp_div + c.tp / t) + tok * s * c.s2 / t
    sel = tok * (c.sel_rep + c.sel_sp / sp_div + c.sel_tp / t)
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
    return _out(x)


def first_stage_extra_terms(model: ModelSpec) -> list[ActTerm]:
    """Per micro-batch on the first stage: token ids (int64, Megatron theoretical_memory_usage.py)
    and the embedding-dropout mask (Korthikanti §4.3), when the model has dropout."""
    T = [ActTerm("token ids (int64)", 8.0, 1, "1", tp=False, sp=False, selective=True, source=SRC_MEGATRON_CONV)]
    if model.dropout:
        T.append(ActTerm("embedding dropout mask", 1.0, model.hidden, "h", tp=False, sp=True, selective=True,
                         source=SRC_KORTH_EXTRA))
    return T


def last_stage_extra_terms(model: ModelSpec) -> list[ActTerm]:
    """Per micro-batch on the last stage (Korthikanti §4.3, 4sbh/t·(1 + V/h)): final-norm input,
    LM-head input, and the fp32 logits of the vocab-parallel cross-entropy (4·s·b·V/t; for a
    128K vocabulary these outweigh a layer)."""
    h = model.hidden
    norm = "LayerNorm" if model.norm == "layernorm" else "RMSNorm"
    return [
        ActTerm(f"final {norm} input", 2.0, h, "h", tp=False, sp=True, selective=True, source=SRC_KORTH_EXTRA),
        ActTerm("LM-head input", 2.0, h, "h", tp=False, sp=True, selective=True, source=SRC_KORTH_EXTRA),
        ActTerm("logits (fp32, vocab-parallel cross-entropy)", 4.0, model.vocab, "V", tp=True, sp=False,
                selective=True, source=SRC_KORTH_EXTRA),
    ]


def _extra_bytes(terms: list[ActTerm], par: Parallel):
    total = 0.0
    for term in terms:
        total = total + np.asarray(term_bytes(term, par))
    return total


# ============================================================================ model states

def _zero_divisors(par: Parallel):
    """(weights, gradients, optimizer) divisors for non-expert and expert parameters.

    ZeRO (Rajbhandari 2019 §5) shards over the data-parallel group: dp·cp ranks (Megatron shards
    the distributed optimizer over the data-parallel-with-context-parallel group); expert
    parameters over the expert-data-parallel group dp·cp/ep. Stage 1 shards optimizer states,
    stage 2 also gradients, stage 3 also weights.
    """
    z = np.asarray(par.zero)
    n = np.asarray(par.dp, dtype=float) * np.asarray(par.cp, dtype=float)
    ne = n / np.asarray(par.ep, dtype=float)
    one = np.ones_like(n)
    return (
        (np.where(z >= 3, n, one), np.where(z >= 2, n, one), np.where(z >= 1, n, one)),
        (np.where(z >= 3, ne, one), np.where(z >= 2, ne, one), np.where(z >= 1, ne, one)),
    )


def _states(ne, ex, lin_ne, lin_ex, prec: BytesPerParam, par: Parallel, div=None):
    """weights, gradients, optimizer bytes of ``ne`` non-expert + ``ex`` expert parameters
    (``div``: :func:`_zero_divisors` of ``par``, if already computed)."""
    (wd, gd, od), (wde, gde, ode) = div if div is not None else _zero_divisors(par)
    w = prec.weights * (ne / wd + ex / wde) + prec.fp8_cache * (lin_ne / wd + lin_ex / wde)
    g = np.asarray(prec.gradients) * (ne / gd + ex / gde)
    o = prec.optimizer * (ne / od + ex / ode)
    return w, g, o


def _zero3_buffers(model: ModelSpec, par: Parallel, prec: BytesPerParam, shard: LayerShard, has_layers):
    """Transient ZeRO-3 memory: llmpar/megatron: two layers' bf16 weights gathered (current +
    prefetched) and one layer's unsharded gradient; deepspeed: 4·largest_layer (2 B weight + 2 B
    gradient of the largest module, DeepSpeed's estimator). Returns (weights part, gradient part)."""
    z3 = np.asarray(par.zero) >= 3
    if prec.convention == "deepspeed":
        big = np.asarray(largest_layer_params(model, par))
        return np.where(z3, 2.0 * big, 0.0), np.where(z3, 2.0 * big, 0.0)
    layer = np.maximum(np.asarray(shard.dense), np.asarray(shard.moe) + np.asarray(shard.experts))
    layer = np.where(np.asarray(has_layers), layer, 0.0)
    return (np.where(z3, 2.0 * prec.weights * layer, 0.0),
            np.where(z3, np.asarray(prec.gradients) * layer, 0.0))


# ============================================================================ the stage model

def _layer_coeffs(model: ModelSpec, settings: Settings):
    attn = settings.attention
    ckpt = checkpoint_term(model)
    dense = aggregate(activation_terms(model, False, attn, settings.dtype), ckpt)
    moe = aggregate(activation_terms(model, True, attn, settings.dtype), ckpt) if model.moe else dense
    return dense, moe


def _stage_common(model: ModelSpec, par: Parallel, coeffs) -> dict[str, Any]:
    """The parts of :func:`_stage_eval` that do not depend on the stage: computed once when
    several stages of the same layouts are evaluated (the planner's arrays), same numbers."""
    c_dense, c_moe = coeffs
    act_d, none_d = (np.asarray(x) for x in layer_activation_bytes(c_dense, par))
    act_m, none_m = (act_d, none_d) if c_moe is c_dense else (np.asarray(x) for x in layer_activation_bytes(c_moe, par))
    p = np.asarray(par.pp)
    return {
        "emb": np.asarray(embedding_shard(model, par)), "head": np.asarray(head_shard(model, par)),
        "act": (act_d, none_d, act_m, none_m), "zero_div": _zero_divisors(par),
        "first_x": np.asarray(_extra_bytes(first_stage_extra_terms(model), par)) *
        np.asarray(in_flight_on_stage(par.schedule, p, par.microbatches, par.virtual_stages, 0)),
        "last_x": np.asarray(_extra_bytes(last_stage_extra_terms(model), par)) *
        np.asarray(logits_in_flight(par.schedule, p, par.microbatches)),
    }


def _stage_eval(model: ModelSpec, par: Parallel, settings: Settings, prec: BytesPerParam, shard: LayerShard,
                coeffs, stage, common: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every memory component of pipeline stage ``stage`` (array-polymorphic).

    DualPipe (DeepSeek-V3 Table 2): device i holds stages i and p−1−i (2x parameters); its
    activations are p+1 micro-batches of one stage's layers. ``common``: :func:`_stage_common`
    of the same layouts, if already computed.
    """
    cm = common if common is not None else _stage_common(model, par, coeffs)
    L = model.layers
    p = np.asarray(par.pp)
    i = np.asarray(stage)
    j = p - 1 - i
    dual = (np.asarray(par.schedule) == DUALPIPE) & (p > 1) & (j != i)   # (odd p is infeasible for DualPipe)
    start_i, n_i = (np.asarray(x) for x in stage_span(L, p, i))
    start_j, n_j = (np.asarray(x) for x in stage_span(L, p, j))
    nd_i = np.asarray(_dense_in_span(model, start_i, n_i))
    nd_j = np.asarray(_dense_in_span(model, start_j, n_j))
    nm_i, nm_j = n_i - nd_i, n_j - nd_j
    nd = nd_i + np.where(dual, nd_j, 0)
    nm = nm_i + np.where(dual, nm_j, 0)
    is_first = (i == 0) | (dual & (j == 0))
    is_last = (i == p - 1) | (dual & (j == p - 1))

    emb = np.where(is_first, cm["emb"], 0.0)
    head = np.where(is_last, cm["head"], 0.0)
    ne = nd * np.asarray(shard.dense) + nm * np.asarray(shard.moe) + emb + head
    ex = nm * np.asarray(shard.experts)
    lin_ne = nd * np.asarray(shard.dense_linear) + nm * np.asarray(shard.moe_linear)
    lin_ex = nm * np.asarray(shard.experts_linear)
    w, g, o = _states(ne, ex, lin_ne, lin_ex, prec, par, cm["zero_div"])
    bw, bg = _zero3_buffers(model, par, prec, shard, (nd + nm) > 0)
    w, g = w + bw, g + bg

    act_d, none_d, act_m, none_m = cm["act"]
    fl = np.asarray(in_flight_on_stage(par.schedule, p, par.microbatches, par.virtual_stages, i))
    # DualPipe: p+1 micro-batches of *one* stage's layers (the mean of the two halves it holds)
    w_d = np.where(dual, (nd_i + nd_j) / 2.0, nd_i)
    w_m = np.where(dual, (nm_i + nm_j) / 2.0, nm_i)
    layers_act = (w_d * act_d + w_m * act_m) * fl
    # recompute working set: during a backward one layer's activations are rematerialised
    rec = np.asarray(par.recompute)
    peak_none = np.maximum(np.where(nd > 0, none_d, 0.0), np.where(nm > 0, none_m, 0.0))
    peak_kept = np.maximum(np.where(nd > 0, act_d, 0.0), np.where(nm > 0, act_m, 0.0))
    recompute_ws = np.where(rec == 0, 0.0, peak_none - peak_kept)
    first_x = np.where(is_first, cm["first_x"], 0.0)
    last_x = np.where(is_last, cm["last_x"], 0.0)
    act = layers_act + recompute_ws + first_x + last_x
    return {
        "stage": i, "layers": nd + nm, "dense_layers": nd, "moe_layers": nm,
        "params_per_gpu": ne + ex, "params_nonexpert": ne, "params_expert": ex,
        "weights_bytes": w, "gradients_bytes": g, "optimizer_bytes": o,
        "activations_bytes": act, "in_flight": fl,
        "act_layers_bytes": layers_act, "act_recompute_bytes": recompute_ws,
        "act_first_extra_bytes": first_x, "act_last_extra_bytes": last_x,
        "zero3_buffer_bytes": bw + bg,
    }


def _capacity(hw: Hardware, reserve):
    return float(hw.gpu.memory), float(hw.reserve if reserve is None else reserve)


def _max_by(fixed, per_unit, usable):
    """Largest integer n with fixed + n·per_unit <= usable (inf when per_unit is 0; 0 if none)."""
    room = usable - fixed
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.where(per_unit > 0, np.floor(room / np.where(per_unit > 0, per_unit, 1.0)), np.inf)
    return np.where(room < 0, 0.0, np.maximum(n, 0.0))


MEMORY_KEYS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes")


def candidate_stages(pp):
    """The stages that can be the most loaded (the others never exceed one of them):
    0 (embedding, most micro-batches in flight), 1 (the busiest middle stage: most layers and
    most in flight among middle stages), p−1 (LM head, logits), and the centre device
    p/2 − 1 (under DualPipe it may pair two full middle stages)."""
    p = np.asarray(pp)
    return [np.zeros_like(p), np.minimum(1, p - 1), p - 1, np.maximum(p // 2 - 1, 0)]


def _argmax(values):
    """Index of the largest of a list of equally-shaped values (first on ties), elementwise."""
    stacked = np.stack(np.broadcast_arrays(*[np.asarray(v, dtype=float) for v in values]))
    return np.argmax(stacked, axis=0)


def _choose(pick, values):
    return np.choose(pick, [np.broadcast_to(np.asarray(v, dtype=float), np.shape(pick)) for v in values])


def memory_per_gpu(model: ModelSpec, hw: Hardware, par: Parallel, settings: Settings, reserve=None) -> dict[str, Any]:
    """Training memory per GPU on the most-loaded pipeline stage. Array-polymorphic.

    Evaluates the :func:`candidate_stages` (0, 1, p−1 and the centre) and keeps the one with the
    largest total; the others are never larger (see :func:`stage_span`). Returns a dict of numbers or arrays:
    weights_bytes, gradients_bytes, optimizer_bytes, activations_bytes, kv_cache_bytes (0),
    reserved_bytes, total_bytes (including the reserve), capacity_bytes (HBM), fits,
    max_micro_batch (largest b that fits, from the linear dependence of activations on b),
    params_per_gpu (parameters of this GPU's TP/PP/EP shard, before ZeRO), stage,
    activation_bytes_per_layer (one layer, one micro-batch, of the model's commoner layer kind).
    """
    prec = bytes_per_param(settings, par.zero)
    shard = layer_shard(model, par)
    coeffs = _layer_coeffs(model, settings)
    cands = candidate_stages(par.pp)
    common = _stage_common(model, par, coeffs)
    evals = [_stage_eval(model, par, settings, prec, shard, coeffs, s, common) for s in cands]
    cap, res = _capacity(hw, reserve)
    totals = [sum(np.asarray(e[k]) for k in MEMORY_KEYS) + res for e in evals]
    pick = _argmax(totals)

    def choose(key):
        return _choose(pick, [e[key] for e in evals])

    out = {k: choose(k) for k in MEMORY_KEYS}
    out["kv_cache_bytes"] = np.zeros_like(out["weights_bytes"])
    out["reserved_bytes"] = np.full_like(out["weights_bytes"], res)
    out["total_bytes"] = _choose(pick, totals)
    out["capacity_bytes"] = np.full_like(out["weights_bytes"], cap)
    out["fits"] = out["total_bytes"] <= cap
    b = np.asarray(par.micro_batch, dtype=float)
    out["max_micro_batch"] = np.min(np.stack(np.broadcast_arrays(*[
        _max_by(t - np.asarray(e["activations_bytes"]), np.asarray(e["activations_bytes"]) / b, cap)
        for t, e in zip(totals, evals)])), axis=0)
    out["params_per_gpu"] = choose("params_per_gpu")
    out["stage"] = _choose(pick, cands).astype(int)
    c_dense, c_moe = coeffs
    typical = c_moe if model.moe_layers >= model.dense_layers else c_dense
    out["activation_bytes_per_layer"] = np.asarray(layer_activation_bytes(typical, par)[0], dtype=float)
    return {k: _out(v) for k, v in out.items()}


def memory_per_stage(model: ModelSpec, hw: Hardware, par: Parallel, settings: Settings, reserve=None) -> list[dict]:
    """Every pipeline stage of one scalar layout: layers, parameters and each memory component."""
    prec = bytes_per_param(settings, par.zero)
    shard = layer_shard(model, par)
    coeffs = _layer_coeffs(model, settings)
    _, res = _capacity(hw, reserve)
    rows = []
    for i in range(int(par.pp)):
        e = _stage_eval(model, par, settings, prec, shard, coeffs, i)
        row = {k: _out(np.asarray(e[k])) for k in ("stage", "layers", "params_per_gpu", *MEMORY_KEYS, "in_flight")}
        row["stage"] = i
        row["layers"] = int(row["layers"])
        row["total_bytes"] = sum(row[k] for k in MEMORY_KEYS) + res
        rows.append(row)
    return rows


# ====================================================================== bare parameter count

def model_states_for_count(params, par: Parallel, settings: Settings) -> dict[str, Any]:
    """Model states of a bare parameter count Ψ (``--params 7.5B``), split evenly over tp·pp,
    ZeRO over dp·cp (Rajbhandari 2019 §5, Table 1). No shapes: no activations, and the DeepSpeed
    ZeRO-3 largest-layer term is 0. Array-polymorphic."""
    prec = bytes_per_param(settings, par.zero)
    shard = np.asarray(params, dtype=float) / (np.asarray(par.tp, dtype=float) * np.asarray(par.pp, dtype=float))
    lin = shard if prec.fp8_cache else 0.0
    w, g, o = _states(shard, 0.0, lin, 0.0, prec, par)
    return {"params_per_gpu": _out(shard), "weights_bytes": _out(w), "gradients_bytes": _out(g),
            "optimizer_bytes": _out(o)}


# ================================================================================== inference

def kv_cache_per_token_layer(model: ModelSpec, par: Parallel, kv_dtype: str):
    """KV-cache bytes per token per layer on one GPU: 2·kv_heads·d_head·bytes / t (Pope 2022 §2;
    KV heads split over TP), or for MLA the compressed latent (d_c + d_R)·bytes, replicated over
    TP (DeepSeek-V2 §2.1.2)."""
    nb = KV_BYTES[kv_dtype]
    if model.mla is not None:
        return _out(np.ones_like(np.asarray(par.tp, dtype=float)) * (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * nb)
    return _out(2.0 * model.n_kv_heads * model.d_head * nb / np.asarray(par.tp, dtype=float))


def inference_working_terms(model: ModelSpec, settings: Settings) -> dict[str, float]:
    """Per-token bytes of one layer's live forward tensors during a prefill (an estimate): the
    hidden state and residual (2·2h), then the larger of the attention phase (Q, K, V and the
    attention output, ÷ t; + the s² scores with standard attention) and the MLP phase (gate/up
    and activation output, ÷ t; MoE: k copies through experts)."""
    h = model.hidden
    dims = _attention_dims(model)
    attn_tp = 2.0 * (dims["q"] + dims["k"] + dims["v"] + dims["o"])
    f = model.ffn_hidden
    k = 1
    if model.moe and model.moe_layers:
        f, k = model.moe.expert_ffn_hidden, model.moe.top_k
        f_shared = model.moe.shared_experts * model.moe.expert_ffn_hidden
    else:
        f_shared = 0
    mult = 3 if model.ffn_type == "swiglu" else 2
    mlp_tp = 2.0 * mult * (f * k + f_shared)
    return {"resident": 4.0 * h, "attention_tp": attn_tp,
            "scores_s2": 2.0 * model.heads if settings.attention == "standard" else 0.0,
            "mlp_tp": mlp_tp, "logits_per_seq": 4.0 * model.vocab}


def inference_memory_per_gpu(model: ModelSpec, hw: Hardware, par: Parallel, settings: Settings, batch, context,
                             reserve=None) -> dict[str, Any]:
    """Serving memory per GPU on the most-loaded stage: weights (no gradients or optimizer) +
    KV cache for ``batch`` sequences of ``context`` tokens (÷ cp) + a working-activation
    estimate for one prefill of ``context`` tokens plus fp32 logits of the batch's last
    positions. max_micro_batch is the largest batch that fits. Array-polymorphic."""
    t = np.asarray(par.tp, dtype=float)
    p = np.asarray(par.pp)
    shard = layer_shard(model, par)
    wb = INFERENCE_WEIGHT_BYTES[settings.dtype]
    T = np.asarray(context, dtype=float) / np.asarray(par.cp, dtype=float)
    B = np.asarray(batch, dtype=float)
    kv_tok = np.asarray(kv_cache_per_token_layer(model, par, settings.kv_dtype))
    wt = inference_working_terms(model, settings)
    cap, res = _capacity(hw, reserve)
    per_layer_tok = wt["resident"] + np.maximum((wt["attention_tp"] + wt["scores_s2"] * np.asarray(context, dtype=float)) / t,
                                                wt["mlp_tp"] / t)
    rows = []
    cands = candidate_stages(p)
    for s in cands:
        start, n = (np.asarray(x) for x in stage_span(model.layers, p, s))
        nd = np.asarray(_dense_in_span(model, start, n))
        nm = n - nd
        is_first, is_last = (np.asarray(s) == 0), (np.asarray(s) == p - 1)
        params = (nd * np.asarray(shard.dense) + nm * (np.asarray(shard.moe) + np.asarray(shard.experts))
                  + np.where(is_first, np.asarray(embedding_shard(model, par)), 0.0)
                  + np.where(is_last, np.asarray(head_shard(model, par)), 0.0))
        kv_per_seq = n * kv_tok * T
        logits_per_seq = np.where(is_last, wt["logits_per_seq"] / t, 0.0)
        work_fixed = T * per_layer_tok
        rows.append({"params_per_gpu": params, "weights_bytes": wb * params, "kv_cache_bytes": kv_per_seq * B,
                     "activations_bytes": work_fixed + logits_per_seq * B,
                     "per_seq": kv_per_seq + logits_per_seq, "work_fixed": work_fixed})
    totals = [r["weights_bytes"] + r["kv_cache_bytes"] + r["activations_bytes"] + res for r in rows]
    pick = _argmax(totals)

    def choose(key):
        return _choose(pick, [r[key] for r in rows])

    out = {k: choose(k) for k in ("weights_bytes", "activations_bytes", "kv_cache_bytes", "params_per_gpu")}
    zero = np.zeros_like(out["weights_bytes"])
    out.update(gradients_bytes=zero, optimizer_bytes=zero, reserved_bytes=zero + res, capacity_bytes=zero + cap)
    out["total_bytes"] = _choose(pick, totals)
    out["fits"] = out["total_bytes"] <= cap
    out["max_micro_batch"] = np.min(np.stack(np.broadcast_arrays(*[
        _max_by(r["weights_bytes"] + r["work_fixed"] + res, r["per_seq"], cap) for r in rows])), axis=0)
    out["stage"] = _choose(pick, cands).astype(int)
    out["activation_bytes_per_layer"] = T * per_layer_tok
    return {k: _out(v) for k, v in out.items()}


# ============================================================================ the explain layer

@dataclass
class Term:
    """One line of ``--explain``: component, name, bytes, formula, substituted values, source."""

    component: str
    name: str
    bytes: float
    formula: str
    values: str
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"component": self.component, "name": self.name, "bytes": self.bytes,
                "formula": self.formula, "values": self.values, "source": self.source}


def _g(x) -> str:
    x = float(x)
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:.4g}"


def _zero_desc(div_w, div_g, div_o) -> tuple[str, str, str]:
    return tuple("" if float(d) == 1 else f" / {_g(d)}" for d in (div_w, div_g, div_o))


def state_terms(params_ne, params_e, lin_ne, lin_e, prec: BytesPerParam, par: Parallel, settings: Settings) -> list[Term]:
    """Weights, gradients and optimizer terms of a scalar layout (the same arithmetic as :func:`_states`)."""
    (wd, gd, od), (wde, gde, ode) = _zero_divisors(par)
    z = int(par.zero)
    src = {"llmpar": SRC_ZERO, "megatron": SRC_MEGATRON_CONV, "deepspeed": SRC_DS2 if z < 3 else SRC_DS3}[prec.convention]
    zdesc = f"ZeRO-{z} over dp·cp = {_g(np.asarray(par.dp) * np.asarray(par.cp))}" if z else "ZeRO-0 (replicated over dp)"
    out = []
    for comp, nb, (d, de) in (("weights", prec.weights, (wd, wde)), ("gradients", prec.gradients, (gd, gde)),
                              ("optimizer", prec.optimizer, (od, ode))):
        val = float(nb) * (float(params_ne) / float(d) + float(params_e) / float(de))
        if float(params_e):
            formula = f"{prec.describe[comp].split(':')[0]}: {_g(nb)} B × (Ψ_gpu/{'N' if float(d) > 1 else '1'} + Ψ_exp/{'N_e' if float(de) > 1 else '1'})"
            values = f"{_g(nb)} × ({_g(params_ne)}/{_g(d)} + {_g(params_e)}/{_g(de)})"
        else:
            formula = f"{_g(nb)} B/param × Ψ_gpu{' / N' if float(d) > 1 else ''}"
            values = f"{_g(nb)} × {_g(params_ne)}{'' if float(d) == 1 else ' / ' + _g(d)}"
        out.append(Term(comp, f"{comp} ({prec.describe[comp]})", val, formula, f"{values}; {zdesc}", src))
    if prec.fp8_cache and (float(lin_ne) or float(lin_e)):
        val = prec.fp8_cache * (float(lin_ne) / float(wd) + float(lin_e) / float(wde))
        out.append(Term("weights", "fp8 weight cache (copy + transpose of linear weights)", val,
                        "2 B × linear params", f"2 × ({_g(lin_ne)}/{_g(wd)} + {_g(lin_e)}/{_g(wde)})", SRC_TE_FP8))
    return out


def memory_terms(model: ModelSpec | None, hw: Hardware, par: Parallel, settings: Settings, reserve=None, *,
                 stage: int | None = None, params: float | None = None) -> list[Term]:
    """Every term of one scalar layout's memory on ``stage`` (default: the most-loaded stage).

    Sums per component equal :func:`memory_per_gpu`'s (or :func:`model_states_for_count`'s)."""
    prec = bytes_per_param(settings, par.zero)
    cap, res = _capacity(hw, reserve)
    terms: list[Term] = []
    if model is None:
        shard = float(params) / (int(par.tp) * int(par.pp))
        terms.append(Term("params", "parameters per GPU", shard, "Ψ / (tp·pp)",
                          f"{_g(params)} / ({int(par.tp)}·{int(par.pp)})", "even split of a bare count"))
        terms += state_terms(shard, 0.0, shard if prec.fp8_cache else 0.0, 0.0, prec, par, settings)
        terms.append(Term("reserved", "reserve", res, "profile or --reserve", _g(res), SRC_RESERVE))
        return terms
    if stage is None:
        stage = int(memory_per_gpu(model, hw, par, settings, reserve)["stage"])
    shard = layer_shard(model, par)
    coeffs = _layer_coeffs(model, settings)
    e = _stage_eval(model, par, settings, prec, shard, coeffs, stage)
    nd, nm = int(e["dense_layers"]), int(e["moe_layers"])
    t = int(par.tp)
    # parameters on this GPU
    emb = float(embedding_shard(model, par)) if (stage == 0 or _is_dual_end(par, stage, 0)) else 0.0
    head = float(head_shard(model, par)) if (stage == int(par.pp) - 1 or _is_dual_end(par, stage, int(par.pp) - 1)) else 0.0
    src_shard = SRC_MEGATRON_TP + "; " + SRC_MEGATRON_PP
    if nd:
        terms.append(Term("params", f"{nd} dense layer(s)", nd * float(shard.dense),
                          "L_stage × [(attn − attn_rep)/t + attn_rep + (mlp − b_row)/t + b_row + norms]",
                          f"{nd} × {_g(shard.dense)} (t={t})", src_shard))
    if nm:
        terms.append(Term("params", f"{nm} MoE layer(s), non-expert", nm * float(shard.moe),
                          "L_stage × [(attn)/t + shared/t + router + norms]", f"{nm} × {_g(shard.moe)} (t={t})", src_shard))
        terms.append(Term("params", f"{nm} MoE layer(s), routed experts", nm * float(shard.experts),
                          "L_stage × E·expert / (ep·t)",
                          f"{nm} × {model.moe.experts}·{_g(P.expert_params(model))} / ({int(par.ep)}·{t})", src_shard))
    if emb:
        terms.append(Term("params", "embedding (vocab-parallel)", emb, "V·h/t + positions",
                          f"{model.vocab}·{model.hidden}/{t} + {_g(P.embedding_params(model) - _word_embedding(model))}",
                          SRC_MEGATRON_TP))
    if head:
        tied = model.tied_embeddings and int(par.pp) > 1
        terms.append(Term("params", "LM head (vocab-parallel) + final norm" + (" (tied copy, pp > 1)" if tied else ""), head,
                          "V·h/t + final norm" if (P.head_params(model) or tied) else "final norm (tied, counted once)",
                          f"{_g(P.head_params(model) or (_word_embedding(model) if tied else 0))}/{t} + {P.final_norm_params(model)}",
                          SRC_MEGATRON_PP))
    terms += state_terms(e["params_nonexpert"], e["params_expert"],
                         nd * float(shard.dense_linear) + nm * float(shard.moe_linear), nm * float(shard.experts_linear),
                         prec, par, settings)
    if float(e["zero3_buffer_bytes"]):
        bw, bg = _zero3_buffers(model, par, prec, shard, True)
        if prec.convention == "deepspeed":
            big = float(largest_layer_params(model, par))
            terms.append(Term("weights", "ZeRO-3 largest-layer buffer (weights)", float(bw), "2 × largest_layer",
                              f"2 × {_g(big)}", SRC_DS3))
            terms.append(Term("gradients", "ZeRO-3 largest-layer buffer (gradients)", float(bg), "2 × largest_layer",
                              f"2 × {_g(big)}", SRC_DS3))
        else:
            terms.append(Term("weights", "ZeRO-3 gathered layers (current + prefetch)", float(bw),
                              "2 × bytes_w × layer params/GPU", f"2 × {_g(prec.weights)} × {_g(float(bw) / (2 * prec.weights))}",
                              SRC_ZERO3_BUF))
            terms.append(Term("gradients", "ZeRO-3 unsharded layer gradient", float(bg), "bytes_g × layer params/GPU",
                              f"{_g(prec.gradients)} × {_g(float(bg) / float(prec.gradients))}", SRC_ZERO3_BUF))
    # activations
    fl = float(e["in_flight"])
    rec = int(par.recompute)
    for kind, n, moe_layer in (("dense", nd, False), ("MoE", nm, True)):
        if not n:
            continue
        tt = activation_terms(model, moe_layer, settings.attention, settings.dtype)
        kept = [x for x in tt if rec == 0 or (rec == 1 and x.selective)] if rec < 2 else [checkpoint_term(model)]
        dual = int(par.schedule) == DUALPIPE and int(par.pp) > 1
        n_eff = n / 2.0 if dual else n
        for x in kept:
            per = float(term_bytes(x, par))
            terms.append(Term("activations", f"{kind} layer: {x.name}", per * n_eff * fl,
                              _act_formula(x) + " × layers × in-flight",
                              f"{_g(per)} B/layer × {_g(n_eff)} × {_g(fl)}", x.source))
    if float(e["act_recompute_bytes"]):
        terms.append(Term("activations", "recompute working set (one layer rematerialised in backward)",
                          float(e["act_recompute_bytes"]), "one layer's activations without recompute − kept",
                          f"{_g(e['act_recompute_bytes'])}", CHECKPOINT_SOURCE))
    for flag, key, tlist, inflight in (
        ("first", "act_first_extra_bytes", first_stage_extra_terms(model),
         in_flight_on_stage(par.schedule, par.pp, par.microbatches, par.virtual_stages, 0)),
        ("last", "act_last_extra_bytes", last_stage_extra_terms(model), logits_in_flight(par.schedule, par.pp, par.microbatches)),
    ):
        if not float(e[key]):
            continue
        for x in tlist:
            per = float(term_bytes(x, par))
            terms.append(Term("activations", f"{flag} stage: {x.name}", per * float(inflight),
                              _act_formula(x) + " × in-flight", f"{_g(per)} × {_g(inflight)}", x.source))
    terms.append(Term("reserved", "reserve", res, "profile or --reserve", _g(res), SRC_RESERVE))
    return terms


def _is_dual_end(par: Parallel, stage: int, end: int) -> bool:
    return int(par.schedule) == DUALPIPE and int(par.pp) > 1 and int(par.pp) - 1 - stage == end


def _act_formula(x: ActTerm) -> str:
    coef = f"{x.coef:g}" if x.coef != 1 else ""
    seq = "b·(s/c)·s" if x.s2 else "b·(s/c)"
    div = " / t" if x.tp else (" / t_sp" if x.sp else "")
    return f"{coef}·{seq}·{x.unit}{div}".lstrip("·")


def inference_terms(model: ModelSpec, hw: Hardware, par: Parallel, settings: Settings, batch, context,
                    reserve=None) -> list[Term]:
    """Terms of :func:`inference_memory_per_gpu` for one scalar layout."""
    r = inference_memory_per_gpu(model, hw, par, settings, batch, context, reserve)
    stage = int(r["stage"])
    _, n = stage_span(model.layers, par.pp, stage)
    kv_tok = float(kv_cache_per_token_layer(model, par, settings.kv_dtype))
    T = float(context) / int(par.cp)
    wb = INFERENCE_WEIGHT_BYTES[settings.dtype]
    cap, res = _capacity(hw, reserve)
    if model.mla is not None:
        kvf = "L_stage·(d_c + d_R)·T/c·B·bytes"
        kvv = f"{int(n)}·({model.mla.kv_lora_rank}+{model.mla.qk_rope_head_dim})·{_g(T)}·{batch}·{KV_BYTES[settings.kv_dtype]:g}"
        kvs = SRC_KV_MLA
    else:
        kvf = "2·L_stage·kv_heads·d_head·T/c·B·bytes / t"
        kvv = (f"2·{int(n)}·{model.n_kv_heads}·{model.d_head}·{_g(T)}·{batch}·{KV_BYTES[settings.kv_dtype]:g} / {int(par.tp)}")
        kvs = SRC_KV
    return [
        Term("params", "parameters on this GPU", float(r["params_per_gpu"]), "stage layers + embedding/head, ÷ t, ep",
             _g(r["params_per_gpu"]), SRC_MEGATRON_TP),
        Term("weights", f"weights ({settings.dtype}, {wb:g} B/param)", float(r["weights_bytes"]), "bytes × Ψ_gpu",
             f"{wb:g} × {_g(r['params_per_gpu'])}", SRC_MEGATRON_TP),
        Term("kv_cache", f"KV cache ({settings.kv_dtype})", float(r["kv_cache_bytes"]), kvf, kvv + f" (= {_g(kv_tok)} B/token/layer)", kvs),
        Term("activations", "working activations (one prefill + last-position logits)", float(r["activations_bytes"]),
             "T/c·[4h + max(attn/t, mlp/t)] + B·4V/t (last stage)", f"T={_g(T)}, B={batch}",
             "llmpar estimate (docs/memory.md, Inference)"),
        Term("reserved", "reserve", res, "profile or --reserve", _g(res), SRC_RESERVE),
    ]


__all__ = [
    "ActTerm", "BytesPerParam", "LayerShard", "Term",
    "activation_terms", "bytes_per_param", "check_convention", "convention_allows",
    "embedding_shard", "head_shard", "in_flight_on_stage", "inference_memory_per_gpu", "inference_terms",
    "kv_cache_per_token_layer", "largest_layer_params", "layer_activation_bytes", "layer_shard",
    "logits_in_flight", "memory_per_gpu", "memory_per_stage", "memory_terms", "model_states_for_count",
    "stage_span", "term_bytes",
]

