"""Write the current nccl-tests text layout (what :func:`llmpar.calibrate.nccl_tests.parse_text`
reads back; used by ``llmpar calibrate bench``). Split from ``nccl_tests``."""

from __future__ import annotations

from typing import Iterable

from llmpar.calibrate.nccl_records import PROGRAMS, Measurement, ParsedLog, Row


def _float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: 2, 1, 0 decimals, then exponent form, whichever fits ``width``."""
    for fmt in (".2f", ".1f", ".0f"):
        s = f"{value:{width}{fmt}}"
        if len(s) <= width:
            return s
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


_BLOCK_BLANK = " " * 33


def format_block(m: Measurement | None) -> str:
    if m is None:
        return _BLOCK_BLANK
    wrong = "   N/A" if m.wrong is None else f"{m.wrong:6g}"
    return f"  {_float_str(m.time_us, 7)}  {_float_str(m.algbw_GBps, 6)}  {_float_str(m.busbw_GBps, 6)}  {wrong}"


def format_row(row: Row) -> str:
    lead = f"{row.size_bytes:12d}  {row.count:12d}  {row.type:>8s}  {(row.redop or 'none'):>6s}  {(-1 if row.root is None else row.root):6d}"
    return (lead + format_block(row.out_of_place) + format_block(row.in_place)).rstrip()


def header_lines() -> list[str]:
    """The three header lines of the current nccl-tests layout (root column, #wrong)."""
    e = ("", "", "", "", "")
    return [
        "#",
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place" % e,
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s" % (
            "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s" % (
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]


def to_text(log: ParsedLog, program: str | None = None, config_line: str | None = None,
            preamble: Iterable[str] = ()) -> str:
    """A :class:`ParsedLog` in the current nccl-tests text layout (what ``parse`` reads back)."""
    prog = program or next((p for p, c in PROGRAMS.items() if c == log.collective), "unknown_perf")
    out = [f"# {line}" for line in preamble]
    out.append(f"# Collective test starting: {prog}")
    if config_line:
        out.append(f"# {config_line}")
    out.append("#")
    out.append("# Using devices")
    for d in log.devices:
        out.append(f"#  Rank {d.rank:2d} Group {d.group:2d} Pid {d.pid or 0:6d} on {d.host:>10s} device {d.device:2d} "
                   f"[{d.bus}] {d.name}")
    out.extend(header_lines())
    out.extend(format_row(r) for r in log.rows)
    wrong_rows = sum(1 for r in log.rows if r.flagged)
    bus = [m.busbw_GBps for r in log.rows for m in r.blocks()]
    avg = sum(bus) / len(bus) if bus else 0.0
    out.append(f"# {'Out of bounds values':<20s} : {wrong_rows} {'FAILED' if wrong_rows else 'OK'}")
    out.append(f"# {'Avg bus bandwidth':<20s} : {avg:g} ")
    out.append("#")
    out.append(f"# Collective test concluded: {prog}")
    out.append("#")
    return "\n".join(out) + "\n"
