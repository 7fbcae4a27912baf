"""`llmpar plan`: search the layouts of N GPUs and rank them.

All numbers come from :func:`llmpar.planner.search.plan` (every candidate evaluated through
``llmpar.cost``, the functions `llmpar step` uses); this module renders the result as rich
tables, JSON or CSV.
"""

from __future__ import annotations

from pathlib import Path

import csv
import io

import click

from llmpar.cli.common import (guard_outputs, complete_hardware, complete_model, echo_json, html_option, overlap_options,
                               plot_option, precision_options, refuse_moot_outputs)
from llmpar.cli.training import print_training, training_options
from llmpar.errors import CheckFailed, UserError
from llmpar.parallel import RECOMPUTE, SCHEDULES
from llmpar.cli.plan_table import knob_text, equivalent_texts, plan_cells, plan_columns
from llmpar.units import fmt_seconds

_LAYOUT = [
    click.option("--hardware", "hardware", default=None, shell_complete=complete_hardware,
                 help="Shipped profile or YAML path (default h100-sxm)."),
    click.option("--gpus", type=int, help="GPUs to plan for (required, unless --min-gpus)."),
    click.option("--min-gpus", is_flag=True, help="Plan at the smallest GPU count (1, 2, 4, ...) at which the model "
                                                  "trains at all, instead of --gpus."),
    click.option("--seq", type=int, help="Sequence length (default min(8192, model max))."),
    click.option("--global-batch", type=int, help="Sequences per step (default 4,194,304 tokens / seq)."),
    click.option("--tokens-per-batch", type=int, help="Tokens per step instead of --global-batch (a multiple of seq)."),
    click.option("--microbatches", type=int, help="Keep only layouts with this many micro-batches per step."),
    click.option("--tp", type=int, help="Fix the tensor-parallel degree (same as --fix tp=N)."),
    click.option("--pp", type=int, help="Fix the pipeline-parallel degree."),
    click.option("--dp", type=int, help="Fix the data-parallel degree."),
    click.option("--cp", type=int, help="Fix the context-parallel degree."),
    click.option("--ep", type=int, help="Fix the expert-parallel degree."),
    click.option("--etp", type=int, help="Fix the expert tensor-parallel degree (default: each candidate's tp; "
                                          "below tp, Megatron-Core MoE parallel folding)."),
    click.option("--zero", type=click.IntRange(0, 3), help="Fix the ZeRO stage."),
    click.option("--sp/--no-sp", default=None, help="Fix sequence parallelism on or off."),
    click.option("--recompute", type=click.Choice(RECOMPUTE), help="Fix the recompute mode."),
    click.option("--micro-batch", type=int, help="Fix the micro-batch size."),
    click.option("--schedule", type=click.Choice(SCHEDULES), help="Fix the pipeline schedule."),
    click.option("--virtual-stages", type=int, help="Fix the virtual stages (interleaved schedule)."),
    click.option("--offload-layers", type=int, help="Fix the layers whose activations are offloaded to host memory "
                                                    "(0: none; default: searched where the stack and hardware can)."),
]

_SEARCH = [
    click.option("--top", type=int, default=10, show_default=True, help="Layouts to list."),
    click.option("--objective", type=click.Choice(["time", "memory"]), default="time", show_default=True,
                 help="Rank by step time (= tokens/s at the fixed batch) or by memory per GPU."),
    click.option("--fix", "fix", multiple=True, metavar="K=V[,K=V]",
                 help="Hold knobs at one value, e.g. --fix tp=8,pp=16 (tp pp dp cp ep zero sp recompute "
                      "micro_batch schedule virtual_stages offload_layers)."),
    click.option("--allow", "allow", multiple=True, metavar="K=V1,V2",
                 help="Search only these values of one knob, e.g. --allow zero=0,1,3 (repeatable)."),
    click.option("--max-tp", type=int, help="Largest tensor-parallel degree to search."),
    click.option("--pareto", is_flag=True, help="Also list the time-memory frontier."),
    click.option("--margin", default=None, metavar="X",
                 help="Keep only layouts whose memory x (1 + X) fits the HBM, e.g. 0.05 or 5% (default 0: every layout "
                      "that fits; the stack's memory.uncertainty drops every TIGHT one)."),
    click.option("--explain-rank", type=int, default=2, show_default=True, metavar="N",
                 help="Explain why #1 beats #N."),
]

_OUTPUT = [
    click.option("--units", type=click.Choice(["gb", "gib"]), default="gb", show_default=True,
                 help="Memory display unit: GB = 1e9, GiB = 2^30."),
    click.option("--json", "as_json", is_flag=True, help="Print one JSON object."),
    click.option("--csv", "as_csv", is_flag=True, help="Print the plan rows as CSV (nested keys joined with dots)."),
    click.option("--emit", type=click.Choice(("megatron", "nemo", "torchtitan", "deepspeed")), default=None,
                 help="Print plan #1 as the framework's launch configuration (docs/launch.md) instead of the table."),
    click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
                 help="With --emit: write the configuration to this file (and print the table)."),
]


def _apply(options, f):
    for opt in reversed(options):
        f = opt(f)
    return f


@click.command("plan")
@click.argument("model", required=False, shell_complete=complete_model)
@lambda f: _apply(_LAYOUT, f)
@precision_options
@lambda f: _apply(_SEARCH, f)
@click.option("--hf", "hf", metavar="CONFIG_JSON", help="Read the model from a Hugging Face config.json.")
@overlap_options
@training_options
@lambda f: _apply(_OUTPUT, f)
@plot_option("the time-memory frontier (every feasible layout, step time vs memory per GPU, #1 marked)")
@html_option("the settings, the layouts with their intervals, the time to train, the frontier figure and the "
             "assumptions")
def plan(model, **kw):
    """Rank the TP/PP/DP/CP/EP layouts of MODEL on --gpus N (default model llama-3-70b).

    Searches tp, pp, cp, ep (MoE), dp (derived), micro-batch, schedule and virtual stages, ZeRO
    stage, recompute, SP and activation offloading; every candidate is costed by the same model as
    `llmpar step`.

    \b
    Examples:
      llmpar plan --gpus 2048
      llmpar plan llama-3.1-405b --gpus 16384 --tokens-per-batch 16777216 --top 5
      llmpar plan gpt3-175b --hardware a100-80gb --gpus 1024 --global-batch 1536 --pareto
      llmpar plan llama-3-70b --gpus 512 --fix tp=8 --allow zero=0,1 --json
      llmpar plan llama-3-70b --gpus 2048 --tokens 15T --pue 1.2 --gpu-hour-price 2.5
    """
    from llmpar.planner.search import plan as run_plan

    as_json, as_csv, units = kw.pop("as_json"), kw.pop("as_csv"), kw.pop("units")
    plot_path, html_path = kw.pop("plot_path"), kw.pop("html_path")
    emit, out = kw.pop("emit"), kw.pop("out")
    _check_outputs(as_json, as_csv, units, emit, out, kw)
    guard_outputs(model, kw, {"--out": out, "--plot": plot_path, "--html": html_path})
    if out is not None:
        if html_path is not None and Path(out).resolve() == html_path.resolve():
            raise UserError(f"--out and --html both name {out}: give each its own file")
    try:
        result = run_plan(model, units=units, keep_points=plot_path is not None or html_path is not None, **kw)
    except CheckFailed as exc:
        if as_json:
            # a script reading stdout gets a document saying why, as well as exit 1 and the stderr line
            rejected = getattr(exc, "rejected", None)
            from llmpar.planner.arguments import DEFAULT_HARDWARE, DEFAULT_MODEL

            echo_json({"feasible": False, "model_requested": model or kw.get("hf") or DEFAULT_MODEL,
                       "hardware": kw.get("hardware") or DEFAULT_HARDWARE,
                       "gpus": kw.get("gpus"), "reason": str(exc),
                       "rejected": {k: v for k, v in rejected.items()} if rejected else None})
        raise
    if plot_path is not None:
        from llmpar.cli import plots

        plots.save(plots.plan_figure(result, units=units), plot_path)
    if html_path is not None:
        from llmpar.cli.report_html import plan_page
        from llmpar.outputs import write_text

        write_text(html_path, plan_page(result, units=units), option="--html")
    if emit is not None:
        text = _emit(emit, model, kw, result)
        if out is None:
            click.echo(text, nl=False)
            return
        from llmpar.outputs import write_text

        write_text(out, text)
        render(result, units=units)
        click.echo(f"wrote {out} (--emit {emit}: plan #1's launch configuration)")
        if html_path is not None:
            click.echo(f"report: {html_path}")
        return
    if as_json:
        echo_json(result.to_dict())
    elif as_csv:
        rows = result.pareto if result.pareto is not None else result.plans
        click.echo(to_csv([_csv_row(p) for p in rows]), nl=False)
    else:
        render(result, units=units)
        if plot_path is not None:
            click.echo(f"plot: {plot_path}")
        if html_path is not None:
            click.echo(f"report: {html_path}")


def _check_outputs(as_json, as_csv, units, emit, out, kw) -> None:
    """The output switches that exclude each other, and those the chosen output does not read."""
    if as_json and as_csv:
        raise UserError("--json and --csv are exclusive: choose one")
    if out is not None and emit is None:
        raise UserError("--out writes the --emit configuration: give --emit megatron|nemo|torchtitan|deepspeed")
    if emit is not None and (as_json or as_csv):
        raise UserError("--emit prints the launch configuration: leave out --json/--csv")
    if emit is not None and out is None:   # only plan #1's configuration is printed
        # --top 1 agrees with what --emit prints (plan #1): not refused
        refuse_moot_outputs({"--top": kw["top"] not in (10, 1), "--pareto": kw["pareto"],
                             "--explain-rank": kw["explain_rank"] != 2,
                             "--interval-level": kw["interval_level"] is not None, "--units": units != "gb",
                             "--gpu-hour-price": kw["gpu_hour_price"] is not None},
                            f"--emit {emit} without --out (it prints plan #1's launch configuration only)")
    if as_csv:
        refuse_moot_outputs({"--explain-rank": kw["explain_rank"] != 2, "--units": units != "gb"},
                            "--csv (the rows, in bytes and seconds)")


def _emit(framework, model, kw, result) -> str:
    """Plan #1 as ``framework``'s configuration (llmpar.launch)."""
    from llmpar import launch
    from llmpar.inputs import load_hardware_spec, load_model_spec

    spec = load_model_spec(model or (None if kw.get("hf") else result.model), kw.get("hf"))[0]
    hw = load_hardware_spec(kw.get("hardware") or result.hardware)
    return launch.emit(framework, spec, hw, result.settings, result.best.parallel, global_batch=result.global_batch,
                       seq=result.seq)


# --------------------------------------------------------------------------------------- CSV

def flatten(d: dict, prefix: str = "") -> dict:
    """Nested keys joined with dots: {'breakdown_s': {'tp': x}} -> {'breakdown_s.tp': x}."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def to_csv(rows: list[dict]) -> str:
    flat = [flatten(r) for r in rows]
    cols: list[str] = []
    for r in flat:
        cols += [k for k in r if k not in cols]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in flat:
        w.writerow({k: _cell(v) for k, v in r.items()})
    return buf.getvalue()


def _cell(v):
    """One CSV cell: empty for None, JSON for booleans, lists and mappings (true, [1, 2]), never a
    Python repr (docs/json.md, CSV)."""
    import json

    if v is None:
        return ""
    if isinstance(v, (bool, list, tuple, dict)):
        return json.dumps(v)
    return v


def _csv_row(p) -> dict:
    """A plan row for CSV: the tied layouts as one text cell ('zero=1; sp=off,zero=1')."""
    d = p.to_dict()
    d["equivalent"] = "; ".join(equivalent_texts(p))
    return d




# ------------------------------------------------------------------------------------ render

# below this console width the table drops its least needed columns (the largest overhead, then
# sp and z) instead of letting rich elide the rank, dp, step time and MFU (newcomer review, defect 2)
_FULL_WIDTH = 121


def _rows_table(rows, fmt, unit, title, width: int | None = None):
    from rich import box
    from rich.table import Table

    narrow = width is not None and width < _FULL_WIDTH
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  header_style="bold", collapse_padding=narrow, padding=(0, 1) if not narrow else (0, 1, 0, 0))
    cols = plan_columns(unit)
    short = {"schedule": "sched", "tokens/s": "tok/s", f"mem {unit}": unit} if narrow else {}
    drop: set[str] = set()
    if narrow:
        drop = {"overhead"} | ({"sp", "z", "b"} if width < 100 else set())
    keep = [i for i, (name, _) in enumerate(cols) if name not in drop]
    for i in keep:
        name, right = cols[i]
        table.add_column(short.get(name, name), justify="right" if right else "left", no_wrap=True)
    for p in rows:
        cells = plan_cells(p, fmt)
        table.add_row(*[cells[i] for i in keep])
    return table


def _explain_lines(c, fmt, unit) -> list[str]:
    w, o = c.winner, c.other
    if c.margin == 0:
        what = "step time" if c.objective == "time" else "memory per GPU"
        lines = [f"#1 and #{o.rank} tie exactly on {what}: ranked by the other objective, then the simpler layout"]
        show = (lambda v: fmt_seconds(v)) if c.objective == "time" else (lambda v: f"{fmt(v)} {unit}")  # noqa: E731
    elif c.objective == "time" and c.margin < 0:
        pct = -c.margin / w.step_time_s * 100 if w.step_time_s else 0.0
        lines = [f"why #1 ranks above #{o.rank}: it is {fmt_seconds(-c.margin)} slower per step ({pct:.1f} %), within "
                 "the planner's rank tolerance, and the more robust layout (no offload, no CP, fewer parallel "
                 "dimensions); --margin 0 ranks by predicted time alone"]
        show = lambda v: fmt_seconds(v)  # noqa: E731
    elif c.objective == "time":
        pct = c.margin / w.step_time_s * 100 if w.step_time_s else 0.0
        lines = [f"why #1 beats #{o.rank}: {fmt_seconds(c.margin)} faster per step ({pct:.1f} %)"]
        show = lambda v: fmt_seconds(v)  # noqa: E731
    else:
        lines = [f"why #1 beats #{o.rank}: {fmt(c.margin)} {unit} less memory per GPU"]
        show = lambda v: f"{fmt(v)} {unit}"  # noqa: E731
    if c.knobs:
        lines.append("  layout: " + ", ".join(f"{k} {knob_text(a)} vs {knob_text(b)}" for k, a, b in c.knobs))
    scale = abs(c.margin) or 1.0
    shown = [t for t in c.terms if abs(t[2] - t[1]) >= 0.02 * scale][:6] or c.terms[:3]
    for name, a, b in shown:
        d = b - a
        word = "more" if d > 0 else "less"
        lines.append(f"  {name:<11} #1 {show(a):>12}   #{o.rank} {show(b):>12}   (#{o.rank} spends "
                     f"{show(abs(d))} {word})")
    return lines


def render(r, units: str = "gb") -> None:
    from llmpar.cli import render as R

    con = R.console(pipe_width=140)   # the layout tables are wide: room on a pipe unless COLUMNS says
    fmt, unit = R.bytes_formatter(units)
    if r.defaults_used:
        con.print("defaults used: " + "; ".join(r.defaults_used), highlight=False)
    name = r.model if not r.model_requested else f"{r.model} (from {r.model_requested})"
    con.print(R.header(f"plan {name}", [
        ("on", f"{r.gpus:,} x {r.hardware}"), ("seq", f"{r.seq:,}"),
        ("global batch", f"{r.global_batch:,} ({r.global_batch * r.seq:,} tokens)"), ("objective", r.objective),
    ]))
    pairs = [("dtype", r.settings.dtype), ("optimizer", r.settings.optimizer), ("attention", r.settings.attention),
             ("overlap", f"tp {r.settings.tp_overlap_on(r.generation):g} / dp {r.settings.dp_overlap:g}")]
    if r.settings.convention != "llmpar":
        pairs.append(("convention", r.settings.convention))
    # the runtime (CUDA context + NCCL buffers, or --reserve) is what is held back from the HBM; it
    # depends on the layout's communicators, so say whose it is. (reserved_bytes is the allocator's pool.)
    runtime = r.best.memory.get("runtime_bytes")
    hbm = f"{fmt(r.capacity_bytes)} {unit}"
    if runtime is not None:
        hbm += f" (runtime reserve {fmt(runtime)} {unit} at #1)"
    pairs.append(("HBM", hbm))
    margin = getattr(r.space, "margin", 0.0)
    if margin:
        pairs.append(("margin", f"memory x {1 + margin:g} must fit the HBM"))
    con.print(R.header("settings", pairs))
    R.print_assumptions(con, r.assumptions)
    con.print()
    order = ("recommended first: near-ties by robustness, TIGHT last" if r.space.recommended and r.objective == "time"
             else f"by {r.objective}, TIGHT last" if r.space.recommended else f"by {r.objective}")
    con.print(_rows_table(r.plans, fmt, unit, f"Top {len(r.plans)} layouts{',' * order.startswith('rec')} {order} "
                                              f"(memory in {unit}; step time per iteration)", con.width))
    if r.best.interval:
        con.print("#1" + R.interval_line(r.best.interval, r.best.step_time_s)[1:], highlight=False)
    ties = [(p.rank, equivalent_texts(p)) for p in r.plans if p.equivalent]
    if ties:
        con.print("exact ties (same step time and same memory) share a row; each also runs as:", highlight=False)
        for rank, texts in ties:
            more = f" | +{len(texts) - 4} more (--json lists all)" if len(texts) > 4 else ""
            con.print(f"  #{rank}: " + " | ".join(texts[:4]) + more, highlight=False)
    depths = [(p, p.variants) for p in r.plans if p.variants]
    if depths:
        con.print("the same layout at other interleaving depths shares a row (1f1b is v 1); each also runs at:",
                  highlight=False)
        for p, vs in depths:
            cells = [f"{'1f1b' if v['schedule'] == '1f1b' else 'v' + str(v['virtual_stages'])} "
                     f"{fmt_seconds(v['step_time_s'])} ({(v['step_time_s'] / p.step_time_s - 1) * 100:+.1f} %, "
                     f"{fmt(v['memory_bytes'])} {unit})" for v in vs]
            more = f" | +{len(cells) - 4} more (--json lists all)" if len(cells) > 4 else ""
            con.print(f"  #{p.rank}: " + " | ".join(cells[:4]) + more, highlight=False)
    if r.comparison is not None:
        con.print()
        for line in _explain_lines(r.comparison, fmt, unit):
            con.print(line, highlight=False)
    if r.pareto is not None:
        con.print()
        con.print(_rows_table(r.pareto, fmt, unit, width=con.width, title=f"Time-memory frontier ({len(r.pareto)} layouts: no other is both "
                                                   "faster and smaller; # = rank by the objective)"))
    print_training(con, r.training, "#1")
    s = r.space
    con.print()
    rej = ", ".join(f"{k} {v:,}" for k, v in s.rejected.items() if v) or "none"
    u = r.settings.stack.memory.uncertainty
    tight = (f" ({s.tight:,} TIGHT: within the stack's {u * 100:g} % memory uncertainty of the HBM)"
             if getattr(s, "tight", 0) else "")
    con.print(f"space: {s.candidates:,} candidates, {s.feasible:,} feasible{tight}; rejected: {rej}", highlight=False)
    rate = s.memory_evaluated / s.search_s if s.search_s else float("inf")
    con.print(f"[dim]evaluated {s.memory_evaluated:,} layouts for memory and timed {s.step_evaluated:,} in "
              f"{s.search_s:.2f} s ({rate:,.0f} per second); {r.elapsed_s:.2f} s in all[/dim]")
