"""`llmpar collective`: time, algbw and busbw of one collective, per algorithm, as NCCL would pick.

The numbers come from :func:`llmpar.api.collective` (input checks, placement, and
:mod:`llmpar.cost.collectives`' ``collective_report``), the function ``llmpar.collective`` is;
this module only renders its result (``to_dict()`` is the JSON contract).
"""

from __future__ import annotations

from typing import Any

import click

from llmpar.cli.common import echo_json
from llmpar.units import fmt_seconds, fmt_size
from llmpar.specs.registry import DEFAULT_HARDWARE


@click.command("collective")
@click.argument("collective_name", metavar="COLLECTIVE")
@click.option("--size", help="Message size, nccl-tests convention (all-gather/reduce-scatter: the whole array), e.g. 1GiB.")
@click.option("--gpus", type=int, help="GPUs in the group (default: one node).")
@click.option("--gpus-per-node", "per_node", type=int,
              help="Group members per node / NVLink domain (default: consecutive ranks filling whole domains, "
                   "as step and plan place a data-parallel group; an uneven last domain sets k).")
@click.option("--hardware", default=DEFAULT_HARDWARE, show_default=True, help="Profile name or YAML path.")
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
    from llmpar import api

    result = api.collective(collective_name, size=size, gpus=gpus, gpus_per_node=per_node, hardware=hardware,
                            algorithm=algorithm, sweep=sweep, explain=explain)
    if as_json:
        echo_json(result.to_dict())
    elif sweep:
        _render_sweep(result.to_dict())
    else:
        _render_single(result.to_dict())


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
