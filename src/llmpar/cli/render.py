"""Shared rich rendering helpers for the commands (memory, step, plan, ...).

Generic on purpose: a breakdown table (component, value, share, bar, note) whose values are
formatted by a caller-supplied function (bytes for `memory`, seconds for `step`), a one-line
verdict, the assumptions list, and an --explain table of terms (name, value, formula, values,
source). rich is imported lazily, inside the functions.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from llmpar.units import unit_scale

_BLOCKS = " ▏▎▍▌▋▊▉█"


def fit_columns(names: list[str], rows: list[list[str]], width: int, drop_order: Sequence[str],
                caps: dict[str, int] | None = None) -> tuple[list[int], list[str]]:
    """(indices of the columns kept, names left out): the columns of ``drop_order`` go, in that
    order, until every kept cell fits whole in ``width`` with the three-space gaps box.SIMPLE_HEAD
    lays out; ``caps``: the width a column that wraps or folds needs at least (its cells' longest
    otherwise). The tables that drop columns instead of letting rich elide their cells (sweep,
    calibrate runs) share it."""
    caps = caps or {}

    def size(i):
        longest = max([len(names[i])] + [len(r[i]) for r in rows])
        return min(longest, caps[names[i]]) if names[i] in caps else longest

    keep = list(range(len(names)))
    dropped: list[str] = []
    for name in drop_order:
        if sum(size(i) for i in keep) + 3 * (len(keep) - 1) <= width:
            break
        keep.remove(names.index(name))
        dropped.append(name)
    return keep, dropped


def layout_short(d: dict[str, Any], searched: frozenset | set = frozenset()) -> str:
    """A layout in one cell, as sweep and calibrate runs print it: ``tp8 pp4 dp2 cp2 z1 sel b1 m16
    v5`` (cp, ep, etp when they differ from 1 / tp; recompute when not none; v with pp > 1). Knobs
    in ``searched`` (a run did not state them; calibrate runs chose them) carry a ``*``. Keys
    missing from ``d`` are left out."""
    def mark(key, text):
        return text + ("*" if key in searched else "")

    parts = [f"tp{d.get('tp', 1)}", f"pp{d.get('pp', 1)}", f"dp{d.get('dp', '?')}"]
    if (d.get("cp") or 1) > 1:
        parts.append(f"cp{d['cp']}")
    if (d.get("ep") or 1) > 1:
        parts.append(f"ep{d['ep']}")
    if d.get("etp") and d["etp"] != d.get("tp", 1):
        parts.append(f"etp{d['etp']}")
    if "zero" in d:
        parts.append(mark("zero", f"z{d['zero']}"))
    if "recompute" in d:
        rec = recompute_label(d, short=True)
        if rec != "none" or "recompute" in searched:
            parts.append(mark("recompute", rec))
    if "micro_batch" in d:
        parts.append(mark("micro_batch", f"b{d['micro_batch']}"))
    if "microbatches" in d:
        parts.append(mark("microbatches", f"m{d['microbatches']}"))
    if (d.get("pp") or 1) > 1 and (d.get("virtual_stages") or 1) > 1:
        parts.append(mark("virtual_stages", f"v{d['virtual_stages']}"))
    return " ".join(parts)


def recompute_label(d: dict[str, Any], short: bool = False) -> str:
    """The recompute mode of a ``parallel`` dict: none, selective, full, or 'full, N layers per
    chunk' ('full:N' when ``short``) with --recompute-layers; 'none, N layers' activations
    offloaded' ('off:N') with --offload-layers."""
    rec = d["recompute"]
    if short:
        rec = {"selective": "sel"}.get(rec, rec)
    n = d.get("recompute_layers") or 0
    if d["recompute"] == "full" and n:
        return f"{rec}:{n}" if short else f"{rec}, {n} layer{'s' if n > 1 else ''} per chunk"
    off = d.get("offload_layers") or 0
    if off:
        return f"off:{off}" if short else f"{rec}, {off} layer{'s' if off > 1 else ''}' activations offloaded"
    return rec


def make_console(**kw):
    """A rich Console whose broken pipe (``llmpar plan ... | head -1``) reaches the entry point
    as a BrokenPipeError (cli/main.py: exit 0 quietly), instead of rich's own SystemExit(1), the
    "nothing feasible" code. Every command's console is made here."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return _Console(**kw)


def console(pipe_width: int = 120):
    """A rich Console on the current stdout; when not a terminal, ``COLUMNS`` wide if the
    environment sets it (40 to 1,000 columns: a script that pipes `llmpar plan` at 80 gets the
    80-column tables), else ``pipe_width``, wide enough for the command's tables (plan 140, sweep
    and validate 150-160: until 2026-12-04 those set their width and ignored COLUMNS)."""
    c = make_console()
    if c.is_terminal:
        return c
    try:
        width = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        width = 0
    return make_console(width=width if 40 <= width <= 1000 else pipe_width, highlight=False)


def bar(fraction: float, width: int = 24) -> str:
    """A horizontal bar of ``width`` cells filled to ``fraction`` (eighth-cell resolution)."""
    if not math.isfinite(fraction) or fraction <= 0:
        return ""
    eighths = int(round(min(fraction, 1.0) * width * 8))
    full, rem = divmod(eighths, 8)
    return "█" * full + (_BLOCKS[rem] if rem else "")


def bytes_formatter(units: str = "gb", digits: int = 2) -> tuple[Callable[[float], str], str]:
    """(format function, unit name) for memory in GB (1e9, default) or GiB."""
    scale, name = unit_scale(units)
    return (lambda n: f"{n / scale:,.{digits}f}"), name


def breakdown_table(
    rows: Sequence[tuple[str, float, str]],
    *,
    title: str | None = None,
    value_header: str = "value",
    fmt: Callable[[float], str] = str,
    total: float | None = None,
    total_label: str = "total",
    total_note: str = "",
    bar_width: int = 24,
    note_header: str = "",
):
    """A rich Table: component | value | share | bar | note, plus a total row.

    ``rows`` are (label, value, note); share is value / total (total defaults to the sum).
    Rows with value 0 are kept (they say something, e.g. no KV cache in training)."""
    from rich.table import Table

    from rich import box

    tot = float(sum(v for _, v, _ in rows) if total is None else total)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  header_style="bold")
    table.add_column("component")
    table.add_column(value_header, justify="right")
    table.add_column("share", justify="right")
    table.add_column("", no_wrap=True, style="cyan")
    table.add_column(note_header, style="dim")
    for label, value, note in rows:
        share = value / tot if tot else 0.0
        table.add_row(label, fmt(value), f"{share * 100:.1f}%", bar(share, bar_width), note)
    table.add_section()
    table.add_row(f"[bold]{total_label}[/bold]", f"[bold]{fmt(tot)}[/bold]", "100.0%", "", total_note)
    return table


def verdict(ok: bool, text: str, ok_word: str = "FITS", bad_word: str = "DOES NOT FIT"):
    """One line: a green ok_word or a red bad_word, then the text."""
    from rich.text import Text

    line = Text()
    line.append(ok_word if ok else bad_word, style="bold green" if ok else "bold red")
    line.append(f"  {text}")
    return line


def header(title: str, pairs: Iterable[tuple[str, Any]]):
    """'title · k v · k v' as one dim-styled line."""
    from rich.text import Text

    line = Text()
    line.append(title, style="bold")
    for key, value in pairs:
        line.append("  ·  ", style="dim")
        line.append(f"{key} ", style="dim")
        line.append(str(value))
    return line


def print_assumptions(con, notes: Sequence[str], title: str = "assumed") -> None:
    for note in notes:
        con.print(f"[dim]{title}:[/dim] {note}", highlight=False)


def terms_table(terms: Sequence[Any], fmt: Callable[[float], str], value_header: str = "value", title: str | None = None,
                formats: dict[str, Callable[[float], str]] | None = None):
    """--explain: every term with its value, formula, substituted values and source.

    ``terms`` are objects with component, name, bytes (or value), formula, values, source;
    ``formats`` overrides the value format per component (e.g. parameter counts)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False, header_style="bold", expand=False)
    table.add_column("component", style="dim")
    table.add_column("term")
    table.add_column(value_header, justify="right")
    table.add_column("formula", style="cyan")
    table.add_column("values")
    table.add_column("source", style="dim")
    for t in terms:
        value = getattr(t, "bytes", None)
        if value is None:
            value = getattr(t, "value")
        f = (formats or {}).get(t.component, fmt)
        table.add_row(t.component, t.name, f(value), t.formula, t.values, t.source)
    return table


def simple_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None,
                 right: Sequence[str] = ()):
    """A plain rich Table with the given columns; columns named in ``right`` are right-aligned."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  header_style="bold")
    for c in columns:
        table.add_column(c, justify="right" if c in right else "left")
    for r in rows:
        table.add_row(*[str(x) for x in r])
    return table


def interval_text(interval: dict[str, Any]) -> str:
    """``80 %; 34 rows from 4 sources of megatron-core · hopper · ...`` or, for a class no
    published run belongs to, ``80 %; extrapolated: no published run of this class (...)``."""
    ev = interval["evidence"]
    pct = f"{interval['level'] * 100:.0f} %"
    if not ev["extrapolated"]:
        return f"{pct}; {ev['rows']} rows from {ev['sources']} source{'s' * (ev['sources'] != 1)} of {ev['class']}"
    if not ev["rows"]:
        return f"{pct}; extrapolated: no published run of this class ({ev['class']}) nor of any class above it"
    return (f"{pct}; extrapolated: no published run of this class ({ev['class']}); from {ev['rows']} rows of "
            f"{ev['used_class']}, widened")


def band(iv: dict[str, Any] | None, fmt: Callable[[float], str]) -> str:
    """``  (lo-hi)`` after a serving figure from its band ({low, high}: serving/evidence.interval_json);
    empty where the figure has none."""
    return f"  ({fmt(iv['low'])}-{fmt(iv['high'])})" if iv else ""


def interval_line(interval: dict[str, Any], step_time_s: float) -> str:
    """The line under a step-time figure: its bounds for time, throughput and MFU, and the evidence."""
    from llmpar.units import fmt_seconds

    lo, hi = interval["step_time_s"]
    t_lo, t_hi = interval["tokens_per_s"]
    m_lo, m_hi = interval["mfu"]
    return (f"  {fmt_seconds(step_time_s)} ({fmt_seconds(lo)}-{fmt_seconds(hi)}), {t_lo:,.0f}-{t_hi:,.0f} tokens/s, "
            f"MFU {m_lo * 100:.1f}-{m_hi * 100:.1f} % ({interval_text(interval)})")
