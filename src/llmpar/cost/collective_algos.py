"""Every collective algorithm's latency and bandwidth time, per protocol: the model's table.

:func:`algorithm_table` evaluates, for one collective, each algorithm NCCL has (ring, tree, NVLS,
NVLS-tree, CollNet; direct point-to-point) and the reference rows (naive all-reduce,
hierarchical) on the group's shape: size S, P GPUs, k per scale-up domain, n domains.
Array-polymorphic in all of them. :mod:`llmpar.cost.collectives` picks the fastest, as NCCL does;
docs/collectives.md derives each formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmpar.cost.collective_params import (
    ALGOS_FOR, BASE_LATENCY_US, PROTO_BW, RING_PLATEAU, intra_params, tier_params,
)


@dataclass
class _Algo:
    """One algorithm's cost on every candidate: per protocol latency and bandwidth time."""

    latency: list          # per protocol, seconds (array or float); inf where unavailable
    bw_time: list          # per protocol, seconds
    bytes_per_rank: object  # bytes sent by the busiest rank (all its links)
    intra: object          # bool: moves bytes over the scale-up tier
    inter: object          # bool: moves bytes over the scale-out tier
    available: object      # bool

    def times(self):
        return [np.where(self.available, lat + bw, np.inf) for lat, bw in zip(self.latency, self.bw_time)]


def group_shape(hw, size_bytes, group_size, members_per_node):
    """(S, P, k, n): size, group size (at least 1), members per scale-up domain, domains spanned."""
    S = np.asarray(size_bytes, dtype=float)
    P = np.asarray(group_size, dtype=float)
    if members_per_node is None:
        # a group of at most one physical domain stays in it; a larger one fills the domains a
        # job is given (Hardware.placement_domain: job_domain, else the whole domain)
        k = np.where(P <= hw.nvlink_domain, P, np.minimum(P, float(hw.placement_domain)))
    else:
        k = np.asarray(members_per_node, dtype=float)
    P1 = np.maximum(P, 1.0)
    k = np.clip(k, 1.0, P1)
    n = np.ceil(P1 / k)                     # scale-up domains the group spans
    return S, P1, k, n


def _log2ceil(n):
    return np.ceil(np.log2(np.maximum(n, 1.0)))


class _Ctx:
    """The shape of one evaluation of :func:`algorithm_table` (size S, group P, k per domain, n domains),
    the tier parameters it uses, and the three helpers every algorithm's formula is written with."""

    def __init__(self, hw, c: str, size_bytes, group_size, members_per_node):
        S, P, k, n = group_shape(hw, size_bytes, group_size, members_per_node)
        self.S, self.P, self.k, self.n = S, P, k, n
        self.multi = n > 1.0
        self.has_local = k > 1.0
        self.ti = ti = intra_params(hw, k, c)
        self.to = to = tier_params(hw.tiers[-1], c)
        self.r_i, self.r_o = ti["proto_bw"], to["proto_bw"]   # per-protocol bandwidth factors of each tier
        self.a_i, self.a_o = ti["alpha"], to["alpha"]
        self.b_i = ti["beta"]
        self.b_o = k * to["beta"]                    # k NIC shares pooled (docs/architecture.md, Collectives)
        self.b_nvls = ti["beta_inr"]
        self.b_sharp = k * to["beta_inr"]
        self.zero = np.zeros_like(S * P)
        # fraction of a ring's edges that stay inside a domain, as seen by one GPU: with the group
        # spread over n domains, n of the P edges of each ring cross; NCCL spreads the crossing edges
        # of its channels over the k GPUs (one NIC each), so each GPU sends (k-1)/k of its ring
        # traffic over NVLink and 1/k over its NIC (whose share the pooled beta_o already counts).
        self.ring_intra = np.where(self.multi, (k - 1.0) / k, 1.0)
        self.flat = (P - 1.0) / P
        self.intra_inr = np.asarray(ti["inr"], dtype=bool)
        self.any_intra_inr = bool(np.any(self.intra_inr))
        self.x_o_tree = np.where(n <= 2.0, 1.0, 2.0)

    def bw(self, x_i, beta_i, x_o, beta_o):
        """Seconds to move S*x_i per GPU over the scale-up tier and S*x_o per domain over the
        scale-out tier, both in flight at once (pipelined): the slower one sets the time.
        One value per protocol (each tier's LL/LL128 factor; 1 unless calibrated)."""
        S = self.S
        t_i = np.where(x_i > 0, S * x_i / beta_i, 0.0)
        t_o = np.where(self.multi & (x_o > 0), S * x_o / beta_o, 0.0)
        return [np.maximum(t_i / self.r_i[p], t_o / self.r_o[p]) for p in range(3)]

    def steps_latency(self, algo, n_intra, n_inter):
        base = BASE_LATENCY_US[algo]
        return [base[p] * 1e-6 + n_intra * self.a_i[p] + n_inter * self.a_o[p] for p in range(3)]

    def per_proto(self, algo, t_bw, lat, **kw):
        frac = PROTO_BW[algo]
        bwt = [t / f if f > 0 else self.zero + np.inf for t, f in zip(t_bw, frac)]
        return _Algo(latency=lat, bw_time=bwt, **kw)


def algorithm_table(hw, collective: str, size_bytes, group_size, members_per_node=None,
                    only=None) -> dict[str, _Algo]:
    """Latency and bandwidth time of every algorithm x protocol for ``collective``.

    ``only``: the algorithms to evaluate (default: all defined for the collective).
    """
    want = set(only) if only is not None else set(ALGOS_FOR[collective])
    x = _Ctx(hw, collective, size_bytes, group_size, members_per_node)
    if collective == "all_reduce":
        return _all_reduce_algos(x, want)
    return _other_algos(x, collective, want)


def _all_reduce_algos(x: _Ctx, want: set) -> dict[str, _Algo]:
    """All-reduce: ring, tree, NVLS, NVLS-tree, CollNet, hierarchical, naive."""
    S, P, k, n, multi, has_local, flat, zero, inf = x.S, x.P, x.k, x.n, x.multi, x.has_local, x.flat, x.zero, np.inf
    ti, to, r_i, r_o, a_i, a_o = x.ti, x.to, x.r_i, x.r_o, x.a_i, x.a_o
    b_i, b_o, b_nvls, b_sharp = x.b_i, x.b_o, x.b_nvls, x.b_sharp
    ring_intra, intra_inr, any_intra_inr, x_o_tree = x.ring_intra, x.intra_inr, x.any_intra_inr, x.x_o_tree
    bw, steps_latency, per_proto = x.bw, x.steps_latency, x.per_proto
    out: dict[str, _Algo] = {}
    if "ring" in want:
        x = 2.0 * flat
        lat = steps_latency("ring", 2.0 * (P - 1.0) - 2.0 * (n - 1.0), 2.0 * (n - 1.0))
        lat[2] = lat[2] * np.where(multi, RING_PLATEAU, 1.0)
        out["ring"] = per_proto("ring", bw(x * ring_intra, b_i, x, b_o), lat,
                                bytes_per_rank=S * x, intra=has_local, inter=multi, available=P > 1)
    if "tree" in want:
        # double binary tree (Sanders et al. 2009; NCCL 2.4): a chain inside the domain, a
        # tree of domains across the NICs. A chain of k GPUs carries S up (partial sums) and S
        # down (result) on each of its k-1 edges; NCCL builds every channel's chain in a
        # different order, so each GPU sends 2(k-1)/k S on average. A domain sends S out with
        # 2 domains (each is the other's root/child), 2S with more (inner tree node).
        x_i_tree = 2.0 * (k - 1.0) / k
        lat = [BASE_LATENCY_US["tree"][p] * 1e-6 + 2.0 * ((k - 1.0) * a_i[p] + _log2ceil(n) * a_o[p])
               for p in range(3)]
        out["tree"] = per_proto("tree", bw(x_i_tree, b_i, x_o_tree, b_o), lat,
                                bytes_per_rank=S * (x_i_tree + np.where(multi, x_o_tree / k, 0.0)),
                                intra=has_local, inter=multi, available=P > 1)
    if "nvls" in want:
        # NVLS (NVLink SHARP) inside one domain: each GPU serves S of multimem loads and
        # receives S of multicast stores, plus its own S/P shard each way: S(1 + 1/P).
        nvls_ok = (~multi) & has_local & intra_inr
        lat = [zero + inf, zero + inf, zero + ti["inr_latency"]]
        out["nvls"] = _unavailable(S * (1.0 + 1.0 / P), zero) if not any_intra_inr else per_proto(
            "nvls", bw(1.0 + 1.0 / P, b_nvls, 0.0, b_o), lat,
            bytes_per_rank=S * (1.0 + 1.0 / P), intra=True, inter=False, available=nvls_ok)
    if "nvls_tree" in want:
        # NVLS-tree: NVLS inside each domain, tree of domains across the NIC tier.
        nvt_ok = multi & has_local & intra_inr
        lat = [zero + inf, zero + inf, ti["inr_latency"] + 2.0 * _log2ceil(n) * a_o[2]]
        out["nvls_tree"] = _unavailable(S * (1.0 + 1.0 / k), zero) if not any_intra_inr else per_proto(
            "nvls_tree", bw(1.0 + 1.0 / k, b_nvls, x_o_tree, b_o), lat,
            bytes_per_rank=S * (1.0 + 1.0 / k) + S * x_o_tree / k,
            intra=True, inter=True, available=nvt_ok)
    if "collnet" in want:
        # CollNet (IB SHARP): each domain sends its partial sum S into the switch tree once
        # and receives the result once; inside the domain NVLS if present, else ring RS/AG.
        x_i_cn = np.where(intra_inr, 1.0 + 1.0 / k, 2.0 * (k - 1.0) / k)
        if not to["inr"]:
            out["collnet"] = _unavailable(S * np.where(has_local, x_i_cn, 0.0) + S / k, zero)
        else:
            b_i_cn = np.where(intra_inr, b_nvls, b_i)
            lat = [zero + inf, zero + inf, 2.0 * (k - 1.0) * a_i[2] + to["inr_latency"]]
            out["collnet"] = per_proto("collnet", bw(np.where(has_local, x_i_cn, 0.0), b_i_cn, 1.0, b_sharp),
                                       lat, bytes_per_rank=S * np.where(has_local, x_i_cn, 0.0) + S / k,
                                       intra=has_local, inter=True, available=multi)
    if "hierarchical" in want:
        # Hierarchical (Horovod/BlueConnect-style): ring reduce-scatter inside the domain,
        # ring all-reduce of the S/k shard across domains (each GPU on its own NIC share),
        # ring all-gather inside the domain. Phases run one after the other: times add.
        x_loc = (k - 1.0) / k
        t_loc = S * x_loc / b_i
        t_net = S * 2.0 * (n - 1.0) / n / b_o
        lat = [BASE_LATENCY_US["hierarchical"][p] * 1e-6 + 2.0 * (k - 1.0) * a_i[p] + 2.0 * (n - 1.0) * a_o[p]
               for p in range(3)]
        out["hierarchical"] = per_proto("hierarchical", [2.0 * t_loc / r_i[p] + t_net / r_o[p] for p in range(3)], lat,
                                        bytes_per_rank=S * (2.0 * x_loc + 2.0 * (n - 1.0) / n / k),
                                        intra=has_local, inter=multi, available=multi & has_local)
    if "naive" in want:
        # Naive: every rank sends its whole D to every other rank: D(P-1) sent per rank (the
        # seeds' "2DP" adds the D(P-1) it receives). Per domain k(P-k)D leaves over k shares.
        lat = steps_latency("naive", k - 1.0, P - k)
        out["naive"] = per_proto("naive", bw(k - 1.0, b_i, k * (P - k), b_o), lat,
                                 bytes_per_rank=S * (P - 1.0), intra=has_local, inter=multi, available=P > 1)
    return out


def _other_algos(x: _Ctx, c: str, want: set) -> dict[str, _Algo]:
    """All-gather, reduce-scatter, broadcast, reduce, all-to-all, gather, scatter, send/recv."""
    S, P, k, n, multi, has_local, flat, zero, inf = x.S, x.P, x.k, x.n, x.multi, x.has_local, x.flat, x.zero, np.inf
    ti, to, r_i, r_o = x.ti, x.to, x.r_i, x.r_o
    b_i, b_o, b_nvls = x.b_i, x.b_o, x.b_nvls
    ring_intra, intra_inr, any_intra_inr = x.ring_intra, x.intra_inr, x.any_intra_inr
    bw, steps_latency, per_proto = x.bw, x.steps_latency, x.per_proto
    out: dict[str, _Algo] = {}
    if c in ("all_gather", "reduce_scatter"):
        lat = steps_latency("ring", (P - 1.0) - (n - 1.0), n - 1.0)
        out["ring"] = per_proto("ring", bw(flat * ring_intra, b_i, flat, b_o), lat,
                                bytes_per_rank=S * flat, intra=has_local, inter=multi, available=P > 1)
        # NVLS all-gather (multicast store) / reduce-scatter (multimem load-reduce): each GPU
        # receives (all-gather) or serves (reduce-scatter) the (P-1)/P of S it does not own.
        nvls_bytes = S * (1.0 / P if c == "all_gather" else flat)
        if "nvls" in want and any_intra_inr:
            lat = [zero + inf, zero + inf, zero + ti["inr_latency"]]
            out["nvls"] = per_proto("nvls", bw(flat, b_nvls, 0.0, b_o), lat, bytes_per_rank=nvls_bytes,
                                    intra=True, inter=False, available=(~multi) & has_local & intra_inr)
        elif "nvls" in want:
            out["nvls"] = _unavailable(nvls_bytes, zero)
    elif c in ("broadcast", "reduce"):
        # pipelined chain (NCCL ring for broadcast/reduce): every rank but the last forwards S
        lat = steps_latency("ring", (P - 1.0) - (n - 1.0), n - 1.0)
        out["ring"] = per_proto("ring", bw(ring_intra, b_i, 1.0, b_o), lat,
                                bytes_per_rank=S + zero, intra=has_local, inter=multi, available=P > 1)
    elif c == "all_to_all":
        # each rank sends S/P to every peer: (k-1)S/P over the scale-up tier, (P-k)S/P over
        # the NICs (k of them pooled per domain: k(P-k)S/P leaves each domain)
        lat = steps_latency("naive", k - 1.0, P - k)
        out["naive"] = per_proto("naive", bw((k - 1.0) / P, b_i, k * (P - k) / P, b_o), lat,
                                 bytes_per_rank=S * flat, intra=has_local, inter=multi, available=P > 1)
    elif c in ("gather", "scatter"):
        # the root receives (gather) / sends (scatter) the (P-1)/P of S it does not own; the
        # part from other domains crosses the NICs of the root's domain (PXN spreads it).
        lat = steps_latency("naive", k - 1.0, P - k)
        out["naive"] = per_proto("naive", bw(np.where(has_local, flat, 0.0), b_i, (P - k) / P, b_o), lat,
                                 bytes_per_rank=S * flat, intra=has_local, inter=multi, available=P > 1)
    elif c == "send_recv":
        # every rank sends S to the next (nccl-tests sendrecv); a crossing pair has ONE NIC share
        lat = steps_latency("naive", np.where(multi, 0.0, 1.0), np.where(multi, 1.0, 0.0))
        t = [np.where(multi, S / (to["beta"] * r_o[p]), S / (b_i * r_i[p])) for p in range(3)]
        out["naive"] = per_proto("naive", t, lat, bytes_per_rank=S + zero,
                                 intra=~multi, inter=multi, available=P > 1)
    return out


def _unavailable(bytes_per_rank, zero) -> _Algo:
    """An algorithm the hardware lacks (e.g. NVLS without NVLink SHARP): infinite time."""
    inf = zero + np.inf
    return _Algo(latency=[inf] * 3, bw_time=[inf] * 3, bytes_per_rank=bytes_per_rank,
                 intra=False, inter=False, available=False)
