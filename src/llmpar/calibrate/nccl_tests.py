"""Read (and write) nccl-tests / rccl-tests output.

Formats read (all checked against the printing code of github:NVIDIA/nccl-tests, src/common.cu and
src/util.cu, and github:ROCm/rccl-tests; the parser is written from those formats, not copied):

- current text layout: ``size count type redop root`` then an out-of-place and an in-place block of
  ``time algbw busbw #wrong`` (``#wrong`` is ``%6g`` of the wrong-element count, or ``N/A`` when
  the data check is off, and for all-to-all in place);
- older layouts (before NCCL 2.13, 2022): a per-collective subset of ``redop``/``root`` columns and
  an ``error`` column printed like ``0e+00`` (the maximum deviation, not a count);
- ``-C 1`` (the time column is ``cputime``), ``-I 1`` (four per-iteration columns after each block:
  ``i_min i_max i_p99 i_cv%``), ``-S 1`` (a ``YYYY-MM-DD HH:MM:SS`` timestamp at the end of a row),
  trace-replay rows whose out-of-place block is blank;
- launcher noise: ``mpirun --tag-output`` prefixes (``[1,0]<stdout>:``), ``srun --label`` prefixes
  (`` 0: ``), NCCL INFO/WARN lines, rccl version blocks, any other line that is not a row;
- the JSON written by ``-J FILE`` (nccl-tests >= 2.17, ``version`` 3: ``config.devices``,
  ``results[].{size,count,type,redop,root,out_of_place,in_place}``).

What a log states is taken as stated (``# Collective test starting/concluded: NAME_perf``, the
``#  Rank N Group G Pid P on HOST device D [BUS] NAME`` device list, NCCL INFO ``rank r nranks N``
lines); what it lacks is inferred from the rows and the inference is reported in ``inferred``
(field -> how) and ``notes``. Sizes follow nccl-tests: ``size`` is max(send, receive) bytes per rank,
so for all-gather/reduce-scatter/all-to-all/gather/scatter ``size = count x typesize x ranks``.

algbw = size / time and busbw = algbw x factor are the nccl-tests definitions (doc/PERFORMANCE.md;
``*GetBw`` in src/*.cu); :func:`busbw_factor` states the factor once.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from llmpar.cost.collectives import COLLECTIVES, bus_factor
from llmpar.cost.collectives import normalize_collective as _normalize
from llmpar.errors import UserError

# ----------------------------------------------------------------------------- names and factors

#: nccl-tests program name (argv[0] without the directory) -> collective
PROGRAMS = {
    "all_reduce_perf": "all_reduce",
    "all_gather_perf": "all_gather",
    "reduce_scatter_perf": "reduce_scatter",
    "alltoall_perf": "all_to_all",
    "broadcast_perf": "broadcast",
    "reduce_perf": "reduce",
    "gather_perf": "gather",
    "scatter_perf": "scatter",
    "sendrecv_perf": "send_recv",
}

#: collectives whose nccl-tests ``size`` counts every rank's piece (size = count x typesize x ranks)
GATHERED = frozenset({"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"})

#: bytes per element of the nccl-tests / rccl-tests type names
TYPE_BYTES = {
    "char": 1, "int8": 1, "uint8": 1, "int": 4, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
    "half": 2, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2, "float": 4, "float32": 4, "fp32": 4,
    "double": 8, "float64": 8, "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}

#: old layout: a row's ``error`` (max deviation) is out of bounds above this x (ranks - 1)
#: (nccl-tests before 2.13, common.cu DeltaMaxValue)
_OLD_ERROR_LIMIT = {"half": 1e-2, "float16": 1e-2, "bfloat16": 1e-2, "float": 1e-5, "float32": 1e-5,
                    "double": 1e-12, "float64": 1e-12}


def normalize_collective(name: str) -> str:
    """``all-reduce``, ``allreduce``, ``all_reduce_perf``, ``./build/alltoall_perf`` -> canonical name.

    Strips the nccl-tests program's directory and ``_perf`` suffix, then uses the collective
    model's names (:func:`llmpar.cost.collectives.normalize_collective`).
    """
    raw = str(name).strip()
    s = re.sub(r"_perf(_mpi)?$", "", os.path.basename(raw.replace("\\", "/")).lower())
    return _normalize(s)


def busbw_factor(collective: str, ranks):
    """busbw / algbw as nccl-tests defines it: :func:`llmpar.cost.collectives.bus_factor`."""
    return bus_factor(collective, ranks)


_MAX_RANKS = 1 << 17


# ----------------------------------------------------------------------------- result objects

@dataclass
class Measurement:
    """One block of a row (out-of-place or in-place)."""

    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    wrong: float | None = None          # #wrong: elements wrong; None = N/A (check off) or old layout
    max_error: float | None = None      # old layout's ``error`` column (max deviation)
    per_iter: dict[str, float] | None = None  # -I: min_us, max_us, p99_us, cv_pct
    cputime: bool = False               # -C: time_us is CPU time, not the GPU time of algbw
    # half a unit of the last printed digit of (time, algbw, busbw): what rounding hides
    resolution: tuple[float, float, float] = field(default=(0.0, 0.0, 0.0), repr=False, compare=False)

    @property
    def time_s(self) -> float:
        return self.time_us * 1e-6

    def to_dict(self) -> dict[str, Any]:
        return {
            "time_us": self.time_us,
            "algbw_GBps": self.algbw_GBps,
            "busbw_GBps": self.busbw_GBps,
            "wrong": self.wrong,
            "max_error": self.max_error,
            "cputime": self.cputime,
            "per_iter": self.per_iter,
        }


@dataclass
class Row:
    size_bytes: int
    count: int
    type: str
    redop: str | None
    root: int | None
    out_of_place: Measurement | None
    in_place: Measurement | None
    line: int = 0
    timestamp: str | None = None
    flagged: bool = False               # #wrong > 0 (or old-layout error out of bounds): not used
    label: str | None = field(default=None, repr=False, compare=False)  # srun/mpirun rank label

    def blocks(self) -> list[Measurement]:
        return [m for m in (self.out_of_place, self.in_place) if m is not None]

    def measurement(self, block: str = "out_of_place") -> Measurement | None:
        """The requested block, or the other one where the log has only that."""
        first = self.out_of_place if block == "out_of_place" else self.in_place
        return first or self.in_place or self.out_of_place

    def to_dict(self) -> dict[str, Any]:
        return {
            "size_bytes": self.size_bytes,
            "count": self.count,
            "type": self.type,
            "redop": self.redop,
            "root": self.root,
            "out_of_place": self.out_of_place.to_dict() if self.out_of_place else None,
            "in_place": self.in_place.to_dict() if self.in_place else None,
            "flagged": self.flagged,
            "line": self.line,
            "timestamp": self.timestamp,
        }


@dataclass
class Device:
    rank: int
    host: str
    device: int
    name: str = ""
    group: int = 0
    pid: int | None = None
    bus: str = ""


@dataclass
class ParsedLog:
    """One nccl-tests table (a file usually holds one; a concatenated log may hold several)."""

    file: str
    collective: str | None
    ranks: int | None
    nodes: int | None
    gpu: str | None
    rows: list[Row]
    gpus_per_node: int | None = None
    hosts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    inferred: dict[str, str] = field(default_factory=dict)   # field -> how it was inferred
    format: str = ""
    library: dict[str, str] | None = None
    avg_busbw_GBps: float | None = None
    section: int = 0
    devices: list[Device] = field(default_factory=list, repr=False)

    @property
    def flagged_rows(self) -> list[Row]:
        return [r for r in self.rows if r.flagged]

    def usable_rows(self) -> list[Row]:
        """Rows a fit or a check may use: not flagged, with a measurement, a positive time."""
        return [r for r in self.rows if not r.flagged and r.blocks() and r.size_bytes > 0
                and (r.measurement() and r.measurement().time_us > 0)]

    def samples(self, block: str = "out_of_place") -> list[tuple[int, float, float]]:
        """(size_bytes, time_s, busbw_GBps) of the usable rows, the chosen block first."""
        out = []
        for r in self.usable_rows():
            m = r.measurement(block)
            out.append((r.size_bytes, m.time_s, m.busbw_GBps))
        return out

    @property
    def multi_node(self) -> bool | None:
        return None if self.nodes is None else self.nodes > 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "section": self.section,
            "collective": self.collective,
            "ranks": self.ranks,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "gpu": self.gpu,
            "hosts": self.hosts,
            "format": self.format,
            "library": self.library,
            "avg_busbw_GBps": self.avg_busbw_GBps,
            "flagged_rows": len(self.flagged_rows),
            "inferred": self.inferred,
            "notes": self.notes,
            "rows": [r.to_dict() for r in self.rows],
        }


# ----------------------------------------------------------------------------- text parsing

_MPI_PREFIX = re.compile(r"^\[\d+,(\d+)\]<(?:stdout|stderr)>:\s?")
_SRUN_PREFIX = re.compile(r"^\s*(\d+):\s")
_INT = re.compile(r"^-?\d+$")
_NUM = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^[-+]?(?:nan|inf)$", re.IGNORECASE)
_OLD_ERR = re.compile(r"^\d(?:\.\d*)?e[-+]\d+$")
_DATE = re.compile(r"^\d{4}-\d\d-\d\d$")
_CLOCK = re.compile(r"^\d\d:\d\d:\d\d$")
_DEVICE = re.compile(
    r"^Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?(?:Pid\s+(\d+)\s+)?on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_NCCL_LINE = re.compile(r"^(\S+?):(\d+):(\d+)\s+\[(\d+)\]\s+NCCL\s+(INFO|WARN|TRACE)\b\s*(.*)$")
_RANK_NRANKS = re.compile(r"\brank\s+(\d+)\s+nranks\s+(\d+)")
_TIME_NAMES = ("time", "cputime")
_PER_ITER = {"i_min": "min_us", "i_max": "max_us", "i_p99": "p99_us", "i_cv%": "cv_pct"}


class _RowError(ValueError):
    pass


@dataclass
class _Columns:
    lead: list[str]                 # columns between type and the first block: redop, root
    blocks: list[list[str]]         # column names of each block
    time_ends: list[int]            # character column where each block's time column ends
    timestamp: bool
    line: int


@dataclass
class _Section:
    stated: str | None = None
    stated_line: int = 0
    devices: list[Device] = field(default_factory=list)
    info_hosts: dict[str, set] = field(default_factory=dict)   # host -> cuda devices seen
    info_rank_host: dict[int, str] = field(default_factory=dict)
    info_nranks: set = field(default_factory=set)
    warns: list[str] = field(default_factory=list)
    columns: _Columns | None = None
    time_scale: float = 1.0
    rows: list[Row] = field(default_factory=list)
    footer: bool = False
    concluded: bool = False
    oob: tuple[int, str] | None = None
    avg_busbw: float | None = None
    nthread: int | None = None
    ngpus: int | None = None
    library: dict[str, str] = field(default_factory=dict)
    json: bool = False

    def in_table(self) -> bool:
        return (self.columns is not None or bool(self.rows)) and not self.footer

    def empty(self) -> bool:
        return not self.rows and self.columns is None


def _strip_prefix(raw: str) -> tuple[str | None, str]:
    m = _MPI_PREFIX.match(raw)
    if m:
        return m.group(1), raw[m.end():]
    m = _SRUN_PREFIX.match(raw)
    if m:
        return m.group(1), raw[m.end():]
    return None, raw


def _resolution(tok: str) -> float:
    """Half a unit of the last printed digit: '12.25' -> 0.005, '18289' -> 0.5, '1.2e+03' -> 50."""
    t = tok.lower()
    mant, _, exp = t.partition("e")
    dec = len(mant.split(".")[1]) if "." in mant else 0
    return 0.5 * 10.0 ** (-dec) * (10.0 ** int(exp) if exp else 1.0)


def _number(tok: str, what: str) -> float:
    if not _NUM.match(tok):
        raise _RowError(f"cannot read {what} {tok!r}")
    v = float(tok)
    if math.isnan(v) or v < 0:
        raise _RowError(f"{what} {tok!r} is not a non-negative number")
    return v


def _parse_header(content: str, lineno: int) -> _Columns | None:
    body = content.lstrip()[1:]
    toks = body.split()
    if len(toks) < 4 or toks[0] != "size" or toks[1] != "count":
        return None
    names = toks[3:] if toks[2] == "type" else toks[2:]
    timestamp = bool(names) and names[-1] == "timestamp"
    if timestamp:
        names = names[:-1]
    starts = [i for i, n in enumerate(names) if n in _TIME_NAMES]
    if not starts:
        return None
    lead = names[: starts[0]]
    blocks = [names[a:b] for a, b in zip(starts, starts[1:] + [len(names)])]
    time_ends = [m.end() for m in re.finditer(r"\S+", content) if m.group() in _TIME_NAMES]
    return _Columns(lead=lead, blocks=blocks, time_ends=time_ends, timestamp=timestamp, line=lineno)


def _parse_block(toks: list[str], names: list[str], time_scale: float) -> Measurement:
    vals: dict[str, Any] = {}
    res = [0.0, 0.0, 0.0]
    m = Measurement(0.0, 0.0, 0.0)
    per_iter: dict[str, float] = {}
    for name, tok in zip(names, toks):
        if name in _TIME_NAMES:
            m.time_us = _number(tok, "time") * time_scale
            m.cputime = name == "cputime"
            res[0] = _resolution(tok) * time_scale
        elif name == "algbw":
            m.algbw_GBps = _number(tok, "algbw")
            res[1] = _resolution(tok)
        elif name == "busbw":
            m.busbw_GBps = _number(tok, "busbw")
            res[2] = _resolution(tok)
        elif name in ("#wrong", "wrong", "error"):
            if tok.upper() == "N/A":
                continue
            v = _number(tok.rstrip("*"), name)
            if name == "error" or (name != "#wrong" and _OLD_ERR.match(tok)):
                m.max_error = v
            else:
                m.wrong = v
        elif name in _PER_ITER:
            per_iter[_PER_ITER[name]] = _number(tok, name) * (1.0 if name == "i_cv%" else time_scale)
        else:
            vals[name] = tok
    m.per_iter = per_iter or None
    m.resolution = tuple(res)  # type: ignore[assignment]
    return m


_DEFAULT_BLOCK = ["time", "algbw", "busbw", "#wrong"]
_DEFAULT_BLOCK_I = _DEFAULT_BLOCK + list(_PER_ITER)


def _parse_row(content: str, sec: _Section, lineno: int, label: str | None) -> Row:
    spans = [(m.group(), m.start(), m.end()) for m in re.finditer(r"\S+", content)]
    toks = [s[0] for s in spans]
    timestamp = None
    if len(toks) >= 2 and _DATE.match(toks[-2]) and _CLOCK.match(toks[-1]):
        timestamp = f"{toks[-2]} {toks[-1]}"
        toks, spans = toks[:-2], spans[:-2]
    if len(toks) < 3:
        raise _RowError(f"truncated row: {len(toks)} column(s)")
    if not (_INT.match(toks[0]) and _INT.match(toks[1])):
        raise _RowError("size and count must be integers")
    size, count = int(toks[0]), int(toks[1])
    dtype = toks[2]
    if _NUM.match(dtype):
        raise _RowError(f"expected a data type in column 3, found {dtype!r}")
    rest, rest_spans = toks[3:], spans[3:]
    redop: str | None = None
    root: int | None = None
    cols = sec.columns
    if cols is not None:
        lead = cols.lead
        body = rest[len(lead):]
        body_spans = rest_spans[len(lead):]
        for name, tok in zip(lead, rest[: len(lead)]):
            if name == "redop":
                redop = tok
            elif name == "root":
                if not _INT.match(tok):
                    raise _RowError(f"root {tok!r} is not an integer")
                root = int(tok)
        block_names = cols.blocks
        want = sum(len(b) for b in block_names)
    else:
        if rest and not _NUM.match(rest[0]):
            redop = rest[0]
            rest, rest_spans = rest[1:], rest_spans[1:]
        n = len(rest)
        block_names = None
        has_root = False
        for width, names in ((4, _DEFAULT_BLOCK), (8, _DEFAULT_BLOCK_I)):
            for nblocks in (2, 1):
                if n in (nblocks * width, nblocks * width + 1):
                    block_names = [names] * nblocks
                    has_root = n == nblocks * width + 1
                    break
            if block_names:
                break
        if block_names is None:
            raise _RowError(f"cannot split {n} value columns into out-of-place/in-place blocks")
        if has_root:
            if not _INT.match(rest[0]):
                raise _RowError(f"root {rest[0]!r} is not an integer")
            root = int(rest[0])
            rest, rest_spans = rest[1:], rest_spans[1:]
        body, body_spans = rest, rest_spans
        want = sum(len(b) for b in block_names)
        if len(block_names) == 1:
            want = len(body)  # one block present: decided below
    oop = inp = None
    if len(body) == want and len(block_names) == 2:
        w0 = len(block_names[0])
        oop = _parse_block(body[:w0], block_names[0], sec.time_scale)
        inp = _parse_block(body[w0:], block_names[1], sec.time_scale)
    elif len(block_names) == 1 and len(body) == len(block_names[0]) and cols is not None:
        oop = _parse_block(body, block_names[0], sec.time_scale)
    elif len(body) in (len(block_names[-1]), len(block_names[0])) and body_spans:
        # one block blank (nccl-tests prints blanks for an out-of-place block it did not run):
        # which one is told by where the time column ends, against the header (or a wide gap)
        names = block_names[0]
        end = body_spans[0][2]
        if cols is not None and len(cols.time_ends) >= 2:
            in_place_only = abs(end - cols.time_ends[1]) < abs(end - cols.time_ends[0])
        else:
            prev_end = spans[len(spans) - len(body) - 1][2]
            in_place_only = body_spans[0][1] - prev_end > 24
        m = _parse_block(body, names, sec.time_scale)
        if in_place_only:
            inp = m
        else:
            oop = m
    else:
        ncols = 3 + (len(cols.lead) if cols else 0) + sum(len(b) for b in block_names)
        raise _RowError(f"expected {ncols} columns, found {len(toks)} (truncated or garbled row)")
    return Row(size_bytes=size, count=count, type=dtype, redop=redop, root=root,
               out_of_place=oop, in_place=inp, line=lineno, timestamp=timestamp, label=label)


def _comment(body: str, sec: _Section, content: str, lineno: int, new_section) -> _Section:
    m = re.match(r"Collective test starting:\s*(\S+)", body)
    if m:
        sec = new_section(force=bool(sec.rows) or sec.stated is not None)
        sec.stated, sec.stated_line = m.group(1), lineno
        return sec
    m = re.match(r"Collective test concluded:\s*(\S+)", body)
    if m:
        if sec.stated is None:
            sec.stated, sec.stated_line = m.group(1), lineno
        sec.concluded = True
        return sec
    m = re.match(r"nThread\s+(\d+)\s+nGpus\s+(\d+)", body)
    if m:
        sec = new_section(force=bool(sec.rows))
        sec.nthread, sec.ngpus = int(m.group(1)), int(m.group(2))
        return sec
    if body.startswith("Using devices"):
        return new_section(force=bool(sec.rows))
    m = _DEVICE.match(body)
    if m:
        sec = new_section(force=bool(sec.rows))
        rank, group, pid, host, dev, bus, name = m.groups()
        sec.devices.append(Device(rank=int(rank), host=host, device=int(dev), name=name,
                                  group=int(group or 0), pid=int(pid) if pid else None, bus=bus))
        return sec
    cols = _parse_header(content, lineno)
    if cols is not None:
        sec = new_section(force=bool(sec.rows))
        sec.columns = cols
        return sec
    if body.startswith("(B)"):
        toks = body.split()
        if "(ms)" in toks:
            sec.time_scale = 1e3
        return sec
    m = re.match(r"Out of bounds values\s*:\s*(\d+)\s*(\w*)", body)
    if m:
        sec.oob = (int(m.group(1)), m.group(2))
        return sec
    m = re.match(r"Avg bus bandwidth\s*:\s*(\S+)", body)
    if m:
        try:
            sec.avg_busbw = float(m.group(1))
        except ValueError:
            pass
        sec.footer = True
        return sec
    m = re.match(r"nccl-tests version\s+(\S+)", body)
    if m:
        sec.library.setdefault("tests", f"nccl-tests {m.group(1)}")
    return sec


def _scan_text(text: str, file: str) -> list[tuple[_Section, dict[str, Any]]]:
    sections: list[_Section] = [_Section()]
    labels: list[Counter] = [Counter()]
    lines = text.splitlines()

    def new_section(force: bool) -> _Section:
        if force:
            sections.append(_Section())
            labels.append(Counter())
        return sections[-1]

    sec = sections[0]
    for lineno, raw in enumerate(lines, 1):
        label, content = _strip_prefix(raw.rstrip("\r\n"))
        s = content.strip()
        if not s:
            continue
        if s.startswith("#"):
            sec = _comment(s[1:].strip(), sec, content, lineno, new_section)
            continue
        m = _NCCL_LINE.match(s)
        if m:
            host, _pid, _tid, dev, kind, msg = m.groups()
            sec.info_hosts.setdefault(host, set()).add(int(dev))
            rn = _RANK_NRANKS.search(msg)
            if rn:
                sec.info_rank_host[int(rn.group(1))] = host
                sec.info_nranks.add(int(rn.group(2)))
            v = re.match(r"NCCL version\s+(\S+)", msg)
            if v:
                sec.library.setdefault("nccl", v.group(1))
            if kind == "WARN":
                sec.warns.append(msg)
            continue
        m = re.match(r"NCCL version\s+(\S+)", s)
        if m:
            sec.library.setdefault("nccl", m.group(1))
            continue
        m = re.match(r"RCCL version\s*:\s*(\S+)", s)
        if m:
            sec.library["rccl"] = m.group(1)
            continue
        m = re.match(r"rccl-tests:\s*Version\s+(\S+)", s)
        if m:
            sec.library["tests"] = f"rccl-tests {m.group(1)}"
            continue
        toks = s.split()
        if not _INT.match(toks[0]):
            continue  # launcher / application noise
        strict = sec.in_table() or (
            len(toks) >= 3 and _INT.match(toks[1]) is not None and not _NUM.match(toks[2])
            and re.match(r"^[A-Za-z][\w]*$", toks[2]) is not None)
        if not strict:
            continue
        if sec.footer or sec.concluded:
            sec = new_section(force=True)
        try:
            row = _parse_row(content, sec, lineno, label)
        except _RowError as exc:
            what = "truncated" if lineno == len(lines) and not text.endswith("\n") else "garbled"
            raise UserError(f"{file}:{lineno}: {what} nccl-tests row: {exc}") from None
        sec.rows.append(row)
        labels[-1 if sec is sections[-1] else sections.index(sec)][label] += 1
    return [(s, {"labels": lab, "nlines": len(lines)}) for s, lab in zip(sections, labels)]


# ----------------------------------------------------------------------------- JSON (-J)

def _scan_json(text: str, file: str) -> list[tuple[_Section, dict[str, Any]]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        at_end = exc.pos >= len(text.rstrip()) - 1 or exc.msg.startswith("Unterminated")
        what = "truncated" if at_end else "malformed"
        raise UserError(f"{file}:{exc.lineno}: {what} JSON (nccl-tests -J output): {exc.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise UserError(f"{file}:1: JSON without a 'results' list: not nccl-tests -J output")
    sec = _Section(json=True)
    args = data.get("args") or []
    if args and isinstance(args[0], str):
        sec.stated = os.path.basename(args[0].replace("\\", "/"))
    cfg = data.get("config") or {}
    sec.nthread = int(cfg.get("nthreads") or 1)
    sec.ngpus = int(cfg.get("ngpus") or 1)
    for d in cfg.get("devices") or []:
        try:
            sec.devices.append(Device(rank=int(d["rank"]), host=str(d.get("hostname", "")), device=int(d.get("device", 0)),
                                      name=str(d.get("device_info", "")).strip(), group=int(d.get("group", 0)),
                                      pid=d.get("pid"), bus=str(d.get("device_hex", ""))))
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{file}:1: config.devices has an entry without rank/hostname/device") from None
    v = data.get("nccl_version")
    if isinstance(v, int) and v > 0:
        sec.library["nccl"] = f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v >= 20900 else f"{v // 1000}.{v // 100 % 10}.{v % 100}"
    ab = data.get("average_bus_bandwidth")
    if isinstance(ab, dict) and isinstance(ab.get("bandwidth"), (int, float)):
        sec.avg_busbw = float(ab["bandwidth"])
        sec.footer = True
    oob = data.get("out_of_bounds")
    if isinstance(oob, dict) and isinstance(oob.get("count"), int):
        sec.oob = (oob["count"], "OK" if oob.get("okay") in (True, "true") else "FAILED")

    def block(obj, where) -> Measurement | None:
        if obj is None:
            return None
        if not isinstance(obj, dict):
            raise UserError(f"{file}:1: {where} is not an object")
        cputime = "cpu_time" in obj
        try:
            t = obj["cpu_time" if cputime else "time"]
            vals = [float(x) for x in (t, obj["alg_bw"], obj["bus_bw"])]
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{file}:1: {where} lacks time/alg_bw/bus_bw numbers") from None
        if any(math.isnan(x) or x < 0 for x in vals):
            raise UserError(f"{file}:1: {where} has a negative or NaN value")
        nw = obj.get("nwrong")
        wrong = None if nw is None or nw == "nan" else float(nw)
        return Measurement(vals[0], vals[1], vals[2], wrong=wrong, cputime=cputime, resolution=(5e-7, 5e-7, 5e-7))

    for i, res in enumerate(data["results"]):
        where = f"results[{i}]"
        if not isinstance(res, dict):
            raise UserError(f"{file}:1: {where} is not an object")
        try:
            size, count = int(res["size"]), int(res["count"])
            root_raw = str(res.get("root", "-1")).strip()
            root = int(root_raw) if root_raw else None
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{file}:1: {where} lacks integer size/count/root") from None
        sec.rows.append(Row(size_bytes=size, count=count, type=str(res.get("type", "")), redop=res.get("redop"),
                            root=root, out_of_place=block(res.get("out_of_place"), f"{where}.out_of_place"),
                            in_place=block(res.get("in_place"), f"{where}.in_place"), line=i))
    if not sec.rows:
        raise UserError(f"{file}:1: nccl-tests JSON with an empty 'results' list")
    return [(sec, {"labels": Counter(), "nlines": text.count("\n") + 1})]


# ----------------------------------------------------------------------------- inference

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


def _infer_collective(sec: _Section, rows: list[Row], ranks_hint: int | None) -> tuple[str | None, str]:
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


def _finish(sec: _Section, meta: dict[str, Any], file: str, index: int, overrides: dict[str, Any]) -> ParsedLog:
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


# ----------------------------------------------------------------------------- public API

def _check_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in overrides.items() if v is not None}
    if "collective" in out:
        out["collective"] = normalize_collective(out["collective"])
    for key in ("ranks", "nodes"):
        if key in out and (not isinstance(out[key], int) or out[key] < 1):
            raise UserError(f"--{key} must be a positive integer, got {out[key]!r}")
    if "ranks" in out and "nodes" in out and out["ranks"] % out["nodes"]:
        raise UserError(f"--ranks {out['ranks']} is not a multiple of --nodes {out['nodes']}")
    return out


def parse_text(text: str, file: str = "<text>", *, collective: str | None = None, ranks: int | None = None,
               nodes: int | None = None, gpu: str | None = None) -> list[ParsedLog]:
    """Parse one log (text or -J JSON). Returns one :class:`ParsedLog` per table in it.

    Bad input (empty, truncated, garbled) raises :class:`UserError` naming ``file:line``.
    """
    overrides = _check_overrides({"collective": collective, "ranks": ranks, "nodes": nodes, "gpu": gpu})
    if not text.strip():
        raise UserError(f"{file}:1: empty log")
    if text.lstrip().startswith("{"):
        scanned = _scan_json(text, file)
    else:
        scanned = _scan_text(text, file)
    out = []
    for sec, meta in scanned:
        if not sec.rows:
            if sec.columns is not None:
                raise UserError(f"{file}:{sec.columns.line}: table header but no result rows after it (truncated log?)")
            continue
        out.append(_finish(sec, meta, file, len(out), overrides))
    if not out:
        n = scanned[0][1]["nlines"] if scanned else 0
        raise UserError(f"{file}:{n}: no nccl-tests result rows in {n} lines (not an nccl-tests log?)")
    return out


def parse_file(path: str | Path, **overrides) -> list[ParsedLog]:
    p = Path(path)
    try:
        data = p.read_bytes()
    except IsADirectoryError:
        raise UserError(f"{p}: is a directory, expected an nccl-tests log") from None
    except OSError as exc:
        raise UserError(f"cannot read {p}: {exc.strerror or exc}") from None
    if b"\x00" in data[:4096]:
        raise UserError(f"{p}:1: binary file, not an nccl-tests log")
    text = data.decode("utf-8", errors="replace")
    return parse_text(text, str(p), **overrides)


def parse_files(paths: Iterable[str | Path], **overrides) -> list[ParsedLog]:
    out: list[ParsedLog] = []
    for p in paths:
        out.extend(parse_file(p, **overrides))
    return out


# ----------------------------------------------------------------------------- writing the layout

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
