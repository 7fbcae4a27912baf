"""`llmpar engines` and `llmpar engines show NAME`: the shipped serving engines (docs/serving.md, Engines)."""

from __future__ import annotations

from typing import Any

import click

from llmpar.cli.common import echo_json
from llmpar.specs import registry

_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _gen(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{g} {v:g}" for g, v in value.items())
    return f"{value:g}"


def _ms(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{g} {v * 1e3:.3g} ms" for g, v in value.items())
    return f"{value * 1e3:.3g} ms"


def summary(e) -> dict[str, Any]:
    k, o, s = e.kernels, e.overhead, e.scheduler
    return {"name": e.name, "description": e.description, "version": e.version, "extends": e.extends,
            "fitted": any(x.startswith("FITTED") for x in e.fitted_on) or bool(e.calibration),
            "decode_bandwidth": k.decode_bandwidth, "gemm_efficiency": k.gemm_efficiency,
            "per_step_s": o.per_step_s, "max_num_seqs": s.max_num_seqs,
            "max_num_batched_tokens": s.max_num_batched_tokens, "memory_fraction": s.memory_fraction,
            "memory_rule": s.memory_rule, "profile": e.model_dump(mode="json")}


@click.group(name="engines", invoke_without_command=True)
@_JSON
@click.pass_context
def engines(ctx: click.Context, as_json: bool) -> None:
    """List the shipped serving engines (`--engine NAME` on serve, serve-plan, calibrate serve)."""
    if ctx.invoked_subcommand is not None:
        return
    rows = [summary(registry.load_engine(n)) for n in registry.shipped_names("engines")]
    if as_json:
        echo_json([{k: v for k, v in r.items() if k != "profile"} for r in rows])
        return
    from llmpar.cli.render import console, simple_table

    con = console()
    con.print(simple_table(("name", "version", "decode bandwidth", "prefill GEMM", "per step", "memory", "fitted"),
                           [(r["name"], r["version"], _gen(r["decode_bandwidth"]), _gen(r["gemm_efficiency"]),
                             _ms(r["per_step_s"]), f"{r['memory_fraction']:g} ({r['memory_rule']})",
                             "yes" if r["fitted"] else "prior only") for r in rows],
                           title="Shipped serving engines (docs/serving.md, Engines)"))


@engines.command("show")
@click.argument("name")
@_JSON
def show(name: str, as_json: bool) -> None:
    """Every value of one engine profile, and what it was fitted on."""
    e = registry.load_engine(name)
    r = summary(e)
    if as_json:
        echo_json(r)
        return
    from llmpar.cli.render import console

    con = console()
    con.print(f"[bold]{e.name}[/bold] {e.version}: {e.description}", highlight=False)
    for section in ("scheduler", "kernels", "overhead", "memory"):
        con.print(f"  {section}: " + ", ".join(f"{k} {v}" for k, v in r["profile"][section].items()), highlight=False)
    for x in e.sources:
        con.print(f"  source: {x}", highlight=False)
    for x in e.fitted_on:
        con.print(f"  fitted on: {x}", highlight=False)
