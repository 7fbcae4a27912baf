"""Where one parsed nccl-tests table sits on a hardware profile (split from ``fit``).

:func:`place` gives the group shape a log measures - ranks, members per scale-up domain, the tier
it fixes - with its usable rows; :func:`predict` is the model's time for them, through
:func:`llmpar.cost.collectives.collective_time` (no second copy of the time formula here), and
:func:`error_summary` the median and maximum |error| by size band. Used by
:mod:`llmpar.calibrate.fit` and :mod:`llmpar.calibrate.check` alike (docs/calibration.md).

Nothing here prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from llmpar.cost.collectives import collective_time
from llmpar.errors import UserError

MIB = float(1 << 20)
SIZE_BANDS = {"ge_1MB": MIB, "ge_64MB": 64 * MIB}   # 1 MB and 64 MB as nccl-tests' powers of two


@dataclass
class Placement:
    """One parsed table, placed on the profile: which group shape and which tiers it measures."""

    file: str
    label: str                      # file, plus the table number when a file holds several
    collective: str
    ranks: int
    nodes: int
    members_per_node: int           # k: group members per scale-up domain (llmpar.cost.collectives)
    domains: int                    # scale-up domains the group spans
    intra_tier: str                 # the scale-up tier the group uses inside a domain
    tier: str                       # the tier this log fixes: intra_tier, or the scale-out tier
    sizes: np.ndarray
    times: np.ndarray               # seconds, out-of-place block (in-place where only that exists)
    notes: list[str] = field(default_factory=list)
    algorithm: str | None = None    # the algorithm the log was forced to (NCCL_ALGO); None = NCCL's choice

    @property
    def multi_domain(self) -> bool:
        return self.domains > 1


def _gpu_family(name: str) -> str:
    """'H100-SXM5-80GB' -> 'H100' (the token that names the chip)."""
    return str(name).upper().replace("NVIDIA", "").strip().split("-")[0].split()[0] if str(name).strip() else ""


def _samples(log) -> tuple[np.ndarray, np.ndarray, list[str]]:
    notes: list[str] = []
    sizes, times = [], []
    dropped = 0
    for r in log.usable_rows():
        m = r.measurement("out_of_place")
        t = m.time_s
        if m.cputime:
            # -C 1: the time column is CPU time; algbw was computed from the GPU time
            if m.algbw_GBps >= 10.0:
                t = r.size_bytes / (m.algbw_GBps * 1e9)
            else:
                dropped += 1
                continue
        sizes.append(float(r.size_bytes))
        times.append(t)
    if dropped:
        notes.append(f"{dropped} rows with CPU time (-C 1) and algbw < 10 GB/s skipped: GPU time not recoverable")
    if log.flagged_rows:
        notes.append(f"{len(log.flagged_rows)} rows flagged #wrong > 0 not used")
    return np.asarray(sizes), np.asarray(times), notes


def place(log, hw, algorithm: str | None = None, strict_gpu: bool = False) -> Placement:
    """Group shape of a parsed log on ``hw``: ranks, members per scale-up domain, tier fixed.

    Nodes map to scale-up domains through the profile: ``nvlink_domain / gpus_per_node`` nodes per
    domain (1 on a DGX, 18 on GB200 NVL72), so 8 GB200 GPUs on 2 trays are one NVLink domain.
    ``algorithm``: the log was measured with ``NCCL_ALGO=<it>``; the model is then held to it.
    ``strict_gpu``: a log of another GPU is refused (a fit), not noted (a check).
    """
    label = log.file + (f" (table {log.section + 1})" if log.section else "")
    if not log.collective:
        raise UserError(f"{label}: cannot tell which collective this log measures; pass --collective")
    if not log.ranks:
        raise UserError(f"{label}: cannot tell the number of ranks; pass --ranks")
    if log.ranks < 2:
        raise UserError(f"{label}: {log.ranks} rank: no link is crossed, nothing to fit or check")
    notes: list[str] = []
    nodes = log.nodes
    if not nodes:
        nodes = max(1, math.ceil(log.ranks / hw.gpus_per_node))
        notes.append(f"node count not in the log: assuming {nodes} ({hw.gpus_per_node} GPUs per node of {hw.name}); "
                     "pass --nodes")
    if log.ranks > nodes * hw.gpus_per_node:
        # more ranks a node than the profile's node holds (reliability review, item 9)
        raise UserError(f"{label}: {log.ranks} ranks on {nodes} node(s) is {math.ceil(log.ranks / nodes)} a node, but a "
                        f"{hw.name} node holds {hw.gpus_per_node} GPUs; check --ranks/--nodes or --hardware")
    if log.gpu and _gpu_family(hw.gpu.name) and _gpu_family(hw.gpu.name) not in str(log.gpu).upper():
        if strict_gpu:
            # a fit writes the log's network into the profile: another GPU's cluster is another
            # profile (newcomer review, §4: an H100 log fitted onto mi300x with a trailing note)
            raise UserError(f"{label}: the log ran on {log.gpu!r}, not {hw.name}'s {hw.gpu.name!r}: a fit would write "
                            "that cluster's network into this profile; use --hardware of the log's GPU (`llmpar "
                            "hardware`), or --gpu NAME if the log names its GPU wrongly")
        notes.append(f"log GPU {log.gpu!r} is not the profile's {hw.gpu.name!r}")
    domain = hw.nvlink_domain
    nodes_per_domain = max(1, domain // hw.gpus_per_node)
    domains = max(math.ceil(nodes / nodes_per_domain), math.ceil(log.ranks / domain))
    k = max(1, math.ceil(log.ranks / domains))
    inner = hw.tiers[:-1] or hw.tiers[-1:]
    intra = next((t for t in inner if t.domain_size is None or k <= t.domain_size), inner[-1])
    tier = hw.tiers[-1] if domains > 1 else intra
    if algorithm is not None:   # "" is a typo, refused by normalize_algorithm, not "none given"
        from llmpar.cost.collective_params import normalize_algorithm

        algorithm = normalize_algorithm(algorithm, log.collective)
    sizes, times, more = _samples(log)
    if sizes.size == 0:
        raise UserError(f"{label}: no usable rows (all flagged, empty or zero-sized)")
    pl = Placement(file=log.file, label=label, collective=log.collective, ranks=int(log.ranks), nodes=int(nodes),
                   members_per_node=int(k), domains=int(domains), intra_tier=intra.name, tier=tier.name,
                   sizes=sizes, times=times, notes=notes + more, algorithm=algorithm)
    if algorithm and not np.all(np.isfinite(predict(hw, pl, sizes[:1]))):
        raise UserError(f"{label}: algorithm {algorithm} is not available to {log.collective} over {pl.ranks} GPUs "
                        f"({pl.members_per_node} per domain) on {hw.name}")
    return pl


def predict(hw, pl: Placement, sizes=None):
    """Model time (s) of the placement's rows on ``hw`` (through cost.collectives)."""
    s = pl.sizes if sizes is None else sizes
    return np.asarray(collective_time(hw, pl.collective, s, pl.ranks, pl.members_per_node, algorithm=pl.algorithm),
                      dtype=float)


def error_summary(sizes, errors) -> dict[str, float | None]:
    """Median and maximum |error| for sizes >= 1 MB and >= 64 MB (None where no row qualifies)."""
    sizes = np.asarray(sizes, dtype=float)
    err = np.abs(np.asarray(errors, dtype=float))
    out: dict[str, float | None] = {}
    for band, lo in SIZE_BANDS.items():
        sel = err[sizes >= lo]
        out[f"median_abs_error_{band}"] = float(np.median(sel)) if sel.size else None
        out[f"max_abs_error_{band}"] = float(np.max(sel)) if sel.size else None
    return out
