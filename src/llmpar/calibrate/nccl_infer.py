"""What a parsed nccl-tests table lacks, inferred from what it states (split from ``nccl_tests``).

Collective, rank count, nodes and GPU come from the log where it states them (device list, NCCL
INFO lines, test program name) and are otherwise inferred from the rows (size/count ratio,
busbw/algbw factor); every inference is recorded in ``ParsedLog.inferred`` and every doubt in
``ParsedLog.notes``. What the rows alone say (size/count, busbw/algbw) is worked out in
:mod:`llmpar.calibrate.nccl_from_rows`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from llmpar.calibrate.nccl_from_rows import factor_interval, infer_collective, ranks_candidates, size_ratio
from llmpar.calibrate.nccl_records import (
    _OLD_ERROR_LIMIT, GATHERED, TYPE_BYTES, ParsedLog, Row, Section, normalize_collective,
)
from llmpar.errors import UserError


@dataclass
class _Facts:
    """What :func:`finish` has established so far about one table; each step fills a part."""

    file: str
    sec: Section
    rows: list[Row]
    overrides: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    inferred: dict[str, str] = field(default_factory=dict)   # field -> how
    devices: list = field(default_factory=list)
    dev_ranks: list[int] = field(default_factory=list)
    complete: bool = False            # the device list names every rank 0..n-1
    ranks: int | None = None
    ranks_src: str = ""
    lower: int = 1                    # at least this many ranks (highest device-list rank + 1)
    collective: str | None = None
    hosts: list[str] = field(default_factory=list)
    nodes: int | None = None
    gpu: str | None = None

    def where(self, row: Row) -> str:
        """file:line of a row (a -J JSON row: its index in ``results``)."""
        return f"{self.file}: results[{row.line}]" if self.sec.json else f"{self.file}:{row.line}"


def finish(sec: Section, meta: dict[str, Any], file: str, index: int, overrides: dict[str, Any]) -> ParsedLog:
    """One scanned table -> :class:`ParsedLog`: each step states what it found or inferred."""
    notes: list[str] = []
    rows = _one_launcher_rank(sec.rows, meta["labels"], notes)
    f = _Facts(file=file, sec=sec, rows=rows, overrides=overrides, notes=notes)
    _note_skipped_lines(f)
    _ranks_from_devices(f)
    _collective(f)
    _ranks_from_rows(f)
    _nodes(f)
    _gpu(f)
    _check_sizes(f)
    _flag_rows(f)
    _note_log_state(f)
    gpn = f.ranks // f.nodes if f.ranks and f.nodes and f.ranks % f.nodes == 0 else None
    lib = dict(sec.library) or None
    if lib is None and f.gpu and ("AMD" in f.gpu or "Instinct" in f.gpu):
        lib = {"rccl": "unknown"}
    return ParsedLog(file=file, collective=f.collective, ranks=f.ranks, nodes=f.nodes, gpu=f.gpu, rows=f.rows,
                     gpus_per_node=gpn, hosts=f.hosts, notes=f.notes, inferred=f.inferred, format=_format(sec),
                     library=lib, avg_busbw_GBps=sec.avg_busbw, section=index, devices=list(f.devices))


def _one_launcher_rank(rows: list[Row], labels: Counter, notes: list[str]) -> list[Row]:
    """Rows labelled by several launcher ranks (every rank ran its own test): keep the lowest."""
    if len([lab for lab in labels if lab is not None]) <= 1:
        return rows
    keep = min(labels, key=lambda lab: (lab is None, int(lab) if lab and lab.isdigit() else 0))
    notes.append(f"rows came from several launcher ranks ({', '.join(sorted(str(x) for x in labels))}): each ran its "
                 f"own test (nccl-tests built without MPI?); using rank {keep}'s rows only")
    return [r for r in rows if r.label == keep]


def _note_skipped_lines(f: _Facts) -> None:
    """Lines inside the table that are not rows (launcher or library messages): named, not fatal."""
    skipped = f.sec.skipped
    if not skipped:
        return
    shown = "; ".join(f"{f.file}:{n}: {text!r}" for n, text in skipped[:3])
    more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    f.notes.append(f"skipped {len(skipped)} line(s) inside the table that are not nccl-tests rows "
                   f"(launcher/library output): {shown}{more}")


def _ranks_from_devices(f: _Facts) -> None:
    """Ranks stated by the device list (or the JSON config, or NCCL INFO 'nranks')."""
    sec = f.sec
    f.devices = devices = sec.devices
    f.dev_ranks = dev_ranks = sorted({d.rank for d in devices})
    groups = Counter(d.group for d in devices)
    f.complete = bool(dev_ranks) and dev_ranks == list(range(len(dev_ranks)))
    if sec.json and devices and (sec.nthread or 1) * (sec.ngpus or 1) > 1:
        f.complete = False  # -J lists one device per process
    if f.complete:
        if len(groups) > 1:
            g0 = next(d.group for d in devices if d.rank == 0)
            f.ranks, f.ranks_src = groups[g0], "device list"
            f.notes.append(f"the device list has {len(groups)} communicator groups (NCCL_TESTS_SPLIT); "
                           f"each collective runs over one group of {f.ranks} ranks")
        else:
            f.ranks, f.ranks_src = len(dev_ranks), "device list"
    elif sec.json and devices:
        f.ranks = len(devices) * (sec.nthread or 1) * (sec.ngpus or 1)
        f.ranks_src = "JSON device list x nthreads x ngpus"
    f.lower = (max(dev_ranks) + 1) if dev_ranks else 1
    if f.ranks is None and len(sec.info_nranks) == 1:
        f.ranks = next(iter(sec.info_nranks))
        f.ranks_src = "NCCL INFO 'nranks'"
        f.inferred["ranks"] = f"{f.ranks} from the NCCL INFO lines ('rank r nranks {f.ranks}')"


def _collective(f: _Facts) -> None:
    """Stated by the test program name, else inferred from the rows; --collective overrides."""
    sec = f.sec
    stated = None
    if sec.stated:
        try:
            stated = normalize_collective(sec.stated)
        except UserError:
            f.notes.append(f"unknown test program {sec.stated!r}: no collective model for it")
    f.collective = stated
    if f.collective is None and f.rows:
        f.collective, why = infer_collective(sec, f.rows, f.ranks)
        if f.collective:
            f.inferred["collective"] = why
        else:
            f.notes.append(f"collective not stated and not inferable: {why}")
    if f.overrides.get("collective"):
        over = normalize_collective(f.overrides["collective"])
        if f.collective and f.collective != over:
            f.notes.append(f"collective {f.collective} in the log overridden by --collective {over}")
        f.collective = over
        f.inferred.pop("collective", None)


def _ranks_from_rows(f: _Facts) -> None:
    """Ranks from size/count (gathered collectives) and busbw/algbw; --ranks overrides."""
    collective, rows = f.collective, f.rows
    if collective in GATHERED:
        ratios, used = size_ratio(rows)
        if used and len(ratios) == 1:
            q = ratios.pop()
            if q == int(q) and q >= 1:
                if f.ranks is None:
                    f.ranks, f.ranks_src = int(q), "size/count"
                    f.inferred["ranks"] = (f"{f.ranks} = size / (count x typesize) ({collective} sizes count every "
                                           "rank's piece)")
                elif f.ranks != int(q):
                    f.notes.append(f"size / (count x typesize) = {q:g} but the {f.ranks_src} says {f.ranks} ranks")
    iv = factor_interval(rows)
    if (collective == "all_reduce" or collective in GATHERED) and iv is not None:
        _ranks_from_factor(f, iv)
    if f.ranks is None and f.dev_ranks:
        f.notes.append(f"the device list is partial (ranks up to {f.lower - 1}): at least {f.lower} ranks")
    if f.overrides.get("ranks"):
        if f.ranks_src == "device list" and f.ranks != f.overrides["ranks"]:
            # the device list names every rank the run had: a --ranks against it prices a run that
            # never happened (reliability review, item 9: --ranks 1000000 on a 4-rank log)
            from llmpar.errors import UserError

            raise UserError(f"{f.file}: --ranks {f.overrides['ranks']} contradicts the log's device list of "
                            f"{f.ranks} ranks; leave --ranks out (it is for logs that do not list their devices)")
        if f.ranks is not None and f.ranks != f.overrides["ranks"]:
            f.notes.append(f"{f.ranks} ranks ({f.ranks_src}) overridden by --ranks {f.overrides['ranks']}")
        f.ranks = int(f.overrides["ranks"])
        f.inferred.pop("ranks", None)


def _ranks_from_factor(f: _Facts, iv: tuple[float, float]) -> None:
    collective = f.collective
    cands = ranks_candidates(collective, iv, f.lower)
    if cands is None:
        f.notes.append(f"busbw/algbw ({iv[0]:.4f}..{iv[1]:.4f}) fits no rank count for {collective}")
        return
    first, last = cands
    formula = "2(n-1)/n" if collective == "all_reduce" else "(n-1)/n"
    if f.ranks is None:
        if first == last:
            f.ranks, f.ranks_src = int(first), "busbw/algbw"
            f.inferred["ranks"] = (f"{f.ranks} from busbw/algbw = {formula} ({iv[0]:.5f}..{iv[1]:.5f} over the rows)"
                                   + (f"; the partial device list shows ranks up to {f.lower - 1}"
                                      if f.dev_ranks else ""))
        else:
            span = f"{first}..{last}" if math.isfinite(last) else f">= {first}"
            f.notes.append(f"rank count not stated; busbw/algbw = {formula} allows n = {span}: pass --ranks")
    elif not first <= f.ranks <= last:
        f.notes.append(f"busbw/algbw ({iv[0]:.4f}..{iv[1]:.4f}) does not match {formula} for the "
                       f"{f.ranks} ranks of the {f.ranks_src}")


def _nodes(f: _Facts) -> None:
    """Hosts of the device list, else of the NCCL INFO lines; --nodes overrides."""
    sec, ranks, devices = f.sec, f.ranks, f.devices
    if f.complete:
        f.hosts = list(dict.fromkeys(d.host for d in devices))
        f.nodes = len(f.hosts)
    elif ranks and sec.info_rank_host and set(sec.info_rank_host) >= set(range(ranks)):
        f.hosts = list(dict.fromkeys(sec.info_rank_host[r] for r in range(ranks)))
        f.nodes = len(f.hosts)
        f.inferred["nodes"] = f"{f.nodes} hosts in the NCCL INFO lines of all {ranks} ranks"
    else:
        f.hosts = seen_hosts = list(dict.fromkeys([d.host for d in devices] + list(sec.info_hosts)))
        max_dev = max([d.device for d in devices] + [x for s in sec.info_hosts.values() for x in s], default=None)
        if ranks and max_dev is not None:
            per = max_dev + 1
            f.nodes = max(len(seen_hosts), math.ceil(ranks / per))
            f.inferred["nodes"] = (f"{f.nodes}: assuming {per} GPUs per node (highest device index seen + 1) for "
                                   f"{ranks} ranks; hosts seen: {len(seen_hosts)}")
        elif ranks == 1:
            f.nodes = 1
    if f.overrides.get("nodes"):
        # (--nodes against a device list stays allowed: with NCCL_P2P_DISABLE=1 and SHM off, --nodes = ranks
        # models each rank as its own domain, docs/calibration.md; the even-fill rule below still holds)
        if f.nodes is not None and f.nodes != f.overrides["nodes"]:
            f.notes.append(f"{f.nodes} nodes overridden by --nodes {f.overrides['nodes']}")
        f.nodes = int(f.overrides["nodes"])
        f.inferred.pop("nodes", None)
    if f.nodes is None:
        f.notes.append("node count not stated (no device list, no NCCL INFO hosts): pass --nodes")
    elif f.ranks and (f.nodes > f.ranks or f.ranks % f.nodes):
        # reliability review, item 9: 4 ranks on 8 nodes, or on 3 (not 3 x an integer), were priced
        from llmpar.errors import UserError

        given = " (--ranks/--nodes)" if f.overrides.get("nodes") or f.overrides.get("ranks") else ""
        raise UserError(f"{f.file}: {f.ranks} ranks on {f.nodes} nodes{given}: the ranks must fill the nodes "
                        "evenly (ranks a multiple of nodes, at least one a node)")


def _gpu(f: _Facts) -> None:
    names = Counter(d.name for d in f.devices if d.name)
    f.gpu = names.most_common(1)[0][0] if names else None
    if len(names) > 1:
        f.notes.append(f"mixed devices: {', '.join(f'{n} x{c}' for n, c in names.items())}")
    if f.overrides.get("gpu"):
        f.gpu = str(f.overrides["gpu"])
    elif f.gpu is None:
        f.notes.append("GPU model not in the log (no device list): pass --gpu")


def _check_sizes(f: _Facts) -> None:
    """size = count x typesize (x ranks for the gathered collectives), as nccl-tests prints it."""
    collective, ranks = f.collective, f.ranks
    if not (collective and ranks):
        return
    bad = []
    for r in f.rows:
        ts = TYPE_BYTES.get(r.type.lower())
        if ts and r.count > 0 and r.count * ts * (ranks if collective in GATHERED else 1) != r.size_bytes:
            bad.append(r)
    if bad:
        f.notes.append(f"{len(bad)} rows' size != count x typesize{' x ranks' if collective in GATHERED else ''} "
                       f"for {collective} on {ranks} ranks (first: line {bad[0].line})")


def _row_problem(r: Row) -> str | None:
    """Why a row cannot be a measurement: a time that is not a positive finite number, a
    non-finite bandwidth, or size 0 (nccl-tests -b 0: nothing moved)."""
    for name, m in (("out-of-place", r.out_of_place), ("in-place", r.in_place)):
        if m is None:
            continue
        if not math.isfinite(m.time_us) or m.time_us <= 0:
            # the log's own value in words where it is not a number (no inf/nan printed)
            shown = (f"{m.time_us:g} us" if math.isfinite(m.time_us) else "not a number" if math.isnan(m.time_us)
                     else "infinite")
            return f"{name} time ({shown}) is not a positive finite number"
        if not (math.isfinite(m.algbw_GBps) and math.isfinite(m.busbw_GBps)):
            return f"{name} algbw/busbw {m.algbw_GBps:g}/{m.busbw_GBps:g} GB/s is not finite"
        if (why := _time_disagrees(r.size_bytes, m)) is not None:
            return f"{name} {why}"
    if r.size_bytes <= 0:
        return "size 0: nothing was moved"
    if r.size_bytes > MAX_ROW_BYTES:
        return f"size {r.size_bytes:.3g} B is above 1 PiB, no collective's message"
    return None


MAX_ROW_BYTES = 2**50   # 1 PiB: `collective --size`'s bound; a log row above it is a corrupted size


def _time_disagrees(size: int, m) -> str | None:
    """A row's own physics: nccl-tests prints algbw = size / time (common.cu, for every collective),
    so a time that gives another bandwidth than the row prints by more than 2x (beyond the printed
    digits' rounding) is a corrupted number, never a measurement (a 1e30 us time had been fitted).
    -C rows (CPU time) are not checked: their bandwidths come from the GPU time."""
    if m.cputime or size <= 0 or not m.algbw_GBps > 0:
        return None
    implied = size / (m.time_us * 1e-6) / 1e9
    ratio = implied / m.algbw_GBps
    if 0.5 <= ratio <= 2.0 or abs(implied - m.algbw_GBps) <= 0.02:
        return None
    return (f"time {m.time_us:g} us and algbw {m.algbw_GBps:g} GB/s disagree (size / time is {implied:.3g} GB/s): "
            "a corrupted row")


def _flag_rows(f: _Facts) -> None:
    """Flag (never drop silently) rows with wrong results or impossible measurements; say which."""
    ranks = f.ranks
    for r in f.rows:
        flags = [m.wrong for m in r.blocks() if m.wrong]
        limit = _OLD_ERROR_LIMIT.get(r.type.lower(), 0.0) * max((ranks or 2) - 1, 1)
        errs = [m.max_error for m in r.blocks() if m.max_error is not None and m.max_error > limit]
        r.problem = _row_problem(r)
        r.flagged = bool(flags or errs or r.problem)
    wrong = [r for r in f.rows if r.flagged and not r.problem]
    if wrong:
        sizes = ", ".join(str(r.size_bytes) for r in wrong[:5]) + (" ..." if len(wrong) > 5 else "")
        f.notes.append(f"{len(wrong)} rows with wrong results (#wrong > 0 or error out of bounds; sizes {sizes}): "
                       "flagged, not used by fit/check")
    bad = [r for r in f.rows if r.problem]
    if bad:
        shown = "; ".join(f"{f.where(r)}: {r.problem}" for r in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        f.notes.append(f"{len(bad)} row(s) without a usable measurement, flagged, not used by fit/check: "
                       f"{shown}{more}")
    if all(r.flagged for r in f.rows):
        f.notes.append("no row is usable for fit/check")


def _note_log_state(f: _Facts) -> None:
    """What the log says about itself: unchecked data, out-of-bounds footer, cut short, -C, WARNs."""
    sec, rows = f.sec, f.rows
    blocks = [m for r in rows for m in r.blocks()]
    if blocks and all(m.wrong is None and m.max_error is None for m in blocks):
        f.notes.append("#wrong is N/A throughout: results were not checked (-c 0)")
    if sec.oob and sec.oob[0] > 0:
        f.notes.append(f"footer: Out of bounds values : {sec.oob[0]} {sec.oob[1]}")
    if not sec.footer and not sec.json:
        f.notes.append("no 'Avg bus bandwidth' footer: the log may be cut short")
    if any(m.cputime for m in blocks):
        f.notes.append("-C: the time columns are CPU time; algbw/busbw come from the GPU time")
    if sec.warns:
        f.notes.append(f"{len(sec.warns)} NCCL WARN lines (first: {sec.warns[0][:120]})")
    if len({(r.type, r.redop) for r in rows}) > 1:
        f.notes.append("rows of several data types / reduction ops in one table: fit each separately")


def _format(sec: Section) -> str:
    if sec.json:
        return "nccl-tests JSON (-J)"
    if sec.columns is None:
        return "headerless table (columns from the row shape)"
    c = sec.columns
    wrong = "error" if any("error" in b for b in c.blocks) else "#wrong"
    fmt = f"nccl-tests text: {' '.join(c.lead) or 'no redop/root'} columns, {wrong}"
    if any("i_min" in b for b in c.blocks):
        fmt += ", -I per-iteration columns"
    if c.timestamp:
        fmt += ", -S timestamps"
    return fmt
