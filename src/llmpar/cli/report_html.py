"""`--html FILE.html` on `plan`, `sweep` and `validate`: one self-contained static page a manager can
read (docs/cli.md, The HTML report).

No network and no script: the tables carry the same cells as the terminal's (plan_table.plan_cells,
sweep_table.sweep_table, validate.report's rows), the assumptions and intervals as text, and the
command's figure (cli/plots.py, the one `--plot` draws) as inline SVG where matplotlib is installed
(a line says so where it is not). Every text that comes from a result is escaped.
"""

from __future__ import annotations

import html
import io
from typing import Any, Callable, Iterable

_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1400px;color:#111}"
          "table{border-collapse:collapse;margin:0.5em 0 1.5em 0}"
          "td,th{border:1px solid #bbb;padding:3px 7px}td.r,th.r{text-align:right;white-space:nowrap}"
          "th{background:#eee}caption{font-weight:bold;text-align:left;margin:0.4em 0}"
          "li{margin:0.2em 0}.legend{color:#555;font-size:0.9em}svg{max-width:100%;height:auto}")

FOOTER = ("Every figure is llmpar's model; the formulas and their sources are in docs/, and how far the model "
          "is from published runs (leave-one-source-out) in docs/validation.md.")


def e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def table(tid: str, caption: str, cols: list[tuple[str, bool]], rows: Iterable[list[str]]) -> str:
    """A <table id=tid>; cols are (header, right-aligned)."""
    out = [f'<table id="{e(tid)}"><caption>{e(caption)}</caption><thead><tr>'
           + "".join(f'<th class="{"r" if right else "l"}">{e(h)}</th>' for h, right in cols) + "</tr></thead><tbody>"]
    for cells in rows:
        out.append("<tr>" + "".join(f'<td class="{"r" if right else "l"}">{e(c)}</td>'
                                    for c, (_, right) in zip(cells, cols)) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def items(lid: str, lines: Iterable[str], title: str | None = None) -> str:
    lines = list(lines)
    if not lines:
        return ""
    head = f"<h2>{e(title)}</h2>" if title else ""
    return head + f'<ul id="{e(lid)}">' + "".join(f"<li>{e(x)}</li>" for x in lines) + "</ul>"


def pairs(pid: str, kv: Iterable[tuple[str, str]]) -> str:
    return f'<p id="{e(pid)}">' + "; ".join(f"<b>{e(k)}</b> {e(v)}" for k, v in kv) + "</p>"


def figure(draw: Callable[[], Any]) -> str:
    """The figure ``draw()`` returns, as inline SVG; a sentence instead where matplotlib is missing."""
    try:
        from llmpar.cli import plots

        plots.require()
    except Exception:   # noqa: BLE001 - matplotlib missing: the page says so instead of a figure
        return '<p id="figure">(no figure: matplotlib is not installed: pip install \'llmpar[plot]\')</p>'
    plt = plots._plt()
    fig = draw()
    buf = io.StringIO()
    try:
        fig.savefig(buf, format="svg", bbox_inches="tight")
    finally:
        plt.close(fig)
    text = buf.getvalue()
    # inline: drop the XML prologue and DOCTYPE; matplotlib's SVG has no script and no external link
    return f'<div id="figure">{text[text.index("<svg"):]}</div>'


def page(title: str, blocks: Iterable[str]) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="generator" content="llmpar">', f"<title>{e(title)}</title>",
             f"<style>{_STYLE}</style></head><body>", f"<h1>{e(title)}</h1>"]
    parts += [b for b in blocks if b]
    parts.append(f'<p class="legend">{e(FOOTER)}</p></body></html>')
    return "\n".join(parts) + "\n"


# ------------------------------------------------------------------------------------ the pages

def _training_lines(t: dict[str, Any] | None, who: str) -> list[str]:
    """The time-to-train block (cli.training's terminal lines, without rich markup)."""
    if not t:
        return []
    from llmpar.cli.training import goodput_line, training_line

    g = t.get("goodput")
    return ([f"{who}: {training_line(t)}"] + ([goodput_line(t)] if g is not None else [])
            + list(t["assumptions"]) + (list(g["assumptions"]) if g else []))


def sweep_page(r) -> str:
    """The page for a :class:`llmpar.results_plan.SweepResult`."""
    from llmpar.cli import plots
    from llmpar.cli.sweep_table import deadline_lines, implausible_lines, legend, sweep_table
    from llmpar.cli.training import fmt_tokens

    cols, rows, notes = sweep_table(r)
    kv = [("on", ", ".join(r.hardware)), ("seq", f"{r.seq:,}"),
          ("global batch", f"{r.global_batch:,} sequences ({r.global_batch * r.seq:,} tokens)")]
    if r.tokens is not None:
        kv.append(("token budget", fmt_tokens(r.tokens)))
    return page(f"llmpar sweep {r.model}", [
        pairs("settings", kv),
        items("deadline", deadline_lines(r), "Deadline"),
        table("plans", "Plan #1 at each GPU count (scaling = tokens/s per GPU vs the smallest count with a layout)",
              cols, rows),
        items("notes", [f"[{i}] {n}" for i, n in enumerate(notes, 1)] + implausible_lines(r)),
        f'<p class="legend">{e(legend(r))}</p>',
        "<h2>Figures</h2>" + figure(lambda: plots.sweep_figure(r)),
        items("assumptions", r.assumptions, "Assumptions"),
    ])


def plan_page(r, units: str = "gb") -> str:
    """The page for a :class:`llmpar.results_plan.PlanResult` (its frontier figure needs keep_points)."""
    from llmpar.cli import plots
    from llmpar.cli import render as R
    from llmpar.cli.plan_table import equivalent_texts, plan_cells, plan_columns

    fmt, unit = R.bytes_formatter(units)
    kv = [("on", f"{r.gpus:,} x {r.hardware}"), ("seq", f"{r.seq:,}"),
          ("global batch", f"{r.global_batch:,} sequences ({r.global_batch * r.seq:,} tokens)"),
          ("objective", r.objective), ("dtype", r.settings.dtype), ("optimizer", r.settings.optimizer),
          ("HBM", f"{fmt(r.capacity_bytes)} {unit}")]
    cols = plan_columns(unit)
    ivs = []
    for p in r.plans:
        if p.interval:
            lo, hi = p.interval["step_time_s"]
            ivs.append(f"#{p.rank}: step {lo:.4g}-{hi:.4g} s at {p.interval['level'] * 100:.0f} %"
                       + (" (extrapolated: no published run of its class)" if p.interval["evidence"]["extrapolated"]
                          else ""))
    ties = [f"#{p.rank} also runs as: " + " | ".join(equivalent_texts(p)) for p in r.plans if p.equivalent]
    s = r.space
    rej = ", ".join(f"{k} {v:,}" for k, v in s.rejected.items() if v) or "none"
    blocks = [pairs("settings", kv),
              table("plans", f"Top {len(r.plans)} layouts (memory in {unit}; step time per iteration)", cols,
                    [plan_cells(p, fmt) for p in r.plans]),
              items("intervals", ivs, "How far off it may be (intervals from published runs like each layout)"),
              items("ties", ties)]
    if r.pareto is not None:
        blocks.append(table("pareto", f"Time-memory frontier ({len(r.pareto)} layouts)", cols,
                            [plan_cells(p, fmt) for p in r.pareto]))
    blocks.append(items("training", _training_lines(r.training, "#1"), "Time to train"))
    blocks.append(f'<p id="space">space: {s.candidates:,} candidates, {s.feasible:,} feasible; rejected: {e(rej)}</p>')
    if r.points is not None:
        blocks.append("<h2>Figures</h2>" + figure(lambda: plots.plan_figure(r, units=units)))
    blocks.append(items("assumptions", r.assumptions, "Assumptions"))
    name = r.model if not r.model_requested else f"{r.model} (from {r.model_requested})"
    return page(f"llmpar plan {name}", blocks)


def validate_page(result) -> str:
    """The page for a :class:`llmpar.validation.core.ValidationResult`: the leave-one-source-out tables
    first (the honest figures), then the in-sample summary, then each source's groups."""
    from llmpar.cli import plots
    from llmpar.validation import report

    blocks = []
    cv = result.cross_validation
    if cv:
        blocks.append("<h2>Leave-one-source-out (the honest figures)</h2>")
        blocks.append(items("cv-headline", report.cv_headline(cv)))
        blocks.append(figure(lambda: plots.validate_figure(result)))
        for kind in ("speed", "memory"):
            cells = report.cv_rows(cv, result, kind)
            if cells:
                blocks.append(table(f"cv-{kind}", f"Leave-one-source-out, {kind} (predicted "
                                    f"{'throughput' if kind == 'speed' else 'peak'} / measured - 1)",
                                    [(h, h not in ("source", "stack", "scheme")) for h in report.CV_HEADERS], cells))
    blocks.append(table("groups", "Groups (absolute errors; in-sample where the stack was fitted on the source)",
                        [(h, h in ("rows", "FITS/OOM") or "error" in h) for h in report.SUMMARY_HEADERS],
                        report.summary_rows(result)))
    per_source = []
    for src in result.sources:
        groups = [g for g in result.groups if g["source"] == src.name]
        per_source.append(f"<h3>{e(src.name)}</h3><p>{e(src.citation)}; {src.runs} runs, hardware "
                          f"{e(src.hardware)}, stack {e(src.stack)}</p>"
                          + items(f"groups-{src.name}", [report.group_line(g) for g in groups]))
    blocks.append("<h2>Sources</h2>" + "".join(per_source))
    return page(f"llmpar validate: {len(result.sources)} sources, {len(result.rows):,} rows", blocks)
