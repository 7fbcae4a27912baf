"""``llmpar calibrate fit`` and ``llmpar calibrate check``: the collective model against nccl-tests logs.

``fit`` fits the model's latency and bandwidth to the logs and writes a profile
(:mod:`llmpar.calibrate.fit`); ``check`` compares the model with them, row by row, and exits 1
beyond tolerance (:mod:`llmpar.calibrate.check`). Both take the logs as ``calibrate parse`` reads
them, with the same overrides (docs/calibration.md, sections 5 and 6). Split from
:mod:`llmpar.cli.calibrate_cmd`, which adds both commands to the ``calibrate`` group.
"""

from __future__ import annotations

from pathlib import Path

import click

from llmpar.cli.common import echo_json
from llmpar.specs.registry import DEFAULT_HARDWARE


def _log_options(f):
    """LOG... plus the parse overrides (for logs that do not state what they measured)."""
    for opt in reversed([
        click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path)),
        click.option("--hardware", default=DEFAULT_HARDWARE, show_default=True,
                     help="Profile name (see `llmpar hardware`) or YAML path."),
        click.option("--collective", help="Override the collective of every log (all_reduce, all-gather, ...)."),
        click.option("--ranks", type=int, help="Override the rank count of every log."),
        click.option("--nodes", type=int, help="Override the node count of every log."),
        click.option("--gpu", help="Override the GPU model of every log."),
        click.option("--algorithm", help="The logs were measured with NCCL_ALGO forced to this (ring, tree, nvls, ...): "
                     "hold the model to it too (default: the model picks as NCCL does)."),
    ]):
        f = opt(f)
    return f


def _parse_logs(logs, collective, ranks, nodes, gpu):
    from llmpar.calibrate.nccl_tests import parse_files

    return parse_files(logs, collective=collective, ranks=ranks, nodes=nodes, gpu=gpu)


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def _param(name: str, value: float) -> str:
    return f"{value * 1e6:.3g} us" if name.endswith("latency") else f"{value:.4g}"


@click.command("fit")
@_log_options
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the calibrated profile here (it `extends:` --hardware).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def fit_cmd(logs, hardware, collective, ranks, nodes, gpu, algorithm, out, as_json):
    """Fit the collective model's latency and bandwidth to nccl-tests logs; write a profile.

    Per collective and per tier crossed: single-node logs fit the NVLink tier, multi-node logs the
    network tier (alpha per protocol LL/LL128/Simple, beta = bandwidth x efficiency, the LL/LL128
    bandwidth fractions, NVLS/SHARP where present), by least squares on the relative time error.
    Every command then takes the profile: --hardware my-cluster.yaml.
    """
    from llmpar.calibrate import fit as fitmod

    from llmpar.outputs import check_out

    check_out(out, inputs=logs, spec_kind="hardware", spec=hardware)   # before any work: never over an input
    parsed = _parse_logs(logs, collective, ranks, nodes, gpu)
    result = fitmod.fit(parsed, hardware, out_name=out.stem if out else None, algorithm=algorithm)
    if out:
        fitmod.write_profile(result, out)
    if as_json:
        echo_json({**result.to_dict(), "out": str(out) if out else None, "profile": result.profile})
        return
    from llmpar.cli.render import console as make_console
    from rich.table import Table

    console = make_console()
    console.print(f"[bold]llmpar calibrate fit[/bold]: {len(result.placements)} table(s) on base {result.base_hardware.name}; "
                  f"primary collective {result.primary} (its values become the tiers' own)")
    for g in result.groups:
        along = f" (and {', '.join(g.alongside)} alongside)" if g.alongside else ""
        console.print(f"\n[bold]{g.collective}[/bold], tier(s) {', '.join(g.tiers)}{along} from {', '.join(g.files)}: "
                      f"{g.samples} rows, rms relative error {g.rms_rel_error:.1%}, max {g.max_rel_error:.1%}")
        table = Table(show_edge=False, pad_edge=False)
        for col in ("tier", "parameter", "base", "fitted", "change"):
            table.add_column(col, justify="right" if col in ("base", "fitted", "change") else "left")
        for tier, fields in g.after.items():
            for name, v in fields.items():
                b = g.before[tier][name]
                table.add_row(tier, name, _param(name, b), _param(name, v), f"{v / b - 1:+.0%}" if b else "-")
        console.print(table)
        for note in g.notes:
            console.print(f"  note: {note}")
    console.print("\n[bold]model vs measurement[/bold], |time error| before (base) -> after (fitted):")
    for f in result.files:
        b, a = f["before"], f["after"]
        console.print(f"  {f['file']}: {f['collective']}, {f['ranks']} ranks, {f['nodes']} node(s), tier {f['tier']}: "
                      f"median >= 1 MB {_pct(b['median_abs_error_ge_1MB'])} -> {_pct(a['median_abs_error_ge_1MB'])}, "
                      f">= 64 MB {_pct(b['median_abs_error_ge_64MB'])} -> {_pct(a['median_abs_error_ge_64MB'])}; "
                      f"max >= 1 MB {_pct(b['max_abs_error_ge_1MB'])} -> {_pct(a['max_abs_error_ge_1MB'])}")
    for f in result.files:
        for note in f["notes"]:
            console.print(f"  {f['file']}: {note}")
    if out:
        console.print(f"\nwrote {out} (extends {result.profile['extends']}); use it with --hardware {out}")
    else:
        console.print("\nnothing written: add --out my-cluster.yaml")


def _chart_lines(sizes, measured, predicted, width: int = 40) -> list[str]:
    """Measured busbw as a bar, predicted as a marker, one line per size (text only)."""
    from llmpar.units import fmt_size

    top = max(float(max(measured, default=0.0)), float(max(predicted, default=0.0)), 1e-12)
    lines = []
    for s, m, p in zip(sizes, measured, predicted):
        cells = [" "] * (width + 1)
        n = int(round(m / top * width))
        for i in range(n):
            cells[i] = "#"
        j = min(width, int(round(p / top * width)))
        cells[j] = "o" if j >= n else "O"
        lines.append(f"{fmt_size(s):>8s} |{''.join(cells)}|{m:7.1f} {p:7.1f}")
    return lines


def _plot(result, path: Path) -> None:
    """measured vs predicted busbw (cli/plots.py draws it)."""
    from llmpar.cli import plots

    plots.save(plots.calibrate_check_figure(result), path)


@click.command("check")
@_log_options
@click.option("--tolerance", default="10%", show_default=True, help="Largest acceptable error, e.g. 10% or 0.1.")
@click.option("--statistic", type=click.Choice(["median_abs_error_ge_1MB", "max_abs_error_ge_1MB",
                                                "median_abs_error_ge_64MB", "max_abs_error_ge_64MB"]),
              default="median_abs_error_ge_1MB", show_default=True, help="Which error is held to --tolerance.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw measured vs predicted busbw into an image (needs matplotlib: llmpar[plot]).")
@click.option("--no-chart", is_flag=True, help="Leave out the terminal chart.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def check_cmd(logs, hardware, collective, ranks, nodes, gpu, algorithm, tolerance, statistic, plot_path, no_chart,
              as_json):
    """Compare nccl-tests logs with the model: per row measured vs predicted time and busbw.

    error = predicted / measured - 1 (time; negative = the model is optimistic). Summary: median
    and max |error| at sizes >= 1 MB and >= 64 MB. Exit 1 when --statistic (default the median at
    >= 1 MB) exceeds --tolerance, so a cluster team can run it in CI.
    """
    from llmpar.calibrate import check as checkmod
    from llmpar.errors import CheckFailed

    tol = checkmod.parse_tolerance(tolerance)
    if plot_path is not None:
        from llmpar.cli import plots

        plots.check_path(plot_path)
        plots.require()
    parsed = _parse_logs(logs, collective, ranks, nodes, gpu)
    result = checkmod.check(parsed, hardware, tolerance=tol, statistic=statistic, algorithm=algorithm)
    if plot_path is not None:
        _plot(result, plot_path)
    if as_json:
        echo_json({**result.to_dict(), "plot": str(plot_path) if plot_path else None})
    else:
        _render_check(result, plot_path, no_chart)
    if not result.passed:
        raise CheckFailed(f"calibrate check failed: {result.verdict()} on {result.hardware}")


def _render_check(result, plot_path, no_chart) -> None:
    from llmpar.cli.render import console as make_console
    from rich.table import Table
    from rich.text import Text

    from llmpar.calibrate.check import chart_points
    from llmpar.units import fmt_seconds, fmt_size

    console = make_console()
    for f in result.files:
        console.print(f"[bold]{f.file}[/bold]: {f.collective}, {f.ranks} ranks, {f.nodes} node(s), "
                      f"{f.members_per_node} per scale-up domain, tier {f.tier}; model {result.hardware}")
        table = Table(show_edge=False, pad_edge=False)
        for col in ("size", "measured", "predicted", "error", "busbw meas. (GB/s)", "busbw pred. (GB/s)", "model choice"):
            table.add_column(col, justify="left" if col == "model choice" else "right")
        for r in (r for r in result.rows if r.file == f.file):
            style = "red" if r.size_bytes >= 1 << 20 and abs(r.error) > result.tolerance else ""
            table.add_row(fmt_size(r.size_bytes), fmt_seconds(r.measured_time_s), fmt_seconds(r.predicted_time_s),
                          Text(f"{r.error:+.1%}", style=style), f"{r.measured_busbw_GBps:.2f}",
                          f"{r.predicted_busbw_GBps:.2f}", f"{r.algorithm or '-'}/{r.protocol or '-'}")
        console.print(table)
        s = f.summary
        console.print(f"  |error| >= 1 MB: median {_pct(s['median_abs_error_ge_1MB'])}, max {_pct(s['max_abs_error_ge_1MB'])}; "
                      f">= 64 MB: median {_pct(s['median_abs_error_ge_64MB'])}, max {_pct(s['max_abs_error_ge_64MB'])}")
        for note in f.notes:
            console.print(f"  note: {note}")
        if not no_chart:
            console.print("  busbw (GB/s) by size: # measured, o predicted (O: inside the bar)    meas.   pred.")
            for line in _chart_lines(*chart_points(result, f.file)):
                console.print(Text("  " + line))
        console.print()
    s = result.summary
    console.print(f"[bold]all rows[/bold]: |error| >= 1 MB median {_pct(s['median_abs_error_ge_1MB'])}, max "
                  f"{_pct(s['max_abs_error_ge_1MB'])}; >= 64 MB median {_pct(s['median_abs_error_ge_64MB'])}, max "
                  f"{_pct(s['max_abs_error_ge_64MB'])}")
    console.print(("[green]PASS[/green] " if result.passed else "[red]FAIL[/red] ") + result.verdict())
    if plot_path:
        console.print(f"plot: {plot_path}")
