"""The stage model of per-GPU training memory: every memory component of one pipeline stage
(docs/memory.md), array-polymorphic in every degree and knob of a :class:`~llmpar.parallel.Parallel`.

Split out of cost/memory.py, which picks the most-loaded stage and adds the allocator and the
runtime (:func:`llmpar.cost.memory.memory_per_gpu`); the explain layer (cost/memory_explain.py)
calls the same :func:`_stage_eval`, so the two cannot disagree. Sources are named beside each
formula: model states ZeRO (arXiv:1910.02054) §5 and cost/states.py; shards cost/shards.py;
activations Korthikanti et al. 2022 (arXiv:2205.05198) §4-5 and cost/activations.py; DualPipe
and multi-token prediction DeepSeek-V3 (arXiv:2412.19437) Table 2 and §2.2; LoRA / QLoRA
cost/finetune.py; activation offloading Megatron-Core cpu_offloading_num_layers.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from llmpar.cost import finetune as FT
from llmpar.cost import params as P
from llmpar.cost.activations import aggregate, checkpoint_term, layer_activation_bytes, stack_activation_terms
from llmpar.cost.activations_ends import _extra_bytes, first_stage_extra_terms, last_stage_extra_terms
from llmpar.cost.arrays import scalar_out as _out
from llmpar.cost.inflight import _dense_in_span, in_flight_on_stage, logits_in_flight, stage_span
from llmpar.cost.pipeline import DUALPIPE, bf16_boundary_layers, fp8_bf16_layers, full_recompute_fraction, offload_kept_share
from llmpar.cost.runtime import communicators
from llmpar.cost.shards import LayerShard, embedding_shard, head_shard
from llmpar.cost.states import (
    BytesPerParam, _states, _zero3_buffers, _zero_divisors, frozen_precision, offload_optimizer, offload_params,
    optimizer_step_bytes,
)
from llmpar.parallel import RECOMPUTE, Parallel, Settings
from llmpar.specs.model import ModelSpec


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


def grad_buffer_bytes(mem, par: Parallel, params_on_gpu):
    """Gradient-reduction buffers of a stack, when the data-parallel group (dp·cp) has > 1 rank:
    the stack's bucket (``memory.grad_bucket_bytes``: DeepSpeed's reduce bucket, 5e8 elements x
    2 B) and, for torch DDP without gradient_as_bucket_view (``memory.ddp_bucket_copy``), a flat
    16-bit copy of every gradient of this GPU (PyTorch DDP docs: gradient_as_bucket_view "saves
    memory equal to the total gradients size")."""
    n = np.asarray(par.dp) * np.asarray(par.cp)
    copy = 2.0 * np.asarray(params_on_gpu, dtype=float) if mem.ddp_bucket_copy else 0.0
    return _out(np.where(n > 1, mem.grad_bucket_bytes + copy, 0.0))


class StageLayers(NamedTuple):
    """The layers one pipeline stage holds (arrays): its own split (``*_i``), DualPipe's second
    stage p−1−i (``*_j``), their sum (``nd``, ``nm``: dense, MoE), and whether it holds an end."""

    p: Any
    i: Any
    dual: Any
    nd_i: Any
    nd_j: Any
    nm_i: Any
    nm_j: Any
    nd: Any
    nm: Any
    is_first: Any
    is_last: Any


def _stage_layers(model: ModelSpec, par: Parallel, stage) -> StageLayers:
    """Dense and MoE layers of pipeline stage ``stage``, DualPipe's two halves included."""
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
    return StageLayers(p, i, dual, nd_i, nd_j, nm_i, nm_j, nd, nm, is_first, is_last)


def _stage_params(model: ModelSpec, par: Parallel, prec: BytesPerParam, shard: LayerShard, settings: Settings,
                  cm: dict[str, Any], sl: StageLayers):
    """(non-expert, expert, their linear parts, MTP modules) parameters of the stage on one GPU."""
    emb = np.where(sl.is_first, cm["emb"], 0.0)
    head = np.where(sl.is_last, cm["head"], 0.0)
    # multi-token prediction (DeepSeek-V3 §2.2): besides its block (a slot of the split), each module
    # has its 2h->h projection (column-parallel: / tp) and norms on the last stage
    mtp = np.where(sl.is_last, float(model.mtp_layers), 0.0) if model.mtp_layers else 0.0
    if model.mtp_layers:
        head = head + mtp * P.mtp_extra_params(model, np.asarray(par.tp))
    nd, nm = sl.nd, sl.nm
    ne = nd * np.asarray(shard.dense) + nm * np.asarray(shard.moe) + emb + head
    ex = nm * np.asarray(shard.experts)
    lin_ne = nd * np.asarray(shard.dense_linear) + nm * np.asarray(shard.moe_linear)
    lin_ex = nm * np.asarray(shard.experts_linear)
    start, end = fp8_bf16_layers(settings)
    if prec.fp8_cache and (start or end):
        lin_ne, lin_ex = _without_bf16_boundary(model, shard, sl, start, end, lin_ne, lin_ex)
    return ne, ex, lin_ne, lin_ex, mtp


def _without_bf16_boundary(model: ModelSpec, shard: LayerShard, sl: StageLayers, start, end, lin_ne, lin_ex):
    """The linear parameters that keep FP8 copies, less the FP8 recipe's BF16 boundary layers."""
    p = sl.p
    # the FP8 recipe's BF16 boundary layers keep no FP8 copies (Megatron-Core
    # --first-last-layers-bf16): the model's first ones on stage 0, its last ones on stage p-1
    # (cost/pipeline.py bf16_boundary_layers; DualPipe's device 0 holds both end stages)
    first_bf, last_bf = bf16_boundary_layers(model.layers, p, start, end)
    # pp = 1: the first `start` layers and the last ones up to the model's layers (no layer
    # counted twice when start + end exceeds them); pp > 1: what each end stage holds
    n_s = np.where(sl.is_first, np.where(p == 1, min(start, model.layers), first_bf), 0)
    n_e = np.where(sl.is_last, np.where(p == 1, min(end, model.layers - min(start, model.layers)), last_bf), 0)
    d_s = np.asarray(_dense_in_span(model, 0, n_s))
    d_e = np.asarray(_dense_in_span(model, model.layers - n_e, n_e))
    lin_ne = lin_ne - (d_s + d_e) * np.asarray(shard.dense_linear) - (n_s - d_s + n_e - d_e) * np.asarray(
        shard.moe_linear)
    lin_ex = lin_ex - (n_s - d_s + n_e - d_e) * np.asarray(shard.experts_linear)
    return lin_ne, lin_ex


def _adapter_states(model: ModelSpec, par: Parallel, settings: Settings, prec: BytesPerParam, shard: LayerShard,
                    cm: dict[str, Any], sl: StageLayers, params):
    """LoRA / QLoRA: (weights, gradients, optimizer, ZeRO-3 buffers, trainable, dequant buffer)."""
    ne, ex, lin_ne, lin_ex = params
    nd, nm = sl.nd, sl.nm
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
    return w, g, o, bw, bg, trainable, dequant


def _stage_states(model: ModelSpec, par: Parallel, settings: Settings, prec: BytesPerParam, shard: LayerShard,
                  cm: dict[str, Any], sl: StageLayers, params):
    """Model states of the stage: (weights, gradients, optimizer, ZeRO-3 buffers w and g,
    trainable parameters, dequant buffer, host parameter bytes, host optimizer bytes)."""
    ne, ex, lin_ne, lin_ex = params
    if settings.finetune == "full":
        w, g, o = _states(ne, ex, lin_ne, lin_ex, prec, par, cm["zero_div"])
        bw, bg = _zero3_buffers(model, par, prec, shard, (sl.nd + sl.nm) > 0)
        trainable = ne + ex
        dequant = 0.0
    else:
        w, g, o, bw, bg, trainable, dequant = _adapter_states(model, par, settings, prec, shard, cm, sl, params)
    # parameter offload (ZeRO-3): the rank's 16-bit shards in host memory, the gathered layers in HBM
    w, host_par = offload_params(w, par.zero, settings.param_offload)
    w, g = w + bw, g + bg
    # optimizer-state offload: a share of the states (and an fp32 gradient buffer) in host memory
    o, host_opt = offload_optimizer(o, prec, settings.optimizer_offload)
    return w, g, o, bw, bg, trainable, dequant, host_par, host_opt


def _stage_activations(par: Parallel, settings: Settings, cm: dict[str, Any], sl: StageLayers, mtp) -> dict[str, Any]:
    """The stage's activations: its layers' in flight, the recompute and backward working sets,
    the first and last stages' extra terms, and their total."""
    act_d, none_d, act_m, none_m = cm["act"]
    nd, nm = sl.nd, sl.nm
    fl = np.asarray(in_flight_on_stage(par.schedule, sl.p, par.microbatches, par.virtual_stages, sl.i))
    # DualPipe: p+1 micro-batches of *one* stage's layers (the mean of the two halves it holds)
    w_d = np.where(sl.dual, (sl.nd_i + sl.nd_j) / 2.0, sl.nd_i)
    w_m = np.where(sl.dual, (sl.nm_i + sl.nm_j) / 2.0, sl.nm_i)
    mix_d, mix_m = cm["mix"]
    layers_act = (w_d * mix_d + w_m * mix_m) * fl
    # recompute working set: during a backward one layer's activations are rematerialised
    rec = np.asarray(par.recompute)
    peak_none = np.maximum(np.where(nd > 0, none_d, 0.0), np.where(nm > 0, none_m, 0.0))
    peak_kept = np.maximum(np.where(nd > 0, act_d, 0.0), np.where(nm > 0, act_m, 0.0))
    recompute_ws = np.where(rec == 0, 0.0, np.maximum(peak_none - peak_kept, 0.0))
    first_x = np.where(sl.is_first, cm["first_x"], 0.0)
    # each MTP module computes its own logits (and loss) through the shared head: the last stage's
    # logit terms once more per module (not counted: a module's normalised inputs and 2h concat,
    # ~3 h x 2 B per token, against a DeepSeek-V3 MoE block's ~460 kB: 1.89 GB per layer at 4,096 tokens)
    last_x = np.where(sl.is_last, cm["last_x"], 0.0) * (1.0 + mtp)
    mem = settings.stack.memory
    # working set of the backward: gradient and upcast temporaries of the layer being
    # differentiated, ``working_layers`` x one layer's saved activations of one micro-batch, live
    # once however many micro-batches are in flight (memory.working_layers; fitted per stack)
    working = mem.working_layers * peak_kept
    act = (layers_act + recompute_ws + first_x + last_x) * mem.activation_factor + working
    return {"activations_bytes": act, "in_flight": fl, "act_layers_bytes": layers_act,
            "act_recompute_bytes": recompute_ws, "act_first_extra_bytes": first_x, "act_last_extra_bytes": last_x,
            "act_working_bytes": working}


def _stage_eval(model: ModelSpec, par: Parallel, settings: Settings, prec: BytesPerParam, shard: LayerShard,
                coeffs, stage, common: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every memory component of pipeline stage ``stage`` (array-polymorphic).

    DualPipe (DeepSeek-V3 Table 2): device i holds stages i and p−1−i (2x parameters); its
    activations are p+1 micro-batches of one stage's layers. ``common``: :func:`_stage_common`
    of the same layouts, if already computed.
    """
    cm = common if common is not None else _stage_common(model, par, coeffs, settings)
    sl = _stage_layers(model, par, stage)
    nd, nm = sl.nd, sl.nm
    ne, ex, lin_ne, lin_ex, mtp = _stage_params(model, par, prec, shard, settings, cm, sl)
    w, g, o, bw, bg, trainable, dequant, host_par, host_opt = _stage_states(
        model, par, settings, prec, shard, cm, sl, (ne, ex, lin_ne, lin_ex))
    acts = _stage_activations(par, settings, cm, sl, mtp)
    mem = settings.stack.memory
    # reduction buckets and the optimizer step's working buffers (cost/states.optimizer_step_bytes)
    buffers = (np.asarray(grad_buffer_bytes(mem, par, trainable)) + optimizer_step_bytes(mem, o, prec)
               + dequant + np.zeros_like(np.asarray(w, dtype=float)))
    n_comm = np.asarray(communicators(par.tp, sl.p, par.dp, par.cp, par.ep, embedding=sl.is_first | sl.is_last))
    return {
        "stage": sl.i, "layers": nd + nm, "dense_layers": nd, "moe_layers": nm,
        "params_per_gpu": ne + ex, "params_nonexpert": ne, "params_expert": ex,
        "trainable_params_per_gpu": trainable + np.zeros_like(np.asarray(ne, dtype=float)),
        "weights_bytes": w, "gradients_bytes": g, "optimizer_bytes": o,
        "activations_bytes": acts["activations_bytes"], "in_flight": acts["in_flight"],
        "act_layers_bytes": acts["act_layers_bytes"], "act_recompute_bytes": acts["act_recompute_bytes"],
        "act_first_extra_bytes": acts["act_first_extra_bytes"], "act_last_extra_bytes": acts["act_last_extra_bytes"],
        "act_working_bytes": acts["act_working_bytes"],
        "zero3_buffer_bytes": bw + bg, "buffers_bytes": buffers, "communicators": n_comm,
        "host_optimizer_bytes": host_opt + np.zeros_like(np.asarray(ne, dtype=float)),
        "host_param_bytes": host_par + np.zeros_like(np.asarray(ne, dtype=float)),
    }
