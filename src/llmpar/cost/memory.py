"""Per-GPU memory: model states, activations, KV cache, and whether it fits (docs/memory.md).

Two layers, as docs/architecture.md asks ("every number can show its work"):

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

from typing import Any

import numpy as np

from llmpar.cost.activations import *  # noqa: F401,F403  (re-exported: names other modules import from here)
from llmpar.cost.activations import (
    _extra_bytes, aggregate, stack_activation_terms, checkpoint_term, first_stage_extra_terms,
    last_stage_extra_terms, layer_activation_bytes,
)
from llmpar.cost.arrays import argmax_of as _argmax, choose as _choose, max_by as _max_by, scalar_out as _out
from llmpar.cost.inflight import *  # noqa: F401,F403
from llmpar.cost.inflight import _dense_in_span, candidate_stages, in_flight_on_stage, logits_in_flight, stage_span
from llmpar.cost import params as P
from llmpar.cost.pipeline import DUALPIPE, bf16_boundary_layers, fp8_bf16_layers, full_recompute_fraction, offload_kept_share
from llmpar.cost.states import *  # noqa: F401,F403
from llmpar.cost.shards import LayerShard, embedding_shard, head_shard, layer_shard
from llmpar.cost.states import (
    BytesPerParam, _states, _zero3_buffers, _zero_divisors, bytes_per_param,
    frozen_precision, offload_optimizer, offload_params, optimizer_step_bytes,
)
from llmpar.cost import finetune as FT
from llmpar.cost.runtime import *  # noqa: F401,F403
from llmpar.cost.runtime import (
    _capacity, communicators, reserved_bytes, runtime_bytes, verdict_code, verdict_name,
)
from llmpar.parallel import RECOMPUTE, Parallel, Settings
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec



# ============================================================================ the stage model

def _layer_coeffs(model: ModelSpec, settings: Settings):
    ckpt = checkpoint_term(model)
    dense = aggregate(stack_activation_terms(model, False, settings), ckpt)
    moe = aggregate(stack_activation_terms(model, True, settings), ckpt) if model.moe else dense
    return dense, moe


def _stage_common(model: ModelSpec, par: Parallel, coeffs, settings: Settings) -> dict[str, Any]:
    """The parts of :func:`_stage_eval` that do not depend on the stage: computed once when
    several stages of the same layouts are evaluated (the planner's arrays), same numbers."""
    c_dense, c_moe = coeffs
    act_d, none_d = (np.asarray(x) for x in layer_activation_bytes(c_dense, par))
    act_m, none_m = (act_d, none_d) if c_moe is c_dense else (np.asarray(x) for x in layer_activation_bytes(c_moe, par))
    p = np.asarray(par.pp)
    # full recompute of N layers per chunk (Megatron-Core block method): the others keep the
    # no-recompute set; per layer on average kept + (1 - fraction)(none - kept)
    rest = 1.0 - np.asarray(full_recompute_fraction(model.layers, p, par.virtual_stages, par.recompute_layers))
    full = np.asarray(par.recompute) == RECOMPUTE.index("full")
    mix_d = act_d + np.where(full, rest, 0.0) * (none_d - act_d)
    mix_m = act_m + np.where(full, rest, 0.0) * (none_m - act_m)
    # activation offloading (Megatron-Core cpu_offloading_num_layers, Transformer Engine's
    # double-buffered offload handler; pp = 1, no recompute): the first N layers' saved
    # activations move to host memory as their forward ends and come back one layer ahead of their
    # backward. At the peak (the end of the forward) HBM holds the L - N others and at most one
    # offloaded layer still in transit: a share (L - N + min(N, 1)) / L of the layers' activations
    if np.any(np.asarray(par.offload_layers) > 0):     # (skipped when no layout offloads: planner speed)
        kept = offload_kept_share(model.layers, par.offload_layers)
        mix_d, mix_m = mix_d * kept, mix_m * kept
    return {
        "emb": np.asarray(embedding_shard(model, par)), "head": np.asarray(head_shard(model, par)),
        "act": (act_d, none_d, act_m, none_m), "mix": (mix_d, mix_m), "zero_div": _zero_divisors(par),
        "first_x": np.asarray(_extra_bytes(first_stage_extra_terms(model), par)) *
        np.asarray(in_flight_on_stage(par.schedule, p, par.microbatches, par.virtual_stages, 0)),
        "last_x": np.asarray(_extra_bytes(last_stage_extra_terms(model, settings.stack.memory), par)) *
        np.asarray(logits_in_flight(par.schedule, p, par.microbatches)),
    }


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


def grad_buffer_bytes(mem, par: Parallel, params_on_gpu):
    """Gradient-reduction buffers of a stack, when the data-parallel group (dp·cp) has > 1 rank:
    the stack's bucket (``memory.grad_bucket_bytes``: DeepSpeed's reduce bucket, 5e8 elements x
    2 B) and, for torch DDP without gradient_as_bucket_view (``memory.ddp_bucket_copy``), a flat
    16-bit copy of every gradient of this GPU (PyTorch DDP docs: gradient_as_bucket_view "saves
    memory equal to the total gradients size")."""
    n = np.asarray(par.dp) * np.asarray(par.cp)
    copy = 2.0 * np.asarray(params_on_gpu, dtype=float) if mem.ddp_bucket_copy else 0.0
    return _out(np.where(n > 1, mem.grad_bucket_bytes + copy, 0.0))


def _stage_eval(model: ModelSpec, par: Parallel, settings: Settings, prec: BytesPerParam, shard: LayerShard,
                coeffs, stage, common: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every memory component of pipeline stage ``stage`` (array-polymorphic).

    DualPipe (DeepSeek-V3 Table 2): device i holds stages i and p−1−i (2x parameters); its
    activations are p+1 micro-batches of one stage's layers. ``common``: :func:`_stage_common`
    of the same layouts, if already computed.
    """
    cm = common if common is not None else _stage_common(model, par, coeffs, settings)
    # the pipeline splits the L blocks and the D multi-token-prediction modules' blocks (slots L ..
    # L+D-1, on the last stage) by the uneven-split convention of cost/pipeline.py
    L = model.layers + model.mtp_layers
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
    # multi-token prediction (DeepSeek-V3 §2.2): besides its block (a slot of the split), each module
    # has its 2h->h projection (column-parallel: / tp) and norms on the last stage
    mtp = np.where(is_last, float(model.mtp_layers), 0.0) if model.mtp_layers else 0.0
    if model.mtp_layers:
        head = head + mtp * P.mtp_extra_params(model, np.asarray(par.tp))
    ne = nd * np.asarray(shard.dense) + nm * np.asarray(shard.moe) + emb + head
    ex = nm * np.asarray(shard.experts)
    lin_ne = nd * np.asarray(shard.dense_linear) + nm * np.asarray(shard.moe_linear)
    lin_ex = nm * np.asarray(shard.experts_linear)
    start, end = fp8_bf16_layers(settings)
    if prec.fp8_cache and (start or end):
        # the FP8 recipe's BF16 boundary layers keep no FP8 copies (Megatron-Core
        # --first-last-layers-bf16): the model's first ones on stage 0, its last ones on stage p-1
        # (cost/pipeline.py bf16_boundary_layers; DualPipe's device 0 holds both end stages)
        first_bf, last_bf = bf16_boundary_layers(model.layers, p, start, end)
        # pp = 1: the first `start` layers and the last ones up to the model's layers (no layer
        # counted twice when start + end exceeds them); pp > 1: what each end stage holds
        n_s = np.where(is_first, np.where(p == 1, min(start, model.layers), first_bf), 0)
        n_e = np.where(is_last, np.where(p == 1, min(end, model.layers - min(start, model.layers)), last_bf), 0)
        d_s = np.asarray(_dense_in_span(model, 0, n_s))
        d_e = np.asarray(_dense_in_span(model, model.layers - n_e, n_e))
        lin_ne = lin_ne - (d_s + d_e) * np.asarray(shard.dense_linear) - (n_s - d_s + n_e - d_e) * np.asarray(
            shard.moe_linear)
        lin_ex = lin_ex - (n_s - d_s + n_e - d_e) * np.asarray(shard.experts_linear)
    if settings.finetune == "full":
        w, g, o = _states(ne, ex, lin_ne, lin_ex, prec, par, cm["zero_div"])
        bw, bg = _zero3_buffers(model, par, prec, shard, (nd + nm) > 0)
        trainable = ne + ex
        dequant = 0.0
    else:
        # LoRA / QLoRA (cost/finetune.py): the base is frozen, in 16 bits or NF4 (its weights only,
        # sharded by ZeRO-3 like any weight); the adapters are the trainable parameters, with the
        # usual weights + gradients + optimizer states (LoRA §4.1, QLoRA §3)
        frozen = frozen_precision(prec, settings)
        w, _, _ = _states(ne, ex, lin_ne, lin_ex, frozen, par, cm["zero_div"])
        bw, bg = _zero3_buffers(model, par, frozen, shard, (nd + nm) > 0)
        if settings.finetune == "qlora":
            # FSDP gathers the quantised storage (QLoRA's NF4 in 16-bit containers: Answer.AI's
            # fsdp_qlora, bnb quant_storage) and dequantises one linear at a time (below): the two
            # gathered layers hold their linear weights at NF4 bytes, the rest at 2
            lay_lin = np.maximum(np.asarray(shard.dense_linear), np.asarray(shard.moe_linear) + np.asarray(shard.experts_linear))
            bw = bw + np.where(np.asarray(par.zero) >= 3, 2.0 * frozen.fp8_cache * lay_lin, 0.0) * ((nd + nm) > 0)
        trainable = (nd * FT.adapter_params_per_layer(model, False, settings.lora_targets, settings.lora_rank)
                     + nm * FT.adapter_params_per_layer(model, True, settings.lora_targets, settings.lora_rank))
        wa, g, o = _states(trainable, 0.0, 0.0, 0.0, prec, par, cm["zero_div"])
        w = w + wa
        # QLoRA dequantises one linear weight at a time into a 16-bit buffer (bitsandbytes
        # dequantize_4bit), live while its GEMM runs
        dequant = 2.0 * FT.largest_linear(model) if settings.finetune == "qlora" else 0.0
    # parameter offload (ZeRO-3): the rank's 16-bit shards in host memory, the gathered layers in HBM
    w, host_par = offload_params(w, par.zero, settings.param_offload)
    w, g = w + bw, g + bg
    # optimizer-state offload: a share of the states (and an fp32 gradient buffer) in host memory
    o, host_opt = offload_optimizer(o, prec, settings.optimizer_offload)

    act_d, none_d, act_m, none_m = cm["act"]
    fl = np.asarray(in_flight_on_stage(par.schedule, p, par.microbatches, par.virtual_stages, i))
    # DualPipe: p+1 micro-batches of *one* stage's layers (the mean of the two halves it holds)
    w_d = np.where(dual, (nd_i + nd_j) / 2.0, nd_i)
    w_m = np.where(dual, (nm_i + nm_j) / 2.0, nm_i)
    mix_d, mix_m = cm["mix"]
    layers_act = (w_d * mix_d + w_m * mix_m) * fl
    # recompute working set: during a backward one layer's activations are rematerialised
    rec = np.asarray(par.recompute)
    peak_none = np.maximum(np.where(nd > 0, none_d, 0.0), np.where(nm > 0, none_m, 0.0))
    peak_kept = np.maximum(np.where(nd > 0, act_d, 0.0), np.where(nm > 0, act_m, 0.0))
    recompute_ws = np.where(rec == 0, 0.0, np.maximum(peak_none - peak_kept, 0.0))
    first_x = np.where(is_first, cm["first_x"], 0.0)
    # each MTP module computes its own logits (and loss) through the shared head: the last stage's
    # logit terms once more per module (not counted: a module's normalised inputs and 2h concat,
    # ~3 h x 2 B per token, against a DeepSeek-V3 MoE block's ~460 kB: 1.89 GB per layer at 4,096 tokens)
    last_x = np.where(is_last, cm["last_x"], 0.0) * (1.0 + mtp)
    mem = settings.stack.memory
    # working set of the backward: gradient and upcast temporaries of the layer being
    # differentiated, ``working_layers`` x one layer's saved activations of one micro-batch, live
    # once however many micro-batches are in flight (memory.working_layers; fitted per stack)
    working = mem.working_layers * peak_kept
    act = (layers_act + recompute_ws + first_x + last_x) * mem.activation_factor + working
    # reduction buckets and the optimizer step's working buffers (cost/states.optimizer_step_bytes)
    buffers = (np.asarray(grad_buffer_bytes(mem, par, trainable)) + optimizer_step_bytes(mem, o, prec)
               + dequant + np.zeros_like(np.asarray(w, dtype=float)))
    n_comm = np.asarray(communicators(par.tp, p, par.dp, par.cp, par.ep, embedding=is_first | is_last))
    return {
        "stage": i, "layers": nd + nm, "dense_layers": nd, "moe_layers": nm,
        "params_per_gpu": ne + ex, "params_nonexpert": ne, "params_expert": ex,
        "trainable_params_per_gpu": trainable + np.zeros_like(np.asarray(ne, dtype=float)),
        "weights_bytes": w, "gradients_bytes": g, "optimizer_bytes": o,
        "activations_bytes": act, "in_flight": fl,
        "act_layers_bytes": layers_act, "act_recompute_bytes": recompute_ws,
        "act_first_extra_bytes": first_x, "act_last_extra_bytes": last_x, "act_working_bytes": working,
        "zero3_buffer_bytes": bw + bg, "buffers_bytes": buffers, "communicators": n_comm,
        "host_optimizer_bytes": host_opt + np.zeros_like(np.asarray(ne, dtype=float)),
        "host_param_bytes": host_par + np.zeros_like(np.asarray(ne, dtype=float)),
    }


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


def memory_per_gpu(model: ModelSpec, hw: Hardware, par: Parallel, settings: Settings, reserve=None) -> dict[str, Any]:
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
    """
    prec = bytes_per_param(settings, par.zero, par.microbatches)
    shard = layer_shard(model, par)
    coeffs = _layer_coeffs(model, settings)
    cands = candidate_stages(par.pp, model)
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
    cap, res = _capacity(hw, reserve)
    evals_u = [_stage_eval(model, par, settings, prec, shard, coeffs, s, common) for s in uniq]
    parts_u = [_stage_totals(e, settings, res) for e in evals_u]
    evals = [evals_u[j] for j in which]
    parts = [parts_u[j] for j in which]
    totals = [x[3] for x in parts]
    pick = _argmax(totals)

    def choose(key):
        return _choose(pick, [e[key] for e in evals])

    mem = settings.stack.memory
    out = {k: choose(k) for k in MEMORY_KEYS}
    out["kv_cache_bytes"] = np.zeros_like(out["weights_bytes"])
    for n, key in enumerate(("allocated_bytes", "reserved_bytes", "runtime_bytes", "total_bytes")):
        out[key] = _choose(pick, [x[n] for x in parts])
    out["allocator_overhead_bytes"] = out["reserved_bytes"] - out["allocated_bytes"]
    # pipeline stage 0's own peak (candidate_stages lists it first): what world rank 0 measures,
    # the rank that frameworks' benchmark logs usually report (nanotron's create_table_log)
    out["first_stage_allocated_bytes"], out["first_stage_reserved_bytes"] = parts[0][0], parts[0][1]
    out["communicators"] = choose("communicators").astype(int)
    out["capacity_bytes"] = np.full_like(out["weights_bytes"], cap)
    out["margin_bytes"] = cap - out["total_bytes"]
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
    b = np.asarray(par.micro_batch, dtype=float)
    # total = (fixed + b·per_b)(1 + overhead) + runtime <= cap  <=>  fixed + b·per_b <= (cap - runtime)/(1 + overhead)
    out["max_micro_batch"] = np.min(np.stack(np.broadcast_arrays(*[
        _max_by(x[0] - np.asarray(e["activations_bytes"]), np.asarray(e["activations_bytes"]) / b,
                (cap - x[2]) / (1.0 + mem.allocator_overhead))
        for x, e in zip(parts, evals)])), axis=0)
    out["params_per_gpu"] = choose("params_per_gpu")
    out["trainable_params_per_gpu"] = choose("trainable_params_per_gpu")
    out["stage"] = _choose(pick, cands).astype(int)
    c_dense, c_moe = coeffs
    typical = c_moe if model.moe_layers >= model.dense_layers else c_dense
    out["activation_bytes_per_layer"] = (np.asarray(layer_activation_bytes(typical, par)[0], dtype=float)
                                         * mem.activation_factor)
    result = {k: _out(v) for k, v in out.items()}
    result["verdict"] = verdict_name(out["verdict_code"])
    return result


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

from llmpar.cost.inference import *  # noqa: E402,F401,F403
from llmpar.cost.inference import inference_memory_per_gpu, kv_cache_per_token_layer  # noqa: E402,F401
