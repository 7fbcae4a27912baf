"""`llmpar sweep`: plan a list of GPU counts on one or more hardware profiles, with the time,
GPU-hours, energy and cost to train a token budget.

Numbers come from :func:`llmpar.planner.sweep.sweep` (each row is `llmpar plan`'s #1 at that count;
time/energy/cost from :mod:`llmpar.cost.training`); this module renders them as a rich table,
JSON or CSV. The layout and precision options are `llmpar plan`'s own option objects, so both
commands read them the same way.
"""

from __future__ import annotations

import click

from llmpar.cli.common import (guard_outputs, complete_hardware, complete_model, echo_json, html_option, overlap_options,
                               plot_option, precision_options)
from llmpar.cli.sweep_table import deadline_lines, implausible_lines, legend, sweep_table
from llmpar.cli.training import fmt_tokens, training_options
from llmpar.errors import CheckFailed, UserError

# `llmpar plan`'s options that do not apply to a sweep (it plans its own counts and keeps #1 by time)
_NOT_FROM_PLAN = {"hardware", "gpus", "top", "objective", "pareto", "explain_rank", "min_gpus"}   # a sweep sets the counts


def _plan_options(f):
    """Attach `llmpar plan`'s layout options (the fixes: --seq, --global-batch, --tp ... --virtual-stages)
    and --fix/--allow/--max-tp: the same click Option definitions, so names, types and help stay in
    step with `plan`."""
    from llmpar.cli import plan_cmd

    def probe():
        pass

    for opt in plan_cmd._LAYOUT + plan_cmd._SEARCH:
        opt(probe)            # each appends its Option: probe's list is in declaration order
    params = [p for p in probe.__click_params__ if p.name not in _NOT_FROM_PLAN]
    # click.command reverses __click_params__ (decorators apply bottom-up): append in reverse
    f.__dict__.setdefault("__click_params__", []).extend(reversed(params))
    return f


@click.command("sweep")
@click.argument("model", required=False, shell_complete=complete_model)
@click.option("--gpus", "gpus", required=True, metavar="N,N,...",
              help="GPU counts to plan, e.g. 256,512,1024 or 256,512,...,16384 (the ratio of the first two, up to "
                   "the last).")
@click.option("--hardware", "hardware", default=None, metavar="NAME[,NAME]", shell_complete=complete_hardware,
              help="Hardware profiles, comma-separated (shipped names or YAML paths; default h100-sxm).")
@_plan_options
@precision_options
@click.option("--hf", "hf", metavar="CONFIG_JSON", help="Read the model from a Hugging Face config.json.")
@overlap_options
@training_options
@click.option("--deadline", default=None, metavar="T",
              help="With --tokens: the smallest swept count per profile that trains the budget within T (90d, 12w, "
                   "2160h), with failures and checkpoints.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the rows as CSV (nested keys joined with dots).")
@html_option("the table, the deadline, the figure (inline SVG) and the assumptions")
@plot_option("tokens/s, MFU and days vs GPUs, one line per hardware")
def sweep(model, **kw):
    """Plan MODEL at each GPU count on each hardware profile: best layout, step time, tokens/s,
    MFU, scaling efficiency, and with --tokens the days, GPU-hours, energy and cost to train.

    Each row is `llmpar plan`'s #1 at that count (same search, same cost model); the global batch
    is the same at every count. Energy uses the profile's maximum power (an upper bound) unless
    --power-per-gpu gives an average; cost needs your --gpu-hour-price (none ships).

    \b
    Examples:
      llmpar sweep llama-3-70b --gpus 256,512,...,16384 --tokens 15T
      llmpar sweep llama-3.1-405b --gpus 2048,4096,8192,16384 --hardware h100-sxm,b200 --tokens 15T --pue 1.2 --gpu-hour-price 2.5
      llmpar sweep llama-3-8b --gpus 8,16,32,64 --tokens 300B --csv
    """
    from llmpar.planner.sweep import sweep as run_sweep

    as_json, as_csv = kw.pop("as_json"), kw.pop("as_csv")
    plot_path = kw.pop("plot_path")
    html_path = kw.pop("html_path")
    if as_json and as_csv:
        raise UserError("--json and --csv are exclusive: choose one")
    if as_csv:
        from llmpar.cli.common import refuse_moot_outputs

        refuse_moot_outputs({"--deadline": kw.get("deadline") is not None},
                            "--csv (the rows; the deadline's answer, per profile, is in the text and --json)")
    guard_outputs(model, kw, {"--plot": plot_path, "--html": html_path})
    from llmpar.cli.progress import progress_bar

    with progress_bar("sweep", enabled=not (as_json or as_csv)) as tick:
        result = run_sweep(model, progress=tick, **kw)
    if plot_path is not None:
        from llmpar.cli import plots

        plots.save(plots.sweep_figure(result), plot_path)
    if html_path is not None:
        from llmpar.cli.report_html import sweep_page
        from llmpar.outputs import write_text

        write_text(html_path, sweep_page(result), option="--html")
    if as_json:
        echo_json(result.to_dict())
    elif as_csv:
        from llmpar.cli.plan_cmd import to_csv

        click.echo(to_csv([_csv_row(r.to_dict()) for r in result.rows]), nl=False)
    else:
        render(result)
        if plot_path is not None:
            click.echo(f"plot: {plot_path}")
        if html_path is not None:
            click.echo(f"report: {html_path}")
    if not result.any_ok:
        n = len(result.rows)
        raise CheckFailed(f"no GPU count of the sweep has a layout that runs ({n} row{'s' * (n != 1)}: see the reasons)")
    if result.deadline is not None and all(d is None for d in result.deadline["by_hardware"].values()):
        # the question --deadline asks has no answer among the counts swept: valid, nothing feasible (exit 1)
        raise CheckFailed(f"no swept GPU count makes the {result.deadline['days']:g}-day deadline on "
                          f"{', '.join(result.deadline['by_hardware'])}: add larger counts to --gpus")


def _csv_row(d: dict) -> dict:
    """A failed row has no plan: leave its plan columns empty rather than a 'plan' column."""
    return {k: v for k, v in d.items() if not (k in ("plan", "training") and v is None)}


# ------------------------------------------------------------------------------------ render

# the columns a narrow console leaves out first (newcomer review, defect 2: rich elided the GPU
# count, the step and the days below 150 columns); hardware, GPUs, layout, step, MFU and days stay
_DROP_ORDER = ("MWh", "GPU-hours", "scaling", "tokens/s", "eff. cost", "eff. days")


def fit_columns(cols, rows, width: int) -> tuple[list[int], list[str]]:
    """The sweep table's columns for ``width`` (cli/render.py fit_columns): _DROP_ORDER first, then
    the interval column."""
    from llmpar.cli.render import fit_columns as fit

    names = [c for c, _ in cols]
    band = [n for n in names if n.startswith("days (")]
    order = [n for n in _DROP_ORDER if n in names]
    if "eff. cost" in order:   # with a price the cost is the answer: the days' band goes before it
        order = [n for n in order if n != "eff. cost"] + band + ["eff. cost"]
        band = []
    return fit(names, rows, width, order + band)


def render(r) -> None:
    from rich import box
    from rich.table import Table

    from llmpar.cli import render as R

    con = R.console(pipe_width=160)
    if r.defaults_used:
        con.print("defaults used: " + "; ".join(r.defaults_used), highlight=False)
    name = r.model if not r.model_requested else f"{r.model} (from {r.model_requested})"
    pairs = [("on", ", ".join(r.hardware)), ("seq", f"{r.seq:,}"),
             ("global batch", f"{r.global_batch:,} ({r.global_batch * r.seq:,} tokens)")]
    if r.tokens is not None:
        pairs.append(("token budget", fmt_tokens(r.tokens)))
    con.print(R.header(f"sweep {name}", pairs))
    R.print_assumptions(con, r.assumptions)
    con.print()
    cols, cells_rows, notes = sweep_table(r)
    keep, dropped = fit_columns(cols, cells_rows, con.width)
    title = "Plan #1 at each GPU count (scaling = tokens/s per GPU vs the smallest count with a layout)"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  header_style="bold")
    for i in keep:
        c, right = cols[i]
        table.add_column(c, justify="right" if right else "left", no_wrap=True)
    for cells in cells_rows:
        table.add_row(*[cells[i] for i in keep])
    con.print(table)
    if dropped:   # a line of its own: a table's title is cut at the table's width
        con.print(f"left out at this width: {', '.join(dropped)} (--json, --csv or a wider terminal has them)",
                  highlight=False)
    for i, n in enumerate(notes, 1):
        con.print(f"[{i}] {n}", highlight=False, markup=False)
    for line in implausible_lines(r) + deadline_lines(r):
        con.print(line, highlight=False, markup=False)
    con.print()
    con.print(f"[dim]{len(r.rows)} plans in {r.elapsed_s:.2f} s; {legend(r)}[/dim]", highlight=False)
