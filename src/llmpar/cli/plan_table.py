"""The plan table's cells, shared by the terminal (cli/plan_cmd.py), `--html` (cli/report_html.py)
and the sweep table (cli/sweep_table.py): one home, so the three print the same figures."""

from __future__ import annotations

from llmpar.units import fmt_seconds


def equivalent_texts(p) -> list[str]:
    """Each layout tied with row ``p``, as the knobs where it differs from the row's ('zero=1')."""
    base = p.parallel.as_dict()
    out = []
    for e in p.equivalent:
        d = e.as_dict()
        out.append(",".join(f"{k}={knob_text(v)}" for k, v in d.items() if v != base[k]) or "same layout")
    return out


def knob_text(v):
    if isinstance(v, bool):
        return "on" if v else "off"
    return v


_SCHED_SHORT = {"interleaved": "int", "dualpipe": "dualpipe", "zb-h1": "zb-h1", "1f1b": "1f1b", "gpipe": "gpipe"}


def _sched(d: dict) -> str:
    if d["pp"] == 1:
        return "-"
    return _SCHED_SHORT[d["schedule"]] + (f" v{d['virtual_stages']}" if d["virtual_stages"] > 1 else "")


_TERM_SHORT = {"recompute": "recomp", "optimizer": "optim"}


def secs_text(t: float) -> str:
    """4 significant digits: 2.007 s, 198.1 ms, 707.7 s."""
    return fmt_seconds(t, significant=4)


def rate_text(x: float) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:.2f}{suffix}"
    return f"{x:.0f}"




def plan_columns(unit: str) -> list[tuple[str, bool]]:
    """The layout table's columns (name, right-aligned): the terminal and `--html` share them."""
    return [("#", True), ("tp", True), ("pp", True), ("dp", True), ("cp", True), ("ep", True), ("z", True),
            ("sp", False), ("rec", False), ("b", True), ("m", True), ("schedule", False), ("step", True),
            ("tokens/s", True), ("MFU", True), (f"mem {unit}", True), ("overhead", False)]


def plan_cells(p, fmt) -> list[str]:
    """One layout's cells, in :func:`plan_columns`' order."""
    from llmpar.cli import render as R

    d = p.parallel.as_dict()
    name, sec = p.largest_overhead()
    return [str(x) for x in (
        p.rank, d["tp"], d["pp"], d["dp"], d["cp"], _ep_cell(d), d["zero"], "on" if d["sp"] else "off",
        R.recompute_label(d, short=True), d["micro_batch"], d["microbatches"], _sched(d), secs_text(p.step_time_s),
        rate_text(p.tokens_per_s), f"{p.mfu * 100:.1f}%", _mem_cell(p, fmt),
        f"{_TERM_SHORT.get(name, name)} {secs_text(sec)}" if sec > 0 else "-")]


def _ep_cell(d) -> str:
    """ep, and the expert-TP degree when MoE parallel folding sets it apart from tp ('32 e1')."""
    return f"{d['ep']} e{d['etp']}" if d.get("etp", d["tp"]) != d["tp"] else str(d["ep"])


def _mem_cell(p, fmt) -> str:
    """Memory per GPU; a TIGHT row (within the stack's memory.uncertainty of the HBM) says so."""
    text = fmt(p.memory_bytes)
    return f"{text} TIGHT" if p.memory.get("verdict") == "tight" else text
