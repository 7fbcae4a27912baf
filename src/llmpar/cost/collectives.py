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
(``Tier.collectives``). Everything else is NCCL's constants.

Here: the time NCCL's choice takes (``collective_time``), the row-per-algorithm report and its
``--explain`` terms. NCCL's constants, the algorithm names, bus factors and a tier's resolved
parameters are in cost/collective_params.py; each algorithm's formulas in cost/collective_algos.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from llmpar.cost.collective_algos import algorithm_table, group_shape
from llmpar.cost.collective_params import (
    ALGOS_FOR, BASE_LATENCY_US, NCCL_CHOICES, PROTO_BW, PROTOCOL_NAMES, PROTOCOLS, bus_factor, intra_params,
    normalize_algorithm, tier_params,
)
from llmpar.specs.collective_names import COLLECTIVES, normalize_collective  # noqa: F401 (the names' home)


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
    names = (normalize_algorithm(algorithm, c),) if algorithm else NCCL_CHOICES[c]
    table = algorithm_table(hw, c, size_bytes, group_size, members_per_node, only=names)
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
    S, P, k, n = group_shape(hw, size_bytes, group_size, members_per_node)
    table = algorithm_table(hw, c, size_bytes, group_size, members_per_node)
    ti = intra_params(hw, k, c)
    to = tier_params(hw.tiers[-1], c)
    factor = bus_factor(c, float(P))
    rows = []
    for a in ALGOS_FOR[c]:
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
            tiers=tiers, available=avail, nccl=a in NCCL_CHOICES[c],
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
    """Why ``algorithm`` cannot run for a group: the availability masks of
    :func:`llmpar.cost.collective_algos.algorithm_table` in words.

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
