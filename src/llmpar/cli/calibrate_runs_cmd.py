"""`llmpar calibrate runs FILE...`: fit a stack to measured training runs, or check one against them
(docs/calibrate-runs.md; docs/runs-format.md for the inputs)."""

from __future__ import annotations

from pathlib import Path

import click

from llmpar.cli.common import complete_hardware, complete_model, complete_stack, echo_json, plot_option
from llmpar.errors import CheckFailed, UserError
from llmpar.units import parse_tolerance


def _pct(v) -> str:
    return "-" if v is None else f"{v * 100:.1f} %"


def _at_bound(name: str, value: float) -> str:
    """A fitted value; one the optimiser drove onto a bound (to within 1e-6 of its range) prints as
    the bound, 'at bound' (newcomer review: 2.518e-19 for an allocator overhead of 0)."""
    from llmpar.calibrate.runs_parameters import PARAMETERS

    lo, hi = PARAMETERS[name][:2]
    tol = 1e-6 * (hi - lo)
    if abs(value - lo) <= tol:
        return f"{lo:g} (at bound)"
    if abs(value - hi) <= tol:
        return f"{hi:g} (at bound)"
    return f"{value:.4g}"


def _fmt_summary(name: str, s: dict) -> list[str]:
    sp, mem, reg = s["speed"], s["memory"], s["regret"]
    return [name, str(sp["runs"]), _pct(sp["median_abs"]), _pct(sp["mean_abs"]), _pct(sp["max_abs"]),
            str(mem["runs"]), _pct(mem["median_abs"]), _pct(s["fits_agreement"]),
            _pct(reg["median"]) + (f" ({reg['configurations']})" if reg["configurations"] else "")]


# the per-run table's columns a narrow console leaves out first, so that the source (file:line),
# the layout and the errors stay whole (issue 24: any width >= 80 columns)
_DROP_ORDER = ("before", "mem meas.", "model", "mem after")
_SOURCE_WIDTH = 24
_COLS = ("source", "model", "layout", "measured", "before", "after", "error", "mem meas.", "mem after")


def _runs_table(shown: list[dict], width: int):
    """(the per-run table, whether any knob was searched, the columns left out) for a console
    ``width`` columns wide (error: predicted-after vs measured tokens/s; mem: peak memory measured
    and predicted after the fit)."""
    from rich import box
    from rich.table import Table

    from llmpar.cli.render import fit_columns, layout_short

    any_searched = False
    all_cells = []
    for r in shown:
        lay, chosen = r["layout"], r.get("chosen") or {}
        # the knobs the run did not state are marked: calibrate runs searched them (the fastest that fits)
        searched = frozenset(k for k in chosen if k not in lay)
        any_searched |= bool(searched & {"zero", "recompute", "micro_batch", "microbatches", "virtual_stages"})
        mt, mm = r["measured_step_time_s"], r["measured_memory_bytes"]
        err = None if mt is None else mt / r["predicted_step_time_s_after"] - 1
        name = Path(r["source"]).name
        # a long file name keeps its end, where the line number is (the full source is in --json)
        name = name if len(name) <= _SOURCE_WIDTH else "…" + name[-(_SOURCE_WIDTH - 1):]
        all_cells.append([name, r["model"], layout_short({**chosen, **lay}, searched),
                          "-" if mt is None else f"{mt:.3f} s", f"{r['predicted_step_time_s_before']:.3f} s",
                          f"{r['predicted_step_time_s_after']:.3f} s", _pct(err),
                          "-" if mm is None else f"{mm / 2**30:.1f} GiB",
                          f"{r['predicted_memory_bytes_after'] / 2**30:.1f} GiB"])
    keep, dropped = fit_columns(list(_COLS), all_cells, width, _DROP_ORDER, {"layout": 14})
    table = Table(title="Per run: step time, measured vs predicted (error = predicted/measured tokens/s - 1)",
                  title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for i in keep:
        col = _COLS[i]
        # the layout wraps at its spaces (the one column rich may narrow); every other cell stays whole
        table.add_column(col, justify="left" if col in ("source", "model", "layout") else "right",
                         no_wrap=col != "layout", min_width=14 if col == "layout" else None)
    for cells in all_cells:
        table.add_row(*[cells[i] for i in keep])
    return table, any_searched, dropped


def render(result, notes: list[str], check: bool, out: Path | None, show_rows: int) -> None:
    from rich.table import Table

    from llmpar.cli.render import console

    con = console()
    con.print(f"[bold]{len(result.runs)} runs[/bold] against stack [bold]{result.base.name}[/bold]"
              + (f" (GPU generation {result.generation})" if result.generation else ""), highlight=False)
    for n in notes[:20]:
        con.print(f"note: {n}", highlight=False)
    if len(notes) > 20:
        con.print(f"note: ... and {len(notes) - 20} more (--json lists all)", highlight=False)
    rows, any_searched, dropped = _runs_table(result.rows[:show_rows], con.width)
    con.print(rows)
    if dropped:   # a line of its own: a table's title is cut at the table's width
        con.print(f"left out at this width: {', '.join(dropped)} (--json has every field)", highlight=False)
    if any_searched:
        con.print("* not stated by the run: searched, the fastest value that fits kept (docs/calibrate-runs.md)",
                  highlight=False)
    if len(result.rows) > show_rows:
        con.print(f"({len(result.rows) - show_rows} more runs: --json, or --rows N)")
    summ = Table(title="Errors (absolute; speed = tokens/s, memory = peak; regret = the measured tokens/s of "
                       "the layout llmpar ranks first vs the best measured, median over configurations)")
    for col in ("", "speed runs", "median", "mean", "max", "memory runs", "median", "FITS/OOM agree", "regret"):
        summ.add_column(col, justify="left" if not col else "right")
    s = result.summary
    summ.add_row(*_fmt_summary(f"{result.base.name} (before)", s["before"]))
    if "after_in_sample" in s:
        summ.add_row(*_fmt_summary("fitted, in-sample", s["after_in_sample"]))
    if "after_cross_validated" in s:
        summ.add_row(*_fmt_summary(f"fitted, {s['folds']}-fold cross-validated", s["after_cross_validated"]))
    con.print(summ)
    if result.parameters:
        par = Table(title="Fitted parameters (bounded; the base values are the priors)")
        for col in ("parameter", "before", "after"):
            par.add_column(col, justify="left" if col == "parameter" else "right")
        for k, v in result.parameters.items():
            par.add_row(k, f"{v['before']:.4g}", _at_bound(k, v["after"]))
        con.print(par)
    if out is not None:
        con.print(f"wrote {out} (extends {result.extends(str(out.parent))}; use it with --stack {out})",
                  highlight=False)
    elif not check:
        con.print("(--out FILE.yaml writes the fitted stack)")


def render_held_out(held) -> None:
    """The runs the fit did not see, predicted by the fitted stack: errors, the fastest quarter of
    each configuration, and the planner's regret per configuration."""
    from rich.table import Table

    from llmpar.cli.render import console

    s = held.summary["before"]
    con = console()
    t = Table(title=f"Held out: {len(held.runs)} runs the fit did not use, predicted by the fitted stack")
    for col in ("", "speed runs", "median", "mean", "max", "memory runs", "median", "FITS/OOM agree", "regret"):
        t.add_column(col, justify="left" if not col else "right")
    t.add_row(*_fmt_summary("held out", s))
    con.print(t)
    fq, reg = s["fastest_quarter"], s["regret"]["per_configuration"]
    per = Table(title="Per configuration: |error| over its fastest quarter of runs (by tokens/s); regret = how much "
                      "slower, per token, the measured run of llmpar's pick is than the best measured")
    for col in ("configuration", "fastest-quarter |error|", "planner regret"):
        per.add_column(col, justify="left" if col == "configuration" else "right")
    for key, v in fq["per_configuration"].items():
        per.add_row(key, _pct(v), _pct(reg.get(key)))
    con.print(per)
    con.print(f"median over configurations: fastest-quarter |error| {_pct(fq['median'])}, regret "
              f"{_pct(s['regret']['median'])} ({_pct(s['regret']['within_5pct'])} of configurations within 5 %)",
              highlight=False)


def _out_path(text: str) -> Path:
    """--out, checked before any reading or fitting: a file name, in a folder that exists and can
    be written (an error after a long fit would lose the fit)."""
    import os

    if not text.strip():
        raise UserError("--out is empty: give the file to write the fitted stack to (e.g. --out my-stack.yaml)")
    out = Path(text)
    if out.is_dir():
        raise UserError(f"--out {text}: is a directory; give a file name (e.g. {out / 'my-stack.yaml'})")
    folder = out.parent
    if not folder.is_dir():
        raise UserError(f"--out {text}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise UserError(f"--out {text}: cannot write there (permission denied)")
    return out


@click.command("runs")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--stack", shell_complete=complete_stack, help="Base stack (name or YAML); default: the files' `stack:`, else megatron-core.")
@click.option("--hardware", shell_complete=complete_hardware, help="Hardware for runs that name none (name or YAML path).")
@click.option("--model", shell_complete=complete_model, help="Model for runs that name none (e.g. logs).")
@click.option("--layout", "layout_text", metavar="KEY=V,...",
              help="Layout for runs that do not state it (logs): e.g. 'gpus=16,tp=2,ep=8,seq=4096,global_batch=256'.")
@click.option("--fit", "fit_names", help="Comma list of stack parameters to fit (default: what the runs constrain).")
@click.option("--folds", type=click.IntRange(0, 50), default=5, show_default=True,
              help="Cross-validation folds over configurations (model x GPU count); 0 = none.")
@click.option("--only", "only_sel", multiple=True, metavar="KEY=V",
              help="Use only the runs this selects (repeatable): hardware=NAME, model=NAME, dtype=NAME or KEY<=N "
                   "as --train; e.g. --only hardware=h100-sxm --only dtype=bf16.")
@click.option("--train", "train_sel", metavar="KEY<=N", multiple=True,
              help="Fit on the runs this selects (e.g. gpus<=16; repeatable: all must hold); predict the others "
                   "as held out.")
@click.option("--drop-slower-than", "healthy", type=click.FloatRange(0, 1, min_open=True),
              help="Leave out of the fit runs slower than this fraction of their configuration's best (e.g. 0.5).")
@click.option("--check", is_flag=True, help="Report the stack's error on the runs; fit nothing.")
@click.option("--tolerance", help="With --check: exit 1 if the median speed or memory error exceeds this (e.g. 10%).")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the fitted stack here.")
@click.option("--name", "out_name", help="Name of the written stack (default: the file name).")
@click.option("--rows", "show_rows", type=click.IntRange(0), default=30, show_default=True, help="Runs to list.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@plot_option("predicted vs measured step time and peak memory, before and after the fit, with the y = x line")
def runs_cmd(files, stack, hardware, model, layout_text, fit_names, folds, only_sel, train_sel, healthy, check, tolerance,
             out, out_name, show_rows, as_json, plot_path):
    """Fit a stack's kernel efficiencies, overlaps, fixed costs and memory factors to measured runs.

    \b
    FILE: runs tables (CSV, JSONL, YAML; docs/runs-format.md) or Megatron-LM / NeMo / torchtitan logs.
    Examples:
      llmpar calibrate runs my-runs.csv --stack megatron-core --hardware h100-sxm --out my-stack.yaml
      llmpar calibrate runs logs/*.log --model llama-3-8b --hardware h100-sxm --layout gpus=8,seq=8192,global_batch=64 --check
      llmpar calibrate runs playbook.yaml --train 'gpus<=16' --drop-slower-than 0.5   # fit small, predict big
      llmpar calibrate runs mixed.yaml --only hardware=h100-sxm --only dtype=bf16 --train 'gpus<=8'
    """
    import yaml

    from llmpar.calibrate.runs_holdout import fit_and_hold_out

    tol, folds_given = _check_options(check, tolerance, healthy, out, fit_names, train_sel, folds)
    if out_name is not None and out is None:   # names the written stack: nothing is written without --out
        raise UserError("--name names the stack --out writes: give --out FILE.yaml or drop --name")
    if as_json and click.get_current_context().get_parameter_source("show_rows") == click.core.ParameterSource.COMMANDLINE:
        raise UserError("--rows lists runs in the table; --json has every run: drop --rows")   # as calibrate parse
    if out is not None:
        out = _out_path(out)
    train = _train_predicate(train_sel)
    if stack is not None:
        from llmpar.specs import load_stack

        load_stack(stack)
    read = _read_selected(files, _run_defaults(model, hardware, layout_text), only_sel)
    if stack is None:
        named = {r.stack for r in read.runs if r.stack}
        stack = named.pop() if len(named) == 1 else "megatron-core"
    from llmpar.outputs import check_out, refuse_same_outputs, spec_inputs

    # before any work: never over an input (the tables and logs, the specs given, the stack's chain),
    # nor over its other output
    refuse_same_outputs({"--out": out, "--plot": plot_path})
    check_out(out, inputs=[*files, *spec_inputs(("hardware", hardware), ("models", model))],
              spec_kind="stacks", spec=stack)
    names = [n.strip() for n in fit_names.split(",") if n.strip()] if fit_names is not None else None
    if names is not None and not names:   # --fit "" had fitted the default set, as if not given
        raise UserError("--fit names no parameter: give a comma list (e.g. kernels.gemm_efficiency) or leave it out")
    from llmpar.cli.progress import progress_bar

    with progress_bar("calibrate runs", enabled=not as_json) as tick:
        result, held = fit_and_hold_out(read.runs, stack, train=train, healthy=healthy, hardware=hardware,
                                        parameters=names, folds=folds, models=read.models,
                                        files=[str(f) for f in files], check_only=check, progress=tick)
    if plot_path is not None:
        from llmpar.cli import plots

        plots.save(plots.calibrate_runs_figure(result), plot_path)
    notes = _notes(read, result, held, train_sel if train is not None else None, check, folds_given, folds)
    if out is not None:
        name = out_name or out.stem
        from llmpar.outputs import write_spec

        write_spec(out, yaml.safe_dump(result.stack_dict(name, str(out.parent)), sort_keys=False), "stacks")
    if as_json:
        echo_json({"stack": result.base.name, "generation": result.generation, "parameters": result.parameters,
                   "summary": result.summary, "rows": result.rows, "notes": notes,
                   "out": str(out) if out else None,
                   "held_out": None if held is None else {"runs": len(held.runs), "summary": held.summary["before"],
                                                          "rows": held.rows}})
    else:
        render(result, notes, check, out, show_rows)
        if held is not None:
            render_held_out(held)
        if plot_path is not None:
            click.echo(f"plot: {plot_path}")
    _check_tolerance(result, tol)


def _check_options(check, tolerance, healthy, out, fit_names, train_sel, folds) -> tuple[float | None, bool]:
    """The options that do not go together, refused before any reading; (the tolerance, --folds given?)."""
    if healthy is not None and healthy != healthy:   # NaN passes click's FloatRange
        raise UserError("--drop-slower-than must be a number in (0, 1], got nan")
    tol = parse_tolerance(tolerance)
    if tol is not None and not check:
        raise UserError("--tolerance goes with --check")
    if check and out is not None:
        raise UserError("--check fits nothing: drop --out")
    if check and fit_names is not None:
        raise UserError("--check fits nothing: drop --fit")
    if check and (train_sel or healthy):
        raise UserError("--check fits nothing: --train and --drop-slower-than choose what a fit uses")
    folds_given = click.get_current_context().get_parameter_source("folds") != click.core.ParameterSource.DEFAULT
    if check and folds_given and folds:
        raise UserError("--check fits nothing: --folds sets the cross-validation of a fit")
    if folds == 1:
        raise UserError("--folds 1 cannot cross-validate (one fold holds everything out): 0 (none) or at least 2")
    return tol, folds_given


def _train_predicate(train_sel):
    """--train's selectors as one predicate on runs (every one must hold); None without --train."""
    from llmpar.calibrate.runs_holdout import run_selector

    if train_sel:
        sels = [run_selector(t) for t in train_sel]
        train = (lambda r: all(sel(r) for sel in sels))   # noqa: E731  (every --train must hold)
    else:
        train = None
    return train


def _run_defaults(model, hardware, layout_text) -> dict[str, str]:
    """What runs that do not state it get: --model, --hardware and --layout's KEY=VALUE pairs, checked."""
    defaults = {k: v for k, v in (("model", model), ("hardware", hardware)) if v is not None}
    given: dict[str, str] = {}
    for item in (layout_text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UserError(f"--layout expects KEY=VALUE pairs separated by commas (e.g. gpus=16,tp=2), got {item!r}")
        key, value = key.strip(), value.strip()
        if key in given:   # a key given twice is refused, as in runs files (the last would win silently)
            raise UserError(f"--layout gives {key} twice ({key}={given[key]} and {key}={value})")
        if key in defaults:
            raise UserError(f"--layout {key}={value} and --{key} {defaults[key]} both give the {key}: give it once")
        given[key] = defaults[key] = value
    if defaults.get("hardware") is not None:
        # checked up front, whether or not the runs name their own (an unknown name is not ignored)
        from llmpar.specs import load_hardware

        load_hardware(str(defaults["hardware"]))
    return defaults


def _read_selected(files, defaults: dict[str, str], only_sel):
    """The runs of ``files`` (``defaults`` filling what they leave out) that every --only selects."""
    from llmpar.calibrate.runs_holdout import run_filter
    from llmpar.calibrate.runs_io import read_runs

    read = read_runs(files, defaults=defaults)
    if defaults.get("model") is not None and str(defaults["model"]) not in read.models:
        from llmpar.specs import load_model

        load_model(str(defaults["model"]))   # an inline 'models:' entry of a table is a model too
    if only_sel:
        keep = [run_filter(t) for t in only_sel]
        runs_kept = [r for r in read.runs if all(k(r) for k in keep)]
        if not runs_kept:
            raise UserError("--only " + " --only ".join(only_sel) + f" selects none of the {len(read.runs)} runs")
        read.runs[:] = runs_kept
    return read


def _notes(read, result, held, train_sel, check: bool, folds_given: bool, folds: int) -> list[str]:
    """Every note to print: the reader's, the fit's and the held-out evaluation's, and what the
    options did not do (``train_sel``: the --train selectors, None without --train)."""
    notes = read.notes + result.notes + ([n for n in held.notes if n not in result.notes] if held is not None else [])
    if train_sel is not None and held is None:
        notes.append("--train " + " --train ".join(train_sel) + " selects every run: nothing is held out")
    k = result.summary.get("folds")
    if not check and folds_given and k is not None and k != folds:
        notes.append(f"--folds {folds}: {k} folds, one per (model, GPUs) configuration of the fitted runs at most")
    return notes


def _check_tolerance(result, tol: float | None) -> None:
    """--check --tolerance: exit 1 when the median speed or memory error exceeds it."""
    if tol is not None:
        before = result.summary["before"]
        worst = max(v for v in (before["speed"]["median_abs"], before["memory"]["median_abs"]) if v is not None) \
            if (before["speed"]["runs"] or before["memory"]["runs"]) else 0.0
        if worst > tol:
            raise CheckFailed(f"median error {worst * 100:.1f} % exceeds the tolerance {tol * 100:g} %")
