"""Data parallel per step: what the DP groups hold on the critical stage, and what stays exposed.

Step 4 of cost/step.py's module doc (docs/time-model.md, the DP row; docs/finetune.md): the
parameters each DP group reduces on the stage (:func:`stage_dp_params`; the adapters' alone under
LoRA / QLoRA, :func:`adapter_dp_params`), a frozen base's ZeRO-3 gathers (:func:`frozen_gathers`),
and the part of the DP collectives no overlap hides (:func:`dp_exposed`).
:func:`llmpar.cost.step._data_parallel` puts them together with the optimizer step.
Array-polymorphic, as cost/step.py.
"""

from __future__ import annotations

import numpy as np

from llmpar.cost import comm, memory
from llmpar.cost import params as P
from llmpar.cost.states import DTYPE_BYTES


def stage_dp_params(model, par, S):
    """(layer shard, MoE layers, dense parameters, expert parameters) of the critical stage's DP groups."""
    shard = memory.layer_shard(model, par)
    moe_on_stage = np.minimum(S.n_mid, model.moe_layers)
    expert_params = moe_on_stage * np.asarray(shard.experts, dtype=float)
    emb_p, head_p = memory.embedding_shard(model, par), memory.head_shard(model, par)
    ends = np.where(S.single, emb_p + head_p, np.maximum(emb_p, head_p))   # both ends on one stage when pp = 1
    dense_params = (S.n_mid - moe_on_stage) * np.asarray(shard.dense, dtype=float) + moe_on_stage * np.asarray(
        shard.moe, dtype=float) + ends
    return shard, moe_on_stage, dense_params, expert_params


def adapter_dp_params(model, settings, S, moe_on_stage, expert_params):
    """LoRA / QLoRA: (dense, expert) parameters with gradients on the stage, the adapters' only."""
    from llmpar.cost import finetune as FT

    r, tg = settings.lora_rank, settings.lora_targets
    dense_params = ((S.n_mid - moe_on_stage) * FT.adapter_params_per_layer(model, False, tg, r)
                    + moe_on_stage * (FT.adapter_params_per_layer(model, True, tg, r) if model.moe else 0.0))
    return dense_params, 0.0 * expert_params


def dp_exposed(model, hw, par, settings, S, dp_t, dp_ag):
    """(exposed seconds, usable overlap fraction) of the step's DP collectives dp_t (dp_ag: the gathers)."""
    # DP overlap (the usable fraction f of a window; docs/time-model.md):
    # - gradient reduce behind the backward (bucketed: DDP, Megatron-Core overlap_grad_reduce):
    #   ZeRO 0-1 behind the last micro-batch's, ZeRO-2 behind every micro-batch's (below);
    # - the ZeRO-1/2 weight all-gather behind the next step's forward (overlap_param_gather), with
    #   the stack's overlap.param_gather when it states one (nanotron and DeepSpeed gather
    #   synchronously after the optimizer step: 0) and --dp-overlap is not given;
    # - ZeRO-3's per-micro-batch gathers behind every micro-batch's compute (prefetch), with the
    #   stack's overlap.zero3_prefetch (unless --dp-overlap is given).
    # The last layer's bucket is never hidden (its gradients are the last computed): at least
    # dp_t / L_stage stays exposed.
    z = np.asarray(par.zero)
    # (--dp-overlap sets every DP overlap value of the stack: resolved once in Settings)
    frac = np.where(z >= 3, settings.zero3_overlap, settings.dp_overlap)
    frac_ag = settings.param_gather_overlap           # the ZeRO-1/2 gather (only used below ZeRO-3)
    # gradient reduction window: ZeRO-0/1 reduce once, behind the last micro-batch's backward;
    # ZeRO-2 reduce-scatters every micro-batch's gradients as its backward produces them
    # (DeepSpeed stage 2 overlap_comm, FSDP SHARD_GRAD_OP), so each hides behind its own backward:
    # m x t_b in all, and only the last micro-batch's last bucket is necessarily exposed
    m = par.microbatches
    grad_t = dp_t - dp_ag
    grad_window = np.where(z == 2, m * S.t_b, S.t_b)
    hidden = np.where(z >= 3, frac * np.minimum(dp_t, m * (S.t_f + S.t_b)),
                      frac * np.minimum(grad_t, grad_window) + frac_ag * np.minimum(dp_ag, S.t_f))
    floor = np.where(z == 2, (grad_t / m + dp_ag) / S.n_mid, dp_t / S.n_mid)
    exposed = np.maximum(dp_t - hidden, np.where(frac > 0, floor, dp_t))
    # Hidden DP collectives are not free either: NCCL runs one thread block per channel, each on its
    # own SM, for as long as the collective runs, so the compute under it has (S - s)/S of the SMs
    # and hiding C seconds costs s/S x C (the derivation of the EP term, step_stage.layer_comm; Lee
    # et al. 2025, arXiv:2507.03114: 18.9 % mean compute slowdown under overlapped collectives on A100/H100)
    sms = hw.gpu.sms
    f_dp = settings.stack.overlap.dp_sms / sms if sms else 0.0
    exposed = exposed + f_dp * (dp_t - exposed)
    # the ZeRO-1/2 weight gather's host loop over (DP rank x parameter tensor), where the stack's
    # framework has one (comm.zero_gather_host_time: nanotron): synchronous, never hidden
    c_host = settings.stack.kernels.zero_gather_s_per_tensor_rank
    if c_host:
        tensors = S.n_mid * P.param_tensors_per_layer(model) + 3       # + embedding, final norm, head
        group = np.asarray(par.dp) * np.asarray(par.cp)
        exposed = exposed + np.where(((z == 1) | (z == 2)) & (group > 1),
                                     comm.zero_gather_host_time(c_host, group, tensors), 0.0)
    return exposed, frac


def frozen_gathers(model, hw, par, settings, place_dp, shard, S, moe_on_stage, params):
    """ZeRO-3 all-gathers of a frozen base (LoRA / QLoRA): its weights for the forward and again for
    the backward of every micro-batch (comm.dp_step's ZeRO-3 weight term, without gradients),
    in the stack's gradient buckets. Returns (seconds, bytes sent per GPU)."""
    from llmpar.cost import finetune as FT

    size, k = place_dp["dp"]
    lin = ((S.n_mid - moe_on_stage) * np.asarray(shard.dense_linear, dtype=float)
           + moe_on_stage * (np.asarray(shard.moe_linear, dtype=float) + np.asarray(shard.experts, dtype=float)))
    per = FT.NF4_BYTES if settings.finetune == "qlora" else DTYPE_BYTES["bf16"]
    w = (np.asarray(params, dtype=float) - lin) * DTYPE_BYTES["bf16"] + lin * per
    bucket = settings.stack.overlap.dp_bucket_bytes
    n = np.maximum(np.ceil(w / bucket), 1.0) if bucket else 1.0
    t_ag = n * comm.collective_time(hw, "all_gather", w / n, size, k)
    z3 = np.asarray(par.zero) >= 3
    m = par.microbatches
    frac = (np.asarray(size, dtype=float) - 1.0) / np.maximum(np.asarray(size, dtype=float), 1.0)
    return np.where(z3, m * 2.0 * t_ag, 0.0), np.where(z3, m * 2.0 * w * frac, 0.0)
