"""Communication of each parallel dimension: bytes per GPU per step and time.

Every function is array-polymorphic in the layout (numpy arrays of degrees). Collective times come
from :mod:`llmpar.cost.collectives` (the NCCL-like model), the group's placement on the tiers from
:mod:`llmpar.cost.topology`. Sizes follow the nccl-tests convention (all-gather/reduce-scatter size
= the whole gathered array).

Sources
- TP (Shoeybi et al. 2019, §3, Fig. 3): per layer two all-reduces forward (after the attention
  output projection and after the second MLP matrix) and two backward (the conjugate f operators)
  of the b*s*h activation. With sequence parallelism (Korthikanti et al. 2022, §4.2.2, Fig. 5)
  each all-reduce becomes an all-gather + reduce-scatter pair of the same total volume.
  Full recompute re-runs the forward, and with it the forward's TP collectives.
- PP (Narayanan et al. 2021, §2.2, §4.1): one b*s*h activation sent per micro-batch per stage
  boundary forward and its gradient backward; with SP (scatter/gather optimisation) ÷ t.
  Interleaving sends v times as many (Narayanan 2021 §2.2.2).
- DP (Rajbhandari et al. 2019, ZeRO §7): ZeRO-0 all-reduce of gradients (2Ψ volume); ZeRO-1/2
  reduce-scatter of gradients + all-gather of parameters (2Ψ); ZeRO-3 all-gathers parameters for
  the forward and again for the backward of every micro-batch, and reduce-scatters gradients (3Ψ
  for m = 1).
- CP (Megatron-Core context parallelism; Liu et al. 2023 ring attention): K and V all-gathered
  across the cp ranks in the forward of every layer, and in the backward again, with dK/dV
  reduce-scattered; overlapped with the attention computation.
- EP (Lepikhin et al. 2020 GShard; DeepSeek-V3 report §3.2): all-to-all dispatch and combine of
  the routed tokens in the forward of every MoE layer, and the same two in the backward.
"""

from __future__ import annotations

import numpy as np

from llmpar.cost.collectives import collective_time


def _frac(n):
    return (n - 1) / np.maximum(n, 1)


def tp_layer(hw, model, par, placement, e=2.0, ag_e=None, moe=False):
    """TP collectives of ONE layer and ONE micro-batch.

    Returns (forward_s, backward_s, bytes_sent_fwd, bytes_sent_bwd). Each collective moves the
    b*(s/cp)*h activation: without SP 2 all-reduces each way; with SP 2 all-gathers + 2
    reduce-scatters each way (same bytes: AR = RS + AG). ``ag_e`` (default ``e``) is the element
    size the SP all-gathers move: 1 where the framework casts to FP8 before gathering (torchao's
    Float8ColwiseParallel gathers the FP8 input in the forward, Float8RowwiseParallel the FP8
    output gradient in the backward; the reduce-scatters stay 16-bit).
    One pair (or all-reduce) belongs to the attention block, the other to the MLP. A MoE layer
    (``moe``) has no dense MLP pair: Megatron-Core's all-to-all dispatcher all-gathers the
    *dispatched* tokens in the expert-TP group after the EP all-to-all and reduce-scatters the
    expert outputs before the return all-to-all (``MoEAlltoAllTokenDispatcher.dispatch_postprocess``
    / ``combine_preprocess``): each rank holds its T/tp tokens' top_k copies, so the pair moves
    top_k x etp/tp of the activation in the etp group — top_k x the dense pair without folding
    (etp = tp), nothing at etp = 1 (MoE parallel folding: Liu et al. 2025, arXiv:2504.14960 §3).
    Shared experts are a dense TP MLP on the layer's tokens: one dense pair in the tp group.
    """
    size, k = placement["tp"]
    tokens_h = par.micro_batch * (par.seq / par.cp) * model.hidden
    act, act_ag = tokens_h * e, tokens_h * (e if ag_e is None else ag_e)

    def half(n, kn, share):
        # one all-reduce, 2(P-1)/P * act; with SP one all-gather + reduce-scatter pair, (P-1)/P * (act_ag + act)
        t_ar = collective_time(hw, "all_reduce", act * share, n, kn)
        t_pair = (collective_time(hw, "all_gather", act_ag * share, n, kn)
                  + collective_time(hw, "reduce_scatter", act * share, n, kn))
        live = n > 1
        return (np.where(live, np.where(par.sp, t_pair, t_ar), 0.0),
                np.where(live, share * np.where(par.sp, act_ag + act, 2 * act) * _frac(n), 0.0))

    t_attn, b_attn = half(size, k, 1.0)
    if moe and model.moe is not None:
        esize, ek = placement.get("etp", (size, k))
        t_mlp, b_mlp = half(esize, ek, model.moe.top_k * np.asarray(esize, dtype=float) / np.maximum(size, 1))
        if model.moe.shared_experts:
            t_mlp, b_mlp = t_mlp + t_attn, b_mlp + b_attn
    else:
        t_mlp, b_mlp = t_attn, b_attn
    one_way, sent = t_attn + t_mlp, b_attn + b_mlp
    return one_way, one_way, sent, sent


def cp_layer(hw, model, par, placement, e=2.0):
    """CP collectives of ONE layer and ONE micro-batch (not yet overlapped).

    K and V of the local sequence chunk: 2 * b * (s/cp) * kv_heads/tp * d * e per rank; the
    all-gather's total array is cp times that. Forward: all-gather K,V. Backward: all-gather K,V
    again and reduce-scatter dK,dV. MLA exchanges the decompressed per-head K and V, not its
    latent: Megatron-Core's MLA up-projects each CP rank's own tokens (multi_latent_attention.py:
    linear_kv_up_proj, then the rope key expanded to every head) and hands key and value to the
    core attention, whose CP ring moves them (Transformer Engine context parallelism):
    b * (s/cp) * a/tp * (d_nope + d_rope + d_v) * e per rank, 82 kB per token for DeepSeek-V3's
    128 heads at tp 1 (its latent would be 1.2 kB).
    Returns (forward_s, backward_s, bytes_sent_fwd, bytes_sent_bwd).
    """
    size, k = placement["cp"]
    if model.mla is not None:
        mla = model.mla
        per_token = model.heads / par.tp * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim) * e
    else:
        per_token = 2 * model.n_kv_heads / par.tp * model.d_head * e
    local = par.micro_batch * (par.seq / par.cp) * per_token
    total = local * par.cp
    t_ag = collective_time(hw, "all_gather", total, size, k)
    t_rs = collective_time(hw, "reduce_scatter", total, size, k)
    sent = total * _frac(size)
    return t_ag, t_ag + t_rs, sent, 2 * sent


def _bins_hit(moe, bins):
    """Expected number of ``bins`` (equal, contiguous blocks of the experts: EP ranks or scale-up
    domains) that one token's top_k routed experts land on, under balanced routing.

    Balanced routing: a token's experts are equally likely to be any allowed ones (the router's
    load balancing aims at exactly this: Lepikhin 2020 §2.2; DeepSeek-V3 §2.1.2). Without a group
    limit the top_k are drawn without replacement from all E experts, so a bin holding b = E/B
    of them is missed with probability prod_{i<K} (E - b - i) / (E - i). With group-limited
    routing (``moe.groups`` G, ``moe.groups_per_token`` g; DeepSeek-V3 §2.1.2 node-limited
    routing) the g groups are drawn from G and the K experts from their A = gE/G:
      * a bin holding whole groups (b >= E/G, c = bG/E of them) is missed when none of its groups
        is drawn, or when some are (a ~ hypergeometric(G, c, g)) but none of the K experts falls in
        them: sum_a P(a) prod_{i<K} (A - a E/G - i) / (A - i);
      * a bin inside a group is hit only if its group is drawn (g/G), then with
        1 - prod_{i<K} (A - b - i) / (A - i).
    Array-polymorphic in ``bins``."""
    from scipy.special import comb

    E, K = float(moe.experts), int(moe.top_k)
    B = np.maximum(np.asarray(bins, dtype=float), 1.0)
    b = E / B

    def miss(pool, out):
        """P(none of K experts drawn without replacement from ``pool`` falls in ``out`` of them)."""
        q = np.ones_like(np.asarray(out, dtype=float) + pool)
        for i in range(K):
            q = q * np.clip((pool - out - i) / (pool - i), 0.0, 1.0)
        return q

    if moe.groups is None:
        return B * (1.0 - miss(E, b))
    G, g = float(moe.groups), int(moe.groups_per_token)
    A, per_group = g * E / G, E / G
    c = np.maximum(b / per_group, 1.0)                       # whole groups per bin (>= 1 branch)
    none = np.zeros_like(B)
    for a in range(g + 1):
        p_a = comb(c, a) * comb(G - c, g - a) / comb(G, g)   # hypergeometric (c may be fractional)
        none = none + p_a * miss(A, a * per_group)
    hit_whole = 1.0 - none
    hit_inside = (g / G) * (1.0 - miss(A, b))
    return B * np.where(b >= per_group, hit_whole, hit_inside)


def ep_destinations(moe, ep, k):
    """Per token of one MoE layer: (ranks, remote domains) its routed experts are sent to.

    ``ep`` GPUs in the EP group, ``k`` of them per scale-up domain (n = ep/k domains). ranks =
    distinct EP ranks holding its experts; remote = distinct domains other than the token's own
    (by symmetry (n-1)/n of the domains hit). Used by the deepep dispatcher, which sends a token
    once per remote domain over the NICs and once per destination GPU over NVLink."""
    ep = np.asarray(ep, dtype=float)
    k = np.clip(np.asarray(k, dtype=float), 1.0, np.maximum(ep, 1.0))
    n = np.maximum(ep / k, 1.0)
    ranks = _bins_hit(moe, ep)
    remote = _bins_hit(moe, n) * (n - 1.0) / n
    return ranks, remote


def ep_moe_layer(hw, model, par, placement, e=2.0, dispatcher="alltoall", dispatch_e=None):
    """EP all-to-alls of ONE MoE layer and ONE micro-batch.

    T = b*(s/cp) tokens per GPU (/tp with SP) go to their experts (dispatch) and come back
    (combine); backward sends the gradients the same two ways: 2 transfers forward, 2 backward.
    ``dispatch_e``: bytes per element of the dispatch-direction transfer (forward tokens,
    backward output gradients; FP8 + scales under a stack's kernels.fp8.dispatch_fp8), the
    combine-direction one moves ``e``.

    * ``alltoall`` (Megatron-Core MoEAlltoAllTokenDispatcher): one row per (token, expert) pair,
      T*top_k*h*e bytes per rank in a flat all-to-all over the EP group (nccl-tests size).
    * ``deepep`` (DeepSeek-V3 §3.2.2; DeepEP normal kernels): a token crosses the NICs once per
      remote scale-up domain its experts are on, to the GPU with the same local index there, and
      is forwarded over NVLink once per destination GPU (:func:`ep_destinations`): NIC bytes
      T*remote*h*e, NVLink bytes T*ranks*(k-1)/k*h*e per rank; the two hops pipeline, so a
      transfer takes the slower of the two. The NIC hop talks to one peer per remote domain, not
      to every remote rank: an all-to-all among the P/k domains (per-peer latency P/k - 1 times,
      not P - k). At DeepEP's benchmark sizes (4096 tokens of 7168, top 8) that gives 46, 45 and
      42-45 GB/s per GPU at EP 16, 32 and 64 on H800 with one 400 Gb/s NIC per GPU, against
      DeepEP's measured 43-47 GB/s (its README's first normal-kernel table, now docs/legacy.md:
      43/43, 44/47 and 46/45 GB/s dispatch/combine RDMA bottleneck bandwidth); pricing it as an
      all-to-all among all P ranks gave 40 and 38 GB/s at EP 32 and 64.
    Returns (forward_s, backward_s, bytes_sent_fwd, bytes_sent_bwd).
    """
    if model.moe is None:
        return 0.0, 0.0, 0.0, 0.0
    size, k = placement["ep"]
    d_e = e if dispatch_e is None else dispatch_e
    tokens = par.micro_batch * (par.seq / par.cp) / np.where(par.sp, par.tp, 1)
    if dispatcher == "alltoall":
        def one(el):
            payload = tokens * model.moe.top_k * model.hidden * el
            # all-to-all: nccl-tests size = the whole send buffer of one rank
            return collective_time(hw, "all_to_all", payload, size, k), payload * _frac(size)
    else:
        P = np.asarray(size, dtype=float)
        kk = np.clip(np.asarray(k, dtype=float), 1.0, np.maximum(P, 1.0))
        ranks, remote = ep_destinations(model.moe, P, kk)
        multi, local = P > kk, kk > 1.0

        def one(el):
            nic = tokens * remote * model.hidden * el
            nvl = tokens * ranks * (kk - 1.0) / kk * model.hidden * el
            # the RDMA hop: a GPU exchanges only with the same-index GPUs of the group's other
            # scale-up domains, so it is an all-to-all among nodes = P/k peers, one per domain,
            # over the scale-out tier (nccl-tests size: the NIC bytes x nodes/(nodes - 1)); the
            # NVLink hop an all-to-all inside the domain
            nodes = np.maximum(np.ceil(P / kk), 1.0)
            t_nic = collective_time(hw, "all_to_all", nic * nodes / np.where(multi, nodes - 1.0, 1.0), nodes, 1)
            t_nvl = collective_time(hw, "all_to_all", nvl * kk / np.where(local, kk - 1.0, 1.0), kk, kk)
            t = np.maximum(np.where(multi, t_nic, 0.0), np.where(local, t_nvl, 0.0))
            return np.where(P > 1, t, 0.0), np.where(P > 1, nic + nvl, 0.0)
    t_d, b_d = one(d_e)
    t_c, b_c = one(e)
    return t_d + t_c, t_d + t_c, b_d + b_c, b_d + b_c


def zero_gather_host_time(s_per_tensor_rank, group, tensors):
    """Host time of a ZeRO-1/2 weight all-gather that loops over (DP rank x parameter tensor).

    nanotron ``ZeroDistributedOptimizer._all_gather_params`` (optim/zero.py) builds, for every
    parameter and every DP rank, a view of that rank's slice, and ``all_gather_coalesced``
    (nanotron/distributed.py) flattens each rank's list, gathers, then unflattens and ``copy_``s
    every (rank, parameter) slice back one by one: group x tensors view-and-copy operations,
    each a PyTorch op dispatched from Python (microseconds each, no overlap: the optimizer step
    waits for it). ``s_per_tensor_rank``: the stack's kernels.zero_gather_s_per_tensor_rank."""
    return s_per_tensor_rank * np.asarray(group, dtype=float) * np.asarray(tensors, dtype=float)


def pp_microbatch(hw, model, par, placement, e=2.0):
    """One stage-boundary transfer of one micro-batch in one direction.

    b*(s/cp)*h*e bytes, ÷ tp: with SP the activation is already split over the TP ranks, and
    without SP Megatron's scatter/gather optimisation (Narayanan 2021 §4.1) sends a 1/t slice from
    each TP rank over its own NIC and all-gathers it over NVLink on the far side (that NVLink
    all-gather is small and not counted). Returns (seconds, bytes). The pipeline group crosses the
    tier that ``placement['pp']`` says.
    """
    size, k = placement["pp"]
    nbytes = par.micro_batch * (par.seq / par.cp) * model.hidden * e / par.tp
    t = collective_time(hw, "send_recv", nbytes, np.maximum(size, 2), k)
    return np.where(size > 1, t, 0.0), np.where(size > 1, nbytes, 0.0)


def dp_step(hw, par, placement, dense_params, expert_params, weight_bytes, grad_bytes, bucket_bytes=0.0,
            gather_bucket_bytes=None, expert_weight_bytes=None):
    """Data-parallel traffic of one step (before overlap).

    dense_params: parameters on this GPU replicated across the dp*cp group; expert_params: routed-
    expert parameters on this GPU, replicated across the expert-data-parallel group tp*cp*dp/(ep*etp)
    (``placement['edp']``: dp*cp/ep when etp = tp).
    ZeRO-0: all-reduce grads once per step. ZeRO-1: reduce-scatter grads once per step + all-gather
    updated weights (Megatron's distributed optimizer). ZeRO-2: grads are kept sharded, so they are
    reduce-scattered after every micro-batch's backward (m times) + one all-gather of weights.
    ZeRO-3: all-gather weights for the forward and again for the backward of every micro-batch and
    reduce-scatter grads every micro-batch (Rajbhandari et al. 2019 §7: 3Ψ for m = 1).
    Returns (seconds, bytes sent per GPU, seconds of the ZeRO-1/2 weight all-gather): that
    all-gather runs after the optimizer and can hide behind the next step's forward
    (Megatron-Core --overlap-param-gather), so cost/step.py gives it its own window.

    Buckets (``bucket_bytes`` > 0: the stack's overlap.dp_bucket_bytes): frameworks reduce the
    gradients in n = ceil(gradient bytes / bucket) collectives of one bucket each (PyTorch DDP
    bucket_cap_mb, Megatron-Core bucket_size, DeepSpeed reduce_bucket_size), and so do the weight
    gathers; each collective pays its own latency: n x time(bytes / n). At hundreds of ranks the
    latency term of n ring collectives (2(P-1) steps each) can outweigh the bandwidth term.
    ``gather_bucket_bytes`` (the stack's overlap.param_gather_bucket_bytes) splits the ZeRO-1/2
    weight all-gather on its own: None = as many collectives as the gradient buckets (Megatron-Core
    gathers per bucket); 0 = one collective (nanotron ZeroDistributedOptimizer._all_gather_params:
    one all_gather of the flattened shard); > 0 = ceil(weight bytes / it) collectives (DeepSpeed
    allgather_bucket_size). ZeRO-3's per-layer gathers keep the gradient bucketing.
    ``weight_bytes`` / ``expert_weight_bytes`` (default: ``weight_bytes``): bytes per gathered
    parameter of each group, a mean over its tensors (cost/step.py: FP8 primary weights gather
    1 B per linear weight).
    """
    out_t, out_b, out_ag = 0.0, 0.0, 0.0
    w_bytes = {"dp": weight_bytes, "edp": weight_bytes if expert_weight_bytes is None else expert_weight_bytes}
    for key, nparam in (("dp", dense_params), ("edp", expert_params)):
        size, k = placement[key]
        g = nparam * grad_bytes
        w = nparam * w_bytes[key]
        n = np.maximum(np.ceil(g / bucket_bytes), 1.0) if bucket_bytes else 1.0
        t_ar = n * collective_time(hw, "all_reduce", g / n, size, k)
        t_rs = n * collective_time(hw, "reduce_scatter", g / n, size, k)
        t_ag = n * collective_time(hw, "all_gather", w / n, size, k)
        if gather_bucket_bytes is None:
            t_ag12 = t_ag
        else:
            n_ag = np.maximum(np.ceil(w / gather_bucket_bytes), 1.0) if gather_bucket_bytes else 1.0
            t_ag12 = n_ag * collective_time(hw, "all_gather", w / n_ag, size, k)
        f = _frac(size)
        z = par.zero
        m = par.microbatches
        t = np.where(z == 0, t_ar, np.where(z == 1, t_rs + t_ag12, np.where(z == 2, m * t_rs + t_ag12,
                                                                               m * (t_rs + 2 * t_ag))))
        b = f * np.where(z == 0, 2 * g, np.where(z == 1, g + w, np.where(z == 2, m * g + w, m * (g + 2 * w))))
        live = (size > 1) & (nparam > 0)   # no group, or nothing to sync (dense model: no experts)
        out_t = out_t + np.where(live, t, 0.0)
        out_b = out_b + np.where(live, b, 0.0)
        out_ag = out_ag + np.where(live & ((z == 1) | (z == 2)), t_ag12, 0.0)
    return out_t, out_b, out_ag
