"""A pipeline stage's per-micro-batch times: one layer's exposed collectives and the critical stage.

Steps 1-2 of cost/step.py's module doc (docs/time-model.md): the TP, CP and EP collectives of one
layer and micro-batch less what hides behind compute (:func:`layer_comm`), the LM head, loss,
MTP modules and embedding at the ends (:func:`stage_ends`), and the slowest stage with its
stage-boundary sends (:func:`critical_stage`). Array-polymorphic, as cost/step.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from llmpar.cost import comm, compute, flops, pipeline
from llmpar.cost.pipeline import DUALPIPE
from llmpar.cost.states import FP8_TILE_BYTES
from llmpar.cost.step_layer import REC_FULL, REC_SELECTIVE, mix_layers


def layer_comm(model, hw, par, settings, place, e, L):
    """TP, CP and EP collectives of one layer and micro-batch, less what hides behind compute."""
    ov = settings.stack.overlap
    # FP8 all-gathers in TP (stack kernels.fp8.tp_all_gather_fp8: torchao's Float8 TP styles)
    ag_e = 1.0 if settings.dtype == "fp8" and settings.stack.kernels.fp8.tp_all_gather_fp8 else e
    tp_f, tp_b, tp_bytes_f, tp_bytes_b = comm.tp_layer(hw, model, par, place, e, ag_e)
    if model.moe is not None:   # MoE layers: the MLP's collectives in the expert-TP group (comm.tp_layer)
        mix = comm.tp_layer(hw, model, par, place, e, ag_e, moe=True)
        tp_f, tp_b, tp_bytes_f, tp_bytes_b = mix_layers(L.frac_moe, (tp_f, tp_b, tp_bytes_f, tp_bytes_b), mix)
    tp_rec = np.where(L.rec == REC_FULL, L.rec_full * tp_f, 0.0)
    # TP overlap: a fraction of the GEMM time the collectives feed can hide them (chunked GEMM +
    # collective pipelining: Wang et al. 2023; Transformer Engine userbuffers). It needs the TP
    # group inside one NVLink domain (userbuffers are NVLink peer memory): none across nodes; and a
    # GPU generation the stack achieves it on (Settings.tp_overlap_on: userbuffers' fast path needs
    # CUDA multicast, compute capability 9.0+; Transformer Engine examples/pytorch/comm_gemm_overlap
    # README at d0067d0d).
    tp_size, tp_k = place["tp"]
    f_tp = settings.tp_overlap_on(hw.gpu.generation) * np.where(tp_k >= tp_size, 1.0, 0.0)
    tp_f = tp_f - f_tp * np.minimum(tp_f, L.g_lin)
    tp_b = tp_b - f_tp * np.minimum(tp_b, 2.0 * L.g_lin)
    tp_rec = tp_rec - f_tp * np.minimum(tp_rec, L.g_lin)
    # CP: the K/V exchange runs behind the attention core (ring attention: Liu et al. 2023), the
    # stack's overlap.cp of it; the excess stays exposed.
    cp = par.cp
    cp_f, cp_b, cp_bytes_f, cp_bytes_b = comm.cp_layer(hw, model, par, place, e)
    cp_f = np.where(cp > 1, cp_f - ov.cp * np.minimum(cp_f, L.core_f), 0.0)
    cp_b = np.where(cp > 1, cp_b - ov.cp * np.minimum(cp_b, L.core_b), 0.0)
    # EP: an all-to-all hides behind the compute of a chunk of the other direction paired with it:
    # DualPipe's F&B pairs (DeepSeek-V3 report §3.2.1), always; Megatron-Core's
    # --overlap-moe-expert-parallel-comm (combined 1F1B), the stack's overlap.ep or --ep-overlap of
    # it. Only the paired share of the chunks can (pipeline.ep_paired_share): the warm-up and
    # cool-down chunks run alone, their all-to-alls exposed.
    # The dispatcher (stack kernels.ep_dispatcher) sets the bytes and where they flow; FP8 dispatch
    # (kernels.fp8.dispatch_fp8, --dtype fp8): 1 B per element + one fp32 scale per 128 (DeepSeek-V3 §3.3.2-3)
    kern = settings.stack.kernels
    d_e = FP8_TILE_BYTES if settings.dtype == "fp8" and kern.fp8.dispatch_fp8 else e
    ep_f, ep_b, ep_bytes_f, ep_bytes_b = comm.ep_moe_layer(hw, model, par, place, e, settings.ep_dispatcher, d_e)
    paired = pipeline.ep_paired_share(par.schedule, par.pp, par.microbatches, par.virtual_stages)
    hide = paired * np.where(np.asarray(par.schedule) == DUALPIPE, 1.0, settings.ep_overlap)
    # Hidden all-to-alls are not free: their kernels hold overlap.ep_sms of the gpu.sms SMs while
    # they run, so the compute under them runs that much slower. Compute W under comm C at rate
    # 1 - f takes C + (W - (1 - f) C) = W + f C: the cost is f x the hidden time (DeepSeek-V3
    # §3.2.2: 20 of the H800's 132 SMs for dispatch and combine; Megatron-Core gives DeepEP 20 by
    # default, token_dispatcher.py MoEFlexTokenDispatcher). Priced for the DeepEP-style dispatcher
    # only: the SMs NCCL's flat all-to-all takes (its channels) are not published per call.
    sms = hw.gpu.sms
    f_sm = settings.stack.overlap.ep_sms / sms if sms and settings.ep_dispatcher == "deepep" else 0.0
    hid_f = hide * np.minimum(ep_f, L.fwd)
    hid_b = hide * np.minimum(ep_b, L.bwd)
    ep_f = L.frac_moe * (ep_f - hid_f + f_sm * hid_f)
    ep_b = L.frac_moe * (ep_b - hid_b + f_sm * hid_b)
    # recompute that re-runs a MoE layer's forward re-runs its dispatch and combine too, in the
    # backward (full recompute on its share of the layers; Megatron-Core's ``moe`` recompute module):
    # the forward's exposed all-to-all time once more, and its bytes
    ep_again = 0.0
    if model.moe is not None:      # (a dense model sends nothing: skipped for the planner's speed)
        policy = settings.selective_policy
        moe_mod = isinstance(policy, tuple) and "moe" in policy
        ep_again = np.where(L.rec == REC_FULL, L.rec_full, np.where((L.rec == REC_SELECTIVE) & moe_mod, 1.0, 0.0))
        ep_b = ep_b + ep_again * ep_f
    return SimpleNamespace(tp_f=tp_f, tp_b=tp_b, tp_rec=tp_rec, cp_f=cp_f, cp_b=cp_b, ep_f=ep_f, ep_b=ep_b,
                           tp_bytes=tp_bytes_f + tp_bytes_b + np.where(L.rec == REC_FULL, L.rec_full * tp_bytes_f, 0.0),
                           cp_bytes=cp_bytes_f + cp_bytes_b,
                           ep_bytes=L.frac_moe * (ep_bytes_f + ep_bytes_b + ep_again * ep_bytes_f))


def stage_ends(model, hw, par, settings, e):
    """LM head + loss (last stage) and embedding (first stage), per micro-batch."""
    b, s, tp, cp = par.micro_batch, par.seq, par.tp, par.cp
    head_g, hcast_f, hcast_b = compute.linear_gemms_time(hw, settings.stack, settings.dtype,
                                                         flops.head_gemms(model, b, s, tp, cp))
    logits = b * s / cp * model.vocab / tp * 4.0           # fp32 logits, vocab-parallel
    head_f = head_g + compute.memory_bound_time(hw, 3.0 * logits + hcast_f)   # write, softmax read+write
    # a frozen head (LoRA / QLoRA) computes its input gradient only: one GEMM, not two
    head_b = (1.0 if settings.finetune != "full" else 2.0) * head_g + compute.memory_bound_time(hw, 2.0 * logits + hcast_b)
    # an MTP module's projection M: [h; h] (2h) -> h, column-parallel, then the shared head again
    proj_g = 0.0
    if model.mtp_layers:
        proj_g, _, _ = compute.linear_gemms_time(hw, settings.stack, settings.dtype,
                                                 flops.mtp_projection_gemms(model, b, s, tp, cp))
    return SimpleNamespace(
        head_f=head_f, head_b=head_b, mtp_f=head_f + proj_g, mtp_b=head_b + 2.0 * proj_g,
        emb=compute.memory_bound_time(hw, 2.0 * b * s / cp * model.hidden * e))  # gather + write


def critical_stage(model, hw, par, settings, place, e, L, C, E):
    """The slowest of first / middle / last stage (under DualPipe: of the devices, each holding two
    stages), and its per-micro-batch forward and backward times with the stage-boundary sends
    (cost/step.py module doc, step 2). ``has_head`` / ``has_emb``: the share of the head /
    embedding the critical stage runs per micro-batch (0 or 1; 1/2 on DualPipe's device 0)."""
    # the split covers the L blocks and the D multi-token-prediction modules' blocks, which sit on
    # the last stage (cost/memory_stage.py _stage_eval, the same convention)
    D = float(model.mtp_layers)
    slots = model.layers + model.mtp_layers
    n_first = pipeline.first_stage_layers(slots, par.pp)
    n_mid = pipeline.stage_layers(slots, par.pp)
    n_last = pipeline.last_stage_layers(slots, par.pp)
    per_layer = L.fwd + L.bwd + L.rec_t + C.tp_f + C.tp_b + C.tp_rec + C.cp_f + C.cp_b + C.ep_f + C.ep_b
    single = np.asarray(par.pp) == 1
    # multi-token prediction (DeepSeek-V3 §2.2): besides its block, each of the D modules runs its
    # 2h->h projection and the shared head once more on the last stage (E.mtp_f / E.mtp_b)
    ends = E.head_f + E.head_b + D * (E.mtp_f + E.mtp_b)
    # FP8 recipes that keep the first / last layers in BF16 (kernels.fp8.bf16_layers_at_start/_end):
    # those layers' extra time lands on the end stages (_bf16_layer_extra, bf16_boundary_layers)
    bf_first, bf_last = pipeline.bf16_boundary_layers(model.layers, par.pp, *pipeline.fp8_bf16_layers(settings))
    bf_layer = L.bf_f + L.bf_b + L.bf_rec
    t_first = n_first * per_layer + 3 * E.emb + np.where(single, ends, 0.0) + bf_first * bf_layer
    t_mid = n_mid * per_layer
    t_last = n_last * per_layer + ends + bf_last * bf_layer
    last_wins = (t_last >= t_mid) & (t_last >= t_first)
    layers = np.where(last_wins, n_last, np.where(t_mid >= t_first, n_mid, n_first))
    has_head = np.where(single, 1.0, np.where(last_wins, 1.0, 0.0))
    has_emb = np.where(single | ((t_first > t_mid) & (t_first > t_last)), 1.0, 0.0)
    bf_n = np.where(last_wins & ~single, bf_last, np.where(has_emb > 0, bf_first, 0.0))
    # DualPipe (DeepSeek-V3 §3.2.1, Fig. 5): device i holds stages i and p-1-i and runs m/2
    # micro-batches through each, so it paces the step at (t_i + t_{p-1-i}) / 2 per micro-batch;
    # device 0 pairs the two end stages (embedding and head), the others two full middle stages
    dual = (np.asarray(par.schedule) == DUALPIPE) & ~single
    if np.any(dual):
        pair_wins = dual & ((t_first + t_last) / 2.0 > t_mid)
        layers = np.where(dual, np.where(pair_wins, (n_first + n_last) / 2.0, n_mid), layers)
        has_head = np.where(dual, np.where(pair_wins, 0.5, 0.0), has_head)
        has_emb = np.where(dual, np.where(pair_wins, 0.5, 0.0), has_emb)
        bf_n = np.where(dual, np.where(pair_wins, (bf_first + bf_last) / 2.0, 0.0), bf_n)
    pp_one, pp_bytes = comm.pp_microbatch(hw, model, par, place, e)
    # p2p: blocking send/recv is on the critical path; async p2p (Megatron-Core overlap_p2p_comm)
    # hides the stack's overlap.pp of it behind the next micro-batch's compute, under the schedules
    # that achieve it (pipeline.p2p_overlap)
    ov = settings.stack.overlap
    pp_f = pp_b = par.virtual_stages * pp_one * (1.0 - pipeline.p2p_overlap(ov.pp, ov.pp_schedules, par.schedule))
    heads_f = has_head * (E.head_f + D * E.mtp_f)
    heads_b = has_head * (E.head_b + D * E.mtp_b)
    bf_f, bf_b, bf_rec = bf_n * L.bf_f, bf_n * L.bf_b, bf_n * L.bf_rec
    t_f = layers * (L.fwd + C.tp_f + C.cp_f + C.ep_f) + heads_f + has_emb * E.emb + pp_f + bf_f
    t_b = (layers * (L.bwd + L.rec_t + C.tp_b + C.tp_rec + C.cp_b + C.ep_b)
           + heads_b + has_emb * 2 * E.emb + pp_b + bf_b + bf_rec)
    return SimpleNamespace(bf_f=bf_f, bf_b=bf_b, bf_rec=bf_rec, bf_on_mid=np.where(single, bf_first, 0), layers=layers, n_mid=n_mid, single=single, has_head=has_head, has_emb=has_emb,
                           heads_f=heads_f, heads_b=heads_b,
                           pp_one=pp_one, pp_bytes=pp_bytes, pp_f=pp_f, pp_b=pp_b, t_f=t_f, t_b=t_b)
