"""Image plots for `--plot FILE.png|svg` (issue 10, "Plots and the terminal").

One function per figure; each takes the result object the command already computed and returns
a matplotlib Figure (so tests can inspect its axes, lines, bars and legend); :func:`save` writes it.
No cost formula lives here: a figure draws what the result holds.

matplotlib is an optional extra (``pip install 'llmpar[plot]'``) and is imported only inside
these functions, never at module import, so `llmpar --help` and commands without --plot do not
pay for it. A missing matplotlib is one line and exit 2 (:func:`require`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmpar.errors import UserError

FORMATS = (".png", ".svg")
INSTALL = "pip install 'llmpar[plot]'"

# the memory components of a stage bar, bottom to top: (label, how to read it from a stage row)
STAGE_PARTS = ("weights", "gradients", "optimizer", "activations", "buffers", "allocator", "runtime")
SCHEDULE_COLOURS = {"F": "tab:blue", "B": "tab:green", "W": "gold"}
SCHEDULE_WORDS = {"F": "forward", "B": "backward", "W": "weight gradient"}
IDLE_COLOUR = "0.85"


def check_path(path) -> Path:
    """The --plot path: .png or .svg (bad input otherwise)."""
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise UserError(f"--plot {path}: the image must end in .png or .svg")
    return p


def require() -> None:
    """matplotlib is importable, or one line naming the extra to install (exit 2)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UserError(f"--plot needs matplotlib: {INSTALL} (or leave out --plot)") from None


def _plt():
    require()
    import matplotlib

    matplotlib.use("Agg")   # files only: no display needed, no GUI backend imported
    import matplotlib.pyplot as plt

    return plt


def save(fig, path) -> Path:
    """Write ``fig`` to ``path`` (.png or .svg) and release it."""
    from llmpar.outputs import refuse_read

    import os

    p = check_path(path)
    refuse_read(p, "--plot")     # never over a file the command read (llmpar.outputs)
    plt = _plt()
    tmp = p.with_name(f".{p.name}.llmpar-{os.getpid()}.tmp")   # temp file + rename, as llmpar.outputs.write_text
    try:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format=p.suffix[1:].lower())
        os.replace(tmp, p)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise UserError(f"cannot write {p}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return p


def _scale(units: str) -> tuple[float, str]:
    from llmpar.units import unit_scale

    return unit_scale(units)


# ------------------------------------------------------------------------------------- plan

def plan_figure(r, units: str = "gb", max_families: int = 12):
    """Time-memory frontier of `llmpar plan`: every feasible layout as a point (step time vs memory
    per GPU), coloured by (tp, pp) — or by schedule when there are more than ``max_families``
    (tp, pp) pairs — the frontier as a line and #1 marked. Needs ``r.points`` (plan(keep_points=True))."""
    import numpy as np

    from llmpar.parallel import SCHEDULES

    if r.points is None:
        raise UserError("the plan holds no candidate points to draw (plan(..., keep_points=True))")
    plt = _plt()
    scale, unit = _scale(units)
    pts = r.points
    t = np.asarray(pts["step_time_s"], dtype=float)
    m = np.asarray(pts["memory_bytes"], dtype=float) / scale
    tp, pp, sched = (np.asarray(pts[k]) for k in ("tp", "pp", "schedule"))
    fig, ax = plt.subplots(figsize=(9, 6))
    pairs = sorted(set(zip(tp.tolist(), pp.tolist())))
    if len(pairs) <= max_families:
        groups = [(f"tp={a}, pp={b}", (tp == a) & (pp == b)) for a, b in pairs]
        by = "layout (tp, pp)"
    else:
        groups = [(SCHEDULES[c] if int(c) < len(SCHEDULES) else str(c), sched == c) for c in sorted(set(sched.tolist()))]
        groups = [(("no pipeline" if name == "1f1b" and np.all(pp[mask] == 1) else name), mask) for name, mask in groups]
        by = "schedule"
    for name, mask in groups:
        # the cloud (tens of thousands of points) is drawn as an image inside a vector file: an SVG of
        # one <path> per point was 4.9 MB for llama-3-70b on 512 GPUs; axes, frontier and text stay vector
        ax.scatter(m[mask], t[mask], s=10, alpha=0.6, label=name, rasterized=t.size > 2000)
    front = np.asarray(pts["frontier"], dtype=bool)
    order = np.argsort(m[front])
    ax.plot(m[front][order], t[front][order], "-", color="black", linewidth=1.5, drawstyle="steps-post",
            label=f"frontier ({int(front.sum())} layouts)")
    b = int(pts["best"])
    ax.scatter([m[b]], [t[b]], marker="*", s=250, color="red", edgecolor="black", zorder=5, label="#1")
    ax.axvline(r.capacity_bytes / scale, color="grey", linestyle="--", linewidth=1, label=f"HBM {r.capacity_bytes / scale:.1f} {unit}")
    ax.set_xlabel(f"memory per GPU ({unit})")
    if t.size and float(np.max(t)) > 10 * float(np.min(t)):
        # a few slow layouts (36,000 s against #1's 11 s) flattened the frontier on a linear axis
        # (newcomer review, defect 9): a log axis keeps every decade readable
        ax.set_yscale("log")
        ax.set_ylabel("step time (s, log scale)")
    else:
        ax.set_ylabel("step time (s)")
    ax.set_title(f"llmpar plan {r.model} on {r.gpus:,} x {r.hardware}: {t.size:,} feasible layouts")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", title=f"colour = {by}", title_fontsize="small", loc="best")
    return fig


# ------------------------------------------------------------------------------------ validate

def validate_figure(result):
    """`validate --html`: each source's leave-one-source-out speed errors as predicted throughput /
    published - 1 (every row a dot, whatever metric it was published in: validate.crossval's
    residual is ln(t_measured / t_predicted), so the error is exp(residual) - 1), sources sorted by
    their median. Rows without a leave-one-source-out prediction are left out."""
    import math

    import numpy as np
    from matplotlib.ticker import FixedLocator, FuncFormatter

    from llmpar.validation.crossval import kind_of

    plt = _plt()
    by: dict[str, list[float]] = {}
    for row in result.rows:
        res = row.get("cv_residual")
        if res is not None and kind_of(row["metric"]) == "speed" and math.isfinite(res):
            by.setdefault(row["source"], []).append(math.expm1(res))
    names = sorted(by, key=lambda n: float(np.median(by[n])))
    fig, ax = plt.subplots(figsize=(9, max(3.0, 0.3 * len(names) + 1.5)))
    for i, n in enumerate(names):
        v = np.asarray(by[n]) * 100
        jitter = (np.arange(v.size) % 7 - 3) * 0.05
        ax.scatter(v, np.full(v.size, i) + jitter, s=8, alpha=0.5, rasterized=v.size > 2000)
        ax.plot([float(np.median(v))], [i], "k|", markersize=14)
    ax.axvline(0, color="grey", linewidth=1)
    ax.set_yticks(range(len(names)), names, fontsize="small")
    ax.set_xscale("symlog", linthresh=20)
    ax.xaxis.set_major_locator(FixedLocator([-50, -20, -10, 0, 10, 20, 100, 1000]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:+.0f} %" if v else "0"))
    ax.xaxis.set_minor_locator(FixedLocator([]))
    ax.set_xlabel("leave-one-source-out error: predicted throughput / published - 1 (log beyond ±20 %)")
    ax.set_title(f"llmpar validate: {sum(len(v) for v in by.values()):,} speed rows from {len(names)} sources, "
                 "each out of its own fit (| = median; right of 0 = predicted too fast)")
    ax.grid(True, axis="x", alpha=0.3)
    return fig


# ------------------------------------------------------------------------------------ sweep

def _human(v: float, _pos=None) -> str:
    """Axis labels in human units: 1.2M, 350k, 42 (tokens/s, GPU-hours, cost)."""
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:g}{suffix}"
    return f"{v:g}"


def _gpu_ticks(ax, counts) -> None:
    """The swept GPU counts themselves as the log-axis ticks (256, 512, ... 4,096, not 2^8)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ticks = sorted(set(counts))
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{int(round(v)):,}"))
    if len(ticks) > 6:
        for label in ax.get_xticklabels():
            label.set_rotation(45)


def sweep_figure(r):
    """`llmpar sweep`: tokens/s, MFU and (with --tokens) days to train vs GPUs, one line per hardware;
    with a price, a cost panel; GPU counts as the ticks, human units on the axes; days and cost with
    failures and checkpoints (goodput) where it was computed, as the table's eff. columns."""
    from matplotlib.ticker import FuncFormatter

    plt = _plt()
    has_days = r.tokens is not None
    priced = has_days and any(row.ok and row.training and row.training.get("cost") is not None for row in r.rows)
    panels = [("tokens/s", "tokens/s"), ("MFU (%)", "mfu")] + ([("days to train", "days")] if has_days else []) \
        + ([("cost to train", "cost")] if priced else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.5), squeeze=False)
    axes = axes[0]
    counts = []

    def eff(row, key):
        t = row.training
        if not t:
            return float("nan")
        g = t.get("goodput") or {}
        v = g.get("effective_days" if key == "days" else "effective_cost") if g else None
        return v if v is not None else (t.get(key) if t.get(key) is not None else float("nan"))

    for name in r.hardware:
        ok = [row for row in r.rows if row.hardware == name and row.ok]
        x = [row.gpus for row in ok]
        counts += x
        values = {"tokens/s": [row.plan.tokens_per_s for row in ok], "mfu": [row.plan.mfu * 100 for row in ok],
                  "days": [eff(row, "days") for row in ok], "cost": [eff(row, "cost") for row in ok]}
        for ax, (_, key) in zip(axes, panels):
            ax.plot(x, values[key], "o-", label=name)
    for ax, (label, key) in zip(axes, panels):
        ax.set_xscale("log", base=2)
        if counts:
            _gpu_ticks(ax, counts)
        ax.set_xlabel("GPUs")
        ax.set_ylabel(label + (" (with failures and checkpoints)" if key in ("days", "cost") else ""))
        if key in ("tokens/s", "cost"):
            ax.yaxis.set_major_formatter(FuncFormatter(_human))
        ax.set_title(label + " vs GPUs")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small", title="hardware", title_fontsize="small")
    budget = ""
    if has_days:
        from llmpar.cli.training import fmt_tokens

        budget = f", {fmt_tokens(r.tokens)} tokens"
    fig.suptitle(f"llmpar sweep {r.model} (global batch {r.global_batch:,} x seq {r.seq:,}{budget})")
    fig.tight_layout()
    return fig


def serve_frontier_figure(r):
    """`llmpar serve-plan --plot`: output tokens/s per GPU against tokens/s per user (1 / TPOT) for
    every candidate's operating points, the non-dominated frontier as a line, the chosen deployment
    marked: the plot serving engineers read."""
    from matplotlib.ticker import FuncFormatter

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 5))
    for c in r["candidates"] + r["missed"]:
        pts = [p for p in c.points if p["tpot_s"] and p["tpot_s"] == p["tpot_s"]]
        if pts:
            ax.scatter([1.0 / p["tpot_s"] for p in pts], [p["output_tokens_per_s_per_gpu"] for p in pts], s=8, alpha=0.35,
                       label=f"{c.engine} {c.weights} tp{c.tp} pp{c.pp}")
    f = r["frontier"]
    if f:
        ax.plot([p["tokens_per_s_per_user"] for p in f], [p["tokens_per_s_per_gpu"] for p in f], "k-", lw=1.5,
                label="frontier (every point; the TTFT target not applied)")
    if r["candidates"]:
        b = r["candidates"][0]
        ax.scatter([1.0 / b.tpot_s], [b.output_tokens_per_s / b.gpus], marker="*", s=200, c="red", zorder=5,
                   label=f"#1 {b.engine} tp{b.tp} pp{b.pp} x{b.replicas}")
    if r.get("tpot_s"):
        ax.axvline(1.0 / r["tpot_s"], ls="--", c="grey", lw=1, label="TPOT target")
    ax.set_xlabel("output tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.yaxis.set_major_formatter(FuncFormatter(_human))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="x-small", ncol=2)
    ax.set_title(f"llmpar serve-plan {r['model']} on {r['hardware']} ({r['isl']:,} in / {r['osl']:,} out)")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------- memory

def stage_parts(stage: dict[str, Any]) -> dict[str, float]:
    """A `memory --per-stage` row as the bar's parts (bytes): the row's own components, the
    allocator overhead being its reserved - allocated pool."""
    return {"weights": stage["weights_bytes"], "gradients": stage["gradients_bytes"],
            "optimizer": stage["optimizer_bytes"], "activations": stage["activations_bytes"],
            "buffers": stage["buffers_bytes"], "allocator": stage["reserved_bytes"] - stage["allocated_bytes"],
            "runtime": stage["runtime_bytes"]}


def memory_figure(r, units: str = "gb"):
    """`llmpar memory --per-stage`: one stacked bar per pipeline stage (weights, gradients, optimizer,
    activations, buffers, allocator, runtime) against the HBM line."""
    if not r.stages:
        raise UserError("--plot draws the per-stage training memory: it needs a training layout (not --inference "
                        "or --params)")
    plt = _plt()
    scale, unit = _scale(units)
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(r.stages) + 3), 5))
    x = [s["stage"] for s in r.stages]
    bottom = [0.0] * len(x)
    for part in STAGE_PARTS:
        h = [stage_parts(s)[part] / scale for s in r.stages]
        ax.bar(x, h, bottom=bottom, label=part, width=0.7)
        bottom = [b + v for b, v in zip(bottom, h)]
    cap = r.capacity_bytes / scale
    ax.axhline(cap, color="red", linestyle="--", linewidth=1.5, label=f"HBM {cap:.1f} {unit}")
    ax.set_xticks(x)
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel(f"memory per GPU ({unit})")
    p = r.parallel
    ax.set_title(f"llmpar memory {r.model} on {r.hardware}: tp={int(p.tp)} pp={int(p.pp)} dp={int(p.dp)} "
                 f"zero={int(p.zero)} ({r.verdict.replace('_', ' ').upper()})")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    return fig


# ----------------------------------------------------------------------------------- bubble

def bubble_figure(result: dict):
    """`llmpar bubble`: the simulated schedule as a Gantt chart, one row per stage; forward,
    backward (and weight-gradient) slots coloured, idle time grey."""
    if "timeline" not in result:
        raise UserError(f"--plot: the {result['schedule']} schedule with p={result['pp']}, m={result['microbatches']} "
                        "is not simulated (see the note above), so there is no chart to draw")
    plt = _plt()
    tl = result["timeline"]
    total = float(tl["total_units"])
    n = len(tl["stages"])
    fig, ax = plt.subplots(figsize=(min(4 + total * 0.25, 24), 1 + 0.5 * n))
    interleaved = result["schedule"] == "interleaved"
    seen: set[str] = set()
    backward = {"zb-h1": "backward (input gradient)", "dualpipe": "backward (input gradient when its W is deferred)"}
    words = dict(SCHEDULE_WORDS, B=backward.get(result["schedule"], SCHEDULE_WORDS["B"]))
    for i, row in enumerate(tl["stages"]):
        y = n - 1 - i        # stage 0 on top, as the terminal drawing
        ax.broken_barh([(0, total)], (y - 0.4, 0.8), facecolors=IDLE_COLOUR,
                       label="idle" if "idle" not in seen else None)
        seen.add("idle")
        for kind in SCHEDULE_COLOURS:
            spans = [(s["start"], s["end"] - s["start"]) for s in row if s["kind"] == kind]
            if spans:
                ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=SCHEDULE_COLOURS[kind], edgecolor="white",
                               label=words[kind] if kind not in seen else None)
                seen.add(kind)
        if total <= 120:
            for s in row:
                text = f"{s['kind']}{s['microbatch']}" + (f":{s['chunk']}" if interleaved else "")
                ax.text((s["start"] + s["end"]) / 2, y, text, ha="center", va="center", fontsize=6)
    ax.set_yticks(range(n))
    row_name = "device" if result["schedule"] == "dualpipe" else "stage"   # DualPipe: stages i and p-1-i
    ax.set_yticklabels([f"{row_name} {n - 1 - y}" for y in range(n)])
    ax.set_xlim(0, total)
    ax.set_xlabel("time (units: forward of one chunk = 1)")
    head = f"{result['schedule']}: p={result['pp']}, m={result['microbatches']}"
    if interleaved:
        head += f", v={result['virtual_stages']}"
    ax.set_title(f"llmpar bubble {head}; idle {tl['idle_fraction']:.3f} of stage-time")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


# -------------------------------------------------------------------------------- calibrate

def calibrate_check_figure(result):
    """`llmpar calibrate check`: measured vs predicted busbw over message size, per log file."""
    from llmpar.calibrate.check import chart_points

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    for f in result.files:
        s, m, p = chart_points(result, f.file)
        name = Path(f.file).name          # "dir/log.txt (table 2)" -> "log.txt (table 2)"
        line = ax.plot(s, m, "o", label=f"{name} measured")[0]
        ax.plot(s, p, "-", color=line.get_color(), label=f"{name} predicted")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"llmpar calibrate check: {result.hardware}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    return fig


def calibrate_runs_figure(result):
    """`llmpar calibrate runs`: predicted vs measured step time (and peak memory, when measured),
    before and after the fit, with the y = x line."""
    plt = _plt()
    rows = result.rows
    fitted = bool(result.parameters)
    panels = [("step time (s)", "measured_step_time_s", "predicted_step_time_s", 1.0)]
    if any(r["measured_memory_bytes"] is not None for r in rows):
        panels.append(("peak memory (GiB)", "measured_memory_bytes", "predicted_memory_bytes", 2**30))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5.5), squeeze=False)
    for ax, (label, meas, pred, scale) in zip(axes[0], panels):
        have = [r for r in rows if r[meas] is not None]
        x = [r[meas] / scale for r in have]
        ax.scatter(x, [r[f"{pred}_before"] / scale for r in have], s=14, alpha=0.7,
                   label=f"{result.base.name} (before)")
        if fitted:
            ax.scatter(x, [r[f"{pred}_after"] / scale for r in have], s=14, alpha=0.7, marker="^",
                       label="fitted (after)")
        vals = x + [r[f"{pred}_before"] / scale for r in have] + ([r[f"{pred}_after"] / scale for r in have]
                                                                   if fitted else [])
        lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
        ax.plot([lo, hi], [lo, hi], "--", color="black", linewidth=1, label="y = x")
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        ax.set_title(f"{label}: {len(have)} runs")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"llmpar calibrate runs: {len(rows)} runs against {result.base.name}")
    fig.tight_layout()
    return fig


__all__ = ["FORMATS", "INSTALL", "STAGE_PARTS", "bubble_figure", "calibrate_check_figure", "calibrate_runs_figure",
           "check_path", "memory_figure", "plan_figure", "require", "save", "stage_parts", "sweep_figure"]
