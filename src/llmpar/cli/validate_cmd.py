"""`llmpar validate`: llmpar against the published runs it ships (docs/validation.md is its output)."""

from __future__ import annotations

from pathlib import Path

import click

from llmpar.cli.common import html_option
from llmpar.errors import UserError
from llmpar.units import parse_tolerance


def _render(result, con) -> None:
    from rich.table import Table

    from llmpar.validation import report

    for src in result.sources:
        rows = [r for r in result.rows if r["source"] == src.name]
        groups = [g for g in result.groups if g["source"] == src.name]
        con.print(f"\n[bold]{src.name}[/bold]: {src.citation}", highlight=False)
        con.print(f"{src.runs} runs, hardware {src.hardware}, stack {src.stack}; convention: {src.convention}",
                  highlight=False)
        for n in src.notes:
            con.print(f"note: {n}", highlight=False)
        if src.runs > report.BIG_SOURCE:
            t = Table(title=f"{src.runs} runs by model and GPU count (--json lists every row)")
            cells_by_gpus = report.by_gpus(rows)
            for h in report.BY_GPUS_HEADERS:
                # model names carry their variant (llm-foundry's mpt-125m-s65536): never cut them
                t.add_column(h, justify="left" if h == "model" else "right", no_wrap=h == "model",
                             min_width=max((len(c[0]) for c in cells_by_gpus), default=5) if h == "model" else None)
            for cells in cells_by_gpus:
                t.add_row(*cells)
        else:
            t = Table(title=f"published vs llmpar ({report.LEGEND})")
            for h in report.ROW_HEADERS:
                t.add_column(h, justify="right" if h in ("published", "llmpar", "error") else "left")
            for r in rows:
                if r["metric"] != "fits":
                    t.add_row(*report.row_cells(r))
        con.print(t)
        nf = report.no_fit_line(rows) if src.runs <= report.BIG_SOURCE else report.no_fit_count_line(rows)
        if nf:
            con.print(f"  {nf}", highlight=False)
        for g in groups:
            con.print(f"  {report.group_line(g)}", highlight=False)
    t = Table(title="Groups (absolute errors)")
    short = {"mean abs error": "mean", "median abs error": "median", "max abs error": "max"}
    for h in report.SUMMARY_HEADERS:
        # numbers never wrap or truncate (they are the point); the in-sample? note wraps instead
        numeric = h in ("rows", "FITS/OOM") or "error" in h
        t.add_column(short.get(h, h), justify="right" if numeric else "left", no_wrap=numeric or h in ("source", "metric", "stack"),
                     min_width={"in-sample?": 14}.get(h))
    for cells in report.summary_rows(result):
        t.add_row(*cells)
    if not con.is_terminal:   # nine columns: give the summary room on a pipe unless COLUMNS says
        from llmpar.cli.render import console

        con = console(pipe_width=160)
    con.print(t)
    cv = result.cross_validation
    if cv:
        for kind in ("speed", "memory"):
            cells = report.cv_rows(cv, result, kind)
            if not cells:
                continue
            t = Table(title=f"Leave-one-source-out, {kind} (the honest figures; errors: predicted "
                            f"{'throughput' if kind == 'speed' else 'peak'} / measured - 1)")
            for h in report.CV_HEADERS:
                t.add_column(h, justify="left" if h in ("source", "stack", "scheme") else "right",
                             no_wrap=h in ("source", "stack"))
            for c in cells:
                t.add_row(*c)
            con.print(t)
        for line in report.cv_headline(cv):
            con.print(line, highlight=False)
        if cv.get("missing_sources"):
            con.print(f"no leave-one-source-out record for {', '.join(cv['missing_sources'])}: "
                      "run python scripts/fit_stacks.py --loso", highlight=False)
    elif result.stack:
        con.print(f"no leave-one-source-out figures under --stack {result.stack}: the record is of the "
                  "sources' own stacks", highlight=False)


@click.command("validate")
@click.option("--source", "sources", multiple=True,
              help="Only this source (a file stem of the shipped validation/*.yaml); repeatable. Default: all.")
@click.option("--stack", help="Evaluate every row under this stack (name or YAML) instead of its source's.")
@click.option("--tolerance", help="Exit 1 if any group's mean absolute error exceeds this (e.g. 10% or 0.1).")
@click.option("--markdown", "as_markdown", is_flag=True, help="Write the docs/validation.md page (stdout, or --out).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="With --markdown: write the page here.")
@click.option("--limit", type=click.IntRange(1), help="Only the first N runs of each source (a quick look).")
@click.option("--json", "as_json", is_flag=True, help='Print {"rows": [...], "groups": [...], "sources": [...]}.')
@click.option("--serving", is_flag=True, help="The published serving runs (validation/serving/) instead: "
                                              "leave-one-source-out TTFT, TPOT and throughput errors.")
@click.option("--finetune", is_flag=True, help="The published LoRA / QLoRA runs (validation/finetune/) instead: "
                                               "peak memory and tokens/s, out of sample (nothing was fitted on them).")
@html_option("the leave-one-source-out tables, the groups and each source's lines")
def validate(sources, stack, tolerance, as_markdown, out, limit, as_json, serving, finetune, html_path):
    """Published vs predicted for every shipped published run, grouped by source.

    Each row runs the model a user would run (its stack, hardware and layout; knobs the source
    did not publish are searched, fastest that fits) and is compared in the row's own metric and
    convention. error = predicted / published - 1.

    \b
    Examples:
      llmpar validate
      llmpar validate --source korthikanti2022-table5 --tolerance 10%
      llmpar validate --source narayanan2021-table1 --stack megatron-core --json
      llmpar validate --markdown --out docs/validation.md
    """
    from llmpar.validation.core import validate as run_validation

    tol = parse_tolerance(tolerance)
    if serving and finetune:
        raise UserError("--serving and --finetune are two sets of published runs: choose one")
    if finetune:
        given = [n for n, v in (("--source", sources), ("--stack", stack), ("--tolerance", tolerance),
                                ("--markdown", as_markdown), ("--out", out), ("--limit", limit)) if v]
        if given:
            raise UserError(f"--finetune validates every published fine-tuning run; {', '.join(given)} changes "
                            "nothing there")
        _finetune(as_json, html_path)
        return
    if serving:
        given = [n for n, v in (("--source", sources), ("--stack", stack), ("--tolerance", tolerance),
                                ("--markdown", as_markdown), ("--out", out), ("--limit", limit)) if v]
        if given:
            raise UserError(f"--serving validates every published serving run; {', '.join(given)} changes nothing there")
        _serving(as_json, html_path)
        return
    if as_json and as_markdown:
        raise UserError("--json and --markdown: choose one")
    if out is not None and not as_markdown:
        raise UserError("--out goes with --markdown")
    from llmpar.outputs import refuse_same_outputs

    refuse_same_outputs({"--out": out, "--html": html_path})
    if out is not None:   # before the run: a folder, a missing folder or an unwritable one is said first
        from llmpar.outputs import check_out

        check_out(out)
    from llmpar.cli.render import console

    con = console()
    from llmpar.cli.progress import progress_bar

    with progress_bar("validate", enabled=not as_json and not (as_markdown and out is None), console=con) as tick:
        result = run_validation(list(sources) or None, stack, limit, tick)
    if as_json:
        from llmpar.cli.common import echo_json

        echo_json(result.as_dict())
    elif as_markdown:
        from llmpar.validation.report_page import markdown

        page = markdown(result)
        if out is None:
            click.echo(page, nl=False)
        else:
            from llmpar.outputs import write_text

            write_text(out, page)
            con.print(f"wrote {out} ({len(result.sources)} sources, {len(result.rows)} rows)", highlight=False)
    else:
        _render(result, con)
    if html_path is not None:
        from llmpar.cli.report_html import validate_page
        from llmpar.outputs import write_text

        write_text(html_path, validate_page(result), option="--html")
        if not as_json and not (as_markdown and out is None):
            con.print(f"report: {html_path}", highlight=False)
    if tol is not None:
        from llmpar.results import raise_over_tolerance

        raise_over_tolerance(result.groups, tol)


def serving_tables(block: dict) -> list[tuple[str, list[tuple[str, bool]], list[list[str]]]]:
    """`validate --serving`'s two tables as (caption, columns (name, right-aligned), rows): the
    terminal and `--html` print the same cells."""
    summary = [(name, [str(d["figures"]), str(d["sources"]), f"{d['median_abs_error'] * 100:.1f} %",
                       f"{d['signed_median'] * 100:+.1f} %", f"{d['optimistic_share'] * 100:.0f} %",
                       f"{d['interval_coverage'] * 100:.0f} %", f"{d['rows_pooled_median_abs_error'] * 100:.1f} %"])
               for name, d in block["cross_validation"].items()]
    from llmpar.serving.fit import SCHEME_NOT_FITTED, SCHEME_PRIOR

    # a source nothing was fitted on (an 'other' engine, a `fit: false` file) or its engine's only
    # one says so beside its name; the others are held out of their engine's refit
    marks = {SCHEME_NOT_FITTED: " (not fitted)", SCHEME_PRIOR: " (prior)"}
    per = [(src + marks.get(d.get("scheme", ""), ""),
            [f"{d[k]['median_abs_error'] * 100:.0f} % ({d[k]['signed_median'] * 100:+.0f} %, {d[k]['figures']})"
             if k in d else "" for k in ("throughput", "tpot", "ttft")]) for src, d in block["per_source"].items()]
    return [(f"Published serving runs, leave-one-source-out ({block['rows']} rows from {block['sources']} "
             "sources; each source weighing the same)",
             [(h, h != "figure") for h in ("figure", "figures", "sources", "median |error|", "signed median",
                                          "optimistic", "80 % coverage", "rows pooled")],
             [[n] + c for n, c in summary]),
            ("Per source (median |error|, signed median, figures)",
             [(h, h != "source") for h in ("source", "throughput", "TPOT", "TTFT")], [[n] + c for n, c in per])]


def _serving(as_json: bool, html_path: Path | None) -> None:
    """`validate --serving`: the leave-one-source-out block of llmpar.serving.report (docs/serving.md)."""
    from llmpar.serving.report import validate_block

    block = validate_block()
    tables = serving_tables(block)
    from llmpar.serving.fit import SCHEME_WORDS

    schemes = "schemes: " + "; ".join(f"{SCHEME_WORDS.get(k, k)}: {v} figures" for k, v in block["figures_by_scheme"].items())
    if html_path is not None:
        from llmpar.cli import report_html as H
        from llmpar.outputs import write_text

        write_text(html_path, H.page("llmpar validate --serving", [
            H.table(f"serving-{i}", cap, cols, rows) for i, (cap, cols, rows) in enumerate(tables)]
            + [f"<p>{H.e(schemes)}</p>"]), option="--html")
    if as_json:
        from llmpar.cli.common import echo_json

        echo_json({"serving": block})
        return
    from rich.table import Table

    from llmpar.cli.render import console

    con = console()
    for cap, cols, rows in tables:
        t = Table(title=cap)
        for h, right in cols:
            t.add_column(h, justify="right" if right else "left")
        for cells in rows:
            t.add_row(*cells)
        con.print(t)
    con.print(schemes, highlight=False)
    if html_path is not None:
        con.print(f"report: {html_path}", highlight=False)


FINETUNE_COLS = [("source", False), ("row", False), ("metric", False), ("published", True), ("llmpar", True),
                 ("error", True)]


def finetune_tables(block: dict) -> list[tuple[str, list[tuple[str, bool]], list[list[str]]]]:
    """`validate --finetune`'s tables (caption, columns, rows): every row, then the summary."""
    def val(r, v):
        return f"{v / 2**30:.2f} GiB" if r["unit"] == "bytes" else f"{v:,.0f}"

    rows = [[r["source"], r["row"], r["metric"], val(r, r["published"]), val(r, r["predicted"]),
             f"{r['error'] * 100:+.1f} %"] for r in block["rows"]]
    summ = []
    for kind in ("memory", "speed"):
        d = block["summary"].get(kind)
        if d:
            summ.append([kind, str(d["rows"]), str(d["sources"]), f"{d['median_abs_error'] * 100:.1f} %",
                         f"{d['signed_median'] * 100:+.1f} %", f"{d['max_abs_error'] * 100:.1f} %",
                         f"{d['source_median_abs_error'] * 100:.1f} %"])
    return [("Published fine-tuning runs vs llmpar (error = llmpar / published - 1; out of sample: nothing was "
             "fitted on them)", FINETUNE_COLS, rows),
            ("Summary", [("figure", False), ("rows", True), ("sources", True), ("median |error|", True),
                         ("signed median", True), ("max |error|", True), ("median of source medians", True)], summ)]


def _finetune(as_json: bool, html_path: Path | None) -> None:
    """`validate --finetune`: llmpar.validation.finetune over validation/finetune/ (docs/finetune.md)."""
    from llmpar.validation.finetune import validate_finetune

    block = validate_finetune()
    tables = finetune_tables(block)
    if html_path is not None:
        from llmpar.cli import report_html as H
        from llmpar.outputs import write_text

        write_text(html_path, H.page("llmpar validate --finetune", [
            H.table(f"finetune-{i}", cap, cols, rows) for i, (cap, cols, rows) in enumerate(tables)]
            + [H.items("sources", [f"{s['name']}: {s['citation']}" for s in block["sources"]], "Sources")]),
                   option="--html")
    if as_json:
        from llmpar.cli.common import echo_json

        echo_json({"finetune": block})
        return
    from rich.table import Table

    from llmpar.cli.render import console

    con = console(pipe_width=150)
    for cap, cols, rows in tables:
        t = Table(title=cap, title_justify="left")
        for h, right in cols:
            t.add_column(h, justify="right" if right else "left")
        for cells in rows:
            t.add_row(*cells)
        con.print(t)
    for s in block["sources"]:
        con.print(f"{s['name']}: {s['citation']} (stack {s['stack']})", highlight=False)
    if html_path is not None:
        con.print(f"report: {html_path}", highlight=False)
