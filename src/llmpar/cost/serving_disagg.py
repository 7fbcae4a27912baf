"""Disaggregated serving: a prefill pool and a decode pool, the KV cache sent between them.

docs/serving.md, "Disaggregated prefill and decode" (Zhong et al. 2024, DistServe,
arXiv:2401.09670, §2-3; Patel et al. 2024, Splitwise, arXiv:2311.18677). Poisson arrivals at λ
requests/s; r_p prefill and r_d decode replicas of the same shape (tp x pp GPUs). Built on
:func:`llmpar.cost.serving.iteration_terms`, array-polymorphic in the rate.

* **Prefill pool.** A replica runs prefill-only iterations of at most B tokens: a prompt of I
  tokens takes k = ceil(I/B) iterations alone, s = k·t(prefill = min(I, B)); at saturation an
  iteration packs B/I prompts (or one chunk), so a replica serves μ = 1/(k·t(min(I, B))) ×
  max(1, B/I) prompts/s. Utilisation ρ = λ / (r_p μ); the wait for the pool is the M/D/1 queue's
  (Pollaczek–Khinchine: W = ρ·s/(2(1 − ρ)), deterministic service): TTFT = s + W + the KV transfer.
  ρ ≥ 1: saturated.
* **KV transfer.** Each GPU of the prefill replica sends its shard of the prompt's KV cache
  (I x KV bytes per token per layer per GPU x layers on its stage) to its decode counterpart over
  the scale-out tier at its achieved bandwidth, all in parallel: t_x = bytes / (bandwidth x
  efficiency) (DistServe §3.3: KV transfer over the network between the pools).
* **Decode pool.** Decode-only iterations, no prefill chunk to wait behind: n running per replica
  solves n = (λ/r_d)·(O − 1)·t(decode = n) (Little's law), at most the replica's max concurrency
  (its KV pool), else saturated; TPOT = t(decode = n).
"""

from __future__ import annotations

import numpy as np

from llmpar.cost.arrays import scalar_out
from llmpar.cost.serving import iteration_terms, kv_bytes_per_token

GRID = 48


def _t(model, hw, engine, dep, **kw):
    return iteration_terms(model, hw, engine, tp=dep["tp"], pp=dep["pp"], ep=dep["ep"], weights=dep["weights"],
                           kv_dtype=dep["kv_dtype"], dp_attention=bool(dep.get("dp_attention")), **kw)["total_s"]


def kv_transfer_s(model, hw, dep, isl):
    """Seconds to send one prompt's KV cache from a prefill GPU to its decode GPU (module docstring)."""
    tier = hw.tiers[-1]
    layers = np.ceil(model.layers / dep["pp"])
    nbytes = np.asarray(isl, dtype=float) * kv_bytes_per_token(model, dep["kv_dtype"], dep["tp"]) * layers
    return nbytes / (tier.bandwidth * (tier.efficiency or 1.0))


def disaggregated(model, hw, engine, dep, isl, osl, rate, prefill_replicas, decode_replicas, decode_limit, budget):
    """TTFT, TPOT, e2e and throughput of a disaggregated deployment under Poisson arrivals."""
    from llmpar.specs.stack import per_gen

    lam = np.asarray(rate, dtype=float)
    I = np.asarray(isl, dtype=float)
    O = np.asarray(osl, dtype=float)
    chunk = np.minimum(I, budget)
    k = np.ceil(I / budget)
    t_chunk = _t(model, hw, engine, dep, prefill=chunk, prefill_seqs=np.minimum(chunk / I, 1.0), prefill_span=chunk)
    s = k * t_chunk                                   # one prompt alone
    packed = np.maximum(1.0, budget / I)              # prompts per iteration when the pool is busy
    t_packed = _t(model, hw, engine, dep, prefill=np.minimum(packed * I, budget), prefill_seqs=packed,
                  prefill_span=chunk)
    mu = packed / (k * t_packed)                      # prompts/s one replica serves at saturation
    rho = lam / (prefill_replicas * mu)
    wait = np.where(rho < 1, rho * s / (2.0 * np.maximum(1.0 - rho, 1e-12)), np.inf)
    xfer = kv_transfer_s(model, hw, dep, I)
    req = per_gen(engine.overhead.per_request_s, hw.gpu.generation)
    ttft = s + wait + xfer + req

    lam_d = lam / decode_replicas
    ctx = I + O / 2.0
    limit = np.asarray(decode_limit, dtype=float)
    # n = λ_d (O − 1) t(n) on a grid of running counts (the first root; none: the pool saturates)
    frac = np.arange(1, GRID + 1, dtype=float) / GRID
    n_grid = np.maximum(limit, 1.0)[..., None] * frac
    t_grid = _t(model, hw, engine, dep, decode=n_grid / dep["pp"], context=ctx[..., None] if np.ndim(ctx) else ctx)
    g = lam_d[..., None] * np.maximum(O - 1.0, 0.0)[..., None] * t_grid - n_grid if np.ndim(lam_d) else \
        lam_d * max(float(O) - 1.0, 0.0) * t_grid - n_grid
    below = g <= 0
    has = below.any(axis=-1)
    i = np.argmax(below, axis=-1)
    n_grid = np.broadcast_to(n_grid, np.shape(g))   # a rate (or pool sizes) array against one limit
    n = np.take_along_axis(n_grid, np.asarray(i)[..., None], axis=-1)[..., 0] if np.ndim(i) else n_grid[i]
    n = np.where(has, n, limit)
    tpot = _t(model, hw, engine, dep, decode=n / dep["pp"], context=ctx)
    decode_cap = decode_replicas * limit / (np.maximum(O - 1.0, 1.0) * _t(model, hw, engine, dep,
                                                                          decode=limit / dep["pp"], context=ctx))
    prefill_cap = prefill_replicas * mu
    cap = np.minimum(prefill_cap, decode_cap)
    out = {"ttft_s": ttft, "tpot_s": np.where(O > 1, tpot, np.nan),
           "itl_median_s": np.where(O > 1, tpot, np.nan),   # decode pools carry no prefill: every gap alike
           "e2e_s": ttft + np.maximum(O - 1.0, 0.0) * tpot,
           "requests_per_s": np.minimum(lam, cap), "output_tokens_per_s": np.minimum(lam, cap) * O,
           "running": n * decode_replicas, "queue_s": wait, "prefill_iterations": k, "iteration_s": tpot,
           "prefill_iteration_s": t_chunk, "kv_transfer_s": xfer, "prefill_utilization": rho,
           "capacity_requests_per_s": cap, "prefill_capacity_requests_per_s": prefill_cap,
           "decode_capacity_requests_per_s": decode_cap, "saturated": (rho >= 1) | ~has}
    return {key: scalar_out(v) for key, v in out.items()}
