"""`llmpar collective`'s work (the face is :func:`llmpar.api.collective`): one collective costed
per NCCL algorithm and protocol by :mod:`llmpar.cost.collectives`, at one size or over a sweep of
sizes in nccl-tests' rows (docs/collectives.md); nothing here prints.
"""

from __future__ import annotations

from typing import Any

from llmpar.errors import UserError
from llmpar.inputs import load_hardware_spec
from llmpar.parallel import MAX_GPUS, flag, positive_int, whole
from llmpar.results import CollectiveResult, CollectiveSweepResult, num
from llmpar.units import parse_bytes


def run(collective: str, *, size, gpus, gpus_per_node, hardware, algorithm, sweep,
        explain) -> CollectiveResult | CollectiveSweepResult:
    """:func:`llmpar.api.collective`, its keywords checked."""
    from llmpar.cost import collective_params as CP
    from llmpar.cost import collectives as C

    explain = flag(explain, "explain", False)
    name = C.normalize_collective(collective)
    # None is the default; anything else is read (algorithm=False or sweep=0 had been taken as not given)
    if algorithm is not None:
        algorithm = CP.normalize_algorithm(algorithm, name)
    hw = load_hardware_spec(hardware)
    gpus, place, notes = _collective_group(hw, gpus, gpus_per_node)
    if sweep is not None and size is not None:
        raise UserError("give --size or --sweep, not both")
    if sweep is not None:
        rows = []
        for s in _sweep_sizes(sweep):
            rep = C.collective_report(hw, name, s, gpus, place["members_per_node"], algorithm=algorithm)
            r = rep.chosen_row
            count = s / _TYPE_BYTES / (gpus if rep.collective in CP.GATHERED else 1)
            rows.append({
                "size_bytes": num(s), "count": int(count), "type": "float", "redop": _REDOP.get(rep.collective, "none"),
                "root": 0 if rep.collective in _ROOTED else -1,
                "time_s": r.time_s if r else None, "algbw_GBps": r.algbw_GBps if r else None,
                "busbw_GBps": r.busbw_GBps if r else None,
                "algorithm": r.algorithm if r else None, "protocol": r.protocol if r else None,
            })
        return CollectiveSweepResult(collective=name, gpus=gpus, hardware=hw.name, **_placement(place),
                                     bus_factor=CP.bus_factor(name, gpus), algorithm=algorithm, sweep=rows,
                                     assumptions=notes)
    if size is None:
        size = "1GiB"
        notes.append("no --size: 1 GiB")
    nbytes = _whole_bytes(parse_bytes(size, "--size"), size, "--size")
    rep = C.collective_report(hw, name, nbytes, gpus, place["members_per_node"], algorithm=algorithm)
    result = CollectiveResult(
        collective=rep.collective, size_bytes=num(rep.size_bytes), gpus=gpus, hardware=hw.name, **_placement(place),
        bus_factor=rep.bus_factor, chosen=rep.chosen, chosen_protocol=rep.chosen_protocol,
        time_s=rep.chosen_row.time_s if rep.chosen_row else None,
        algorithms=[_algorithm_dict(r) for r in rep.rows], assumptions=notes,
        explain=C.explain(rep, hw) if explain else None,
    )
    if algorithm is not None and result.chosen is None:
        raise UserError(
            f"algorithm {algorithm!r} cannot run {name} over {gpus} GPUs with {place['members_per_node']} per node "
            f"on {hw.name}: " + next(a["unavailable_because"] for a in result.algorithms if a["algorithm"] == algorithm)
        )
    return result


_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "reduce": "sum"}
_ROOTED = ("broadcast", "reduce", "gather", "scatter")
_TYPE_BYTES = 4  # nccl-tests default type: float


# the largest message priced: 1 PiB, a thousand times a 405B model's bf16 weights (0.81 TB) gathered
# at once; beyond it a size is a typing slip (reliability re-check 2026-12-03: --size 1e30 printed a
# 2.4e18 s all-gather)
MAX_MESSAGE_BYTES = 2.0**50


def _whole_bytes(nbytes: float, given, option: str) -> float:
    """A message is a whole number of bytes, at least one (reliability review, item 25: 1.5 B was
    reported as 2 B and 1e-3 as 0 B, and priced), and at most MAX_MESSAGE_BYTES."""
    if nbytes < 1 or nbytes != int(nbytes):
        raise UserError(f"{option} {given}: a message is a whole number of bytes, at least 1 (got {nbytes:g} B)")
    if nbytes > MAX_MESSAGE_BYTES:
        raise UserError(f"{option} {given}: a message of at most 1 PiB is priced (got {nbytes:.3g} B)")
    return nbytes


def _sweep_sizes(text: str) -> list[float]:
    parts = str(text).split(":")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise UserError(f"--sweep expects A:B (e.g. 1KiB:8GiB), got {text!r}")
    lo = _whole_bytes(parse_bytes(parts[0], "--sweep start"), parts[0].strip(), "--sweep")
    hi = _whole_bytes(parse_bytes(parts[1], "--sweep end"), parts[1].strip(), "--sweep")
    if lo > hi:
        raise UserError(f"--sweep start {parts[0].strip()} is larger than its end {parts[1].strip()}")
    sizes = []
    s = lo
    while s <= hi * (1 + 1e-12):
        sizes.append(s)
        s *= 2
    return sizes


def _collective_group(hw, gpus: int | None, per_node: int | None) -> tuple[int, dict, list[str]]:
    """Check gpus/gpus_per_node and place the group by the rule ``step`` and ``plan`` use
    (:func:`llmpar.cost.topology.collective_group`)."""
    from llmpar.cost.topology import collective_group

    notes: list[str] = []
    domain = hw.nvlink_domain
    if gpus is None:
        gpus = hw.gpus_per_node
        notes.append(f"no --gpus: one node of {hw.name} ({gpus} GPUs)")
    gpus = whole(gpus, "gpus")
    if gpus < 2:
        raise UserError(f"--gpus must be at least 2 for a collective, got {gpus}")
    if gpus > MAX_GPUS:
        raise UserError(f"--gpus {gpus} is beyond what llmpar models (at most {MAX_GPUS:,})")
    if per_node is not None:
        per_node = positive_int(per_node, "gpus-per-node")
        if per_node > domain:
            raise UserError(
                f"--gpus-per-node {per_node} is larger than the {domain}-GPU NVLink domain of {hw.name}"
            )
        if per_node > gpus:
            raise UserError(f"--gpus-per-node {per_node} is larger than the group (--gpus {gpus})")
        if gpus % per_node:
            raise UserError(f"--gpus {gpus} is not a multiple of --gpus-per-node {per_node}")
    place = collective_group(hw, gpus, per_node)
    k = place["members_per_node"]
    fill = hw.placement_domain     # the GPUs of a domain a job fills (job_domain), as step and plan place ranks
    if per_node is None and place["crosses_nodes"] and gpus % fill:
        notes.append(f"{gpus} consecutive ranks fill {place['domains']} domains of {fill} unevenly "
                     f"({gpus - (place['domains'] - 1) * fill} in the last): the smallest part, "
                     f"k = {k} per domain, sets the NIC pace, as in step and plan")
    elif per_node is not None and domain % per_node:
        notes.append(f"--gpus-per-node {per_node} does not divide the {domain}-GPU domain: "
                     f"taken as stated, {per_node} per domain")
    return gpus, place, notes


def _algorithm_dict(r) -> dict[str, Any]:
    return {
        "algorithm": r.algorithm, "protocol": r.protocol, "time_s": r.time_s if r.available else None,
        "bytes_per_rank": r.bytes_per_rank, "algbw_GBps": r.algbw_GBps if r.available else None,
        "busbw_GBps": r.busbw_GBps if r.available else None, "tiers": r.tiers if r.available else [],
        "available": r.available, "nccl_choice": r.nccl,
        "latency_s": r.latency_s if r.available else None, "bandwidth_s": r.bandwidth_s if r.available else None,
        **({} if r.available else {"unavailable_because": r.unavailable_because}),
    }


def _placement(place: dict) -> dict[str, Any]:
    return {"members_per_node": place["members_per_node"], "nodes": place["domains"],
            "crosses_nodes": place["crosses_nodes"], "tiers": place["tiers"]}
