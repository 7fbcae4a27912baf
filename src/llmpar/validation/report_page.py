"""The generated docs/validation.md page (``llmpar validate --markdown``): the fixed text
(:data:`llmpar.validation.report.PREAMBLE`), the leave-one-source-out section, the summary and one
section per source, as markdown tables of the cells in validation/report.py.

Pure formatting of a :class:`~llmpar.validation.core.ValidationResult`; nothing here evaluates.
Split out of validation/report.py.
"""

from __future__ import annotations

from llmpar.validation.core import ValidationResult
from llmpar.validation.report import (
    BIG_SOURCE, BY_GPUS_HEADERS, CV_HEADERS, LEGEND, PREAMBLE, ROW_HEADERS, SUMMARY_HEADERS, by_gpus, cv_headline, cv_rows,
    group_line, metric_name, no_fit_count_line, no_fit_line, row_cells, stack_lines, summary_rows,
)


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    right = {"published", "llmpar", "error", "GPUs", "rows"}
    align = ["---:" if (h in right or h.endswith("rows") or "error" in h or "abs" in h) else "---" for h in headers]
    return ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"] + ["| " + " | ".join(r) + " |"
                                                                                  for r in esc]


def markdown(result: ValidationResult) -> str:
    lines = [PREAMBLE.rstrip(), ""]
    if result.stack:
        lines += [f"**Every row below is evaluated under the stack `{result.stack}` (`--stack {result.stack}`), "
                  "not the one its source names.**", ""]
    lines += cv_markdown(result)
    lines += ["## Summary (as shipped: in-sample where a stack was fitted on the rows)", "",
              *_md_table(SUMMARY_HEADERS, summary_rows(result)), ""]
    for src in result.sources:
        rows = [r for r in result.rows if r["source"] == src.name]
        groups = [g for g in result.groups if g["source"] == src.name]
        lines += [f"## {src.citation}", ""]
        where = f"[{src.url}]({src.url})" if src.url else ""
        lines += [f"`llmpar validate --source {src.name}` · {src.runs} run{'s' if src.runs != 1 else ''} · hardware `{src.hardware}` · stack "
                  f"`{src.stack}`" + (f" · {where}" if where else ""), ""]
        compared = sorted({metric_name(g["metric"]) if g["metric"] != "fits" else "FITS/OOM verdicts" for g in groups},
                          key=[metric_name(g["metric"]) if g["metric"] != "fits" else "FITS/OOM verdicts"
                               for g in groups].index)
        lines += [f"- **Compares:** {', '.join(compared)}."]
        lines += [f"- **Convention (the source's):** {src.convention}"]
        for conv in dict.fromkeys(r["convention"] for r in rows):
            metric = next(r["metric"] for r in rows if r["convention"] == conv)
            lines += [f"- **Compared as** ({metric_name(metric)}): {conv}."]
        lines += [f"- **Stack:** {line}" for line in stack_lines(src)]
        lines += [f"- **Note:** {n}" for n in src.notes]
        if src.left_out:
            lines += [f"- **Left out:** {src.left_out}"]
        lines += ["", "<details><summary>About the data (from the source file)</summary>", "", src.about, "",
                  "</details>", ""]
        if src.runs > BIG_SOURCE:
            lines += [f"{src.runs} runs; per model and GPU count (errors signed: median; unsigned: mean). "
                      f"Every row: `llmpar validate --source {src.name} --json`.", "",
                      *_md_table(BY_GPUS_HEADERS, by_gpus(rows)), ""]
            nf = no_fit_count_line(rows)
            if nf:
                lines += [f"- {nf}"]
        else:
            lines += [f"Legend: {LEGEND}.", "",
                      *_md_table(ROW_HEADERS, [row_cells(r) for r in rows if r["metric"] != "fits"]), ""]
            nf = no_fit_line(rows)
            if nf:
                lines += [f"- {nf}"]
        lines += [f"- {group_line(g)}" for g in groups]
        lines += [""]
    return "\n".join(lines).rstrip() + "\n"


def cv_markdown(result: ValidationResult) -> list[str]:
    cv = result.cross_validation
    if not cv:
        return []
    lines = ["## Leave-one-source-out (the honest figures)", "",
             "Each source predicted by stack constants fitted without it (`validation/loso-fits.json`, "
             "written by `python scripts/fit_stacks.py --loso`); a source nothing was fitted on is out of sample "
             "as it stands; a source that is its stack's only one is predicted by that fit's own k-fold over "
             "configurations (a new configuration, not a new cluster). Error here = predicted throughput / "
             "measured − 1 for every speed metric (positive: llmpar faster than the run, optimistic); "
             "predicted / measured peak − 1 for memory. Each row's interval comes from the *other* sources' "
             "residuals (docs/validation.md, Intervals; llmpar.evidence).", ""]
    lines += [f"- {line}" for line in cv_headline(cv)]
    if cv.get("missing_sources"):
        lines += [f"- **No leave-one-source-out record** for {', '.join(cv['missing_sources'])}: run "
                  "`python scripts/fit_stacks.py --loso`."]
    lines += ["", "### Speed, per source", "", *_md_table(CV_HEADERS, cv_rows(cv, result)), ""]
    mem = cv_rows(cv, result, "memory")
    if mem:
        lines += ["### Memory, per source", "", *_md_table(CV_HEADERS, mem), ""]
    return lines
