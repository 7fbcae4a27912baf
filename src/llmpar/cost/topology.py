"""Placement of parallel groups onto the interconnect tiers.

Ranks are numbered tp (innermost) -> cp -> dp -> pp (outermost), as Megatron-LM orders them
(``megatron/core/parallel_state.py``, ``RankGenerator`` with order "tp-cp-ep-dp-pp"; docs/architecture.md,
Placement). A group of a dimension is ``size`` ranks spaced ``stride`` apart, stride = the
product of the degrees inside it. Expert-parallel groups are carved out of the dp x cp ranks:
an ep group of size e takes e consecutive ranks of that space, so its stride is tp; the
expert-data-parallel group (dp*cp/e ranks) then has stride tp*e. With an expert-TP degree etp
below tp (MoE parallel folding) the MoE layers regroup the stage's tp*cp*dp ranks instead: etp
groups at stride 1, ep groups at stride etp, expert-data-parallel groups at stride etp*e.

From size, stride and the scale-up domain D a job fills (``Hardware.placement_domain``: the
NVLink domain, 8 on a DGX; on a GB200 NVL72 rack, where gpus_per_node is 4 and all 72 GPUs share
one NVLink domain, the 64 GPUs a large job gets of each rack: the profile's ``job_domain``) we derive
k = members of one group inside one domain - what the collective model needs for beta_inter =
k x NIC share - and whether the group crosses the scale-out tier. Everything is numpy-friendly:
``size`` and ``stride`` may be arrays (one entry per candidate layout).
"""

from __future__ import annotations

import numpy as np

DEFAULT_ORDER = ("tp", "cp", "dp", "pp")


def group_placement(hw, size, stride, total=None):
    """(members_per_node, crosses_nodes) for groups of ``size`` ranks spaced ``stride`` apart.

    Ranks fill scale-up domains of D GPUs in order (rank r lives in domain r // D). "node" here
    is the scale-up (NVLink) domain, not the physical server. With span = size x stride:

    * D % span == 0: every group lies inside one domain: k = size, no scale-out traffic.
    * span % D == 0 and D % stride == 0: every group covers whole domains: k = D / stride
      (stride a multiple of D: one member per domain, k = 1).
    * otherwise groups straddle domain boundaries unevenly (GB200 NVL72 with power-of-two
      degrees); k is the smallest part of a group on one side of a boundary, the worst group
      setting the pace. With ``total`` (GPUs in the job) the boundaries m*D, m = 1 ..
      ceil(total/D) - 1, are scanned: a boundary at offset x = (m*D mod span) inside a group's
      span leaves floor(x/stride) (at least 1) members on its left and size - ceil(x/stride) (at
      least 1) on its right; a domain wholly inside a span holds D // stride. Without ``total``
      the cluster is taken as unbounded and the boundaries fall on every multiple of
      g = gcd(D, span): k = max(1, g // stride).

    D is the profile's ``placement_domain``: the GPUs of a domain a job fills before the next
    (``job_domain``, e.g. 64 of a GB200 NVL72 rack's 72), else the whole domain. A job of at most
    one physical domain's GPUs is placed inside one domain whatever ``job_domain`` says (a
    scheduler keeps such a job on one rack).
    """
    D = int(hw.placement_domain)
    D_phys = int(hw.nvlink_domain)
    scalar = np.ndim(size) == 0 and np.ndim(stride) == 0 and np.ndim(total) == 0
    n = np.maximum(np.asarray(size, dtype=np.int64), 1)
    s = np.maximum(np.asarray(stride, dtype=np.int64), 1)
    tot = np.asarray(0 if total is None else total, dtype=np.int64)
    shape = np.broadcast_shapes(n.shape, s.shape, tot.shape)
    n, s, tot = (np.atleast_1d(np.broadcast_to(a, shape)).ravel() for a in (n, s, tot))
    span = n * s
    inside = (D % span) == 0
    # whole domains: either several members per domain (D % stride == 0) or one per domain
    # (stride a multiple of D)
    whole = ((span % D) == 0) & (((D % s) == 0) | ((s % D) == 0))
    g = np.gcd(D, span)
    k = np.where(inside, n, np.where(whole, np.maximum(1, D // s), np.maximum(1, g // s)))
    crosses = ~inside
    if total is not None:
        bounds = -(-tot // D) - 1                      # internal domain boundaries in the job
        mis = ~inside & ~whole
        # a job that fits in one domain never leaves it, whatever its groups look like
        single = (bounds < 1) | (tot <= D_phys)
        crosses = np.where(single, False, crosses)
        k = np.where(single, n, k)
        idx = np.nonzero(mis & ~single)[0]
        if idx.size:
            # candidates share few distinct (size, stride, job size) triples: scan each once
            ni, si, bi = n[idx], s[idx], bounds[idx]
            if max(ni.max(), si.max(), bi.max()) < 2**21:   # pack into one int64: fast unique
                _, first, inverse = np.unique((ni << 42) | (si << 21) | bi, return_index=True, return_inverse=True)
            else:
                _, first, inverse = np.unique(np.stack([ni, si, bi], axis=1), axis=0,
                                              return_index=True, return_inverse=True)
            ku, cu = _scan_boundaries(D, ni[first], si[first], bi[first])
            inverse = np.asarray(inverse).ravel()
            k = k.copy()
            crosses = crosses.copy()
            k[idx] = ku[inverse]
            crosses[idx] = cu[inverse]
    k = np.minimum(k, n)
    crosses = crosses & (n > 1)
    if scalar:
        return int(k[0]), bool(crosses[0])
    return k.reshape(shape), crosses.reshape(shape)


def _scan_boundaries(D, nn, ss, bb):
    """Smallest part of any group at the domain boundaries m*D, m = 1..bb (see group_placement)."""
    sp = nn * ss
    period = sp // np.gcd(D, sp)                       # m*D mod span repeats with this period
    m_top = np.minimum(bb, period)
    ku = np.empty_like(nn)
    cu = np.zeros(nn.shape, dtype=bool)
    for i in range(nn.size):                           # few distinct triples; each scan is short
        m = np.arange(1, int(m_top[i]) + 1, dtype=np.int64)
        x = (m * D) % sp[i]
        x = x[x != 0]
        if x.size == 0:
            ku[i] = nn[i]
            continue
        left = np.maximum(1, x // ss[i])
        right = np.maximum(1, nn[i] - (-(-x // ss[i])))
        kb = int(np.minimum(left, right).min())
        if sp[i] > D:
            kb = min(kb, max(1, D // int(ss[i])))
        ku[i] = kb
        cu[i] = True
    return ku, cu


def strides(par, order=DEFAULT_ORDER) -> dict:
    """Stride of each of tp, cp, dp, pp in the rank order ``order`` (innermost first)."""
    if sorted(order) != sorted(DEFAULT_ORDER):
        from llmpar.errors import UserError

        raise UserError(f"rank order must be a permutation of {', '.join(DEFAULT_ORDER)}, got {', '.join(order)}")
    out = {}
    s = 1
    for dim in order:
        out[dim] = s
        s = s * getattr(par, dim)
    return out


def _groups(par, order) -> dict:
    """dim -> (group size, stride) of every group kind of layout ``par`` (see dims_placement).

    The one place the group table is built: :func:`dims_placement` (the planner's and ``step``'s
    view) and :func:`placement_table` (``--explain``) both read it.
    """
    st = strides(par, order)
    # the dp x cp space: when cp and dp are adjacent in the order it is one strided block whose
    # stride is that of the inner of the two
    inner = "cp" if order.index("cp") < order.index("dp") else "dp"
    s_space = st[inner]
    dpcp = par.dp * par.cp
    ep = par.ep
    etp = par.expert_tp
    folded = np.asarray(etp != par.tp)
    if folded.any() and not (order[0] == "tp" and order[-1] == "pp"):
        from llmpar.errors import UserError

        raise UserError(f"--etp other than tp needs tp innermost and pp outermost in the rank order "
                        f"(e.g. tp-cp-dp-pp), got {'-'.join(order)}")
    # MoE layers (Megatron-Core MoE parallel folding, Liu et al. 2025 arXiv:2504.14960 §3.2): the
    # tp x cp x dp ranks of a pipeline stage, consecutive when tp is innermost and pp outermost,
    # are regrouped as etp (innermost) x ep x edp. With etp = tp that is EP inside the dp x cp
    # space (stride s_space), as before folding existed.
    ep_stride = np.where(folded, etp, s_space)
    return {
        "tp": (par.tp, st["tp"]),
        "cp": (par.cp, st["cp"]),
        "dp": (par.dp, st["dp"]),
        "pp": (par.pp, st["pp"]),
        "ep": (ep, ep_stride),
        "edp": (par.expert_dp, ep_stride * ep),
        "etp": (etp, np.where(folded, 1, st["tp"])),
        "dpcp": (dpcp, s_space),
    }


def dims_placement(hw, par, order=DEFAULT_ORDER) -> dict:
    """dim -> (group size, members per domain k) for each parallel group of layout ``par``.

    Keys: ``tp``, ``cp``, ``dp``, ``pp`` (the groups of each degree), ``ep`` (expert-parallel:
    e consecutive ranks of the dp x cp space, or with etp < tp of the folded tp x cp x dp space),
    ``edp`` (expert data-parallel: tp*cp*dp/(ep*etp) ranks), ``etp`` (expert tensor-parallel),
    ``dpcp`` (the dp x cp group over which dense gradients are reduced and ZeRO shards when
    cp > 1, as Megatron does). Fields of ``par`` may be numpy arrays.
    """
    out = {}
    for dim, (size, stride) in _groups(par, order).items():
        k, _ = group_placement(hw, size, stride, par.gpus)
        out[dim] = (size, k)
    return out


def tiers_of(hw, k: int, crosses: bool) -> list[str]:
    """Tier names a group with k members per domain uses: the smallest scale-up tier whose domain
    holds k (as the collective model picks it, ``collective_params.intra_params``), then the
    scale-out tier if the group crosses domains."""
    inner = list(hw.tiers[:-1])
    tiers = []
    if k > 1 and inner:
        tiers.append(next((t.name for t in inner if t.domain_size >= k), inner[-1].name))
    if crosses:
        tiers.append(hw.tiers[-1].name)
    return tiers


def describe(hw, size: int, stride: int, total: int | None) -> dict:
    """One scalar group: {size, stride, members_per_node, crosses_nodes, tiers}."""
    k, crosses = group_placement(hw, int(size), int(stride), total)
    return {"size": int(size), "stride": int(stride), "members_per_node": k, "crosses_nodes": crosses,
            "tiers": tiers_of(hw, k, crosses)}


def placement_table(hw, par, order=DEFAULT_ORDER) -> dict:
    """Scalar layouts: dim -> {size, stride, members_per_node, crosses_nodes, tiers} (for --explain)."""
    total = int(par.gpus)
    return {dim: describe(hw, size, stride, total) for dim, (size, stride) in _groups(par, order).items()}


def collective_group(hw, gpus: int, per_node: int | None = None) -> dict:
    """Placement of the group ``llmpar collective`` costs, by the rule ``step`` and ``plan`` use.

    Without ``per_node``: ``gpus`` consecutive ranks from rank 0 in a job of ``gpus`` GPUs - the
    data-parallel group of a dp-only layout (:func:`dims_placement` with tp = cp = pp = 1). Filled
    domain by domain, so 12 GPUs on 8-GPU nodes are 8 + 4 and the smaller side (k = 4) sets the
    NIC pace. With ``per_node`` = m dividing the domain D: the group of stride D/m (the dp group
    under tp = D/m), m members in each of gpus/m domains. An m that does not divide D is taken
    as stated (m members per domain: a job that leaves GPUs of each node idle).
    Adds ``domains``: the scale-up domains the group's ranks occupy.
    """
    D = int(hw.placement_domain)
    if per_node is None:
        out = describe(hw, gpus, 1, gpus)
        out["domains"] = 1 if gpus <= hw.nvlink_domain else -(-gpus // D)
        return out
    if D % per_node == 0:
        stride = D // per_node
        out = describe(hw, gpus, stride, gpus * stride)
    else:
        crosses = gpus > per_node
        out = {"size": int(gpus), "stride": 1, "members_per_node": int(per_node), "crosses_nodes": crosses,
               "tiers": tiers_of(hw, per_node, crosses)}
    out["domains"] = -(-gpus // per_node)
    return out
