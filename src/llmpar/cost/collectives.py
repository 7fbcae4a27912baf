"""Collective communication cost: an alpha-beta model with NCCL's algorithm/protocol selection.

Array-polymorphic in the message size AND in the group shape (group size P, members per
scale-up domain k), so ``llmpar step`` costs one layout and ``llmpar plan`` thousands with the
same function. docs/collectives.md gives every formula with its derivation.

Model (sources in brackets):

* time(a, p) = latency(a, p) + max over tiers of bytes_on_tier(a) / beta_tier(a, p)
  [Hockney alpha-beta; Patarasuk & Yuan 2009 for the ring; NCCL ``src/graph/tuning.cc``
  ``ncclTopoTuneModel`` + ``ncclTopoGetAlgoTime`` for the latency/bandwidth table structure].
* latency(a, p) = base(a, p) + intra_steps * alpha_intra(p) + inter_steps * alpha_inter(p)
  base = NCCL's ``baseLatencies``; alpha(p) = the tier's per-step latency for protocol p (NCCL's
  ``hwLatencies`` per link type; the profile states the LL one and optionally LL128/Simple).
* beta: the tier's line rate per GPU per direction x its efficiency, x the protocol's bandwidth
  fraction (NCCL: LL 0.5, LL128 0.92 of Simple; tree x0.92, tree LL /3.8). Across the scale-out
  tier a group with k members per domain pools k NIC shares: beta_inter = k x NIC share
  (docs/architecture.md, Collectives). In-network reduction (NVLS, SHARP) uses ``inr_efficiency``.
* NCCL picks the (algorithm, protocol) with the smallest time; so do we, among the algorithms
  NCCL has (ring, tree, nvls, nvls_tree, collnet; direct point-to-point for all-to-all, gather,
  scatter, send/recv). ``naive`` (for all-reduce) and ``hierarchical`` are reference rows.
* Sizes follow nccl-tests (doc/PERFORMANCE.md): all-gather/reduce-scatter/gather/scatter size is
  the whole array, all-to-all the whole per-rank buffer, send/recv the bytes one rank sends.
  busbw = algbw x factor: all-reduce 2(P-1)/P; all-gather, reduce-scatter, all-to-all, gather,
  scatter (P-1)/P (nccl-tests src/*.cu GetBw); broadcast, reduce, send/recv 1.

Fit parameters (what ``llmpar calibrate fit`` may change in a profile), per tier:
``latency`` (LL alpha), ``ll128_latency``, ``simple_latency``, ``efficiency`` (beta = bandwidth x
efficiency), ``ll_efficiency`` and ``ll128_efficiency`` (the ring bandwidth of LL / LL128 relative
to Simple: NCCL's 0.5 / 0.92 by default; the size-dependent efficiency, since the protocol
follows the size), ``inr_latency`` and ``inr_efficiency``; each may also be stated per collective
(``Tier.collectives``). Everything else here is NCCL's constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from llmpar.errors import UserError, suggest

from llmpar.specs.collective_names import COLLECTIVES, normalize_collective  # noqa: F401 (the names' home)
#: collectives whose nccl-tests ``size`` counts every rank's piece (size = count x typesize x ranks;
#: nccl-tests ``paramcount`` is per rank): the size convention of this module and of the logs
GATHERED = frozenset({"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"})
ALGORITHMS = ("naive", "ring", "tree", "nvls", "nvls_tree", "collnet", "hierarchical")
PROTOCOLS = ("ll", "ll128", "simple")
PROTOCOL_NAMES = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}

# Which algorithms exist for which collective (NCCL tuning.cc skips the others), and which of
# them NCCL itself can choose. "naive" is direct point-to-point: for all-to-all, gather, scatter
# and send/recv that IS what NCCL runs; for all-reduce it is the seeds' strawman.
_ALGOS_FOR = {
    "all_reduce": ("naive", "ring", "tree", "nvls", "nvls_tree", "collnet", "hierarchical"),
    "all_gather": ("ring", "nvls"),
    "reduce_scatter": ("ring", "nvls"),
    "broadcast": ("ring",),
    "reduce": ("ring",),
    "all_to_all": ("naive",),
    "gather": ("naive",),
    "scatter": ("naive",),
    "send_recv": ("naive",),
}
_NCCL_CHOICES = {
    c: tuple(a for a in algos if a != "hierarchical" and not (c == "all_reduce" and a == "naive"))
    for c, algos in _ALGOS_FOR.items()
}

_ALGO_ALIASES = {"nvlstree": "nvls_tree", "collnet_direct": "collnet", "collnetdirect": "collnet", "sharp": "collnet"}

# NCCL tuning.cc ``baseLatencies`` (us) per algorithm, protocol (LL, LL128, Simple).
BASE_LATENCY_US = {
    "ring": (6.6, 14.0, 8.4),
    "tree": (6.8, 14.0, 8.4),
    "naive": (6.6, 14.0, 8.4),          # point-to-point kernels: ring's launch cost
    "hierarchical": (6.6, 14.0, 8.4),   # three ring phases, one launch each would add more; keep one
    "nvls": (0.0, 0.0, 0.0),
    "nvls_tree": (0.0, 0.0, 0.0),
    "collnet": (0.0, 0.0, 0.0),
}

# NCCL tuning.cc ``hwLatencies`` for Ring (LL, LL128, Simple), us, per link type. A tier states its
# LL latency (``latency``); LL128 and Simple default to the same ratios unless the profile states them.
HW_LATENCY_US = {
    "nvlink": (0.6, 1.9, 3.4),
    "pcie": (1.0, 2.5, 5.7),
    "net": (2.7, 4.0, 14.0),
}
_LINK_CLASS = {"nvlink": "nvlink", "nvswitch": "nvlink", "pcie": "pcie", "infiniband": "net", "ethernet": "net"}
# In-network reduction defaults when a tier has it but states no inr_latency / inr_efficiency:
# NCCL hwLatencies[NVLINK][NVLS][Simple] = 25 us, [NET][CollNetDirect][Simple] = 31 us;
# nvlsEfficiency Hopper 0.85 (tuning.cc).
INR_LATENCY_US = {"nvlink": 25.0, "pcie": 25.0, "net": 31.0}
INR_EFFICIENCY_DEFAULT = 0.85

# Protocol bandwidth as a fraction of Simple's (tuning.cc "model refinements"): ring LL 0.5,
# LL128 0.92; tree all-reduce x0.92, tree LL a further /3.8, tree LL128 x 120/128 (multi-node).
# NVLS, NVLS-tree and CollNet run the Simple protocol only (0 = not available).
PROTO_BW = {
    "ring": (0.5, 0.92, 1.0),
    "naive": (0.5, 0.92, 1.0),
    "hierarchical": (0.5, 0.92, 1.0),
    "tree": (0.92 / 3.8, 0.92 * 120.0 / 128.0, 0.92),
    "nvls": (0.0, 0.0, 1.0),
    "nvls_tree": (0.0, 0.0, 1.0),
    "collnet": (0.0, 0.0, 1.0),
}
# NCCL ncclTopoGetAlgoTime: multi-node ring/Simple all-reduce latency x1.4 ("plateau effect").
RING_PLATEAU = 1.4


def normalize_algorithm(name: str, collective: str | None = None) -> str:
    key = str(name).strip().lower().replace("-", "_")
    key = _ALGO_ALIASES.get(key.replace("_", ""), _ALGO_ALIASES.get(key, key))
    if key not in ALGORITHMS:
        raise UserError(f"unknown algorithm {name!r}{suggest(key, ALGORITHMS)}; choose one of: {', '.join(ALGORITHMS)}")
    if collective is not None and key not in _ALGOS_FOR[collective]:
        raise UserError(
            f"algorithm {key!r} is not available for {collective}; "
            f"available: {', '.join(_ALGOS_FOR[collective])}"
        )
    return key


def algorithms_for(collective: str) -> tuple[str, ...]:
    return _ALGOS_FOR[normalize_collective(collective)]


def bus_factor(collective: str, group_size):
    """nccl-tests busbw/algbw factor (doc/PERFORMANCE.md; src/*.cu ``GetBw``)."""
    c = normalize_collective(collective)
    p = np.asarray(group_size, dtype=float)
    pp = np.maximum(p, 1.0)
    if c == "all_reduce":
        f = 2.0 * (pp - 1.0) / pp
    elif c in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        f = (pp - 1.0) / pp
    else:
        f = np.ones_like(pp)
    return f if f.ndim else float(f)


# ----------------------------------------------------------------------------- tier parameters

def tier_params(tier, collective: str | None = None) -> dict:
    """Resolved collective-model parameters of one tier (NCCL defaults filled in).

    ``collective``: use the tier's per-collective values (``Tier.collectives``, written by
    ``llmpar calibrate fit``) where it states them for that collective.
    """
    over = getattr(tier, "collectives", None) or {}
    over = over.get(collective) if collective else None

    def get(name):
        v = getattr(over, name, None) if over is not None else None
        return v if v is not None else getattr(tier, name, None)

    cls = _LINK_CLASS[tier.kind]
    ll, l128, simple = HW_LATENCY_US[cls]
    a_ll = get("latency")
    a_128 = get("ll128_latency")
    a_128 = a_128 if a_128 is not None else a_ll * l128 / ll
    a_simple = get("simple_latency")
    a_simple = a_simple if a_simple is not None else a_ll * simple / ll
    inr_eff = get("inr_efficiency")
    inr_eff = inr_eff if inr_eff is not None else INR_EFFICIENCY_DEFAULT
    inr_lat = get("inr_latency")
    inr_lat = inr_lat if inr_lat is not None else INR_LATENCY_US[cls] * 1e-6
    # LL / LL128 bandwidth relative to NCCL's ring fractions (1 = NCCL's 0.5 / 0.92)
    f_ll, f_128 = get("ll_efficiency"), get("ll128_efficiency")
    proto = (1.0 if f_ll is None else f_ll / PROTO_BW["ring"][0],
             1.0 if f_128 is None else f_128 / PROTO_BW["ring"][1], 1.0)
    return {
        "name": tier.name,
        "beta": tier.bandwidth * get("efficiency"),
        "alpha": (a_ll, a_128, a_simple),
        "inr": bool(tier.in_network_reduction),
        "beta_inr": tier.bandwidth * inr_eff,
        "inr_latency": inr_lat,
        "proto_bw": proto,
    }


def _intra_params(hw, k, collective: str | None = None):
    """Parameters of the scale-up tier used by a group with k members per domain.

    The smallest inner tier whose domain holds k GPUs (with one inner tier: that tier). Works on
    arrays of k by selecting element-wise. Without an inner tier the scale-out tier stands in
    (then k is always 1 and no intra-domain bytes flow).
    """
    inner = hw.tiers[:-1] or hw.tiers[-1:]
    params = [tier_params(t, collective) for t in inner]
    if len(params) == 1:
        return params[0]
    # start from the largest, overwrite where a smaller tier still holds k
    out = dict(params[-1])
    out["alpha"] = tuple(params[-1]["alpha"])
    for t, prm in zip(reversed(inner[:-1]), reversed(params[:-1])):
        fits = k <= t.domain_size
        out = {
            "name": np.where(fits, prm["name"], out["name"]),
            "beta": np.where(fits, prm["beta"], out["beta"]),
            "alpha": tuple(np.where(fits, a, b) for a, b in zip(prm["alpha"], out["alpha"])),
            "inr": np.where(fits, prm["inr"], out["inr"]),
            "beta_inr": np.where(fits, prm["beta_inr"], out["beta_inr"]),
            "inr_latency": np.where(fits, prm["inr_latency"], out["inr_latency"]),
            "proto_bw": tuple(np.where(fits, a, b) for a, b in zip(prm["proto_bw"], out["proto_bw"])),
        }
    return out


# ----------------------------------------------------------------------------- the table

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


def _shape(hw, size_bytes, group_size, members_per_node):
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
    """The shape of one evaluation of :func:`_table` (size S, group P, k per domain, n domains),
    the tier parameters it uses, and the three helpers every algorithm's formula is written with."""

    def __init__(self, hw, c: str, size_bytes, group_size, members_per_node):
        S, P, k, n = _shape(hw, size_bytes, group_size, members_per_node)
        self.S, self.P, self.k, self.n = S, P, k, n
        self.multi = n > 1.0
        self.has_local = k > 1.0
        self.ti = ti = _intra_params(hw, k, c)
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


def _table(hw, collective: str, size_bytes, group_size, members_per_node=None, only=None) -> dict[str, _Algo]:
    """Latency and bandwidth time of every algorithm x protocol for ``collective``.

    ``only``: the algorithms to evaluate (default: all defined for the collective).
    """
    want = set(only) if only is not None else set(_ALGOS_FOR[collective])
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


# ----------------------------------------------------------------------------- public API

def _scalar_or_array(x, *inputs):
    if all(np.ndim(i) == 0 for i in inputs if i is not None):
        return float(x)
    return x


_RUNS_MIN = 4096   # shorter arrays are evaluated as they are


def _runs(size_bytes, group_size, members_per_node):
    """Long arrays of collective shapes (the planner's candidates) repeat the same (size, group,
    members) entry many times in a row. Returns (shape, inverse, (sizes, groups, members)) with
    one entry per run of equal consecutive entries, so each run is evaluated once and the result
    scattered back (same numbers: every entry goes through the same arithmetic); None when the
    arrays are short or the runs too short to pay."""
    shape = np.broadcast_shapes(np.shape(size_bytes), np.shape(group_size), np.shape(members_per_node))
    n = int(np.prod(shape)) if shape else 1
    if n < _RUNS_MIN:
        return None
    cols = [np.broadcast_to(x, shape).ravel() for x in (size_bytes, group_size, members_per_node) if x is not None]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(cols[0][1:], cols[0][:-1], out=new[1:])
    for x in cols[1:]:
        new[1:] |= x[1:] != x[:-1]
    starts = np.flatnonzero(new)
    if starts.size > n // 4:
        return None
    inverse = np.cumsum(new) - 1
    picked = [x[starts] for x in cols]
    return shape, inverse, (picked[0], picked[1], picked[2] if members_per_node is not None else None)


def collective_time(hw, collective: str, size_bytes, group_size, members_per_node=None,
                    algorithm: str | None = None):
    """Seconds for one ``collective`` of ``size_bytes`` (nccl-tests size) over ``group_size`` GPUs.

    ``members_per_node``: how many group members share one scale-up (NVLink) domain - the node on
    a DGX, the 72-GPU rack on GB200 NVL72 (``llmpar.cost.topology.group_placement`` derives it);
    None = min(group_size, domain size). ``algorithm`` None = the fastest NCCL algorithm and
    protocol, as NCCL picks; a named one = that algorithm's fastest protocol (inf where it is not
    available for the group, e.g. nvls across domains). group_size 1 costs 0.
    Every argument but ``hw`` and ``collective`` may be a numpy array (broadcast together); long
    arrays are evaluated once per run of equal (size, group, members) entries (:func:`_runs`).
    """
    c = normalize_collective(collective)
    runs = _runs(size_bytes, group_size, members_per_node)
    if runs is not None:
        shape, inverse, (S, P, k) = runs
        return np.asarray(collective_time(hw, c, S, P, k, algorithm))[inverse].reshape(shape)
    names = (normalize_algorithm(algorithm, c),) if algorithm else _NCCL_CHOICES[c]
    table = _table(hw, c, size_bytes, group_size, members_per_node, only=names)
    best = None
    for a in names:
        for t in table[a].times():
            best = t if best is None else np.minimum(best, t)
    P = np.asarray(group_size)
    best = np.where(P <= 1, 0.0, best)
    return _scalar_or_array(best, size_bytes, group_size, members_per_node)


@dataclass
class AlgorithmRow:
    algorithm: str
    protocol: str | None
    time_s: float
    bytes_per_rank: float
    algbw_GBps: float
    busbw_GBps: float
    tiers: list[str]
    available: bool
    nccl: bool                     # one NCCL can choose (naive all-reduce and hierarchical are not)
    latency_s: float = 0.0
    bandwidth_s: float = 0.0
    protocols: dict = field(default_factory=dict)   # protocol -> time_s (available ones)
    unavailable_because: str | None = None          # why not, for an unavailable row

    def as_dict(self) -> dict:
        return {
            "algorithm": self.algorithm, "protocol": self.protocol, "time_s": self.time_s,
            "bytes_per_rank": self.bytes_per_rank, "algbw_GBps": self.algbw_GBps,
            "busbw_GBps": self.busbw_GBps, "tiers": self.tiers, "available": self.available,
            "nccl": self.nccl, "latency_s": self.latency_s, "bandwidth_s": self.bandwidth_s,
            "protocols": self.protocols, "unavailable_because": self.unavailable_because,
        }


@dataclass
class CollectiveReport:
    collective: str
    size_bytes: float
    group_size: int
    members_per_node: int
    domains: int
    bus_factor: float
    rows: list[AlgorithmRow]
    chosen: str | None
    chosen_protocol: str | None
    tiers: dict            # tier name -> resolved parameters used

    @property
    def chosen_row(self) -> AlgorithmRow | None:
        return next((r for r in self.rows if r.algorithm == self.chosen), None)


def collective_report(hw, collective: str, size_bytes: float, group_size: int, members_per_node: int | None = None,
                      algorithm: str | None = None) -> CollectiveReport:
    """Scalar, row-per-algorithm view of :func:`collective_time` (for the CLI and ``--explain``).

    Same table, same numbers: the chosen row's ``time_s`` equals ``collective_time``.
    """
    c = normalize_collective(collective)
    if algorithm:
        algorithm = normalize_algorithm(algorithm, c)
    S, P, k, n = _shape(hw, size_bytes, group_size, members_per_node)
    table = _table(hw, c, size_bytes, group_size, members_per_node)
    ti = _intra_params(hw, k, c)
    to = tier_params(hw.tiers[-1], c)
    factor = bus_factor(c, float(P))
    rows = []
    for a in _ALGOS_FOR[c]:
        alg = table[a]
        times = [float(t) for t in alg.times()]
        avail = bool(alg.available) and min(times) < np.inf
        p = int(np.argmin(times)) if avail else None
        t = times[p] if avail else float("inf")
        tiers = []
        if bool(alg.intra) and k > 1:
            tiers.append(str(ti["name"]))
        if bool(alg.inter) and n > 1:
            tiers.append(str(to["name"]))
        algbw = float(S) / t / 1e9 if avail and t > 0 else 0.0
        rows.append(AlgorithmRow(
            algorithm=a, protocol=PROTOCOLS[p] if avail else None, time_s=t,
            bytes_per_rank=float(alg.bytes_per_rank), algbw_GBps=algbw, busbw_GBps=algbw * factor,
            tiers=tiers, available=avail, nccl=a in _NCCL_CHOICES[c],
            latency_s=float(alg.latency[p]) if avail else float("inf"),
            bandwidth_s=float(alg.bw_time[p]) if avail else float("inf"),
            protocols={PROTOCOLS[i]: times[i] for i in range(3) if times[i] < np.inf},
            unavailable_because=None if avail else why_unavailable(
                a, bool(ti["inr"]), bool(to["inr"]), multi=bool(n > 1), has_local=bool(k > 1)),
        ))
    pool = [r for r in rows if r.available and (r.algorithm == algorithm if algorithm else r.nccl)]
    best = min(pool, key=lambda r: r.time_s) if pool else None
    tiers_used = {str(ti["name"]): ti, str(to["name"]): to} if n > 1 else {str(ti["name"]): ti}
    return CollectiveReport(
        collective=c, size_bytes=float(S), group_size=int(P), members_per_node=int(k), domains=int(n),
        bus_factor=float(factor), rows=rows, chosen=best.algorithm if best else None,
        chosen_protocol=best.protocol if best else None, tiers=tiers_used,
    )


def why_unavailable(algorithm: str, intra_inr: bool, outer_inr: bool, *, multi: bool, has_local: bool) -> str:
    """Why ``algorithm`` cannot run for a group: the availability masks of :func:`_table` in words.

    ``intra_inr``/``outer_inr``: the scale-up tier the group uses / the scale-out tier has
    in-network reduction (NVLink SHARP / IB SHARP); ``multi``: the group spans domains;
    ``has_local``: more than one member per domain.
    """
    if algorithm == "nvls":          # available: one domain, k > 1, NVLink SHARP
        return "no NVLink SHARP on this hardware" if not intra_inr else "group spans NVLink domains"
    if algorithm == "nvls_tree":     # available: several domains, k > 1, NVLink SHARP
        if not intra_inr:
            return "no NVLink SHARP on this hardware"
        return "single node" if not multi else "1 GPU per node"
    if algorithm == "collnet":       # available: SHARP on the NIC tier, several domains
        return "no SHARP on the NIC tier" if not outer_inr else "single node"
    if algorithm == "hierarchical":  # available: several domains, k > 1
        return "single node" if not multi else "1 GPU per node"
    return "not available"


# ----------------------------------------------------------------------------- explain

_FAMILY = {"all_reduce": "ar", "all_gather": "agrs", "reduce_scatter": "agrs", "broadcast": "chain",
           "reduce": "chain", "all_to_all": "a2a", "gather": "root", "scatter": "root", "send_recv": "p2p"}
# (collective family, algorithm) -> (latency formula, bandwidth formula, source). Notation: S size
# (nccl-tests), P group, k members per domain, n = ceil(P/k) domains, a_i/a_o per-step latency
# on the scale-up/scale-out tier for the protocol, B_i = bandwidth x efficiency per GPU per
# direction, B_o = k x NIC share x efficiency (pooled), f_p protocol bandwidth fraction.
FORMULAS = {
    ("ar", "ring"): ("base + (2(P-1) - 2(n-1))·a_i + 2(n-1)·a_o  (x1.4 if n>1, Simple)",
                     "max(S·2(P-1)/P·[(k-1)/k if n>1] / B_i, S·2(P-1)/P / B_o) / f_p",
                     "Patarasuk & Yuan 2009 (ring); NCCL tuning.cc ncclTopoTuneModel/GetAlgoTime"),
    ("ar", "tree"): ("base + 2((k-1)·a_i + ceil(log2 n)·a_o)",
                     "max(S·2(k-1)/k / B_i, S·(1 if n=2 else 2) / B_o) / f_p   (f_p includes NCCL's 0.92)",
                     "Sanders et al. 2009 double binary trees; NCCL tuning.cc (tree)"),
    ("ar", "nvls"): ("inr_latency (NVLS, one domain)", "S(1 + 1/P) / (bandwidth x inr_efficiency)",
                     "NCCL NVLS (NVLink SHARP); tuning.cc hwLatencies NVLS, nvlsEfficiency"),
    ("ar", "nvls_tree"): ("inr_latency + 2·ceil(log2 n)·a_o", "max(S(1 + 1/k) / B_nvls, S·(1 if n=2 else 2) / B_o)",
                          "NCCL NVLSTree; tuning.cc"),
    ("ar", "collnet"): ("2(k-1)·a_i + inr_latency(NIC tier)", "max(S·x_i / B_i, S / (k x NIC share x inr_efficiency))",
                        "NCCL CollNet (IB SHARP); tuning.cc"),
    ("ar", "hierarchical"): ("base + 2(k-1)·a_i + 2(n-1)·a_o",
                             "2·S(k-1)/k / B_i + S·2(n-1)/n / B_o   (phases in sequence)",
                             "hierarchical all-reduce (Jia et al. 2018, arXiv:1807.11205)"),
    ("ar", "naive"): ("base + (k-1)·a_i + (P-k)·a_o", "max(S(k-1) / B_i, S·k(P-k) / B_o)   [sent per rank: S(P-1)]",
                      "direct sends to every peer (the seeds' strawman)"),
    ("agrs", "ring"): ("base + (P-n)·a_i + (n-1)·a_o", "max(S(P-1)/P·[(k-1)/k if n>1] / B_i, S(P-1)/P / B_o) / f_p",
                       "Patarasuk & Yuan 2009; NCCL tuning.cc"),
    ("agrs", "nvls"): ("inr_latency", "S(P-1)/P / (bandwidth x inr_efficiency)", "NCCL NVLS; tuning.cc"),
    ("chain", "ring"): ("base + (P-n)·a_i + (n-1)·a_o", "max(S·[(k-1)/k if n>1] / B_i, S / B_o) / f_p",
                        "pipelined chain (NCCL ring broadcast/reduce)"),
    ("a2a", "naive"): ("base + (k-1)·a_i + (P-k)·a_o", "max(S(k-1)/P / B_i, S·k(P-k)/P / B_o) / f_p",
                       "NCCL all-to-all = grouped send/recv to every peer"),
    ("root", "naive"): ("base + (k-1)·a_i + (P-k)·a_o", "max(S(P-1)/P / B_i, S(P-k)/P / B_o) / f_p",
                        "NCCL gather/scatter = send/recv with the root"),
    ("p2p", "naive"): ("base + a (a_o if the pair crosses domains, else a_i)",
                       "S / B_i, or S / (one NIC share x efficiency) across domains",
                       "point-to-point (nccl-tests sendrecv)"),
}


def explain(report: CollectiveReport, hw) -> list[dict]:
    """Terms of each available row: formula, substituted values, seconds and source."""
    fam = _FAMILY[report.collective]
    P, k, n = report.group_size, report.members_per_node, report.domains
    intra = next(iter(report.tiers.values()))
    outer = tier_params(hw.tiers[-1], report.collective)
    out = []
    for r in report.rows:
        if not r.available:
            continue
        lat_f, bw_f, src = FORMULAS[(fam, r.algorithm)]
        p = PROTOCOLS.index(r.protocol)
        values = (f"S={report.size_bytes:.4g} B, P={P}, k={k}, n={n}, protocol {PROTOCOL_NAMES[r.protocol]}: "
                  f"base={BASE_LATENCY_US[r.algorithm][p]:g} us, a_i={intra['alpha'][p] * 1e6:.3g} us, "
                  f"a_o={outer['alpha'][p] * 1e6:.3g} us, B_i={intra['beta'] / 1e9:.4g} GB/s, "
                  f"B_o={k * outer['beta'] / 1e9:.4g} GB/s, f_p={PROTO_BW[r.algorithm][p]:.3g}")
        f_i, f_o = float(intra["proto_bw"][p]), float(outer["proto_bw"][p])
        if f_i != 1.0 or f_o != 1.0:
            values += f", calibrated {PROTOCOL_NAMES[r.protocol]} factor B_i x{f_i:.3g}, B_o x{f_o:.3g}"
        if r.algorithm in ("nvls", "nvls_tree"):
            values += f", B_nvls={intra['beta_inr'] / 1e9:.4g} GB/s, inr_latency={intra['inr_latency'] * 1e6:g} us"
        out.append({"algorithm": r.algorithm, "term": "latency", "value_s": r.latency_s, "formula": lat_f,
                    "values": values, "source": src})
        out.append({"algorithm": r.algorithm, "term": "bandwidth", "value_s": r.bandwidth_s, "formula": bw_f,
                    "values": "", "source": "nccl-tests PERFORMANCE.md sizes; docs/architecture.md beta_inter = k x NIC share"})
    return out


def busbw(collective: str, size_bytes, time_s, group_size):
    """nccl-tests bus bandwidth in bytes/s: size/time x factor."""
    return np.asarray(size_bytes, dtype=float) / np.asarray(time_s, dtype=float) * bus_factor(collective, group_size)
