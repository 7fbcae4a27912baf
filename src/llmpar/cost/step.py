"""Step time of one training iteration, its breakdown, and MFU/HFU.

Array-polymorphic: ``par`` may hold numpy arrays of degrees and knobs (the planner's candidates);
every term below is evaluated for all of them at once with the same code ``llmpar step`` uses.

The model (docs/time-model.md gives each formula with its source):

1. One layer, one micro-batch, on one GPU of the critical (most loaded) pipeline stage:
   - matmuls: the GEMMs of :func:`llmpar.cost.flops.layer_gemms` after the TP/CP/EP split, each
     at peak x a shape-dependent efficiency (:mod:`llmpar.cost.compute`); backward = 2 x forward
     (input- and weight-gradient GEMMs; Narayanan et al. 2021, App.).
   - memory-bound ops (norms, activations, dropout, residuals, softmax of standard attention) at
     achieved HBM bandwidth; backward moves twice the forward traffic.
   - recompute: full re-runs the layer's forward (and its TP collectives) during backward;
     selective re-runs the attention core (Korthikanti et al. 2022, §5).
   - TP collectives hidden behind the GEMMs they feed by the stack's overlap.tp (inside one
     NVLink domain only; none in the Megatron-LM of 2021-22); CP K/V exchange overlapped with the
     attention core (ring attention), only the excess exposed; EP all-to-alls exposed (hidden
     behind the paired chunk's compute under DualPipe, DeepSeek-V3 report §3.2.1).
   - the stack (specs/stack.py) supplies the kernels' achieved fractions, the FP8 recipe, the
     attention kernel, element-wise traffic, launch and fixed costs, and every overlap.
2. A stage's per-micro-batch forward time t_f and backward time t_b: its layers plus the LM head
   and loss (last stage) or the embedding (first stage), plus the p2p transfers (v of them per
   direction with v interleaved chunks). The critical stage is the slowest of first/middle/last.
3. The pipeline: :func:`llmpar.cost.pipeline.pipeline_time` — m(t_f + t_b) + bubble.
4. Data parallel: gradient reduce (in buckets) and ZeRO parameter gathers, minus the part hidden
   behind compute (``settings.dp_overlap``, the stack's overlap.zero3_prefetch).
5. Optimizer step: memory-bound, every optimizer-state byte read and written once.
6. The stack's fixed costs per step and per micro-batch.

step = m(t_f + t_b) + bubble + dp_exposed + optimizer + fixed, and the breakdown's terms add up to it.

This module composes; the parts live beside it: one layer's compute pieces in cost/step_layer.py,
its collectives, the ends and the critical stage in cost/step_stage.py, the data-parallel terms in
cost/step_dp.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from llmpar.cost import comm, compute, flops, memory, pipeline
from llmpar.cost.states import DTYPE_BYTES
from llmpar.cost.step_dp import adapter_dp_params, dp_exposed, frozen_gathers, stage_dp_params
from llmpar.cost.step_layer import (
    REC_FULL, REC_SELECTIVE, adapter_time, dequant_time, layer_parts, mix_layers, module_elementwise_time,
    split_layer_gemms,
)
from llmpar.cost.step_stage import critical_stage, layer_comm, stage_ends
from llmpar.cost.topology import dims_placement
from llmpar.parallel import Parallel, Settings
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec
from llmpar.specs.stack import per_gen

BREAKDOWN_KEYS = ("compute", "recompute", "tp", "pp", "dp", "cp", "ep", "offload", "bubble", "optimizer", "fixed")
# Optimizer-step HBM traffic per parameter, bytes, for a mixed-precision step as Megatron-LM runs
# it (optimizer.py: FP32 main grads; clip_grad_norm; fused Adam; copy of the FP32 main params
# back to the 16-bit model params): grad-norm read of the fp32 main grad (4), clip scale read +
# write (8), the optimizer's own update, and the main->model copy (read 4, write 2).
# Update: adam reads grad, param, m, v and writes param, m, v (7 x 4 = 28); sgd with momentum
# reads grad, param, momentum and writes param, momentum (20); adam-8bit: fp32 grad and param
# read/written (12) + two 1-byte states read and written (4); adam-bf16: fp32 grad and param
# (12) + two 2-byte states read and written (8). The gradient cast into the fp32
# main grad (read grad_dtype bytes, write 4) is added from settings.grad_dtype.
_OPT_TRAFFIC = {k: 4 + 8 + u + 6 for k, u in {"adam": 28.0, "adamw": 28.0, "sgd": 20.0, "adam-8bit": 16.0,
                                                "adam-bf16": 20.0}.items()}


def stack_hardware(hw: Hardware, net) -> Hardware:
    """The hardware as the stack's collectives see it: the scale-out tier's efficiencies and
    latencies and the scale-up tier's efficiencies times the stack's ``network`` multipliers
    (identity: the same object). Efficiencies stay <= 1."""
    if (net.scale_out_efficiency, net.scale_out_latency, net.scale_up_efficiency) == (1.0, 1.0, 1.0):
        return hw
    out = hw.model_copy(deep=True)

    def scale(tier, eff, lat):
        for f in ("efficiency", "ll_efficiency", "ll128_efficiency", "inr_efficiency"):
            if f in ("efficiency", "inr_efficiency") and getattr(tier, f) is not None:
                setattr(tier, f, min(1.0, getattr(tier, f) * eff))
        for f in ("latency", "ll128_latency", "simple_latency", "inr_latency"):
            if getattr(tier, f) is not None:
                setattr(tier, f, getattr(tier, f) * lat)
        for fit in (tier.collectives or {}).values():
            for f in ("efficiency", "inr_efficiency"):
                if getattr(fit, f) is not None:
                    setattr(fit, f, min(1.0, getattr(fit, f) * eff))
            for f in ("latency", "ll128_latency", "simple_latency", "inr_latency"):
                if getattr(fit, f) is not None:
                    setattr(fit, f, getattr(fit, f) * lat)

    scale(out.tiers[-1], net.scale_out_efficiency, net.scale_out_latency)
    for tier in out.tiers[:-1]:
        scale(tier, net.scale_up_efficiency, 1.0)
    return out


def _layer_compute(model, hw, par, settings, e):
    """One layer, one micro-batch, one GPU of the critical stage: GEMMs (averaged over dense and
    MoE layers by their share), the attention core, element-wise traffic, FP8 casts, launch cost;
    forward, backward and what recompute re-runs (module doc, step 1)."""
    stack = settings.stack
    b, s, tp, cp = par.micro_batch, par.seq, par.tp, par.cp
    frac_moe = model.moe_layers / model.layers
    dense = layer_parts(model, hw, par, settings, moe=False)
    moe_parts = layer_parts(model, hw, par, settings, moe=True) if model.moe is not None else dense
    g_lin, core_f, core_b, cast_f, cast_b, g_sel, core_sel, op = mix_layers(frac_moe, dense, moe_parts)
    traffic = stack.kernels.elementwise_traffic
    etp = par.expert_tp
    elem = traffic * compute.layer_elementwise_bytes(model, b, s, tp, par.sp, cp, settings.attention, e, etp)
    elem_flash = traffic * compute.layer_elementwise_bytes(model, b, s, tp, par.sp, cp, "flash", e, etp)
    t_elem = compute.memory_bound_time(hw, elem)
    t_scores = compute.memory_bound_time(hw, elem - elem_flash)   # s^2 softmax/dropout traffic
    t_cast_f = compute.memory_bound_time(hw, cast_f)
    t_cast_b = compute.memory_bound_time(hw, cast_b)
    # CPU/launch cost per layer and micro-batch, fwd 1/3, bwd 2/3; MoE layers add their own
    # (router, permutation, the dispatcher's host sync: kernels.moe_s_per_layer) and a cost per
    # local expert (experts / ep: TE GroupedLinear launches one GEMM, and in FP8 one quantisation,
    # per local expert: kernels.moe_s_per_local_expert), both per GPU generation. Additive: tried
    # as max(GPU time, host time) for the framework's own launches on 2026-12-01 (nanotron refitted:
    # cross-validated 11.2 % -> 12.5 % median, held-out regret 1.7 % -> 0.0 %, fastest quarter
    # 10.3 % either way), not adopted on that mixed evidence (docs/stacks.md, nanotron)
    gen = hw.gpu.generation
    local_experts = model.moe.experts / np.asarray(par.ep, dtype=float) if model.moe is not None else 0.0
    launch = stack.kernels.launch_s_per_layer + frac_moe * (
        per_gen(stack.kernels.moe_s_per_layer, gen) + per_gen(stack.kernels.moe_s_per_local_expert, gen) * local_experts)
    fwd = g_lin + core_f + t_elem + t_cast_f + launch / 3.0
    bwd = 2.0 * (g_lin + t_elem) + core_b + t_cast_b + 2.0 * launch / 3.0
    if settings.finetune != "full":
        # LoRA / QLoRA (cost/finetune.py): the frozen linears' backward is their input gradient
        # only (one GEMM, not two); the adapters' skinny GEMMs and element-wise passes (their FLOPs
        # at the peak, their bytes at HBM bandwidth; backward twice the forward); QLoRA dequantises
        # each NF4 weight to 16 bits before its forward GEMM and again before its backward one
        # (bitsandbytes MatMul4Bit): reads 0.516 B and writes 2 B per linear weight and pass
        ad_f, ad_b = adapter_time(model, hw, par, settings, e, frac_moe)
        deq = dequant_time(model, hw, settings, frac_moe)
        fwd = fwd + ad_f + deq
        bwd = bwd - g_lin + ad_b + deq
    rec = np.asarray(par.recompute)
    # selective re-runs the attention core with its s^2 traffic (Korthikanti §5) or, on the share
    # ``op`` of layers under torchtitan's op-level SAC, every second matmul (g_sel) and the
    # forward's element-wise ops with their launches (the attention core's output is saved there);
    # under Megatron-Core recompute modules, the modules' GEMMs (g_sel), the attention core if
    # core_attn is one, and the element-wise ops that rebuild the tensors they dropped
    policy = settings.selective_policy
    core_in = 0.0 if isinstance(policy, tuple) and "core_attn" not in policy else 1.0
    t_mod = module_elementwise_time(model, hw, par, settings, frac_moe) if isinstance(policy, tuple) else 0.0
    sel_t = core_sel + core_in * (1.0 - op) * t_scores + g_sel + op * (t_elem + launch / 3.0) + t_mod
    # full: the forward again, on the share of the stage's layers it covers (recompute_layers)
    rec_full = pipeline.full_recompute_fraction(model.layers, par.pp, par.virtual_stages, par.recompute_layers)
    rec_t = np.where(rec == REC_FULL, rec_full * fwd, np.where(rec == REC_SELECTIVE, sel_t, 0.0))
    bf_f, bf_b, bf_rec = _bf16_layer_extra(model, hw, par, settings, frac_moe, g_lin, t_cast_f, t_cast_b, rec, rec_full)
    return SimpleNamespace(bf_f=bf_f, bf_b=bf_b, bf_rec=bf_rec, rec_full=rec_full, frac_moe=frac_moe, g_lin=g_lin, core_f=core_f, core_b=core_b, elem=elem, t_elem=t_elem,
                           t_cast_f=t_cast_f, t_cast_b=t_cast_b, launch=launch, fwd=fwd, bwd=bwd, rec=rec, rec_t=rec_t)


def _bf16_layer_extra(model, hw, par, settings, frac_moe, g_lin, t_cast_f, t_cast_b, rec, rec_full):
    """Extra seconds, per micro-batch, of one transformer layer that runs its GEMMs in BF16 under
    ``--dtype fp8`` (the recipe's ``bf16_layers_at_start`` / ``_at_end``: Megatron-Core
    ``--first-last-layers-bf16``, megatron/core/fp8_utils.py get_fp8_context: no FP8 autocast for
    those layers), against the FP8 layer the other terms price: its linear GEMMs at the BF16 rate
    instead of the FP8 one, without the FP8 casts. Forward, backward (2x the GEMMs; the output
    gradient's cast) and what full recompute re-runs of the forward. (0, 0, 0) without such layers."""
    if not any(pipeline.fp8_bf16_layers(settings)):
        return 0.0, 0.0, 0.0

    def bf16_linear(moe):   # the linear GEMMs do not depend on the causal mask
        linear = split_layer_gemms(model, par, moe, flops.CAUSAL_FULL)[1]
        return compute.linear_gemms_time(hw, settings.stack, "bf16", linear)[0]

    dense = bf16_linear(False)
    (g16,) = mix_layers(frac_moe, (dense,), (bf16_linear(True) if model.moe is not None else dense,))
    d = g16 - g_lin
    f = d - t_cast_f
    return f, 2.0 * d - t_cast_b, np.where(rec == REC_FULL, rec_full * f, 0.0)


def _offload(model, hw, par, settings, L):
    """Activation offloading (``--offload-layers N``, pp = 1): the exposed part of the copies, per
    micro-batch, forward and backward.

    Each of the N offloaded layers' saved activations (A bytes: the no-recompute set, averaged over
    dense and MoE layers) crosses the CPU-GPU link once after its forward and once before its
    backward, on a copy stream (Transformer Engine's offload handler; Megatron-Core
    cpu_offloading). The N·A/B seconds of copies run behind the micro-batch's forward (L·t_f)
    and backward (L·t_b) compute; what exceeds it is exposed: max(0, N·A/B − L·t), with
    B = host_bandwidth / gpus_per_host_link (the GPUs sharing one host link copy at once)."""
    n_off = np.asarray(par.offload_layers, dtype=float)
    if not np.any(n_off > 0):
        return SimpleNamespace(f=0.0, b=0.0, bytes=0.0)
    nbytes = memory.offload_host_bytes(model, par, settings)
    # every GPU of a node offloads at once (data-parallel lockstep): the GPUs behind one host link
    # share its bandwidth (hardware gpus_per_host_link)
    t = nbytes / (float(hw.host_bandwidth or np.inf) / hw.gpus_per_host_link)
    return SimpleNamespace(f=np.maximum(t - model.layers * L.fwd, 0.0), b=np.maximum(t - model.layers * L.bwd, 0.0),
                           bytes=2.0 * nbytes)


def _gathered_weight_bytes(settings, S, shard, moe_on_stage, dense_params):
    """Bytes per parameter the ZeRO weight all-gathers move, as a mean over each DP group's
    parameters on this stage: (non-expert group, expert group).

    16-bit weights: 2. Under ``--dtype fp8`` with the stack's FP8 copies as the primary weights
    (``kernels.fp8.primary_weights``: Megatron-Core ``--fp8-param-gather``, "keep the compute param
    in fp8 ... and perform the param all-gather in fp8", megatron/training/arguments.py; set by
    Megatron-Bridge's FP8 current-scaling and MXFP8 mixed-precision configs, mixed_precision.py)
    the linear weights of the FP8 GEMMs are gathered as FP8, 1 B each (per-tensor scales; MXFP8's
    1-per-32 scales, 3 %, are left out); norms, router, embedding and head stay 2 B. The dense
    layer's linear weights count as FP8 when the recipe lists any of qkv/proj/fc1/fc2 (the
    shipped stacks list all four or none), the routed experts' when it lists ``experts``."""
    rec = settings.stack.kernels.fp8
    if settings.dtype != "fp8" or not rec.primary_weights:
        return DTYPE_BYTES["bf16"], DTYPE_BYTES["bf16"]
    dense_fp8 = bool({"qkv", "proj", "fc1", "fc2"} & set(rec.gemms))
    # the recipe's BF16 boundary layers (bf16_layers_at_start/_end) hold 16-bit weights; the DP
    # traffic is the middle stage's, which holds them only at pp = 1 (S.bf_on_mid; counted with
    # the dense layers' linear weights, the experts' aside)
    lin = ((S.n_mid - moe_on_stage - S.bf_on_mid) * np.asarray(shard.dense_linear, dtype=float)
           + moe_on_stage * np.asarray(shard.moe_linear, dtype=float)) if dense_fp8 else 0.0
    w_dense = 2.0 - np.where(dense_params > 0, lin / np.maximum(dense_params, 1.0), 0.0)
    w_exp = 1.0 if "experts" in rec.gemms else 2.0
    return w_dense, w_exp


def _data_parallel(model, hw, par, settings, place, S):
    """Gradient reduction and ZeRO gathers after the pipeline flush, the part of them exposed,
    and the optimizer step (module doc, steps 4-5; cost/step_dp.py)."""
    ov = settings.stack.overlap
    shard, moe_on_stage, dense_params, expert_params = stage_dp_params(model, par, S)
    # bytes per gradient the DP reduction moves: fp32 (Megatron-Core grad_reduce_in_fp32) or the
    # 16-bit model dtype (Megatron-LM 2021 fp16: reduced before the copy into the fp32 main grads;
    # DeepSpeed: bf16/fp16 gradients); docs/stacks.md, overlap.grad_reduce_dtype; bf16 gradients
    # given are reduced in bf16 (resolved once: Settings.grad_reduce_bytes; Megatron-Bridge's Qwen3
    # performance configs set grad_reduce_in_fp32 = False)
    g_comm = settings.grad_reduce_bytes
    w_dense, w_exp = _gathered_weight_bytes(settings, S, shard, moe_on_stage, dense_params)
    place_dp = dict(place)
    place_dp["dp"] = place["dpcp"]
    frozen_t = frozen_b = 0.0
    if settings.finetune != "full":
        # LoRA / QLoRA: only the adapters have gradients to reduce and an optimizer to step; ZeRO-3
        # still gathers the frozen weights (16-bit, or NF4 under QLoRA: FSDP shards the quantised
        # storage) for every micro-batch's forward and backward, with no reduce-scatter of theirs
        frozen_t, frozen_b = frozen_gathers(model, hw, par, settings, place_dp, shard, S, moe_on_stage,
                                            dense_params + expert_params)
        dense_params, expert_params = adapter_dp_params(model, settings, S, moe_on_stage, expert_params)
    dp_t, dp_bytes, dp_ag = comm.dp_step(hw, par, place_dp, dense_params, expert_params, w_dense, g_comm,
                                         ov.dp_bucket_bytes, ov.param_gather_bucket_bytes, w_exp)
    dp_t, dp_bytes = dp_t + frozen_t, dp_bytes + frozen_b
    z = np.asarray(par.zero)
    m = par.microbatches
    exposed, frac = dp_exposed(model, hw, par, settings, S, dp_t, dp_ag)
    opt_params, opt_t, off_t = _optimizer_step(hw, par, settings, z, dense_params, expert_params)
    par_t = _param_fetches(hw, par, settings, z, m, S, dp_t, frac,
                           lambda: w_dense * dense_params / (par.dp * par.cp)
                           + w_exp * expert_params / np.maximum(par.expert_dp, 1))
    return SimpleNamespace(dp_t=dp_t, dp_bytes=dp_bytes, exposed=exposed, opt_params=opt_params, opt_t=opt_t,
                           offload_t=off_t, param_t=par_t)


def _optimizer_step(hw, par, settings, z, dense_params, expert_params):
    """(parameters this GPU steps, optimizer seconds, of them on the CPU) (module doc, step 5)."""
    opt_params = dense_params / np.where(z >= 1, par.dp * par.cp, 1) + expert_params / np.where(z >= 1, par.expert_dp, 1)
    g_bytes = DTYPE_BYTES[settings.grad_dtype]
    step_bytes = opt_params * (_OPT_TRAFFIC[settings.optimizer] + g_bytes + 4.0)
    opt_t = compute.memory_bound_time(hw, step_bytes)
    off_t = 0.0
    f = settings.optimizer_offload
    if f:
        # optimizer offload (ZeRO-Offload §4; Megatron-Core --optimizer-offload-fraction): a share f of
        # the step runs on the CPU, its state traffic at the host DRAM bandwidth per GPU (peak: a lower
        # bound), after the gradients of those parameters go down the host link (grad-dtype bytes) and
        # before their updated 16-bit weights come back up (2 B); copies, CPU and GPU steps in series
        link = float(hw.host_bandwidth) / hw.gpus_per_host_link
        off_t = f * (step_bytes / float(hw.host_memory_bandwidth) + opt_params * (g_bytes + 2.0) / link)
        opt_t = (1.0 - f) * opt_t + off_t
    return opt_params, opt_t, off_t


def _param_fetches(hw, par, settings, z, m, S, dp_t, frac, shard_bytes_of):
    """Parameter offload (--param-offload, ZeRO-3): the exposed seconds per step of copying the
    rank's 16-bit shards from host memory before each gather.

    ZeRO-Infinity §5 (Rajbhandari et al. 2021): each layer's shard crosses the host link before its
    all-gather, for the forward and again for the backward of every micro-batch (2 m copies of
    ``shard_bytes_of()``, this GPU's 16-bit shard of the stage), and the updated shard goes back once
    after the GPU's optimizer step (its share 1 - F: what a CPU step under --optimizer-offload F
    updates is written in host memory already). The copies run on copy engines, not SMs, and are
    prefetched like the gathers: the stack's ZeRO-3 prefetch share of the compute window that the
    collectives leave (m (t_f + t_b) - t_dp) hides them; the rest is exposed. The host link is
    shared by ``gpus_per_host_link`` GPUs copying at once (docs/memory.md, Parameter offload)."""
    if not settings.param_offload:
        return 0.0
    link = float(hw.host_bandwidth) / hw.gpus_per_host_link
    copies = (2.0 * m + (1.0 - settings.optimizer_offload)) * np.asarray(shard_bytes_of(), dtype=float) / link
    room = np.maximum(m * (S.t_f + S.t_b) - dp_t, 0.0)
    return np.where(z >= 3, np.maximum(copies - frac * np.minimum(copies, room), 0.0), 0.0)


def _flops_figures(model, hw, par, settings, step):
    """Model and hardware FLOPs, TFLOP/s and MFU/HFU under the stated convention.

    MFU conventions (docs/flops.md): "full" counts attention's s² in full (the papers' MFU);
    "causal" counts the half a causal model needs. HFU counts what the kernels execute (the
    kernel's causal block fraction, or all of s² for an eager kernel) plus recompute, so
    MFU(causal) <= HFU <= achieved/peak <= 1. The headline MFU uses the causal count when the
    stack's kernel skips the masked half, the full count otherwise (then executed = counted)."""
    gpus = par.gpus
    peak = hw.gpu.peak(settings.dtype)
    skip = settings.stack.kernels.attention.causal_skip and settings.attention == "flash"
    executed = flops.causal_block_fraction(par.seq) if skip else flops.CAUSAL_FULL
    model_flops_full = flops.training_flops_per_step(model, par, settings)
    model_flops = flops.training_flops_per_step(model, par, settings, flops.CAUSAL_FLASH) if skip else model_flops_full
    hw_flops = flops.hardware_flops_per_step(model, par, executed, settings.selective_policy,
                                             settings.attention, settings)
    return {
        "model_flops_per_step": model_flops,
        "hardware_flops_per_step": hw_flops,
        "model_tflops_per_gpu": flops.per_gpu_rate(model_flops, step, gpus) / 1e12,
        "hardware_tflops_per_gpu": flops.per_gpu_rate(hw_flops, step, gpus) / 1e12,
        "mfu": flops.flops_utilization(model_flops, step, gpus, peak),
        "hfu": flops.flops_utilization(hw_flops, step, gpus, peak),
        "mfu_convention": "causal" if skip else "full",
        "mfu_full_attention": flops.flops_utilization(model_flops_full, step, gpus, peak),
        "model_tflops_per_gpu_full_attention": flops.per_gpu_rate(model_flops_full, step, gpus) / 1e12,
    }


def step_time(model: ModelSpec, hw: Hardware, par: Parallel, settings: Settings, *, with_memory: bool = True,
              reserve=None) -> dict:
    """Step time, throughput, MFU/HFU and the breakdown for layout(s) ``par``. See module doc;
    each step is a function above or in cost/step_stage.py (layer compute, layer communication,
    the ends, the critical stage, data parallel and optimizer, FLOPs)."""
    hw_mem = hw
    hw = stack_hardware(hw, settings.stack.network)
    e = DTYPE_BYTES[settings.dtype if settings.dtype != "fp8" else "bf16"]  # activations stay 16-bit under fp8
    place = dims_placement(hw, par, tuple(settings.rank_order.split("-")))
    L = _layer_compute(model, hw, par, settings, e)
    C = layer_comm(model, hw, par, settings, place, e, L)
    E = stage_ends(model, hw, par, settings, e)
    S = critical_stage(model, hw, par, settings, place, e, L, C, E)
    m, v = par.microbatches, par.virtual_stages
    pipe_total, bubble = pipeline.pipeline_time(S.t_f, S.t_b, par.pp, m, par.schedule, v)
    D = _data_parallel(model, hw, par, settings, place, S)
    # fixed costs of the stack: per step (optimizer launch, grad-norm sync, logging) and per
    # micro-batch (data loading, schedule bookkeeping), measured as a residual in real runs
    fixed_t = settings.stack.fixed.per_step_s + m * settings.stack.fixed.per_microbatch_s
    O = _offload(model, hw, par, settings, L)
    pipe_total = pipe_total + m * (O.f + O.b)      # pp = 1 with offloading: no bubble to adjust
    step = pipe_total + D.exposed + D.opt_t + fixed_t + D.param_t

    n = S.layers
    breakdown = {   # adds up to step
        "compute": m * (n * (L.fwd + L.bwd) + S.heads_f + S.heads_b + S.has_emb * 3 * E.emb + S.bf_f + S.bf_b),
        "recompute": m * (n * L.rec_t + S.bf_rec),
        "tp": m * n * (C.tp_f + C.tp_b + C.tp_rec),
        "pp": m * (S.pp_f + S.pp_b),
        "dp": D.exposed,
        "cp": m * n * (C.cp_f + C.cp_b),
        "ep": m * n * (C.ep_f + C.ep_b),
        "offload": m * (O.f + O.b) + D.param_t,
        "bubble": bubble,
        "optimizer": D.opt_t,
        "fixed": fixed_t,
    }
    # every term on every candidate (a term the same for all had stayed one number: the offload of a
    # plan in which no layout offloads and every one has the same micro-batch count)
    breakdown = {k: v + 0.0 * step for k, v in breakdown.items()}
    comm_bytes = {
        "tp": m * n * C.tp_bytes,
        "pp": np.where(np.asarray(par.pp) > 1, 2.0 * m * v * S.pp_bytes, 0.0),
        "dp": D.dp_bytes,
        "cp": m * n * C.cp_bytes,
        "ep": m * n * C.ep_bytes,
    }
    tokens = par.global_batch * par.seq
    out = {
        "step_time_s": step,
        "tokens_per_s": tokens / step,
        "samples_per_s": par.global_batch / step,
        **_flops_figures(model, hw, par, settings, step),
        "breakdown_s": breakdown,
        "comm_bytes_per_gpu": comm_bytes,
        "stage_forward_s": S.t_f,
        "stage_backward_s": S.t_b,
        "optimizer_offload_s": D.offload_t + 0.0 * step,
        "param_offload_s": D.param_t + 0.0 * step,
        "critical_stage_layers": n,
        # the intermediate terms, per layer and micro-batch unless named otherwise (--explain)
        "parts": {
            "gemm_forward_s": L.g_lin + L.core_f, "linear_forward_s": L.g_lin, "attention_core_forward_s": L.core_f,
            "attention_core_backward_s": L.core_b, "fp8_cast_forward_s": L.t_cast_f, "fp8_cast_backward_s": L.t_cast_b,
            "launch_s": L.launch + 0.0 * L.g_lin, "fixed_s": fixed_t, "elementwise_forward_s": L.t_elem,
            "elementwise_forward_bytes": L.elem, "layer_forward_s": L.fwd, "layer_backward_s": L.bwd,
            "layer_recompute_s": L.rec_t, "tp_forward_s": C.tp_f, "tp_backward_s": C.tp_b + C.tp_rec,
            "cp_exposed_s": C.cp_f + C.cp_b, "ep_exposed_s": C.ep_f + C.ep_b,
            "offload_exposed_s": O.f + O.b, "offload_bytes_per_microbatch": O.bytes, "param_offload_s": D.param_t,
            "head_forward_s": E.head_f, "head_backward_s": E.head_b, "embedding_s": E.emb,
            "mtp_forward_s": model.mtp_layers * E.mtp_f, "mtp_backward_s": model.mtp_layers * E.mtp_b,
            "bf16_layers_extra_s": S.bf_f + S.bf_b + S.bf_rec + 0.0 * L.g_lin,
            "p2p_per_transfer_s": S.pp_one, "has_head": S.has_head, "has_embedding": S.has_emb,
            "dp_total_s": D.dp_t, "optimizer_params": D.opt_params, "microbatches": m,
        },
    }
    if with_memory:
        out["memory"] = memory.memory_per_gpu(model, hw_mem, par, settings, reserve)
    return out
