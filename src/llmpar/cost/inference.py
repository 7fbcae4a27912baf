"""Serving memory per GPU: weights, KV cache, working activations (docs/memory.md, Inference).

Sources: Pope et al. 2022 (arXiv:2211.05102) §2; DeepSeek-V2 (arXiv:2405.04434) §2.1.2,
Table 1 (MLA's compressed cache). Array-polymorphic.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmpar.cost.activations import _attention_dims
from llmpar.cost.arrays import argmax_of as _argmax, choose as _choose, max_by as _max_by, scalar_out as _out
from llmpar.cost.inflight import _dense_in_span, candidate_stages, stage_span
from llmpar.cost.shards import embedding_shard, head_shard, layer_shard
from llmpar.cost.states import INFERENCE_WEIGHT_BYTES, KV_BYTES
from llmpar.cost.runtime import _capacity, communicators, runtime_bytes, verdict_code, verdict_name
from llmpar.parallel import Parallel, Settings
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec

SRC_KV = "Pope et al. 2022 (arXiv:2211.05102) §2: KV cache = 2·L·kv_heads·d_head·T·B·bytes"
SRC_KV_MLA = "DeepSeek-V2 (arXiv:2405.04434) §2.1.2, Table 1: cache (d_c + d_h^R) per token per layer"


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
    KV cache for ``batch`` sequences of ``context`` tokens (÷ cp; a sliding-window layer holds at
    most its window, as vLLM's hybrid KV-cache manager and TensorRT-LLM's cyclic cache keep it —
    :func:`llmpar.cost.serving.effective_context`) + a working-activation
    estimate for one prefill of ``context`` tokens plus fp32 logits of the batch's last
    positions. max_micro_batch is the largest batch that fits. Array-polymorphic."""
    t = np.asarray(par.tp, dtype=float)
    p = np.asarray(par.pp)
    shard = layer_shard(model, par)
    wb = INFERENCE_WEIGHT_BYTES[settings.dtype]
    from llmpar.cost.serving import effective_context   # here: `memory` need not import the serving room

    T = np.asarray(context, dtype=float) / np.asarray(par.cp, dtype=float)
    T_kv = np.asarray(effective_context(model, T))      # cached tokens per layer, windows applied
    B = np.asarray(batch, dtype=float)
    kv_tok = np.asarray(kv_cache_per_token_layer(model, par, settings.kv_dtype))
    wt = inference_working_terms(model, settings)
    cap, res = _capacity(hw, reserve)
    per_layer_tok = wt["resident"] + np.maximum((wt["attention_tp"] + wt["scores_s2"] * np.asarray(context, dtype=float)) / t,
                                                wt["mlp_tp"] / t)
    rows = []
    cands = candidate_stages(p, model)
    for s in cands:
        start, n = (np.asarray(x) for x in stage_span(model.layers, p, s))
        nd = np.asarray(_dense_in_span(model, start, n))
        nm = n - nd
        is_first, is_last = (np.asarray(s) == 0), (np.asarray(s) == p - 1)
        params = (nd * np.asarray(shard.dense) + nm * (np.asarray(shard.moe) + np.asarray(shard.experts))
                  + np.where(is_first, np.asarray(embedding_shard(model, par)), 0.0)
                  + np.where(is_last, np.asarray(head_shard(model, par)), 0.0))
        kv_per_seq = n * kv_tok * T_kv
        logits_per_seq = np.where(is_last, wt["logits_per_seq"] / t, 0.0)
        work_fixed = T * per_layer_tok
        rows.append({"params_per_gpu": params, "weights_bytes": wb * params, "kv_cache_bytes": kv_per_seq * B,
                     "activations_bytes": work_fixed + logits_per_seq * B,
                     "per_seq": kv_per_seq + logits_per_seq, "work_fixed": work_fixed})
    mem = settings.stack.memory
    oh = mem.allocator_overhead
    # serving: tp, pp and cp groups (dp replicas are independent) + the world of one replica
    n_comm = np.asarray(communicators(par.tp, p, 1, par.cp, 1)) + np.zeros_like(t)
    runtime = np.asarray(runtime_bytes(mem.cuda_context_bytes, mem.nccl_bytes_per_communicator, n_comm, res))
    allocs = [r["weights_bytes"] + r["kv_cache_bytes"] + r["activations_bytes"] for r in rows]
    totals = [a * (1.0 + oh) + runtime for a in allocs]
    pick = _argmax(totals)

    def choose(key):
        return _choose(pick, [r[key] for r in rows])

    out = {k: choose(k) for k in ("weights_bytes", "activations_bytes", "kv_cache_bytes", "params_per_gpu")}
    zero = np.zeros_like(out["weights_bytes"])
    out.update(gradients_bytes=zero, optimizer_bytes=zero, buffers_bytes=zero, capacity_bytes=zero + cap)
    out["allocated_bytes"] = _choose(pick, allocs)
    out["reserved_bytes"] = out["allocated_bytes"] * (1.0 + oh)
    out["allocator_overhead_bytes"] = out["reserved_bytes"] - out["allocated_bytes"]
    out["runtime_bytes"] = zero + runtime
    out["communicators"] = (zero + n_comm).astype(int)
    out["total_bytes"] = _choose(pick, totals)
    out["margin_bytes"] = cap - out["total_bytes"]
    out["fits"] = out["total_bytes"] <= cap
    out["verdict_code"] = np.asarray(verdict_code(out["total_bytes"], cap, mem.uncertainty))
    out["max_micro_batch"] = np.min(np.stack(np.broadcast_arrays(*[
        _max_by(r["weights_bytes"] + r["work_fixed"], r["per_seq"], (cap - runtime) / (1.0 + oh)) for r in rows])), axis=0)
    out["stage"] = _choose(pick, cands).astype(int)
    out["activation_bytes_per_layer"] = T * per_layer_tok
    result = {k: _out(v) for k, v in out.items()}
    result["verdict"] = verdict_name(out["verdict_code"])
    return result
