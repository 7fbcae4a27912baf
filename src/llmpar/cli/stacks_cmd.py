"""`llmpar stacks` and `llmpar stacks show NAME`: the shipped framework profiles (docs/stacks.md)."""

from __future__ import annotations

from typing import Any

import click

from llmpar.cli.common import echo_json
from llmpar.specs import registry
from llmpar.specs.stack import GENERATIONS, Stack

_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _gen_text(value) -> str:
    if isinstance(value, dict):
        order = [g for g in ("default", *GENERATIONS) if g in value]
        return ", ".join(f"{g} {value[g]:g}" for g in order)
    return f"{value:g}"


def stack_summary(st: Stack, aliases: list[str] | None = None) -> dict[str, Any]:
    """One stack as the JSON of `llmpar stacks` (a row) and `stacks show` (the whole profile)."""
    return {
        "name": st.name, "aliases": aliases or [], "description": st.description, "extends": st.extends,
        "attention_kernel": st.kernels.attention.kernel, "tp_overlap": st.overlap.tp, "dp_overlap": st.overlap.dp,
        "activations": st.memory.activations, "main_grad_fp32": st.memory.main_grad_fp32,
        "fitted": bool(st.fitted_on or st.calibration),
        "profile": st.model_dump(mode="json"),
    }


def _aliases() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, (canon, _) in registry.spec_index("stacks").items():
        if key != canon:
            out.setdefault(canon, []).append(key)
    return out


@click.group(name="stacks", invoke_without_command=True)
@_JSON
@click.pass_context
def stacks(ctx: click.Context, as_json: bool) -> None:
    """List the shipped framework profiles (stacks); `stacks show NAME` for one."""
    if ctx.invoked_subcommand is not None:
        return
    aliases = _aliases()
    rows = [stack_summary(registry.load_stack(n), aliases.get(n, [])) for n in registry.shipped_names("stacks")]
    if as_json:
        echo_json([{k: v for k, v in r.items() if k != "profile"} for r in rows])
        return
    from rich.table import Table

    from llmpar.cli.render import console

    table = Table(title="Shipped stacks (what the software achieves; `--stack NAME` on memory, step, plan)")
    table.add_column("name", no_wrap=True)   # the name is what `--stack` takes: never cut it
    for col in ("aliases", "attention", "GEMM fraction", "tp / dp overlap", "activations", "fitted"):
        table.add_column(col)
    for r in rows:
        st = registry.load_stack(r["name"])
        table.add_row(r["name"], ", ".join(r["aliases"]), r["attention_kernel"], _gen_text(st.kernels.gemm_efficiency),
                      f"{r['tp_overlap']:g} / {r['dp_overlap']:g}", r["activations"], "yes" if r["fitted"] else "no")
    con = console()
    con.print(table)
    con.print("default: megatron-core. `llmpar stacks show NAME` prints every value with its meaning; "
              "`--stack path.yaml` uses your own (it may `extends:` a shipped one); "
              "`llmpar calibrate runs` fits one to your runs.")


def _rows(obj, prefix: str = ""):
    """(dotted field, value text, description) for every leaf of a stack section."""
    for name, info in type(obj).model_fields.items():
        value = getattr(obj, name)
        key = f"{prefix}{name}"
        if hasattr(type(value), "model_fields"):
            yield from _rows(value, key + ".")
        else:
            text = _gen_text(value) if isinstance(value, (int, float, dict)) and not isinstance(value, bool) else str(value)
            yield key, text, info.description or ""


@stacks.command("show")
@click.argument("name")
@_JSON
def stacks_show(name: str, as_json: bool) -> None:
    """Print one stack: every value, its meaning, sources and what it was fitted on (NAME or YAML path)."""
    st = registry.load_stack(name)
    result = stack_summary(st, _aliases().get(st.name, []))
    if as_json:
        echo_json(result)
        return
    from rich.table import Table

    from llmpar.cli.render import console

    con = console()
    con.print(f"[bold]{st.name}[/bold] - {st.description}" + (f"  (extends {st.extends})" if st.extends else ""))
    table = Table(show_header=True)
    for col in ("setting", "value", "meaning"):
        table.add_column(col)
    fields = type(st).model_fields
    for key in ("zero_stages", "schedules"):   # what the framework implements: the planner searches only these
        table.add_row(key, ", ".join(str(x) for x in getattr(st, key)), fields[key].description or "")
    for key in ("moe_folding", "activation_offloading", "param_offloading"):
        v = getattr(st, key)
        table.add_row(key, v if isinstance(v, str) else ("yes" if v else "no"), fields[key].description or "")
    for section in ("kernels", "overlap", "network", "memory", "fixed"):
        for key, text, desc in _rows(getattr(st, section), section + "."):
            table.add_row(key, text, desc)
    con.print(table)
    for title, items in (("sources", st.sources), ("fitted on", st.fitted_on)):
        if items:
            con.print(f"{title}:")
            for item in items:
                con.print(f"  - {item}", highlight=False)
    if st.calibration:
        con.print("calibration record: " + ", ".join(f"{k}" for k in st.calibration), highlight=False)
