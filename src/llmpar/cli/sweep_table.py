"""The sweep table's cells and lines, shared by the terminal (cli/sweep_cmd.py) and `--html`
(cli/report_html.py)."""

from __future__ import annotations

from llmpar.cli.plan_table import rate_text, secs_text
from llmpar.cli.training import fmt_days, fmt_quantity


_STATUS_WORDS = {"does_not_fit": "does not fit", "batch_cannot_split": "batch cannot split",
                 "no_layout": "no layout"}


def _layout(p) -> str:
    from llmpar.cli.render import layout_short

    return layout_short(p.parallel.as_dict())


def sweep_table(r) -> tuple[list[tuple[str, bool]], list[list[str]], list[str]]:
    """The sweep table: columns (name, right-aligned), one row of cells per (hardware, count), and the
    numbered notes of the rows without a layout. The terminal and `--html` print the same cells."""
    priced = any(x.training and x.training["cost"] is not None for x in r.rows)
    has_t = r.tokens is not None
    cols = [("hardware", False), ("GPUs", True), ("layout", False), ("step", True), ("tokens/s", True),
            ("MFU", True), ("scaling", True)]
    level = next((x.plan.interval["level"] for x in r.rows if x.ok and x.plan.interval), None)
    if has_t:
        cols += [("days", True)]
        if level is not None:
            cols.append((f"days ({level * 100:.0f} %)", True))
        cols += [("eff. days", True), ("GPU-hours", True), ("MWh", True)]
        if priced:
            cols += [("eff. cost", True)]
    rows: list[list[str]] = []
    notes: list[str] = []
    for row in r.rows:
        if not row.ok:
            notes.append(f"{row.hardware} x {row.gpus:,}: {row.reason}")
            cells = [row.hardware, f"{row.gpus:,}", f"{_STATUS_WORDS[row.status]} [{len(notes)}]"]
            rows.append(cells + ["-"] * (len(cols) - len(cells)))
            continue
        p = row.plan
        cells = [row.hardware, f"{row.gpus:,}", _layout(p), secs_text(p.step_time_s), rate_text(p.tokens_per_s),
                 f"{p.mfu * 100:.1f}%" + ("!" if _implausible(p) else ""), f"{row.scaling_efficiency * 100:.0f}%"]
        if has_t:
            t = row.training
            cells += [fmt_days(t["days"])]
            if level is not None:
                iv = row.interval()
                cells.append(f"{fmt_days(iv['days'][0])}-{fmt_days(iv['days'][1])}" + ("*" if iv["evidence"]["extrapolated"]
                                                                                         else "") if iv else "-")
            g = t.get("goodput") or {}
            cells += [(f"{fmt_days(g['effective_days'])} ({g['goodput'] * 100:.0f}%)" if g.get("effective_days")
                       is not None else "-"),
                      fmt_quantity(t["gpu_hours"]),
                      fmt_quantity(t["energy_mwh"]) if t["energy_mwh"] is not None else "?"]
            if priced:
                cells.append(fmt_quantity(g["effective_cost"]) if g.get("effective_cost") is not None else "-")
        rows.append(cells)
    return cols, rows, notes


def _implausible(plan) -> bool:
    return bool(plan.plausibility and plan.plausibility.get("above_published"))


def implausible_lines(r) -> list[str]:
    """One line per row whose plan #1 is above every published run of its class (the MFU cell's
    `!`; llmpar.evidence.plausibility), with its step and days at that run's MFU (terminal and `--html`)."""
    out = []
    for row in r.rows:
        if not row.ok or not _implausible(row.plan):
            continue
        pl = row.plan.plausibility
        t_best = pl.get("step_time_at_best_s")
        days = ""
        if t_best and row.training and row.training.get("days") is not None:
            days = f", {fmt_days(row.training['days'] * t_best / row.plan.step_time_s)} days"
        at = f"; at that MFU: step {secs_text(t_best)}{days}" if t_best else ""
        out.append(f"! {row.hardware} x {row.gpus:,}: MFU {row.plan.mfu_full_attention * 100:.1f} % (attention in full) "
                   f"is above the best published run of its class ({pl['class']}: {pl['best_published_mfu'] * 100:.1f} %, "
                   f"{pl['best_source']}) by more than llmpar's errors on it (x{pl['class_factor']:.2f}){at}")
    return out


def deadline_lines(r) -> list[str]:
    """`--deadline`'s answer per hardware profile, one line each (terminal and `--html`)."""
    if r.deadline is None:
        return []
    out = []
    for name, d in r.deadline["by_hardware"].items():
        if d is None:
            out.append(f"deadline {fmt_days(r.deadline['days'])} days: no swept count of {name} makes it "
                       "(add larger counts to --gpus)")
        else:
            cost = f", cost {fmt_quantity(d['cost'])}" if d.get("cost") is not None else ""
            out.append(f"deadline {fmt_days(r.deadline['days'])} days: {name} needs {d['gpus']:,} GPUs "
                       f"({fmt_days(d['effective_days'])} days with failures and checkpoints{cost})")
    return out


def legend(r) -> str:
    """The line under the table that says what its abbreviations and columns mean."""
    level = next((x.plan.interval["level"] for x in r.rows if x.ok and x.plan.interval), None)
    has_t = r.tokens is not None
    flagged = any(x.ok and _implausible(x.plan) for x in r.rows)
    return ("layout: tp pp dp (cp ep when > 1), z = ZeRO stage, "
            "sel/full = recompute (full:N: N layers per chunk), off:N = N layers' activations offloaded, b = micro-batch, m = micro-batches per step"
            + (f"; days ({(level or 0) * 100:.0f} %): the interval from published runs like it, * = extrapolated (no "
               "published run of its class; --json has the evidence)" if has_t and level is not None else "")
            + ("; eff. days (goodput %): with failures, checkpoints and restarts, days / goodput; eff. cost the same; "
               "GPU-hours and MWh ideal (docs/sweep.md, Goodput; --json has both)" if has_t else "")
            + ("; ! = MFU above every published run of its class (--json: plan.plausibility)" if flagged else ""))
