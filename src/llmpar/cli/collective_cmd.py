"""`llmpar collective`: time, algbw and busbw of one collective, per algorithm, as NCCL would pick.

The numbers come from :mod:`llmpar.cost.collectives` (``collective_report``); this module only
checks the input, builds the result dict (the JSON contract) and renders it.
"""

from __future__ import annotations

from typing import Any

import click

from llmpar.cli.common import echo_json
from llmpar.errors import UserError
from llmpar.units import fmt_seconds, fmt_size, parse_bytes

_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "reduce": "sum"}
_ROOTED = ("broadcast", "reduce", "gather", "scatter")
_TYPE_BYTES = 4  # nccl-tests default type: float


def _sweep_sizes(text: str) -> list[float]:
    parts = str(text).split(":")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise UserError(f"--sweep expects A:B (e.g. 1KiB:8GiB), got {text!r}")
    lo = parse_bytes(parts[0], "sweep start")
    hi = parse_bytes(parts[1], "sweep end")
    if lo > hi:
        raise UserError(f"--sweep start {parts[0].strip()} is larger than its end {parts[1].strip()}")
    sizes = []
    s = lo
    while s <= hi * (1 + 1e-12):
        sizes.append(s)
        s *= 2
    return sizes


def _group(hw, gpus: int | None, per_node: int | None, collective: str) -> tuple[int, dict, list[str]]:
    """Check --gpus/--gpus-per-node and place the group by the rule ``step`` and ``plan`` use
    (:func:`llmpar.cost.topology.collective_group`)."""
    from llmpar.cost.topology import collective_group

    notes: list[str] = []
    domain = hw.nvlink_domain
    if gpus is None:
        gpus = hw.gpus_per_node
        notes.append(f"no --gpus: one node of {hw.name} ({gpus} GPUs)")
    if gpus < 2:
        raise UserError(f"--gpus must be at least 2 for a collective, got {gpus}")
    if per_node is not None:
        if per_node < 1:
            raise UserError(f"--gpus-per-node must be a positive integer, got {per_node}")
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
    if per_node is None and place["crosses_nodes"] and gpus % domain:
        notes.append(f"{gpus} consecutive ranks fill {place['domains']} domains of {domain} unevenly "
                     f"({gpus - (place['domains'] - 1) * domain} in the last): the smallest part, "
                     f"k = {k} per domain, sets the NIC pace, as in step and plan")
    elif per_node is not None and domain % per_node:
        notes.append(f"--gpus-per-node {per_node} does not divide the {domain}-GPU domain: "
                     f"taken as stated, {per_node} per domain")
    return gpus, place, notes


def _int_if_whole(x: float):
    return int(x) if float(x).is_integer() else x


def _row_dict(r) -> dict[str, Any]:
    return {
        "algorithm": r.algorithm, "protocol": r.protocol, "time_s": r.time_s if r.available else None,
        "bytes_per_rank": r.bytes_per_rank, "algbw_GBps": r.algbw_GBps if r.available else None,
        "busbw_GBps": r.busbw_GBps if r.available else None, "tiers": r.tiers if r.available else [],
        "available": r.available, "nccl_choice": r.nccl,
        "latency_s": r.latency_s if r.available else None, "bandwidth_s": r.bandwidth_s if r.available else None,
        **({} if r.available else {"unavailable_because": r.unavailable_because}),
    }


def _placement_dict(place: dict) -> dict[str, Any]:
    return {"members_per_node": place["members_per_node"], "nodes": place["domains"],
            "crosses_nodes": place["crosses_nodes"], "tiers": place["tiers"]}


def build_single(hw, collective: str, size: float, gpus: int, place: dict, algorithm: str | None,
                 notes: list[str], explain: bool = False) -> dict[str, Any]:
    from llmpar.cost import collectives as C

    rep = C.collective_report(hw, collective, size, gpus, place["members_per_node"], algorithm=algorithm)
    out = {
        "collective": rep.collective, "size_bytes": _int_if_whole(rep.size_bytes), "gpus": gpus, "hardware": hw.name,
        **_placement_dict(place), "bus_factor": rep.bus_factor,
        "chosen": rep.chosen, "chosen_protocol": rep.chosen_protocol,
        "time_s": rep.chosen_row.time_s if rep.chosen_row else None,
        "algorithms": [_row_dict(r) for r in rep.rows],
        "assumptions": notes,
    }
    if explain:
        out["explain"] = C.explain(rep, hw)
    return out


def build_sweep(hw, collective: str, sizes: list[float], gpus: int, place: dict, algorithm: str | None,
                notes: list[str]) -> dict[str, Any]:
    from llmpar.cost import collectives as C

    per_node = place["members_per_node"]
    rows = []
    for s in sizes:
        rep = C.collective_report(hw, collective, s, gpus, per_node, algorithm=algorithm)
        r = rep.chosen_row
        count = s / _TYPE_BYTES / (gpus if rep.collective in C.GATHERED else 1)
        rows.append({
            "size_bytes": _int_if_whole(s), "count": int(count), "type": "float", "redop": _REDOP.get(rep.collective, "none"),
            "root": 0 if rep.collective in _ROOTED else -1,
            "time_s": r.time_s if r else None, "algbw_GBps": r.algbw_GBps if r else None,
            "busbw_GBps": r.busbw_GBps if r else None,
            "algorithm": r.algorithm if r else None, "protocol": r.protocol if r else None,
        })
    return {
        "collective": C.normalize_collective(collective), "gpus": gpus, "hardware": hw.name, **_placement_dict(place),
        "bus_factor": C.bus_factor(collective, gpus), "algorithm": algorithm, "sweep": rows,
        "assumptions": notes,
    }


@click.command("collective")
@click.argument("collective_name", metavar="COLLECTIVE")
@click.option("--size", help="Message size, nccl-tests convention (all-gather/reduce-scatter: the whole array), e.g. 1GiB.")
@click.option("--gpus", type=int, help="GPUs in the group (default: one node).")
@click.option("--gpus-per-node", "per_node", type=int,
              help="Group members per node / NVLink domain (default: consecutive ranks filling whole domains, "
                   "as step and plan place a data-parallel group; an uneven last domain sets k).")
@click.option("--hardware", default="h100-sxm", show_default=True, help="Profile name or YAML path.")
@click.option("--algorithm", help="Force one algorithm: naive, ring, tree, nvls, nvls_tree, collnet, hierarchical.")
@click.option("--sweep", help="Size range A:B, doubling (nccl-tests layout), e.g. 1KiB:8GiB.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--explain", is_flag=True, help="Print each algorithm's latency and bandwidth terms with their sources.")
def collective(collective_name, size, gpus, per_node, hardware, algorithm, sweep, as_json, explain):
    """Cost one COLLECTIVE (all-reduce, all-gather, reduce-scatter, all-to-all, broadcast, reduce,
    gather, scatter, send-recv) per algorithm and protocol, and the one NCCL would pick.

    \b
    Example: llmpar collective all-reduce --size 1GiB --gpus 16 --hardware h100-sxm
             llmpar collective all-gather --gpus 8 --sweep 1KiB:8GiB
    """
    from llmpar.cost import collectives as C
    from llmpar.specs.registry import load_hardware

    name = C.normalize_collective(collective_name)
    if algorithm:
        algorithm = C.normalize_algorithm(algorithm, name)
    hw = load_hardware(hardware)
    gpus, place, notes = _group(hw, gpus, per_node, name)
    if sweep and size:
        raise UserError("give --size or --sweep, not both")
    if sweep:
        result = build_sweep(hw, name, _sweep_sizes(sweep), gpus, place, algorithm, notes)
        if as_json:
            echo_json(result)
        else:
            _render_sweep(result)
        return
    if size is None:
        size = "1GiB"
        notes.append("no --size: 1 GiB")
    nbytes = parse_bytes(size, "size")
    result = build_single(hw, name, nbytes, gpus, place, algorithm, notes, explain=explain)
    if algorithm and result["chosen"] is None:
        raise UserError(
            f"algorithm {algorithm!r} cannot run {name} over {gpus} GPUs with {place['members_per_node']} per node "
            f"on {hw.name}: " + next(a["unavailable_because"] for a in result["algorithms"] if a["algorithm"] == algorithm)
        )
    if as_json:
        echo_json(result)
    else:
        _render_single(result)


# ----------------------------------------------------------------------------- rendering

def _gbps(x) -> str:
    return "-" if x is None else f"{x:,.2f}"


def _render_single(res: dict[str, Any]) -> None:
    from rich.text import Text

    from llmpar.cli.render import console, header, print_assumptions, simple_table

    con = console()
    con.print(header(f"{res['collective']} of {fmt_size(res['size_bytes'])}", [
        ("GPUs", res["gpus"]), ("per node", res["members_per_node"]), ("nodes", res["nodes"]),
        ("hardware", res["hardware"]), ("busbw factor", f"{res['bus_factor']:.4g}"),
    ]))
    print_assumptions(con, res["assumptions"])
    rows = []
    for a in res["algorithms"]:
        mark = "*" if a["algorithm"] == res["chosen"] else ""
        if not a["available"]:
            note = "n/a: " + a.get("unavailable_because", "")
        elif not a["nccl_choice"]:
            note = "reference only"
        else:
            note = ""
        rows.append([
            f"{mark}{a['algorithm']}", C_PROTO.get(a["protocol"], "-"),
            fmt_seconds(a["time_s"]) if a["time_s"] is not None else "-",
            _gbps(a["algbw_GBps"]), _gbps(a["busbw_GBps"]), fmt_size(a["bytes_per_rank"]) if a["available"] else "-",
            ", ".join(a["tiers"]) or "-", note,
        ])
    con.print(simple_table(
        ["algorithm", "protocol", "time", "algbw GB/s", "busbw GB/s", "sent/rank", "tiers", "note"], rows,
        right=["time", "algbw GB/s", "busbw GB/s", "sent/rank"],
    ))
    if res["chosen"]:
        ch = next(a for a in res["algorithms"] if a["algorithm"] == res["chosen"])
        line = Text()
        line.append("chosen ", style="bold")
        line.append(f"{res['chosen']} / {C_PROTO[res['chosen_protocol']]}: {fmt_seconds(ch['time_s'])}, "
                    f"busbw {ch['busbw_GBps']:,.1f} GB/s (GB = 1e9; sizes in GiB = 2^30)")
        con.print(line)
    by = {a["algorithm"]: a for a in res["algorithms"]}
    if "naive" in by and "ring" in by and res["collective"] == "all_reduce":
        n, r = by["naive"]["bytes_per_rank"], by["ring"]["bytes_per_rank"]
        con.print(f"naive vs ring, bytes SENT per rank: D(P-1) = {fmt_size(n)} vs 2D(P-1)/P = {fmt_size(r)} "
                  f"({n / r:.1f}x); the seeds' \"2DP\" counts sent + received.", highlight=False)
    if "explain" in res:
        from rich.table import Table

        t = Table(title="terms (a: per-step latency; B: bandwidth per GPU per direction; f_p: protocol fraction)",
                  title_justify="left", header_style="bold")
        for col in ("algorithm", "term", "seconds", "formula", "values", "source"):
            t.add_column(col, justify="right" if col == "seconds" else "left")
        for e in res["explain"]:
            t.add_row(e["algorithm"], e["term"], fmt_seconds(e["value_s"]), e["formula"], e["values"], e["source"])
        con.print(t)


C_PROTO = {"ll": "LL", "ll128": "LL128", "simple": "Simple", None: "-"}


def _render_sweep(res: dict[str, Any]) -> None:
    """The nccl-tests layout: size, count, type, redop, root, time (us), algbw, busbw (GB/s)."""
    out = [f"# llmpar model of {res['collective']}: {res['gpus']} GPUs, {res['members_per_node']} per node, "
           f"{res['nodes']} node(s), {res['hardware']}" + (f", algorithm {res['algorithm']}" if res["algorithm"] else "")]
    for note in res["assumptions"]:
        out.append(f"# assumed: {note}")
    out.append("#")
    out.append(f"#{'size':>11s} {'count':>12s} {'type':>6s} {'redop':>6s} {'root':>6s} {'time':>10s} "
               f"{'algbw':>8s} {'busbw':>8s}  algorithm/protocol")
    out.append(f"#{'(B)':>11s} {'(elements)':>12s} {'':>6s} {'':>6s} {'':>6s} {'(us)':>10s} "
               f"{'(GB/s)':>8s} {'(GB/s)':>8s}")
    for r in res["sweep"]:
        t = "-" if r["time_s"] is None else f"{r['time_s'] * 1e6:.2f}"
        out.append(f"{int(r['size_bytes']):>12d} {r['count']:>12d} {r['type']:>6s} {r['redop']:>6s} {r['root']:>6d} "
                   f"{t:>10s} {_gbps(r['algbw_GBps']):>8s} {_gbps(r['busbw_GBps']):>8s}  "
                   f"{r['algorithm']}/{C_PROTO[r['protocol']]}")
    click.echo("\n".join(out))
