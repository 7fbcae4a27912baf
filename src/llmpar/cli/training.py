"""Options and lines shared by `plan`, `step` and `sweep` for time, energy and cost to train a
token budget (numbers from :mod:`llmpar.cost.training`; docs/sweep.md)."""

from __future__ import annotations

import math

import click

from llmpar.units import fmt_watts


_TRAINING_OPTIONS = [
    click.option("--tokens", default=None, metavar="N",
                 help="Token budget to train on, e.g. 15T, 300B, 2.5e12: adds days, GPU-hours, energy and cost."),
    click.option("--pue", default=None, type=float,
                 help="Facility power usage effectiveness (>= 1) multiplying the IT energy (default 1: IT only)."),
    click.option("--gpu-hour-price", default=None, metavar="PRICE",
                 help="Your price of one GPU-hour (any currency), one for all or per profile: 2.5 or "
                      "h100-sxm=2.5,b200=4.5 (default: gpu_hour_price in your hardware profile; none ships)."),
    click.option("--power-per-gpu", default=None, metavar="W",
                 help="Average power per GPU including its node share, e.g. 900W (default: the profile's "
                      "maximum node power / GPUs per node: an upper bound)."),
    click.option("--failure-rate", default=None, metavar="PER_GPU_HOUR",
                 help="Failures per GPU-hour for the goodput (default Llama 3's 2.0e-5: 419 in 54 days on 16K H100s)."),
    click.option("--restart-time", default=None, metavar="T",
                 help="From a failure to training again, e.g. 10min, 300s (default 10 min, an assumption)."),
    click.option("--checkpoint-bandwidth", default=None, metavar="BW",
                 help="Checkpoint write bandwidth per node, e.g. 25GB/s (default: the node's scale-out NICs)."),
    click.option("--checkpoint", type=click.Choice(("sync", "async")), default=None,
                 help="Checkpoint saves stall training (sync, the default) or only copy to host memory (async)."),
    click.option("--interval-level", default=None, metavar="P",
                 help="Level of the intervals printed beside every time, throughput, MFU, day and cost figure, "
                      "e.g. 80% or 0.9 (default 80 %; docs/validation.md, Intervals)."),
]


def training_options(f):
    for opt in reversed(_TRAINING_OPTIONS):
        f = opt(f)
    return f


def fmt_quantity(x: float, digits: int = 3, billions: str = "G") -> str:
    """1.07M, 6.53k, 173, 12.8P - the significant figures a plan is worth (``billions="B"`` for token
    counts). Rounded first, so the suffix is the rounded value's (999,700 is 1M, not "1e+03k"); P up
    to 10^18, plain e-notation beyond (reliability review, item 33: 10,000T tokens read "1e+04T")."""
    if not math.isfinite(x):
        return f"{x}"
    r = float(f"{x:.{digits}g}")
    if abs(r) >= 1e18:
        return f"{x:.{digits}g}"
    for div, suffix in ((1e15, "P"), (1e12, "T"), (1e9, billions), (1e6, "M"), (1e3, "k")):
        if abs(r) >= div:
            return f"{r / div:.{digits}g}{suffix}"
    return f"{x:.{digits}g}" if abs(x) >= 1 else f"{x:.2g}"


def fmt_tokens(n: float) -> str:
    """15T, 300B, 2.5T tokens."""
    return fmt_quantity(n, 4, billions="B")


def fmt_days(d: float) -> str:
    return f"{d:,.1f}" if d >= 10 else f"{d:.2f}"


def training_line(t: dict) -> str:
    """One line: to train 15T tokens: 173.6 days (3,576,279 steps) · 4.27M GPU-hours · 5.44k MWh · cost 10.7M."""
    parts = [f"{fmt_days(t['days'])} days" + (f" ({t['steps']:,} steps)" if t.get("steps") is not None else ""),
             f"{fmt_quantity(t['gpu_hours'])} GPU-hours"]
    if t["energy_mwh"] is not None:
        parts.append(f"{fmt_quantity(t['energy_mwh'])} MWh at {fmt_watts(t['power_per_gpu_w'])} W per GPU x PUE "
                     f"{t['pue']:g}")
    else:
        parts.append("energy unknown")
    if t["cost"] is not None:
        parts.append(f"cost {fmt_quantity(t['cost'])} at {t['gpu_hour_price']:g} per GPU-hour")
    return f"to train {fmt_tokens(t['tokens'])} tokens: " + "  ·  ".join(parts)


def interval_line(iv: dict | None) -> str | None:
    """'80 % band: 125.7-199.8 days · 24.1k-38.4k GPU-hours · 30.8-48.9 MWh · cost 48.3k-76.7k' from a
    prediction's interval (None without one): the days, GPU-hours, energy and cost scale as the step
    time (evidence.speed_json), so a budget's figures carry the step's band (text had shown it only
    in sweep and --json)."""
    if not iv or "days" not in iv:
        return None
    parts = [f"{fmt_days(iv['days'][0])}-{fmt_days(iv['days'][1])} days",
             f"{fmt_quantity(iv['gpu_hours'][0])}-{fmt_quantity(iv['gpu_hours'][1])} GPU-hours"]
    if iv.get("energy_mwh"):
        parts.append(f"{fmt_quantity(iv['energy_mwh'][0])}-{fmt_quantity(iv['energy_mwh'][1])} MWh")
    if iv.get("cost"):
        parts.append(f"cost {fmt_quantity(iv['cost'][0])}-{fmt_quantity(iv['cost'][1])}")
    return f"{iv['level'] * 100:.0f} % band: " + "  ·  ".join(parts)


def print_training(con, t: dict | None, title: str = "") -> None:
    """The training line, its band and its assumptions (nothing when no --tokens)."""
    if t is None:
        return
    from llmpar.cli import render as R

    con.print()
    con.print((f"[bold]{title}[/bold] " if title else "") + training_line(t), highlight=False)
    band = interval_line(t.get("interval"))
    if band is not None:
        con.print("  " + band, highlight=False)
    g = t.get("goodput")
    if g is not None:
        con.print("  " + goodput_line(t), highlight=False)
    R.print_assumptions(con, t["assumptions"] + (g["assumptions"] if g else []))


def goodput_line(t: dict) -> str:
    """with failures and checkpoints: goodput 93.1 % -> 186.5 days · 4.6M GPU-hours · cost 11.5M (...)."""
    g = t["goodput"]
    if g["effective_days"] is None:
        return (f"with failures and checkpoints: goodput 0 %: the job fails every {g['mtbf_s'] / 3600:.3g} h, "
                f"faster than it can checkpoint and restart")
    parts = [f"{fmt_days(g['effective_days'])} days", f"{fmt_quantity(g['effective_gpu_hours'])} GPU-hours"]
    if g.get("effective_cost") is not None:
        parts.append(f"cost {fmt_quantity(g['effective_cost'])}")
    return (f"with failures and checkpoints: goodput {g['goodput'] * 100:.1f} % -> " + "  ·  ".join(parts)
            + f" (a failure every {g['mtbf_s'] / 3600:.3g} h, checkpoint every {g['checkpoint_interval_s'] / 60:.3g} min,"
            f" {g['checkpoint_stall_s']:.3g} s each)")
