"""Exact parameter counts, per component (docs/models.md, "Counting").

Every count is a function of the model's shapes only (a :class:`~llmpar.specs.model.ModelSpec`),
so the results are Python ints; nothing here depends on parallel degrees. Memory, FLOPs and the
planner take these counts and divide them by degrees themselves.

Conventions (each matches the reference implementation named beside it):

* A *linear* ``x (n) -> y (m)`` holds ``n*m`` weights, plus ``m`` biases when it has a bias.
* LayerNorm holds a weight and a bias (``2*w``); RMSNorm a weight only (``w``)
  (Ba et al. 2016; Zhang & Sennrich 2019).
* A transformer block has two norms of width h (before attention and before the MLP; GPT-2/3,
  Megatron, Llama, Mixtral, Qwen2, DeepSeek, and GPT-NeoX, whose parallel block still has two).
  One final norm of width h follows the last block.
* Attention, multi-head / grouped-query (Vaswani et al. 2017 §3.2; Ainslie et al. 2023 GQA):
  ``W_q: h x a*d``, ``W_k, W_v: h x kv*d``, ``W_o: a*d x h``.
* Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434 §2.1.2-2.1.3, eqs. 9-14 and 37-40;
  DeepSeek-V3, arXiv:2412.19437 §2.1.1): ``q_a: h x q_lora``, q_a norm, ``q_b: q_lora x
  a*(d_nope+d_rope)`` (or ``q: h x a*(d_nope+d_rope)`` without query compression),
  ``kv_a: h x (kv_lora + d_rope)`` (the shared rotary key comes out of the same projection),
  kv_a norm, ``kv_b: kv_lora x a*(d_nope + d_v)``, ``o: a*d_v x h``.
* FFN: GeLU has two matrices ``h x f`` and ``f x h`` (Vaswani et al. 2017 §3.3; GPT-2); SwiGLU
  three, gate and up ``h x f`` and down ``f x h`` (Shazeer 2020, eq. 6).
* MoE (Fedus et al. 2021; Jiang et al. 2024 Mixtral §2.1; DeepSeek-V3 §2.1.2): each routed
  expert is one FFN of size ``expert_ffn_hidden``; shared experts likewise; the router is a
  linear ``h x E`` without bias, plus a per-expert bias for DeepSeek-V3's auxiliary-loss-free
  balancing (``e_score_correction_bias``). Layers listed in ``moe.dense_layers`` have a dense FFN
  of size ``ffn_hidden`` instead.
* Embedding ``V x h`` plus learned positions ``max_seq x h`` (GPT-2/3, Megatron); the LM head is
  another ``V x h`` unless tied (then 0).

For the Megatron GPT family this gives Narayanan et al. 2021 (arXiv:2104.04473) eq. 2,
``P = 12*l*h^2 * (1 + 13/(12h) + (V+s)/(12*l*h))``, plus the final LayerNorm's ``2h``, which eq. 2
leaves out: per layer 12h^2 + 13h (QKV 3h^2+3h, proj h^2+h, FFN 8h^2+5h, two LayerNorms 4h).
"""

from __future__ import annotations

from llmpar.specs.model import ModelSpec

__all__ = [
    "active_params",
    "attention_params",
    "breakdown",
    "dense_layer_params",
    "dense_mlp_params",
    "embedding_params",
    "expert_params",
    "final_norm_params",
    "head_params",
    "is_moe_layer",
    "layer_params",
    "moe_layer_params",
    "norm_params",
    "norm_params_per_layer",
    "param_tensors_per_layer",
    "router_params",
    "shared_expert_params",
    "total_params",
]

BREAKDOWN_KEYS = ("embedding", "attention", "mlp", "experts", "shared_experts", "router", "norms", "head")


def ffn_mats(model: ModelSpec) -> int:
    """Matrices of one FFN: GeLU 2 (h->f->h, Vaswani 2017 §3.3), SwiGLU 3 (gate, up, down; Shazeer 2020)."""
    return 3 if model.ffn_type == "swiglu" else 2


def attention_head_dims(model: ModelSpec) -> tuple[int, int]:
    """(d_qk, d_v): width of one query/key head and one value head.
    MHA/GQA: (d, d); MLA (DeepSeek-V2 §2.1): (qk_nope + qk_rope, v_head_dim) = (192, 128) for V3."""
    if model.mla is not None:
        return model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim, model.mla.v_head_dim
    return model.d_head, model.d_head


def _linear(n_in: int, n_out: int, bias: bool) -> int:
    """Weights ``n_in*n_out`` plus ``n_out`` biases when the linear has a bias."""
    return n_in * n_out + (n_out if bias else 0)


def norm_params(model: ModelSpec, width: int) -> int:
    """One norm of ``width``: LayerNorm weight + bias (2w, Ba et al. 2016), RMSNorm weight (w)."""
    return 2 * width if model.norm == "layernorm" else width


def _qkv_bias(model: ModelSpec) -> bool:
    return model.linear_bias or model.qkv_bias


def _out_bias(model: ModelSpec) -> bool:
    return model.linear_bias or model.attention_out_bias


def _mlp_bias(model: ModelSpec) -> bool:
    return model.linear_bias or model.mlp_bias


def attention_params(model: ModelSpec) -> int:
    """One layer's attention, biases included; MHA, GQA or MLA (see the module docstring).

    MHA/GQA (Ainslie et al. 2023): h*a*d + 2*h*kv*d + a*d*h (+ a*d + 2*kv*d if QKV bias, + h if
    output bias). Llama-2-7B: 4 * 4096^2 = 67,108,864.
    MLA (DeepSeek-V2 §2.1, eqs. 9-14, 37-40): q_a + q_a_norm + q_b + kv_a + kv_a_norm + kv_b + o.
    Attention sinks (gpt-oss: a learned logit per head, OpenAI 2025 gpt-oss model card §2.1): + a.
    """
    h = model.hidden
    if model.mla is not None:
        mla = model.mla
        a = model.heads
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank is None:
            q = _linear(h, a * qk, _qkv_bias(model))  # W_Q directly (DeepSeek-V2-Lite)
        else:
            q = (
                _linear(h, mla.q_lora_rank, _qkv_bias(model))  # W_DQ (q_a_proj), eq. 37
                + norm_params(model, mla.q_lora_rank)  # q_a_layernorm
                + _linear(mla.q_lora_rank, a * qk, False)  # W_UQ and W_QR (q_b_proj), eqs. 38-39
            )
        kv = (
            _linear(h, mla.kv_lora_rank + mla.qk_rope_head_dim, _qkv_bias(model))  # W_DKV and W_KR, eqs. 9, 11
            + norm_params(model, mla.kv_lora_rank)  # kv_a_layernorm
            + _linear(mla.kv_lora_rank, a * (mla.qk_nope_head_dim + mla.v_head_dim), False)  # W_UK, W_UV
        )
        o = _linear(a * mla.v_head_dim, h, _out_bias(model))  # W_O, eq. 14
        return q + kv + o
    a, kv, d = model.heads, model.n_kv_heads, model.d_head
    q = _linear(h, a * d, _qkv_bias(model))
    k = _linear(h, kv * d, _qkv_bias(model))
    v = _linear(h, kv * d, _qkv_bias(model))
    o = _linear(a * d, h, _out_bias(model))
    return q + k + v + o + (a if model.attention_sinks else 0)


def _ffn_params(model: ModelSpec, ffn: int) -> int:
    """One FFN of inner size ``ffn``: GeLU 2 matrices (Vaswani 2017 §3.3), SwiGLU 3 (Shazeer 2020)."""
    h, bias = model.hidden, _mlp_bias(model)
    if model.ffn_type == "gelu":
        return _linear(h, ffn, bias) + _linear(ffn, h, bias)
    return 2 * _linear(h, ffn, bias) + _linear(ffn, h, bias)


def dense_mlp_params(model: ModelSpec) -> int:
    """One dense FFN of size ``ffn_hidden``. GPT (gelu, biases): 8h^2 + 5h; Llama (swiglu): 3hf."""
    return _ffn_params(model, model.ffn_hidden)


def expert_params(model: ModelSpec) -> int:
    """One routed expert (an FFN of ``moe.expert_ffn_hidden``); 0 for a dense model."""
    return _ffn_params(model, model.moe.expert_ffn_hidden) if model.moe else 0


def shared_expert_params(model: ModelSpec) -> int:
    """All shared experts of one MoE layer (DeepSeek-V3: 1 x 3*7168*2048); 0 if none."""
    return model.moe.shared_experts * expert_params(model) if model.moe else 0


def router_params(model: ModelSpec) -> int:
    """One MoE layer's router: linear h x E without bias (+ E biases when ``router_bias``)."""
    if not model.moe:
        return 0
    return model.hidden * model.moe.experts + (model.moe.experts if model.moe.router_bias else 0)


def norm_params_per_layer(model: ModelSpec) -> int:
    """The block's norms of width h: pre-attention and pre-MLP, and with sandwich norms (Gemma 2/3)
    the post-attention and post-MLP ones too; MLA's inner norms are in attention."""
    return (4 if model.sandwich_norms else 2) * norm_params(model, model.hidden)


def param_tensors_per_layer(model: ModelSpec) -> int:
    """Parameter *tensors* (not elements) of one block, as a framework holds them with fused QKV
    and fused gate/up (nanotron ``LlamaDecoderLayer``: qkv_proj, o_proj, gate_up_proj, down_proj,
    input_layernorm, post_attention_layernorm = 6 for Llama): 4 weight matrices and their biases,
    2 norms (weight, and bias for LayerNorm). MoE blocks hold 2 matrices per routed expert (fused
    gate/up, down) and per shared expert, plus the router, instead of the dense MLP's 2; MLA adds
    its two inner norms and the down/up split of Q and KV (2 more matrices).
    Counts what loops over parameters cost (nanotron's ZeRO-1 gather: cost/comm.py)."""
    n = 4 + (1 if _qkv_bias(model) else 0) + (1 if _out_bias(model) else 0) + (2 if _mlp_bias(model) else 0)
    n += (4 if model.sandwich_norms else 2) * (2 if model.norm == "layernorm" else 1)
    if model.mla is not None:
        n += 4
    if model.moe is not None:
        moe = model.moe
        n += 2 * (moe.experts + moe.shared_experts) + 1 - 2
    return n


def embedding_params(model: ModelSpec) -> int:
    """Token embedding V*h, plus learned positions max_seq*h (GPT-2/3, Megatron)."""
    pos = model.max_seq * model.hidden if model.position == "learned" else 0
    return model.vocab * model.hidden + pos


def head_params(model: ModelSpec) -> int:
    """LM head V*h (no bias); 0 when tied to the token embedding."""
    return 0 if model.tied_embeddings else model.vocab * model.hidden


def final_norm_params(model: ModelSpec) -> int:
    """The norm after the last block (not in Narayanan eq. 2)."""
    return norm_params(model, model.hidden)


def mtp_module_params(model: ModelSpec) -> int:
    """One multi-token-prediction module (DeepSeek-V3 §2.2, Fig. 3): a block like the model's last,
    the projection M (h x 2h, no bias) of [norm(h_prev); norm(emb)], those two RMSNorms and the
    shared head's norm; embedding and output head are shared with the main model, not counted.
    DeepSeek-V3: 11,507,286,272 (a MoE block) + 2 x 7168^2 + 3 x 7168 = 11,610,068,224; with the
    checkpoint's copies of the embedding and head (2 x 129280 x 7168 = 1,853,358,080) 13.46B, the
    "685B" of the released weights less the 671B main model."""
    return layer_params(model, model.layers - 1) + int(mtp_extra_params(model))


def mtp_extra_params(model: ModelSpec, tp=1):
    """What an MTP module holds beyond its block: the projection M (h x 2h, column-parallel, so
    / tp) and its three RMSNorms (replicated). Array-polymorphic in ``tp``."""
    h = model.hidden
    return 2.0 * h * h / tp + 3.0 * norm_params(model, h)


def is_moe_layer(model: ModelSpec, index: int) -> bool:
    """Whether block ``index`` (0-based) has experts rather than a dense FFN."""
    return model.moe is not None and index not in model.moe.dense_layers


def dense_layer_params(model: ModelSpec) -> int:
    """One block with a dense FFN: attention + FFN + two norms."""
    return attention_params(model) + dense_mlp_params(model) + norm_params_per_layer(model)


def moe_layer_params(model: ModelSpec) -> int:
    """One block with experts: attention + E routed + shared experts + router + two norms."""
    if not model.moe:
        return dense_layer_params(model)
    return (
        attention_params(model)
        + model.moe.experts * expert_params(model)
        + shared_expert_params(model)
        + router_params(model)
        + norm_params_per_layer(model)
    )


def layer_params(model: ModelSpec, index: int) -> int:
    """Parameters of block ``index`` (0-based), dense or MoE."""
    return moe_layer_params(model) if is_moe_layer(model, index) else dense_layer_params(model)


def breakdown(model: ModelSpec) -> dict[str, int]:
    """Whole-model counts per component; ``total`` is the sum of the eight components.

    ``norms`` holds every block's norms and the final norm. ``active`` counts what one token goes
    through: everything except the routed experts it is not sent to, i.e. total minus
    moe_layers * (E - top_k) * expert (Mixtral 12.9B of 46.7B; DeepSeek-V3 37B of 671B).
    """
    L, n_moe = model.layers, model.moe_layers
    parts = {
        "embedding": embedding_params(model),
        "attention": L * attention_params(model),
        "mlp": model.dense_layers * dense_mlp_params(model),
        "experts": n_moe * (model.moe.experts if model.moe else 0) * expert_params(model),
        "shared_experts": n_moe * shared_expert_params(model),
        "router": n_moe * router_params(model),
        "norms": L * norm_params_per_layer(model) + final_norm_params(model),
        "head": head_params(model),
    }
    total = sum(parts[k] for k in BREAKDOWN_KEYS)
    idle = n_moe * ((model.moe.experts - model.moe.top_k) if model.moe else 0) * expert_params(model)
    return {**parts, "total": total, "active": total - idle}


def total_params(model: ModelSpec) -> int:
    return breakdown(model)["total"]


def active_params(model: ModelSpec) -> int:
    """Parameters one token activates (= total for a dense model)."""
    return breakdown(model)["active"]
