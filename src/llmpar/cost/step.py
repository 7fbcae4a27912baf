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
   - TP collectives exposed (Megatron does not overlap them); CP K/V exchange overlapped with the
     attention core (ring attention), only the excess exposed; EP all-to-alls exposed (hidden
     behind the paired chunk's compute under DualPipe, DeepSeek-V3 report §3.2.1).
2. A stage's per-micro-batch forward time t_f and backward time t_b: its layers plus the LM head
   and loss (last stage) or the embedding (first stage), plus the p2p transfers (v of them per
   direction with v interleaved chunks). The critical stage is the slowest of first/middle/last.
3. The pipeline: :func:`llmpar.cost.pipeline.pipeline_time` — m(t_f + t_b) + bubble.
4. Data parallel: gradient reduce (and ZeRO parameter gathers) after the pipeline flush, minus the
   part hidden behind compute (``settings.dp_overlap``).
5. Optimizer step: memory-bound, every optimizer-state byte read and written once.

step = m(t_f + t_b) + bubble + dp_exposed + optimizer, and the breakdown's terms add up to it.
"""

from __future__ import annotations

import numpy as np

from llmpar.cost import comm, compute, flops, memory, pipeline
from llmpar.cost.topology import dims_placement
from llmpar.parallel import RECOMPUTE, SCHEDULES, Parallel, Settings
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec

DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp32": 4.0}
REC_NONE, REC_SELECTIVE, REC_FULL = (RECOMPUTE.index(r) for r in ("none", "selective", "full"))
DUALPIPE = SCHEDULES.index("dualpipe")

BREAKDOWN_KEYS = ("compute", "recompute", "tp", "pp", "dp", "cp", "ep", "bubble", "optimizer")
COMM_KEYS = ("tp", "pp", "dp", "cp", "ep")

# Optimizer-step HBM traffic per parameter, bytes, for a mixed-precision step as Megatron-LM runs
# it (optimizer.py: FP32 main grads; clip_grad_norm; fused Adam; copy of the FP32 main params
# back to the 16-bit model params): grad-norm read of the fp32 main grad (4), clip scale read +
# write (8), the optimizer's own update, and the main->model copy (read 4, write 2).
# Update: adam reads grad, param, m, v and writes param, m, v (7 x 4 = 28); sgd with momentum
# reads grad, param, momentum and writes param, momentum (20); adam-8bit: fp32 grad and param
# read/written (12) + two 1-byte states read and written (4). The gradient cast into the fp32
# main grad (read grad_dtype bytes, write 4) is added from settings.grad_dtype.
_OPT_TRAFFIC = {k: 4 + 8 + u + 6 for k, u in {"adam": 28.0, "adamw": 28.0, "sgd": 20.0, "adam-8bit": 16.0}.items()}


def _gemm_time(hw, dtype, gemms):
    return sum(compute.gemm_time(hw, dtype, m, n, k, c) for _, m, n, k, c in gemms)


def _layer_parts(model: ModelSpec, hw: Hardware, par: Parallel, settings: Settings, moe: bool):
    """Per layer, per micro-batch, one GPU: forward GEMM time, attention-core GEMM time,
    forward element-wise time and the scores' element-wise time (standard attention only)."""
    causal = flops.causal_block_fraction(par.seq) if settings.attention == "flash" else flops.CAUSAL_FULL
    gemms = flops.layer_gemms(model, par.micro_batch, par.seq, par.tp, par.cp, moe=moe, ep=par.ep, causal=causal)
    g_all = _gemm_time(hw, settings.dtype, gemms)
    g_core = _gemm_time(hw, settings.dtype, [g for g in gemms if g[0] in flops.ATTENTION_CORE])
    return g_all, g_core


def step_time(model: ModelSpec, hw: Hardware, par: Parallel, settings: Settings, *, with_memory: bool = True,
              reserve=None) -> dict:
    """Step time, throughput, MFU/HFU and the breakdown for layout(s) ``par``. See module doc."""
    e = DTYPE_BYTES[settings.dtype if settings.dtype != "fp8" else "bf16"]  # activations stay 16-bit under fp8
    place = dims_placement(hw, par, tuple(settings.rank_order.split("-")))
    b, s, tp, cp = par.micro_batch, par.seq, par.tp, par.cp

    # ---- one layer, one micro-batch (averaged over dense and MoE layers by their share)
    frac_moe = model.moe_layers / model.layers
    g_dense, core_dense = _layer_parts(model, hw, par, settings, moe=False)
    if model.moe is not None:
        g_moe, core_moe = _layer_parts(model, hw, par, settings, moe=True)
    else:
        g_moe, core_moe = 0.0, 0.0
    g_fwd = (1 - frac_moe) * g_dense + frac_moe * g_moe
    g_core = (1 - frac_moe) * core_dense + frac_moe * core_moe
    elem = compute.layer_elementwise_bytes(model, b, s, tp, par.sp, cp, settings.attention, e)
    elem_flash = compute.layer_elementwise_bytes(model, b, s, tp, par.sp, cp, "flash", e)
    t_elem = compute.memory_bound_time(hw, elem)
    t_scores = compute.memory_bound_time(hw, elem - elem_flash)   # s^2 softmax/dropout traffic

    layer_fwd = g_fwd + t_elem
    layer_bwd = 2.0 * (g_fwd + t_elem)
    rec = np.asarray(par.recompute)
    layer_rec = np.where(rec == REC_FULL, layer_fwd, np.where(rec == REC_SELECTIVE, g_core + t_scores, 0.0))

    tp_f, tp_b, tp_bytes_f, tp_bytes_b = comm.tp_layer(hw, model, par, place, e)
    tp_rec = np.where(rec == REC_FULL, tp_f, 0.0)
    # TP overlap: a fraction of the GEMM time the collectives feed can hide them (chunked GEMM +
    # collective pipelining: Wang et al. 2023; Transformer Engine userbuffers). It needs the TP
    # group inside one NVLink domain (userbuffers are NVLink peer memory): none across nodes.
    tp_size, tp_k = place["tp"]
    f_tp = settings.tp_overlap * np.where(tp_k >= tp_size, 1.0, 0.0)
    tp_f = tp_f - f_tp * np.minimum(tp_f, g_fwd)
    tp_b = tp_b - f_tp * np.minimum(tp_b, 2.0 * g_fwd)
    tp_rec = tp_rec - f_tp * np.minimum(tp_rec, g_fwd)
    cp_f, cp_b, cp_bytes_f, cp_bytes_b = comm.cp_layer(hw, model, par, place, e)
    cp_f_exp = np.where(cp > 1, np.maximum(cp_f - g_core, 0.0), 0.0)
    cp_b_exp = np.where(cp > 1, np.maximum(cp_b - 2.0 * g_core, 0.0), 0.0)
    ep_f, ep_b, ep_bytes_f, ep_bytes_b = comm.ep_moe_layer(hw, model, par, place, e)
    hide = np.asarray(par.schedule) == DUALPIPE
    ep_f_exp = frac_moe * np.where(hide, np.maximum(ep_f - layer_fwd, 0.0), ep_f)
    ep_b_exp = frac_moe * np.where(hide, np.maximum(ep_b - layer_bwd, 0.0), ep_b)

    # ---- LM head + loss (last stage) and embedding (first stage), per micro-batch
    head_g = _gemm_time(hw, settings.dtype, flops.head_gemms(model, b, s, tp, cp))
    logits = b * s / cp * model.vocab / tp * 4.0           # fp32 logits, vocab-parallel
    head_f = head_g + compute.memory_bound_time(hw, 3.0 * logits)   # write, softmax read+write
    head_b = 2.0 * head_g + compute.memory_bound_time(hw, 2.0 * logits)
    emb = compute.memory_bound_time(hw, 2.0 * b * s / cp * model.hidden * e)  # gather + write

    # ---- critical stage: the slowest of first / middle / last
    L, p = model.layers, par.pp
    n_first = pipeline.first_stage_layers(L, p)
    n_mid = pipeline.stage_layers(L, p)
    n_last = pipeline.last_stage_layers(L, p)
    per_layer = layer_fwd + layer_bwd + layer_rec + tp_f + tp_b + tp_rec + cp_f_exp + cp_b_exp + ep_f_exp + ep_b_exp
    single = np.asarray(p) == 1
    t_first = n_first * per_layer + 3 * emb + np.where(single, head_f + head_b, 0.0)
    t_mid = n_mid * per_layer
    t_last = n_last * per_layer + head_f + head_b
    crit_layers = np.where((t_last >= t_mid) & (t_last >= t_first), n_last, np.where(t_mid >= t_first, n_mid, n_first))
    has_head = np.where(single, 1.0, np.where((t_last >= t_mid) & (t_last >= t_first), 1.0, 0.0))
    has_emb = np.where(single | ((t_first > t_mid) & (t_first > t_last)), 1.0, 0.0)

    v = par.virtual_stages
    pp_one, pp_bytes = comm.pp_microbatch(hw, model, par, place, e)
    pp_f = v * pp_one
    pp_b = v * pp_one

    t_f = crit_layers * (layer_fwd + tp_f + cp_f_exp + ep_f_exp) + has_head * head_f + has_emb * emb + pp_f
    t_b = (crit_layers * (layer_bwd + layer_rec + tp_b + tp_rec + cp_b_exp + ep_b_exp)
           + has_head * head_b + has_emb * 2 * emb + pp_b)
    m = par.microbatches
    pipe_total, bubble = pipeline.pipeline_time(t_f, t_b, p, m, par.schedule, v)

    # ---- data parallel and optimizer
    mem = memory.memory_per_gpu(model, hw, par, settings, reserve) if with_memory else None
    shard = memory.layer_shard(model, par)
    moe_on_stage = np.minimum(n_mid, model.moe_layers)
    expert_params = moe_on_stage * np.asarray(shard.experts, dtype=float)
    emb_p, head_p = memory.embedding_shard(model, par), memory.head_shard(model, par)
    ends = np.where(single, emb_p + head_p, np.maximum(emb_p, head_p))   # both ends on one stage when pp = 1
    dense_params = (n_mid - moe_on_stage) * np.asarray(shard.dense, dtype=float) + moe_on_stage * np.asarray(
        shard.moe, dtype=float) + ends
    w_bytes = DTYPE_BYTES["bf16"]
    g_bytes = DTYPE_BYTES[settings.grad_dtype]
    place_dp = dict(place)
    place_dp["dp"] = place["dpcp"]
    dp_t, dp_bytes = comm.dp_step(hw, par, place_dp, dense_params, expert_params, w_bytes, g_bytes)
    # DP overlap: gradient sync (ZeRO 0-2) can hide behind the last micro-batch's backward, ZeRO-3's
    # per-micro-batch gathers behind every micro-batch's compute (prefetch); settings.dp_overlap is
    # the usable fraction of that window. The last layer's bucket is never hidden (its gradients
    # are the last ones computed): at least dp_t / L_stage stays exposed.
    window = np.where(np.asarray(par.zero) >= 3, m * (t_f + t_b), t_b)
    hidden = settings.dp_overlap * np.minimum(dp_t, window)
    dp_exposed = np.maximum(dp_t - hidden, np.where(settings.dp_overlap > 0, dp_t / n_mid, dp_t))

    z = np.asarray(par.zero)
    opt_params = dense_params / np.where(z >= 1, par.dp * par.cp, 1) + expert_params / np.where(z >= 1, par.expert_dp, 1)
    opt_t = compute.memory_bound_time(hw, opt_params * (_OPT_TRAFFIC[settings.optimizer] + g_bytes + 4.0))

    step = pipe_total + dp_exposed + opt_t

    # ---- breakdown (adds up to step)
    compute_t = m * (crit_layers * (layer_fwd + layer_bwd) + has_head * (head_f + head_b) + has_emb * 3 * emb)
    breakdown = {
        "compute": compute_t,
        "recompute": m * crit_layers * layer_rec,
        "tp": m * crit_layers * (tp_f + tp_b + tp_rec),
        "pp": m * (pp_f + pp_b),
        "dp": dp_exposed,
        "cp": m * crit_layers * (cp_f_exp + cp_b_exp),
        "ep": m * crit_layers * (ep_f_exp + ep_b_exp),
        "bubble": bubble,
        "optimizer": opt_t,
    }
    n_crit = crit_layers
    comm_bytes = {
        "tp": m * n_crit * (tp_bytes_f + tp_bytes_b + np.where(rec == REC_FULL, tp_bytes_f, 0.0)),
        "pp": np.where(np.asarray(p) > 1, 2.0 * m * v * pp_bytes, 0.0),
        "dp": dp_bytes,
        "cp": m * n_crit * (cp_bytes_f + cp_bytes_b),
        "ep": m * n_crit * frac_moe * (ep_bytes_f + ep_bytes_b),
    }

    gpus = par.gpus
    peak = hw.gpu.peak(settings.dtype)
    model_flops = flops.model_flops_per_step(model, par)
    hw_flops = flops.hardware_flops_per_step(model, par)
    tokens = par.global_batch * par.seq
    out = {
        "step_time_s": step,
        "tokens_per_s": tokens / step,
        "samples_per_s": par.global_batch / step,
        "model_flops_per_step": model_flops,
        "hardware_flops_per_step": hw_flops,
        "model_tflops_per_gpu": model_flops / step / gpus / 1e12,
        "hardware_tflops_per_gpu": hw_flops / step / gpus / 1e12,
        "mfu": model_flops / (step * gpus * peak),
        "hfu": hw_flops / (step * gpus * peak),
        "breakdown_s": breakdown,
        "comm_bytes_per_gpu": comm_bytes,
        "stage_forward_s": t_f,
        "stage_backward_s": t_b,
        "critical_stage_layers": crit_layers,
        # the intermediate terms, per layer and micro-batch unless named otherwise (--explain)
        "parts": {
            "gemm_forward_s": g_fwd, "attention_core_forward_s": g_core, "elementwise_forward_s": t_elem,
            "elementwise_forward_bytes": elem, "layer_forward_s": layer_fwd, "layer_backward_s": layer_bwd,
            "layer_recompute_s": layer_rec, "tp_forward_s": tp_f, "tp_backward_s": tp_b + tp_rec,
            "cp_exposed_s": cp_f_exp + cp_b_exp, "ep_exposed_s": ep_f_exp + ep_b_exp,
            "head_forward_s": head_f, "head_backward_s": head_b, "embedding_s": emb,
            "p2p_per_transfer_s": pp_one, "has_head": has_head, "has_embedding": has_emb,
            "dp_total_s": dp_t, "optimizer_params": opt_params, "microbatches": m,
        },
    }
    if mem is not None:
        out["memory"] = mem
    return out
