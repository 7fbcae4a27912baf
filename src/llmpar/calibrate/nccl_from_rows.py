"""What a table's rows alone say about it (split from ``nccl_infer``).

nccl-tests' ``size`` and ``count`` columns and its busbw/algbw factor (doc/PERFORMANCE.md of
github:NVIDIA/nccl-tests; :func:`llmpar.calibrate.nccl_records.bus_factor` states the factor once)
give the collective (:func:`infer_collective`) and bound the rank count (:func:`factor_interval`,
:func:`ranks_candidates`, :func:`size_ratio`) where the log does not state them;
:mod:`llmpar.calibrate.nccl_infer` records every such inference (docs/calibration.md, section 2).
"""

from __future__ import annotations

import math

import numpy as np

from llmpar.calibrate.nccl_records import _MAX_RANKS, TYPE_BYTES, Row, Section, bus_factor


def factor_interval(rows: list[Row]) -> tuple[float, float] | None:
    """The busbw/algbw factor every row agrees with, given what the printed rounding hides."""
    lo, hi, seen = 0.0, math.inf, False
    for r in rows:
        for m in r.blocks():
            ra, rb = m.resolution[1], m.resolution[2]
            if m.algbw_GBps - ra <= 0 or m.algbw_GBps < 100 * ra or m.busbw_GBps < 100 * rb:
                continue
            seen = True
            lo = max(lo, (m.busbw_GBps - rb) / (m.algbw_GBps + ra))
            hi = min(hi, (m.busbw_GBps + rb) / (m.algbw_GBps - ra))
    return (lo, hi) if seen else None


def ranks_candidates(collective: str, interval: tuple[float, float], lower: int = 1) -> tuple[int, float] | None:
    """Rank counts n whose busbw factor lies in ``interval``: (smallest, largest); largest is inf
    when every n up to 2^17 fits. None when no n fits. Evaluates the one factor formula on all n."""
    lo, hi = interval
    ns = np.arange(max(lower, 2), _MAX_RANKS + 1)
    f = np.asarray(bus_factor(collective, ns))
    hit = ns[(f >= lo - 1e-12) & (f <= hi + 1e-12)]
    if hit.size == 0:
        return None
    last = math.inf if hit[-1] == _MAX_RANKS else int(hit[-1])
    return int(hit[0]), last


def size_ratio(rows: list[Row]) -> tuple[set, int]:
    """Set of size / (count x typesize) over rows with a known type and count > 0."""
    ratios, used = set(), 0
    for r in rows:
        ts = TYPE_BYTES.get(r.type.lower())
        if ts and r.count > 0:
            ratios.add(r.size_bytes / (r.count * ts))
            used += 1
    return ratios, used


def infer_collective(sec: Section, rows: list[Row], ranks_hint: int | None) -> tuple[str | None, str]:
    ratios, used = size_ratio(rows)
    if not used:
        return None, "no row has a known data type and a non-zero count"
    if len(ratios) != 1:
        return None, f"size/count ratios differ between rows ({sorted(ratios)[:3]})"
    q = ratios.pop()
    has_redop = sec.columns is None or "redop" in sec.columns.lead
    has_root = sec.columns is None or "root" in sec.columns.lead
    if sec.columns is None:  # headerless: which columns a row carried decides
        has_redop = any(r.redop is not None for r in rows)
        has_root = any(r.root is not None for r in rows)
    reduces = has_redop and any(r.redop not in (None, "none", "") for r in rows)
    rooted = has_root and any(r.root is not None and r.root >= 0 for r in rows)
    ops = f"redop {rows[0].redop}" if has_redop else "no redop column"
    roots = f"root {rows[0].root}" if has_root else "no root column"
    if q == 1:
        why = f"size = count x typesize, {ops}, {roots}"
        if rooted:
            return ("reduce" if reduces else "broadcast"), why
        if not has_redop:
            return "send_recv", why + " (the old sendrecv layout)"
        if not reduces:
            return None, why + ": no collective prints that"
        iv = factor_interval(rows)
        if iv and iv[0] > 1.0 + 1e-9:
            return "all_reduce", why + f", busbw/algbw = {iv[0]:.4f}..{iv[1]:.4f} > 1"
        if ranks_hint and ranks_hint > 2:
            return "send_recv", why + f", busbw = algbw with {ranks_hint} ranks"
        return "all_reduce", why + ", busbw = algbw: an all_reduce on 2 ranks or a send_recv; assumed all_reduce (pass --collective)"
    if q > 1 and q == int(q):
        why = f"size = count x typesize x {int(q)}, {ops}, {roots}"
        if rooted:
            return "gather", why + ": gather or scatter (their rows look alike); assumed gather (pass --collective)"
        if reduces:
            if sec.columns is not None and "root" not in sec.columns.lead:
                return "reduce_scatter", why + " (old layout: reduce_scatter or all_to_all; assumed reduce_scatter)"
            return "reduce_scatter", why
        if not has_redop:
            return "all_gather", why + " (the old all_gather layout)"
        oop_checked = [r.out_of_place is not None and r.out_of_place.wrong is not None for r in rows]
        inp_na = [r.in_place is not None and r.in_place.wrong is None for r in rows]
        if all(oop_checked) and all(inp_na):
            return "all_to_all", why + ", #wrong checked out of place and N/A in place (nccl-tests' all_to_all)"
        if any(oop_checked) and not any(inp_na):
            return "all_gather", why + ", #wrong checked in both blocks"
        return "all_gather", why + ": all_gather or all_to_all (data check off); assumed all_gather (pass --collective)"
    return None, f"size/count ratio {q:g} fits no collective"
