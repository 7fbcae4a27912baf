"""Time of one serving iteration: decode tokens and a prefill chunk on one engine replica.

A continuous-batching engine (vLLM, SGLang, TRT-LLM) runs *iterations*: each holds ``decode``
sequences that each add one token and, with chunked prefill, ``prefill`` prompt tokens of new
requests (docs/serving.md, "One iteration"). Everything here is array-polymorphic: batch sizes,
contexts, chunk sizes and degrees may be numpy arrays (one entry per candidate).

Per layer, on one GPU of a TP group of ``tp`` (the terms :func:`iteration_terms` returns):

* **linear** — the roofline (Williams, Waterman & Patterson, CACM 2009) of the weight GEMMs:
  max(weight bytes / achieved HBM bandwidth, linear FLOPs / achieved peak), the achieved peak
  following the hardware GEMM curve's shape term e_max·N/(N + d_half) at N tokens. Decode at small
  batch reads every weight once per iteration (Pope et al. 2022, arXiv:2211.05102, §3.1: "the
  weights must be loaded ... each step"); the FLOPs are 2 x active parameters per token
  (Kaplan et al. 2020, arXiv:2001.08361, §2.1). MoE: a step of N tokens, each routed to k of E
  experts, touches E·(1 − (1 − k/E)^N) distinct experts on average (each token misses a given
  expert with probability 1 − k/E; tokens routed independently and uniformly — the occupancy
  formula, Feller 1968, Vol. I, §II.11), and only those experts' weights are read.
* **attention** — decode: the roofline of the KV-cache reads (2·kv_heads·d_head bytes per token
  per layer, Pope 2022 §2; MLA's latent, DeepSeek-V2 arXiv:2405.04434 §2.1.2) against the score
  FLOPs 2·heads·(d_qk + d_v) per cached token; prefill: causal FLOPs over the chunk and the
  context before it, compute-bound, at the engine's attention fraction of the 16-bit peak.
* **tp** — two all-reduces per layer of (tokens x hidden x 2 B) over the TP group (Shoeybi et al.
  2019, arXiv:1909.08053, §3: one after attention, one after the MLP), on the α–β collective model
  of :mod:`llmpar.cost.collectives`; with expert parallelism the MoE layer's all-reduce becomes a
  dispatch and a combine all-to-all of tokens x top_k x hidden x 2 B.
* **overhead** — the engine's fixed costs per iteration, per sequence and per layer.

With pipeline parallelism the batch is split into ``pp`` micro-batches in flight; one token of a
sequence passes every stage, so the time per output token is the time of all layers for one
micro-batch plus pp − 1 stage hand-offs, and the replica's throughput is batch / that time.
"""

from __future__ import annotations

import numpy as np

from llmpar.cost.arrays import scalar_out
from llmpar.cost.collectives import collective_time
from llmpar.cost.params import (attention_params, dense_mlp_params, expert_params, head_params, router_params,
                                shared_expert_params)
from llmpar.specs.stack import per_gen

# bytes per weight of the linear layers, scales included: int4/AWQ/GPTQ group 128 with a 16-bit
# scale (+2/128 B; Lin et al. 2024 AWQ §3; Frantar et al. 2023 GPTQ §4), NVFP4 blocks of 16 with an
# FP8 scale (+1/16 B; NVIDIA Blackwell NVFP4), MXFP4 blocks of 32 with an E8M0 scale (+1/32 B; OCP
# Microscaling Formats v1.0 §5). Embedding and LM head stay 16-bit in every engine's quantized path.
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5 + 2.0 / 128,
                "nvfp4": 0.5 + 1.0 / 16, "mxfp4": 0.5 + 1.0 / 32}
WEIGHT_DTYPES = tuple(WEIGHT_BYTES)
KV_DTYPES = ("bf16", "fp16", "fp8")
# the peak the GEMMs run at: W8A8 fp8 at the fp8 peak; weight-only int8/int4 dequantize into
# 16-bit GEMMs (W4A16); fp4 at the fp4 peak where the profile states one (Blackwell), else 16-bit
COMPUTE_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "bf16", "int4": "bf16",
                 "nvfp4": "fp4", "mxfp4": "fp4"}


def compute_dtype(hw, weights: str) -> str:
    d = COMPUTE_DTYPE[weights]
    return d if d in hw.gpu.peak_flops else "bf16"


def experts_touched(experts, top_k, tokens):
    """Expected distinct experts of E that N tokens routed to k each touch: E·(1 − (1 − k/E)^N)."""
    n = np.maximum(np.asarray(tokens, dtype=float), 0.0)
    return experts * (1.0 - (1.0 - top_k / experts) ** n)


def attention_dims(model, absorbed: bool) -> tuple[float, float]:
    """(d_qk, d_v) per head of the attention core. MLA in decode runs absorbed (the up-projections
    folded into Q and the output: scores against the kv_lora_rank + rope latent; DeepSeek-V2 §2.1.2,
    "absorb"); prefill expands the latent into per-head K and V."""
    if model.mla is not None:
        m = model.mla
        if absorbed:
            return m.kv_lora_rank + m.qk_rope_head_dim, m.kv_lora_rank
        return m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    return model.d_head, model.d_head


def kv_bytes_per_token(model, kv_dtype: str, tp):
    """KV-cache bytes one token adds per layer on one GPU: 2·kv_heads·d_head·bytes / tp (at least
    one KV head per GPU: vLLM replicates KV heads when tp > kv_heads), or MLA's latent
    (kv_lora_rank + rope)·bytes, replicated on every TP rank (DeepSeek-V2 §2.1.2)."""
    nb = 1.0 if kv_dtype == "fp8" else 2.0
    t = np.asarray(tp, dtype=float)
    if model.mla is not None:
        return (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * nb + 0.0 * t
    heads_per_gpu = np.maximum(model.n_kv_heads / t, 1.0)
    return 2.0 * heads_per_gpu * model.d_head * nb


def effective_context(model, context):
    """Mean tokens a layer attends to at ``context``: sliding-window layers see at most the window
    (share ``sliding_window_share`` of the layers; Mistral, gpt-oss, Gemma)."""
    c = np.asarray(context, dtype=float)
    if model.sliding_window is None:
        return c
    share = model.sliding_window_share
    return share * np.minimum(c, model.sliding_window) + (1.0 - share) * c


def _layer_counts(model):
    n_moe = model.moe_layers if model.moe is not None else 0
    return model.layers - n_moe, n_moe


def weight_bytes_per_gpu(model, tp, ep, weights: str, tokens=None, dense_tp=None):
    """Weight bytes one GPU reads in an iteration (all layers, the whole pipeline): the 16-bit
    embedding is not read (a gather), the LM head is; experts only as many as ``tokens`` touch
    (None: all). Experts are spread over all tp GPUs of the replica (ep groups of tp/ep expert-TP);
    everything else over ``dense_tp`` of them (default tp; 1 under data-parallel attention)."""
    t = np.asarray(tp, dtype=float)
    td = t if dense_tp is None else np.asarray(dense_tp, dtype=float)
    wb = WEIGHT_BYTES[weights]
    n_dense, n_moe = _layer_counts(model)
    attn = attention_params(model)
    dense = n_dense * (attn + dense_mlp_params(model)) + n_moe * (attn + shared_expert_params(model))
    out = wb * dense / td + 2.0 * (router_params(model) * n_moe) / td + 2.0 * head_params(model) / td
    if n_moe:
        moe = model.moe
        share = 1.0 if tokens is None else experts_touched(moe.experts, moe.top_k, tokens) / moe.experts
        out = out + wb * n_moe * share * moe.experts * expert_params(model) / t
    return out + 0.0 * np.asarray(ep, dtype=float)


def resident_weight_bytes(model, tp, pp, weights: str, dense_tp=None):
    """Weight bytes held by one GPU on the busiest stage (the first holds the embedding, the last
    the head; the layers split evenly): what the KV pool is left after (docs/serving.md, Capacity).
    ``dense_tp``: as in :func:`weight_bytes_per_gpu`."""
    t, p = np.asarray(tp, dtype=float), np.asarray(pp, dtype=float)
    td = t if dense_tp is None else np.asarray(dense_tp, dtype=float)
    layers = weight_bytes_per_gpu(model, t, 1, weights, dense_tp=td) - 2.0 * head_params(model) / td
    emb = 2.0 * model.vocab * model.hidden / td
    head = 2.0 * head_params(model) / td
    return layers / p + np.where(p > 1, np.maximum(emb, head), emb + head)


def linear_flops_per_token(model):
    """2 x the active matmul parameters one token goes through (Kaplan et al. 2020 §2.1), LM head
    excluded: attention + dense FFN, or shared + top_k experts + router on MoE layers."""
    n_dense, n_moe = _layer_counts(model)
    attn = attention_params(model)
    f = n_dense * (attn + dense_mlp_params(model))
    if n_moe:
        f += n_moe * (attn + shared_expert_params(model) + model.moe.top_k * expert_params(model) + router_params(model))
    return 2.0 * f


def iteration_terms(model, hw, engine, *, tp, pp=1, ep=1, weights="bf16", kv_dtype="bf16",
                    decode=0, context=0, prefill=0, prefill_context=0, prefill_seqs=None, prefill_span=None,
                    decode_tokens=1, dp_attention=False):
    """Seconds of one iteration for one micro-batch through every layer of a replica, by term
    (module docstring): ``decode`` sequences at mean ``context`` cached tokens each, plus
    ``prefill`` prompt tokens attending to ``prefill_context`` earlier tokens on average (a chunk
    of P tokens after c0 cached ones: c0 + P/2 causal). ``prefill_span``: the tokens of one
    sequence in the chunk when it holds several prompts (each attends within its own: c0 + span/2;
    default P). ``prefill_seqs``: sequences whose prefill ends in the iteration (their first
    token's logits; default: 1 if prefill > 0). ``decode_tokens``: tokens each decoding sequence
    feeds (k + 1 when it verifies k speculative tokens: each needs the weights' FLOPs, its logits
    and the score FLOPs over the context; the KV cache is read once). ``dp_attention``: the tp
    GPUs of a replica run attention (and every non-expert weight) data-parallel, each on its share
    of the sequences, with the experts spread over all of them (SGLang --enable-dp-attention,
    TRT-LLM enable_attention_dp; DeepSeek-V3 §3.4: "the attention part employs ... DP"): a GPU reads
    the whole non-expert weights and its own sequences' KV cache, and each MoE layer dispatches and
    combines its tokens over the tp GPUs (all-to-all) instead of all-reducing. Returns a dict
    of arrays/floats: linear_s, attention_s, tp_s, ep_s, overhead_s, pp_s, total_s, and the bytes
    and FLOPs behind them."""
    gen = hw.gpu.generation
    t = np.asarray(tp, dtype=float)
    p = np.asarray(pp, dtype=float)
    e = np.asarray(ep, dtype=float)
    b = np.asarray(decode, dtype=float)
    q = float(decode_tokens)
    P = np.asarray(prefill, dtype=float)
    N = b * q + P
    logits = b * q + (np.where(P > 0, 1.0, 0.0) if prefill_seqs is None else np.asarray(prefill_seqs, dtype=float))
    bw, peak_lin, peak_att = _rates(hw, engine, weights, N)

    # data-parallel attention: attention and every non-expert weight whole on each GPU (ta = 1),
    # the sequences split over the tp GPUs (per-GPU batch b/tp); the FLOPs per GPU are the same
    # N/tp share either way, the tokens spread evenly
    ta = 1.0 + 0.0 * t if dp_attention else t
    share = t / ta   # sequences of the replica one GPU attends to: 1/share of them
    w_bytes, lin_flops, linear_s = _linear_term(model, weights, t, e, ta, N, logits, bw, peak_lin)
    kv_read, dec_flops, pf_flops, attention_s = _attention_term(
        model, kv_dtype, ta, b / share, q, P / share, context, prefill_context, prefill_span, bw, peak_att)
    tp_s, ep_s, pp_s = _comm_terms(model, hw, t, e, p, ta, share, N, dp_attention)

    o = engine.overhead
    overhead_s = np.where(N > 0, per_gen(o.per_step_s, gen) + per_gen(o.per_seq_s, gen) * logits / share
                          + per_gen(o.per_layer_s, gen) * model.layers, 0.0)
    total = linear_s + attention_s + tp_s + ep_s + pp_s + overhead_s
    out = {"linear_s": linear_s, "attention_s": attention_s, "tp_s": tp_s, "ep_s": ep_s, "pp_s": pp_s,
           "overhead_s": overhead_s, "total_s": total, "weight_bytes": w_bytes, "kv_read_bytes": kv_read,
           "linear_flops": lin_flops, "attention_flops": dec_flops + pf_flops,
           "bandwidth_bytes_per_s": bw + 0.0 * t, "peak_linear_flops_per_s": peak_lin + 0.0 * t}
    return {key: scalar_out(v) for key, v in out.items()}


def _rates(hw, engine, weights, N):
    """(achieved HBM bandwidth, linear peak at N tokens, attention peak) of one GPU (module docstring)."""
    gen = hw.gpu.generation
    bw = hw.gpu.memory_bandwidth * hw.gpu.memory_efficiency * per_gen(engine.kernels.decode_bandwidth, gen)
    k = engine.kernels
    # the shape side of the hardware GEMM curve (cost/compute.py gemm_efficiency: e_max·d/(d + d_half),
    # d = the smallest GEMM dimension = the iteration's tokens here): small decode batches reach a
    # small fraction of the peak, as in the MAMF measurements the curve is fitted to. The curve's
    # per-launch term F/(F + F_half) is left out: it is per GEMM, and a whole model's FLOPs are not
    # one GEMM (the engine's per-layer cost stands for launches)
    d = np.maximum(N, 1.0)
    shape = hw.gpu.gemm.max_efficiency * d / (d + hw.gpu.gemm.half_dim)
    peak_lin = hw.gpu.peak(compute_dtype(hw, weights)) * shape * per_gen(k.gemm_efficiency, gen)
    peak_att = hw.gpu.peak("bf16") * min(per_gen(k.attention_efficiency, gen), hw.gpu.gemm.max_efficiency)
    return bw, peak_lin, peak_att


def _linear_term(model, weights, t, e, ta, N, logits, bw, peak_lin):
    """(weight bytes, linear FLOPs, linear_s) per GPU: the roofline of the weight GEMMs and the LM head."""
    w_bytes = weight_bytes_per_gpu(model, t, e, weights, tokens=N, dense_tp=ta)
    lin_flops = (N * linear_flops_per_token(model) + logits * 2.0 * model.hidden * model.vocab) / t
    linear_s = np.where(N > 0, np.maximum(w_bytes / bw, lin_flops / peak_lin), 0.0)
    return w_bytes, lin_flops, linear_s


def _attention_term(model, kv_dtype, ta, b, q, P, context, prefill_context, prefill_span, bw, peak_att):
    """(KV bytes read, decode score FLOPs, prefill FLOPs, attention_s) of one GPU's ``b`` decoding
    sequences and ``P`` prompt tokens (its share of the replica's)."""
    heads_t = model.heads / ta
    L = model.layers
    kv_tok = kv_bytes_per_token(model, kv_dtype, ta)
    ctx = effective_context(model, context)
    dq, dv = attention_dims(model, absorbed=True)
    kv_read = L * b * ctx * kv_tok
    dec_flops = L * 2.0 * b * q * ctx * heads_t * (dq + dv)
    pq, pv = attention_dims(model, absorbed=False)
    span = P if prefill_span is None else np.asarray(prefill_span, dtype=float)
    pctx = effective_context(model, np.asarray(prefill_context, dtype=float) + span / 2.0)
    pf_flops = L * 2.0 * P * pctx * heads_t * (pq + pv)
    kv_write = L * (b * q + P) * kv_tok
    attention_s = np.maximum((kv_read + kv_write) / bw, dec_flops / peak_att) + pf_flops / peak_att
    return kv_read, dec_flops, pf_flops, attention_s


def _comm(hw, collective, size, group, on):
    """Seconds of one collective of ``size`` bytes over ``group`` ranks where ``on``, else 0."""
    # a degree of 1 everywhere costs nothing: skip the collective model (most of serve's time)
    if not np.any(on):
        return np.zeros(np.broadcast(size, group).shape) if np.ndim(size) or np.ndim(group) else 0.0
    return np.where(on, collective_time(hw, collective, np.maximum(size, 1.0), np.maximum(group, 2)), 0.0)


def _comm_terms(model, hw, t, e, p, ta, share, N, dp_attention):
    """(tp_s, ep_s, pp_s): the TP all-reduces, the MoE all-to-alls and the pipeline hand-offs."""
    L = model.layers
    act = N * model.hidden * 2.0
    n_dense, n_moe = _layer_counts(model)
    ar = _comm(hw, "all_reduce", act, ta, (ta > 1) & (N > 0))
    moe_k = model.moe.top_k if model.moe is not None else 0
    # expert parallel over the TP ranks, or data-parallel attention (its experts over all tp GPUs):
    # each MoE layer's dispatch + combine, a GPU's own tokens x top_k x hidden x 2 B
    eg = t if dp_attention else e
    a2a = _comm(hw, "all_to_all", act * moe_k / share, eg, (eg > 1) & (N > 0) & (n_moe > 0))
    tp_s = ar * (2 * L - np.where(eg > 1, n_moe, 0))
    ep_s = 2.0 * n_moe * a2a
    hop = _comm(hw, "send_recv", act / t, 2.0 + 0.0 * p, (p > 1) & (N > 0))
    pp_s = (p - 1) * hop
    return tp_s, ep_s, pp_s


def iteration_time(model, hw, engine, **kw):
    """Seconds of one iteration (:func:`iteration_terms` ``total_s``)."""
    return iteration_terms(model, hw, engine, **kw)["total_s"]
