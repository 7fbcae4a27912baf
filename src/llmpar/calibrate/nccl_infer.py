"""What a parsed nccl-tests table lacks, inferred from what it states (split from ``nccl_tests``).

Collective, rank count, nodes and GPU come from the log where it states them (device list, NCCL
INFO lines, test program name) and are otherwise inferred from the rows (size/count ratio,
busbw/algbw factor); every inference is recorded in ``ParsedLog.inferred`` and every doubt in
``ParsedLog.notes``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from llmpar.calibrate.nccl_records import (
    _MAX_RANKS, _OLD_ERROR_LIMIT, GATHERED, TYPE_BYTES, ParsedLog, Row, Section, bus_factor, normalize_collective,
)
from llmpar.errors import UserError


def _factor_interval(rows: list[Row]) -> tuple[float, float] | None:
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


def _ranks_candidates(collective: str, interval: tuple[float, float], lower: int = 1) -> tuple[int, float] | None:
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


def _size_ratio(rows: list[Row]) -> tuple[set, int]:
    """Set of size / (count x typesize) over rows with a known type and count > 0."""
    ratios, used = set(), 0
    for r in rows:
        ts = TYPE_BYTES.get(r.type.lower())
        if ts and r.count > 0:
            ratios.add(r.size_bytes / (r.count * ts))
            used += 1
    return ratios, used


def _infer_collective(sec: Section, rows: list[Row], ranks_hint: int | None) -> tuple[str | None, str]:
    ratios, used = _size_ratio(rows)
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
        iv = _factor_interval(rows)
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


def finish(sec: Section, meta: dict[str, Any], file: str, index: int, overrides: dict[str, Any]) -> ParsedLog:
    notes: list[str] = []
    inferred: dict[str, str] = {}
    rows = sec.rows
    labels: Counter = meta["labels"]
    if len([lab for lab in labels if lab is not None]) > 1:
        keep = min(labels, key=lambda lab: (lab is None, int(lab) if lab and lab.isdigit() else 0))
        notes.append(f"rows came from several launcher ranks ({', '.join(sorted(str(x) for x in labels))}): each ran its "
                     f"own test (nccl-tests built without MPI?); using rank {keep}'s rows only")
        rows = [r for r in rows if r.label == keep]

    # --- devices: stated ranks / hosts / GPU
    devices = sec.devices
    dev_ranks = sorted({d.rank for d in devices})
    groups = Counter(d.group for d in devices)
    complete = bool(dev_ranks) and dev_ranks == list(range(len(dev_ranks)))
    if sec.json and devices and (sec.nthread or 1) * (sec.ngpus or 1) > 1:
        complete = False  # -J lists one device per process
    ranks: int | None = None
    ranks_src = ""
    if complete:
        if len(groups) > 1:
            g0 = next(d.group for d in devices if d.rank == 0)
            ranks = groups[g0]
            ranks_src = "device list"
            notes.append(f"the device list has {len(groups)} communicator groups (NCCL_TESTS_SPLIT); "
                         f"each collective runs over one group of {ranks} ranks")
        else:
            ranks, ranks_src = len(dev_ranks), "device list"
    elif sec.json and devices:
        ranks = len(devices) * (sec.nthread or 1) * (sec.ngpus or 1)
        ranks_src = "JSON device list x nthreads x ngpus"
    lower = (max(dev_ranks) + 1) if dev_ranks else 1
    if ranks is None and len(sec.info_nranks) == 1:
        ranks = next(iter(sec.info_nranks))
        ranks_src = "NCCL INFO 'nranks'"
        inferred["ranks"] = f"{ranks} from the NCCL INFO lines ('rank r nranks {ranks}')"

    # --- collective
    stated = None
    if sec.stated:
        try:
            stated = normalize_collective(sec.stated)
        except UserError:
            notes.append(f"unknown test program {sec.stated!r}: no collective model for it")
    collective = stated
    if collective is None and rows:
        collective, why = _infer_collective(sec, rows, ranks)
        if collective:
            inferred["collective"] = why
        else:
            notes.append(f"collective not stated and not inferable: {why}")
    if overrides.get("collective"):
        over = normalize_collective(overrides["collective"])
        if collective and collective != over:
            notes.append(f"collective {collective} in the log overridden by --collective {over}")
        collective = over
        inferred.pop("collective", None)

    # --- ranks from the rows
    if collective in GATHERED:
        ratios, used = _size_ratio(rows)
        if used and len(ratios) == 1:
            q = ratios.pop()
            if q == int(q) and q >= 1:
                if ranks is None:
                    ranks = int(q)
                    ranks_src = "size/count"
                    inferred["ranks"] = f"{ranks} = size / (count x typesize) ({collective} sizes count every rank's piece)"
                elif ranks != int(q):
                    notes.append(f"size / (count x typesize) = {q:g} but the {ranks_src} says {ranks} ranks")
    iv = _factor_interval(rows)
    if collective in ("all_reduce",) or collective in GATHERED:
        cands = _ranks_candidates(collective, iv, lower) if iv is not None else None
        if iv is not None and cands is None:
            notes.append(f"busbw/algbw ({iv[0]:.4f}..{iv[1]:.4f}) fits no rank count for {collective}")
        elif iv is not None:
            first, last = cands
            formula = "2(n-1)/n" if collective == "all_reduce" else "(n-1)/n"
            if ranks is None:
                if first == last:
                    ranks = int(first)
                    ranks_src = "busbw/algbw"
                    inferred["ranks"] = (f"{ranks} from busbw/algbw = {formula} ({iv[0]:.5f}..{iv[1]:.5f} over the rows)"
                                         + (f"; the partial device list shows ranks up to {lower - 1}" if dev_ranks else ""))
                else:
                    span = f"{first}..{last}" if math.isfinite(last) else f">= {first}"
                    notes.append(f"rank count not stated; busbw/algbw = {formula} allows n = {span}: pass --ranks")
            elif not first <= ranks <= last:
                notes.append(f"busbw/algbw ({iv[0]:.4f}..{iv[1]:.4f}) does not match {formula} for the "
                             f"{ranks} ranks of the {ranks_src}")
    if ranks is None and dev_ranks:
        notes.append(f"the device list is partial (ranks up to {lower - 1}): at least {lower} ranks")
    if overrides.get("ranks"):
        if ranks is not None and ranks != overrides["ranks"]:
            notes.append(f"{ranks} ranks ({ranks_src}) overridden by --ranks {overrides['ranks']}")
        ranks = int(overrides["ranks"])
        inferred.pop("ranks", None)

    # --- hosts / nodes
    hosts: list[str] = []
    nodes: int | None = None
    gpn: int | None = None
    if complete:
        hosts = list(dict.fromkeys(d.host for d in devices))
        nodes = len(hosts)
    elif ranks and sec.info_rank_host and set(sec.info_rank_host) >= set(range(ranks)):
        hosts = list(dict.fromkeys(sec.info_rank_host[r] for r in range(ranks)))
        nodes = len(hosts)
        inferred["nodes"] = f"{nodes} hosts in the NCCL INFO lines of all {ranks} ranks"
    else:
        seen_hosts = list(dict.fromkeys([d.host for d in devices] + list(sec.info_hosts)))
        hosts = seen_hosts
        max_dev = max([d.device for d in devices] + [x for s in sec.info_hosts.values() for x in s], default=None)
        if ranks and max_dev is not None:
            per = max_dev + 1
            nodes = max(len(seen_hosts), math.ceil(ranks / per))
            inferred["nodes"] = (f"{nodes}: assuming {per} GPUs per node (highest device index seen + 1) for "
                                 f"{ranks} ranks; hosts seen: {len(seen_hosts)}")
        elif ranks == 1:
            nodes = 1
    if overrides.get("nodes"):
        if nodes is not None and nodes != overrides["nodes"]:
            notes.append(f"{nodes} nodes overridden by --nodes {overrides['nodes']}")
        nodes = int(overrides["nodes"])
        inferred.pop("nodes", None)
    if nodes is None:
        notes.append("node count not stated (no device list, no NCCL INFO hosts): pass --nodes")
    if ranks and nodes and ranks % nodes == 0:
        gpn = ranks // nodes

    # --- GPU
    names = Counter(d.name for d in devices if d.name)
    gpu = names.most_common(1)[0][0] if names else None
    if len(names) > 1:
        notes.append(f"mixed devices: {', '.join(f'{n} x{c}' for n, c in names.items())}")
    if overrides.get("gpu"):
        gpu = str(overrides["gpu"])
    elif gpu is None:
        notes.append("GPU model not in the log (no device list): pass --gpu")

    # --- checks on the rows
    if collective and ranks:
        bad = []
        for r in rows:
            ts = TYPE_BYTES.get(r.type.lower())
            if ts and r.count > 0:
                expect = r.count * ts * (ranks if collective in GATHERED else 1)
                if expect != r.size_bytes:
                    bad.append(r)
        if bad:
            notes.append(f"{len(bad)} rows' size != count x typesize{' x ranks' if collective in GATHERED else ''} "
                         f"for {collective} on {ranks} ranks (first: line {bad[0].line})")
    for r in rows:
        flags = [m.wrong for m in r.blocks() if m.wrong]
        limit = _OLD_ERROR_LIMIT.get(r.type.lower(), 0.0) * max((ranks or 2) - 1, 1)
        errs = [m.max_error for m in r.blocks() if m.max_error is not None and m.max_error > limit]
        r.flagged = bool(flags or errs)
    flagged = [r for r in rows if r.flagged]
    if flagged:
        sizes = ", ".join(str(r.size_bytes) for r in flagged[:5]) + (" ..." if len(flagged) > 5 else "")
        notes.append(f"{len(flagged)} rows with wrong results (#wrong > 0 or error out of bounds; sizes {sizes}): "
                     "flagged, not used by fit/check")
    if any(m.wrong is None and m.max_error is None for r in rows for m in r.blocks()) and not flagged:
        if all(m.wrong is None and m.max_error is None for r in rows for m in r.blocks()):
            notes.append("#wrong is N/A throughout: results were not checked (-c 0)")
    if sec.oob and sec.oob[0] > 0:
        notes.append(f"footer: Out of bounds values : {sec.oob[0]} {sec.oob[1]}")
    if not sec.footer and not sec.json:
        notes.append("no 'Avg bus bandwidth' footer: the log may be cut short")
    if any(m.cputime for r in rows for m in r.blocks()):
        notes.append("-C: the time columns are CPU time; algbw/busbw come from the GPU time")
    if sec.warns:
        notes.append(f"{len(sec.warns)} NCCL WARN lines (first: {sec.warns[0][:120]})")
    if len({(r.type, r.redop) for r in rows}) > 1:
        notes.append("rows of several data types / reduction ops in one table: fit each separately")

    # --- format and library
    if sec.json:
        fmt = "nccl-tests JSON (-J)"
    elif sec.columns is None:
        fmt = "headerless table (columns from the row shape)"
    else:
        c = sec.columns
        wrong = "error" if any("error" in b for b in c.blocks) else "#wrong"
        fmt = f"nccl-tests text: {' '.join(c.lead) or 'no redop/root'} columns, {wrong}"
        if any("i_min" in b for b in c.blocks):
            fmt += ", -I per-iteration columns"
        if c.timestamp:
            fmt += ", -S timestamps"
    lib = dict(sec.library) or None
    if lib is None and gpu and ("AMD" in gpu or "Instinct" in gpu):
        lib = {"rccl": "unknown"}
    return ParsedLog(file=file, collective=collective, ranks=ranks, nodes=nodes, gpu=gpu, rows=rows,
                     gpus_per_node=gpn, hosts=hosts, notes=notes, inferred=inferred, format=fmt, library=lib,
                     avg_busbw_GBps=sec.avg_busbw, section=index, devices=list(devices))
