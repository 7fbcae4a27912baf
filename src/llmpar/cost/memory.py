"""Per-GPU memory: model states, activations, KV cache, and whether it fits (docs/memory.md).

Two layers, as docs/architecture.md asks ("every number can show its work"):

* a vectorised core — :func:`memory_per_gpu`, :func:`inference_memory_per_gpu`,
  :func:`model_states_for_count` — numbers only, array-polymorphic in every degree and knob of a
  :class:`~llmpar.parallel.Parallel` (the planner passes numpy arrays of candidate layouts);
* an explain layer — :func:`memory_terms`, :func:`memory_per_stage`, :func:`activation_terms` —
  for one scalar layout: every term with its bytes, formula, substituted values and source.
  The explain layer calls the same private helpers as the core, so the two cannot disagree
  (tests check that the terms add up to the core's components).

The stage model — every component of one pipeline stage, :func:`_stage_eval` — is
cost/memory_stage.py; this module picks the most-loaded stage and adds the allocator and runtime.

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

from typing import Any

import numpy as np

# the memory wing's face: what other modules and scripts reach as llmpar.cost.memory.NAME (no star
# re-exports: docs/architecture.md, against the review's §5.4)
from llmpar.cost.activations import (EXPERT_OUTPUTS_TERM, activation_terms, aggregate, checkpoint_term,
                                     layer_activation_bytes, stack_activation_terms, term_bytes)
from llmpar.cost.arrays import argmax_of as _argmax, choose as _choose, max_by as _max_by, scalar_out as _out
from llmpar.cost.inflight import candidate_stages, in_flight_on_stage, stage_span
from llmpar.cost.memory_stage import _layer_coeffs, _stage_common, _stage_eval
from llmpar.cost.runtime import _capacity, communicators, reserved_bytes, runtime_bytes, verdict_code, verdict_name
from llmpar.cost.shards import embedding_shard, head_shard, layer_shard
from llmpar.cost.states import (INFERENCE_WEIGHT_BYTES, bytes_per_param, check_convention, convention_allows,
                                model_states_for_count)
from llmpar.parallel import Parallel, Settings
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec



def offload_host_bytes(model: ModelSpec, par: Parallel, settings: Settings):
    """Host-memory bytes one GPU's activation offloading holds at the end of a micro-batch's forward
    (``--offload-layers N``, pp = 1, no recompute: Megatron-Core cpu_offloading_num_layers): the N
    offloaded layers' saved activations, N x A, A the per-layer no-recompute set averaged over
    dense and MoE layers. The same bytes cross the host link once each way per micro-batch
    (cost/step.py _offload). 0 without offloading. Array-polymorphic."""
    n_off = np.asarray(par.offload_layers, dtype=float)
    if not np.any(n_off > 0):
        return np.zeros_like(n_off)
    c_dense, c_moe = _layer_coeffs(model, settings)
    none_d = np.asarray(layer_activation_bytes(c_dense, par)[1])
    none_m = np.asarray(layer_activation_bytes(c_moe, par)[1]) if model.moe else none_d
    frac_moe = model.moe_layers / model.layers
    return n_off * ((1.0 - frac_moe) * none_d + frac_moe * none_m)


def host_fits(hw: Hardware, host_bytes):
    """Offloaded activations fit in the GPU's share of host memory (``host_memory_per_gpu``); a
    profile that states none fits only no offloading."""
    cap = hw.host_memory_per_gpu
    h = np.asarray(host_bytes, dtype=float)
    return (h <= 0) if cap is None else (h <= cap)


MEMORY_KEYS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "buffers_bytes")


def _stage_totals(e: dict, settings: Settings, reserve):
    """(allocated, reserved, runtime, total) of one evaluated stage: the allocator's pool is
    allocated·(1 + overhead); the runtime is the stack's context + NCCL per communicator, or
    the explicit ``reserve`` (--reserve) in its place."""
    mem = settings.stack.memory
    allocated = sum(np.asarray(e[k], dtype=float) for k in MEMORY_KEYS)
    reserved = np.asarray(reserved_bytes(allocated, mem.allocator_overhead))
    runtime = np.asarray(runtime_bytes(mem.cuda_context_bytes, mem.nccl_bytes_per_communicator, e["communicators"],
                                       reserve)) + np.zeros_like(allocated)
    return allocated, reserved, runtime, reserved + runtime


def memory_per_gpu(model: ModelSpec, hw: Hardware, par: Parallel, settings: Settings, reserve=None,
                   only: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Training memory per GPU on the most-loaded pipeline stage. Array-polymorphic.

    Evaluates the :func:`candidate_stages` (0, 1, p−1 and the centre) and keeps the one with the
    largest total; the others are never larger (see :func:`stage_span`). Returns a dict of numbers or arrays:
    weights_bytes, gradients_bytes, optimizer_bytes, activations_bytes, buffers_bytes (gradient
    buckets), kv_cache_bytes (0); allocated_bytes (their sum: the peak the framework allocates),
    reserved_bytes (the caching allocator's pool, allocated·(1 + overhead)), allocator_overhead_bytes
    (reserved − allocated), runtime_bytes (CUDA context + NCCL buffers, or ``reserve``),
    communicators, total_bytes (reserved + runtime), capacity_bytes (HBM), margin_bytes
    (capacity − total), host_bytes (offloaded activations in host memory, :func:`offload_host_bytes`),
    host_fits (they fit the GPU's share of host memory), fits (total ≤ capacity and host_fits), verdict ('fits' | 'tight' | 'does_not_fit'
    within the stack's memory.uncertainty; verdict_code 0/1/2), max_micro_batch (largest b that
    fits), params_per_gpu (this GPU's TP/PP/EP shard, before ZeRO), stage,
    activation_bytes_per_layer (one layer, one micro-batch, of the model's commoner layer kind),
    first_stage_allocated_bytes / first_stage_reserved_bytes (pipeline stage 0's: what rank 0 measures).

    ``only``: the keys wanted (the planner's chunks need seven of the thirty); the others are not
    selected from the candidate stages, which on a million layouts is most of the work after the
    stages themselves. Every key returned is the same number either way.
    """
    coeffs = _layer_coeffs(model, settings)
    cands = candidate_stages(par.pp, model)
    cap, res = _capacity(hw, reserve)
    evals, parts = _candidate_evals(model, par, settings, coeffs, cands, res)
    totals = [x[3] for x in parts]
    pick = _argmax(totals)

    def choose(key):
        return _choose(pick, [e[key] for e in evals])

    def wanted(*keys):
        return only is None or any(k in only for k in keys)

    mem = settings.stack.memory
    out = {k: choose(k) for k in MEMORY_KEYS if wanted(k)}
    for n, key in enumerate(("allocated_bytes", "reserved_bytes", "runtime_bytes", "total_bytes")):
        out[key] = _choose(pick, [x[n] for x in parts])
    out["kv_cache_bytes"] = np.zeros_like(out["total_bytes"])
    out["allocator_overhead_bytes"] = out["reserved_bytes"] - out["allocated_bytes"]
    # pipeline stage 0's own peak (candidate_stages lists it first): what world rank 0 measures,
    # the rank that frameworks' benchmark logs usually report (nanotron's create_table_log)
    out["first_stage_allocated_bytes"], out["first_stage_reserved_bytes"] = parts[0][0], parts[0][1]
    if wanted("communicators"):
        out["communicators"] = choose("communicators").astype(int)
    out["capacity_bytes"] = np.full_like(out["total_bytes"], cap)
    out["margin_bytes"] = cap - out["total_bytes"]
    _host_and_verdict(out, model, hw, par, settings, choose, cap)
    if wanted("max_micro_batch"):
        out["max_micro_batch"] = _max_micro_batch(par, mem, evals, parts, cap)
    for key in ("params_per_gpu", "trainable_params_per_gpu"):
        if wanted(key):
            out[key] = choose(key)
    if wanted("stage"):
        out["stage"] = _choose(pick, cands).astype(int)
    if wanted("activation_bytes_per_layer"):
        c_dense, c_moe = coeffs
        typical = c_moe if model.moe_layers >= model.dense_layers else c_dense
        out["activation_bytes_per_layer"] = (np.asarray(layer_activation_bytes(typical, par)[0], dtype=float)
                                             * mem.activation_factor)
    result = {k: _out(v) for k, v in out.items() if only is None or k in only}
    if only is None or "verdict" in only:
        result["verdict"] = verdict_name(out["verdict_code"])
    return result


def _candidate_evals(model: ModelSpec, par: Parallel, settings: Settings, coeffs, cands, res):
    """(evaluation, (allocated, reserved, runtime, total)) of each candidate stage, in order."""
    prec = bytes_per_param(settings, par.zero, par.microbatches)
    shard = layer_shard(model, par)
    common = _stage_common(model, par, coeffs, settings)
    # a candidate stage equal to an earlier one on every layout (pp 1: all are stage 0; pp 2: 1 is
    # p - 1) is the same evaluation: computed once (the planner's chunks share their pp)
    uniq: list = []
    which = []
    for s in cands:
        j = next((i for i, u in enumerate(uniq) if np.array_equal(u, s)), None)
        if j is None:
            uniq.append(s)
            j = len(uniq) - 1
        which.append(j)
    evals_u = [_stage_eval(model, par, settings, prec, shard, coeffs, s, common) for s in uniq]
    parts_u = [_stage_totals(e, settings, res) for e in evals_u]
    return [evals_u[j] for j in which], [parts_u[j] for j in which]


def _host_and_verdict(out: dict[str, Any], model: ModelSpec, hw: Hardware, par: Parallel, settings: Settings,
                      choose, cap) -> None:
    """Fill ``out`` with the host-memory bytes, whether they fit, and the fit and verdict."""
    mem = settings.stack.memory
    out["host_bytes"] = np.broadcast_to(np.asarray(offload_host_bytes(model, par, settings), dtype=float)
                                        + np.asarray(choose("host_optimizer_bytes"), dtype=float)
                                        + np.asarray(choose("host_param_bytes"), dtype=float),
                                        np.shape(out["total_bytes"])).astype(float)
    for key in ("host_param_bytes", "host_optimizer_bytes"):
        out[key] = np.broadcast_to(np.asarray(choose(key), dtype=float), np.shape(out["total_bytes"])).astype(float)
    out["host_fits"] = np.asarray(host_fits(hw, out["host_bytes"]), dtype=bool)
    out["fits"] = (out["total_bytes"] <= cap) & out["host_fits"]
    # a layout whose offloaded activations exceed host memory does not run, whatever its HBM
    out["verdict_code"] = np.where(out["host_fits"], np.asarray(verdict_code(out["total_bytes"], cap, mem.uncertainty)), 2)


def _max_micro_batch(par: Parallel, mem, evals, parts, cap):
    """The largest micro-batch that fits on every candidate stage."""
    b = np.asarray(par.micro_batch, dtype=float)
    # total = (fixed + b·per_b)(1 + overhead) + runtime <= cap  <=>  fixed + b·per_b <= (cap - runtime)/(1 + overhead)
    return np.min(np.stack(np.broadcast_arrays(*[
        _max_by(x[0] - np.asarray(e["activations_bytes"]), np.asarray(e["activations_bytes"]) / b,
                (cap - x[2]) / (1.0 + mem.allocator_overhead))
        for x, e in zip(parts, evals)])), axis=0)


def memory_totals(allocated, hw: Hardware, par: Parallel, settings: Settings, reserve=None) -> dict[str, Any]:
    """Allocator overhead, runtime, total and verdict of an ``allocated`` peak (the bare-count
    path, which has no stages): the same rules as :func:`memory_per_gpu`."""
    mem = settings.stack.memory
    cap, res = _capacity(hw, reserve)
    alloc = np.asarray(allocated, dtype=float)
    n_comm = np.asarray(communicators(par.tp, par.pp, par.dp, par.cp, par.ep))
    reserved = np.asarray(reserved_bytes(alloc, mem.allocator_overhead))
    runtime = np.asarray(runtime_bytes(mem.cuda_context_bytes, mem.nccl_bytes_per_communicator, n_comm, res))
    total = reserved + runtime
    code = verdict_code(total, cap, mem.uncertainty)
    out = {"allocated_bytes": alloc, "allocator_overhead_bytes": reserved - alloc, "reserved_bytes": reserved,
           "runtime_bytes": runtime + np.zeros_like(alloc), "communicators": n_comm, "total_bytes": total,
           "capacity_bytes": cap + np.zeros_like(alloc), "margin_bytes": cap - total, "fits": total <= cap,
           "verdict_code": code}
    out = {k: _out(v) for k, v in out.items()}
    out["verdict"] = verdict_name(code)
    return out


def memory_per_stage(model: ModelSpec, hw: Hardware, par: Parallel, settings: Settings, reserve=None) -> list[dict]:
    """Every pipeline stage of one scalar layout: layers, parameters and each memory component."""
    prec = bytes_per_param(settings, par.zero, par.microbatches)
    shard = layer_shard(model, par)
    coeffs = _layer_coeffs(model, settings)
    _, res = _capacity(hw, reserve)
    rows = []
    for i in range(int(par.pp)):
        e = _stage_eval(model, par, settings, prec, shard, coeffs, i)
        row = {k: _out(np.asarray(e[k])) for k in ("stage", "layers", "params_per_gpu", *MEMORY_KEYS, "in_flight")}
        row["stage"] = i
        row["layers"] = int(row["layers"])
        allocated, reserved, runtime, total = (float(x) for x in _stage_totals(e, settings, res))
        row.update(allocated_bytes=allocated, reserved_bytes=reserved, runtime_bytes=runtime, total_bytes=total)
        rows.append(row)
    return rows

from llmpar.cost.inference import inference_memory_per_gpu, kv_cache_per_token_layer  # noqa: E402 (inference uses the above)


# the face: this module's own formulas and the memory wing's names it re-exports
__all__ = ["EXPERT_OUTPUTS_TERM", "INFERENCE_WEIGHT_BYTES", "MEMORY_KEYS", "activation_terms", "aggregate",
           "bytes_per_param", "candidate_stages", "check_convention", "checkpoint_term", "communicators",
           "convention_allows", "embedding_shard", "head_shard", "host_fits", "in_flight_on_stage",
           "inference_memory_per_gpu", "kv_cache_per_token_layer", "layer_activation_bytes", "layer_shard",
           "memory_per_gpu", "memory_per_stage", "memory_totals", "model_states_for_count", "offload_host_bytes",
           "reserved_bytes", "runtime_bytes", "stack_activation_terms", "stage_span", "term_bytes", "verdict_code",
           "verdict_name"]
