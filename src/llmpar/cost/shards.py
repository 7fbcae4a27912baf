"""Parameters per GPU: the TP/PP/EP shard of a layer, the embedding and the LM head (docs/memory.md).

Split out of cost/states.py (the model states' bytes per parameter and ZeRO divisors stay there;
this module says how many parameters each GPU holds before ZeRO). Sources:

* Shoeybi et al. 2019, "Megatron-LM", arXiv:1909.08053, §3 (column/row-parallel matrices,
  vocab-parallel embedding); Narayanan et al. 2021, arXiv:2104.04473, §2.2-2.3; Megatron
  conventions: NVIDIA/Megatron-LM megatron/training/theoretical_memory_usage.py.
* MoE parallel folding (expert-TP): Liu et al. 2025, arXiv:2504.14960 §3.
* DeepSpeed: stage3.py estimate_zero3_model_states_mem_needs (``largest_layer_params``).

Array-polymorphic in every degree of a :class:`~llmpar.parallel.Parallel`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from llmpar.cost import params as P
from llmpar.cost.arrays import scalar_out as _out
from llmpar.cost.params import _linear, _mlp_bias, _out_bias
from llmpar.parallel import Parallel
from llmpar.specs.model import ModelSpec

SRC_MEGATRON_TP = "Shoeybi et al. 2019 (Megatron-LM, arXiv:1909.08053) §3"
SRC_MEGATRON_PP = "Narayanan et al. 2021 (arXiv:2104.04473) §2.2; Megatron-LM theoretical_memory_usage.py"


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
    parameters of a MoE layer (sharded by ep x expert-TP etp); ``*_linear``: the part in linear
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
    replicated. MoE: routed experts split over ep ranks and expert-TP etp (= t unless MoE parallel
    folding sets it: Liu et al. 2025, arXiv:2504.14960 §3); shared experts like a dense FFN;
    router replicated."""
    t = np.asarray(par.tp, dtype=float)
    ep = np.asarray(par.ep, dtype=float)
    et = np.asarray(par.expert_tp, dtype=float)
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
        experts = model.moe.experts * ((one - _row_bias(model)) / et + _row_bias(model)) / ep
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
