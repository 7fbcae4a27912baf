"""`llmpar bubble`: draw a pipeline schedule and print its bubble ratios.

All numbers come from :mod:`llmpar.cost.pipeline`; this module only builds a result dict and
renders it (rich text, or JSON).
"""

from __future__ import annotations

import click

from llmpar.cli.common import plot_option
from llmpar.errors import UserError
from llmpar.parallel import SCHEDULES

_STYLE = {"F": "bold white on blue", "B": "bold black on green", "W": "black on yellow"}
_MAX_DRAW_COLUMNS = 2000
# The schedule is simulated (cost.pipeline_sim.timeline: a list-scheduling pass per stage, roughly
# quadratic in pp) only where the result is small: p*m*v <= 4096 slots per step and p <= 128
# (about 0.1 s). Beyond that the ratios are the closed forms alone, and a drawing would be wider
# than _MAX_DRAW_COLUMNS anyway (issue 9, item 7: 2000 x 2000 took 53 s and 3.4 GB).
_MAX_SIM_SLOTS = 4096
_MAX_SIM_STAGES = 128

_FORMULAS = {
    "gpipe": ("(p-1)/m", "(p-1)/(m+p-1)", "Huang et al. 2019 (GPipe), §2.3"),
    "1f1b": ("(p-1)/m", "(p-1)/(m+p-1)", "Narayanan et al. 2021, §2.2.1 (PipeDream-Flush)"),
    "interleaved": ("(p-1)/(v*m)", "(p-1)/(v*m+p-1)", "Narayanan et al. 2021, §2.2.2"),
    "zb-h1": ("(p-1)(F+B-W) / (m(F+B+W)) = (p-1)/(3m) at F=B=W, m>=p",
              "(p-1)/(3m+p-1) at F=B=W, m>=p", "Qi et al. 2023 (Zero Bubble), §3.1"),
    "dualpipe": ("(p/2-1)(F&B+B_full-3W) / (m(F+B_full)) = (p-2)/(3m) at F=B=W, F&B=F+B_full",
                 "(p-2)/(3m+p-2) at F=B=W, F&B=F+B_full", "DeepSeek-V3 technical report, §3.2.1, Table 2"),
}


def build(schedule: str | None, pp: int, microbatches: int, virtual_stages: int | None,
          layers: int | None) -> dict:
    """The result of `llmpar bubble` as a dict (no printing)."""
    from llmpar.cost import pipeline as pl
    from llmpar.cost.pipeline_sim import timeline

    from llmpar.parallel import MAX_BATCH, MAX_GPUS, positive_int

    notes: list[str] = []
    pp = positive_int(pp, "pp", MAX_GPUS)
    microbatches = positive_int(microbatches, "microbatches", MAX_BATCH)
    virtual_stages = positive_int(virtual_stages, "virtual-stages", MAX_GPUS)
    if layers is not None:
        layers = positive_int(layers, "layers", MAX_GPUS)
    v = virtual_stages or 1
    if schedule is None:
        schedule = "interleaved" if v > 1 else "1f1b"
    if schedule not in SCHEDULES:  # click.Choice guards the CLI; this guards direct callers
        raise UserError(f"unknown schedule {schedule!r}; choose one of: {', '.join(SCHEDULES)}")
    code = SCHEDULES.index(schedule)
    if schedule == "interleaved" and virtual_stages is None:
        v = 2
        notes.append("interleaved schedule without --virtual-stages: assumed v=2")
    pl.check_schedule(code, pp, microbatches, v)
    stage = None
    if layers is not None:
        if layers < 1:
            raise UserError(f"--layers must be a positive integer, got {layers}")
        if pp > layers:
            raise UserError(f"--pp {pp} exceeds the {layers} layers")
        most = int(pl.stage_layers(layers, pp))
        if v > most:
            raise UserError(f"--virtual-stages {v} exceeds the {most} layers per pipeline stage ({layers} layers / pp={pp})")
        if most % v:   # the layout rule memory/step apply (layout.py, rule virtual_stages)
            from llmpar.layout import virtual_stages_message

            raise UserError(virtual_stages_message(v, layers, pp))
        stage = {"layers": layers, "most_loaded_stage_layers": most,
                 "first_stage_layers": int(pl.first_stage_layers(layers, pp)),
                 "last_stage_layers": int(pl.last_stage_layers(layers, pp))}

    over, frac_step, source = _FORMULAS[schedule]
    result = {
        "schedule": schedule,
        "pp": pp,
        "microbatches": microbatches,
        "virtual_stages": v,
        "bubble_over_ideal": float(pl.bubble_over_ideal(code, pp, microbatches, v)),
        "bubble_fraction_of_step": float(pl.bubble_fraction_of_step(code, pp, microbatches, v)),
        "formula_bubble_over_ideal": over,
        "formula_bubble_fraction_of_step": frac_step,
        "source": source,
        "in_flight_microbatches": float(pl.in_flight_microbatches(code, pp, microbatches, v)),
        "parameter_copies": int(pl.parameter_copies(code)),
        "unit_chunk_times": {"forward": pl.UNIT_F, "backward_input": pl.UNIT_B_INPUT,
                             "backward_weight": pl.UNIT_W},
        "notes": notes,
    }
    if stage:
        result["stages"] = stage
    slots = pp * microbatches * v
    tl = None
    if slots <= _MAX_SIM_SLOTS and pp <= _MAX_SIM_STAGES:
        tl = timeline(code, pp, microbatches, v)
    else:
        notes.append(f"schedule not simulated (p*m*v = {slots:,} slots; llmpar simulates up to "
                     f"{_MAX_SIM_SLOTS:,} slots and {_MAX_SIM_STAGES} stages): the ratios are the closed forms")
    if tl is not None:
        result["timeline"] = {
            "total_units": tl.total,
            "idle_fraction": tl.idle_fraction,
            "stages": [[{"kind": s.kind, "microbatch": s.microbatch, "chunk": s.chunk,
                         "start": s.start, "end": s.end} for s in row] for row in tl.stages],
        }
    return result


def _label(slot: dict, interleaved: bool) -> str:
    base = f"{slot['kind']}{slot['microbatch']}"
    return f"{base}:{slot['chunk']}" if interleaved else base


def _drawing(result: dict):
    """rich Text lines, one row per stage; each time unit is `u` characters, idle is '.'."""
    from rich.text import Text

    tl = result["timeline"]
    interleaved = result["schedule"] == "interleaved"
    labels = [_label(s, interleaved) for row in tl["stages"] for s in row]
    u = max(len(x) for x in labels) + 1
    total = int(round(tl["total_units"]))
    if total * u > _MAX_DRAW_COLUMNS:
        return None
    row_name = "device" if result["schedule"] == "dualpipe" else "stage"
    name_w = len(f"{row_name} {result['pp'] - 1}")
    lines = []
    for i, row in enumerate(tl["stages"]):
        line = Text(f"{row_name} {i}".ljust(name_w) + " |")
        t = 0.0
        for s in row:
            gap = int(round(s["start"] - t))
            if gap > 0:
                line.append("." * (gap * u), style="dim")
            width = int(round(s["end"] - s["start"])) * u
            line.append(_label(s, interleaved).ljust(width), style=_STYLE[s["kind"]])
            t = s["end"]
        if total - t > 0:
            line.append("." * (int(round(total - t)) * u), style="dim")
        line.append("|")
        lines.append(line)
    return lines


def render(result: dict) -> None:
    from llmpar.cli.render import make_console

    lines = _drawing(result) if "timeline" in result else None
    width = max([len(x.plain) for x in lines] + [100]) if lines else None
    console = make_console(width=width, highlight=False, soft_wrap=True)
    p, m, v = result["pp"], result["microbatches"], result["virtual_stages"]
    head = f"{result['schedule']} schedule: p={p} stages, m={m} micro-batches"
    if result["schedule"] == "interleaved":
        head += f", v={v} model chunks per stage"
    console.print(head)
    for note in result["notes"]:
        if not note.startswith("schedule not simulated"):   # said below, where the drawing would be
            console.print(f"assumed: {note}")
    ut = result["unit_chunk_times"]
    if lines is not None:
        if result["schedule"] == "zb-h1":
            key = (f"F = forward ({ut['forward']:g} unit), B = input gradient ({ut['backward_input']:g}), "
                   f"W = weight gradient ({ut['backward_weight']:g})")
        elif result["schedule"] == "dualpipe":
            key = (f"F = forward ({ut['forward']:g} unit), B = backward ({ut['backward_input'] + ut['backward_weight']:g} "
                   f"units, or {ut['backward_input']:g} when its W, the weight gradient, is deferred); device i holds "
                   f"stage i and stage p-1-i: micro-batches 0-{m // 2 - 1} enter at device 0, {m // 2}-{m - 1} at "
                   f"device {p - 1}; an F next to a B is an overlapped F&B pair (deepseek-ai/DualPipe order)")
        else:
            key = (f"F = forward ({ut['forward']:g} unit), "
                   f"B = backward ({ut['backward_input'] + ut['backward_weight']:g} units)")
        if result["schedule"] == "interleaved":
            key += "; Fm:c = micro-batch m on model chunk c"
        console.print(key + "; '.' = idle")
        for line in lines:
            console.print(line, no_wrap=True, overflow="ignore")
        tl = result["timeline"]
        console.print(f"drawn: {tl['total_units']:g} time units, idle {tl['idle_fraction']:.4f} of stage-time")
    elif "timeline" in result:
        console.print(f"(drawing omitted: wider than {_MAX_DRAW_COLUMNS} columns; use fewer micro-batches)")
    else:
        console.print(f"(drawing omitted: p*m*v = {p * m * v:,} slots is more than llmpar simulates; "
                      "ratios below are the closed forms)")
    console.print(f"bubble over ideal time      {result['bubble_over_ideal']:.4f}   "
                  f"= {result['formula_bubble_over_ideal']}")
    console.print(f"bubble as fraction of step  {result['bubble_fraction_of_step']:.4f}   "
                  f"= {result['formula_bubble_fraction_of_step']}")
    console.print(f"in-flight micro-batches on stage 1: {result['in_flight_microbatches']:g}"
                  + (f"; parameter copies per device: {result['parameter_copies']}" if result["parameter_copies"] != 1 else ""))
    if "stages" in result:
        st = result["stages"]
        console.print(f"layers per stage: most loaded {st['most_loaded_stage_layers']}, "
                      f"first {st['first_stage_layers']} (+ embedding), last {st['last_stage_layers']} (+ LM head, loss)")
    console.print(f"source: {result['source']}")


@click.command(name="bubble")
@click.option("--pp", type=int, required=True, help="Pipeline stages p.")
@click.option("--microbatches", "-m", type=int, required=True, help="Micro-batches per step m.")
@click.option("--schedule", type=click.Choice(SCHEDULES),
              help="Pipeline schedule (default 1f1b; interleaved when --virtual-stages > 1).")
@click.option("--virtual-stages", type=int, help="Model chunks per stage v (interleaved only; default 2 there).")
@click.option("--layers", type=int, help="Optional: transformer layers, to show (uneven) stage sizes and check v.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@plot_option("the schedule as a Gantt chart (one row per stage; forward, backward and idle coloured)")
def bubble(pp, microbatches, schedule, virtual_stages, layers, as_json, plot_path):
    """Draw a pipeline schedule (a row per stage) and print its bubble ratios.

    "Bubble over ideal" is idle time divided by the bubble-free compute time ((p-1)/m for
    GPipe/1F1B); "fraction of step" is idle time over the whole step ((p-1)/(m+p-1)).

    Example: llmpar bubble --pp 4 --microbatches 8 --schedule interleaved --virtual-stages 2
    """
    result = build(schedule, pp, microbatches, virtual_stages, layers)
    if plot_path is not None:
        from llmpar.cli import plots

        plots.save(plots.bubble_figure(result), plot_path)
    if as_json:
        from llmpar.cli.common import echo_json

        echo_json({k: v for k, v in result.items() if k != "timeline"}
                  | {"drawn_idle_fraction": result["timeline"]["idle_fraction"] if "timeline" in result else None})
        return
    render(result)
    if plot_path is not None:
        click.echo(f"plot: {plot_path}")
