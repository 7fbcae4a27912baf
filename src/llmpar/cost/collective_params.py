"""The collective model's constants and parameters: NCCL's tables, the algorithm names, bus factors.

What :mod:`llmpar.cost.collectives` and the per-algorithm formulas (cost/collective_algos.py)
are written with: the algorithms each collective has and which NCCL can choose, NCCL's base and
per-hop latencies and protocol bandwidth fractions (``src/graph/tuning.cc``), nccl-tests' busbw
factor, and one tier's resolved parameters (``tier_params``; the scale-up tier a group uses,
``intra_params``). docs/collectives.md gives every constant with its source.
"""

from __future__ import annotations

import numpy as np

from llmpar.errors import UserError, suggest
from llmpar.specs.collective_names import normalize_collective

#: collectives whose nccl-tests ``size`` counts every rank's piece (size = count x typesize x ranks;
#: nccl-tests ``paramcount`` is per rank): the size convention of this module and of the logs
GATHERED = frozenset({"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"})
ALGORITHMS = ("naive", "ring", "tree", "nvls", "nvls_tree", "collnet", "hierarchical")
PROTOCOLS = ("ll", "ll128", "simple")
PROTOCOL_NAMES = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}

# Which algorithms exist for which collective (NCCL tuning.cc skips the others), and which of
# them NCCL itself can choose. "naive" is direct point-to-point: for all-to-all, gather, scatter
# and send/recv that IS what NCCL runs; for all-reduce it is the seeds' strawman.
ALGOS_FOR = {
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
NCCL_CHOICES = {
    c: tuple(a for a in algos if a != "hierarchical" and not (c == "all_reduce" and a == "naive"))
    for c, algos in ALGOS_FOR.items()
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
    if collective is not None and key not in ALGOS_FOR[collective]:
        raise UserError(
            f"algorithm {key!r} is not available for {collective}; "
            f"available: {', '.join(ALGOS_FOR[collective])}"
        )
    return key


def algorithms_for(collective: str) -> tuple[str, ...]:
    return ALGOS_FOR[normalize_collective(collective)]


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


def intra_params(hw, k, collective: str | None = None):
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
