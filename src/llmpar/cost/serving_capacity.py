"""How many KV-cache tokens a serving replica holds, and the concurrency that implies.

docs/serving.md, "Capacity". The engine takes ``memory_fraction`` of each GPU's memory
(vLLM ``gpu_memory_utilization``, SGLang ``mem_fraction_static``) for weights, the activation
peak of its profiling pass and the KV pool (``memory_rule: total``), or gives the KV pool that
fraction of what is free after the rest (TRT-LLM ``free_gpu_memory_fraction``, ``free``):

    total:  pool = f·HBM − weights − activations − workspace
    free:   pool = f·(HBM − weights − activations − workspace)

* weights: the busiest stage's resident bytes (cost/serving.py ``resident_weight_bytes``);
* activations: one forward of ``max_num_batched_tokens`` tokens — the per-token working set of one
  layer (cost/inference.py ``inference_working_terms``: hidden and residual, then the larger of the
  attention and MLP phases, ÷ tp) — plus fp32 logits of ``min(max_num_seqs, tokens)`` sequences
  (vLLM profiles its sampler with max_num_seqs dummy requests: gpu_model_runner.py
  ``profile_run``/``_dummy_sampler_run``);
* workspace: the engine's CUDA context, graphs and library workspaces (engine ``memory``).

KV tokens = pool / (KV bytes per token per layer x layers on the stage), rounded down to whole
blocks of ``block_tokens``; the concurrency a request of I + O tokens allows is that ÷ (I + O),
as vLLM prints at start-up ("Maximum concurrency for N tokens per request"); with sliding-window
layers ÷ the tokens the request keeps per layer on average (windows applied). Array-polymorphic.
"""

from __future__ import annotations

import numpy as np

from llmpar.cost.arrays import scalar_out
from llmpar.cost.inference import inference_working_terms
from llmpar.cost.serving import effective_context, kv_bytes_per_token, resident_weight_bytes
from llmpar.specs.stack import per_gen


class _Attn:
    attention = "flash"


def kv_capacity(model, hw, engine, *, tp, pp=1, weights="bf16", kv_dtype="bf16", memory_fraction=None,
                max_num_seqs=None, max_num_batched_tokens=None, dp_attention=False):
    """KV-cache tokens one replica holds, with the bytes behind them (dict of floats/arrays).
    ``dp_attention``: each of the tp GPUs holds the whole non-expert weights and its own sequences'
    KV cache (all heads), and schedules its own iterations: the replica holds tp GPUs' pools, and
    its iteration budget and sequence cap are tp times one GPU's (SGLang runs one scheduler per
    data-parallel rank)."""
    gen = hw.gpu.generation
    s = engine.scheduler
    f = s.memory_fraction if memory_fraction is None else memory_fraction
    seqs = per_gen(s.max_num_seqs, gen) if max_num_seqs is None else max_num_seqs
    tokens = per_gen(s.max_num_batched_tokens, gen) if max_num_batched_tokens is None else max_num_batched_tokens
    t = np.asarray(tp, dtype=float)
    p = np.asarray(pp, dtype=float)
    hbm = hw.gpu.memory
    ta = 1.0 + 0.0 * t if dp_attention else t
    wt = resident_weight_bytes(model, t, p, weights, dense_tp=ta)
    terms = inference_working_terms(model, _Attn())
    per_token = terms["resident"] + np.maximum(terms["attention_tp"], terms["mlp_tp"]) / ta
    act = tokens * per_token + np.minimum(seqs, tokens) * model.vocab * 4.0 / ta
    work = engine.memory.workspace_bytes
    if s.memory_rule == "total":
        pool = f * hbm - wt - act - work
    else:
        pool = f * (hbm - wt - act - work)
    layers = np.ceil(model.layers / p)
    per_tok = kv_bytes_per_token(model, kv_dtype, ta) * layers
    blocks = np.floor(np.maximum(pool, 0.0) / (per_tok * s.block_tokens))
    ranks = t / ta      # schedulers (and KV pools) per replica: tp under data-parallel attention, else 1
    out = {"hbm_bytes": hbm + 0.0 * t, "usable_bytes": (f * hbm if s.memory_rule == "total" else hbm) + 0.0 * t,
           "weights_bytes": wt, "activations_bytes": act, "workspace_bytes": work + 0.0 * t,
           "kv_pool_bytes": np.maximum(pool, 0.0), "kv_bytes_per_token": per_tok,
           "kv_tokens": blocks * s.block_tokens * ranks, "fits": pool > 0, "max_num_seqs": seqs * ranks + 0.0 * t,
           "max_num_batched_tokens": tokens * ranks + 0.0 * t,
           # what each scheduler was given (the engine's own flags; a result's settings report these so
           # they round-trip: the replica's totals above are ranks times them under DP attention)
           "memory_fraction": f + 0.0 * t, "schedulers": ranks + 0.0 * t}
    return {k: scalar_out(v) for k, v in out.items()}


def prompt_exceeds_budget(engine, budget, isl):
    """True where an engine that prefills each prompt whole (``scheduler.chunked_prefill`` false:
    TensorRT-LLM without enable_chunked_context) has an iteration budget below the prompt: it never
    schedules that prompt. One rule for `serve` (refused, naming the option) and `serve-plan`
    (the deployment is not a candidate: it had been ranked with a 12 s TTFT)."""
    return (not engine.scheduler.chunked_prefill) & (np.asarray(budget) < np.asarray(isl))


def max_concurrency(capacity, model, request_tokens):
    """Requests of ``request_tokens`` (I + O) the KV pool holds at once, capped at max_num_seqs.
    A sliding-window layer keeps at most its window of each request (vLLM's V1 KV-cache manager
    frees the blocks that fall out of the window, SGLang keeps a separate SWA pool, TensorRT-LLM a
    cyclic cache), so a request takes ``effective_context`` full-layer tokens of the pool."""
    need = np.asarray(effective_context(model, np.maximum(request_tokens, 1)), dtype=float)
    by_kv = np.floor(np.asarray(capacity["kv_tokens"], dtype=float) / need)
    return scalar_out(np.minimum(by_kv, capacity["max_num_seqs"]))
