"""What an nccl-tests log says, as objects: rows, blocks, devices, parsed tables, and the names,
type sizes and busbw factors they are read with (split from ``nccl_tests``; the parsers in
:mod:`.nccl_text` and :mod:`.nccl_json` fill :class:`Section`, :mod:`.nccl_infer` turns it into a
:class:`ParsedLog`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from llmpar.cost.collective_params import GATHERED, bus_factor
from llmpar.cost.collectives import normalize_collective as _normalize

__all__ = ["GATHERED", "PROGRAMS", "TYPE_BYTES", "Device", "Measurement", "ParsedLog", "Row", "Section",
           "Columns", "busbw_factor", "normalize_collective"]

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

# GATHERED (collectives whose nccl-tests ``size`` counts every rank's piece: size = count x
# typesize x ranks) lives with the size convention in llmpar.cost.collectives.

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
    """busbw / algbw as nccl-tests defines it: :func:`llmpar.cost.collective_params.bus_factor`."""
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
    flagged: bool = False               # #wrong > 0, old-layout error out of bounds, or a problem: not used
    problem: str | None = None          # why the row is no measurement (time inf/0, size 0), if it is not
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
            "problem": self.problem,
            "line": self.line,
            "timestamp": self.timestamp,
        }


def printable(text: str) -> str:
    """``text`` read from a log, with every control character (an ANSI escape, a carriage return) as
    '?': what a log says is printed to the terminal, and a device line holding ESC[31m recoloured it
    (reliability review, item 35, for logs as the spec readers do it for specs: specs/base.py)."""
    import unicodedata

    return "".join("?" if unicodedata.category(c) == "Cc" else c for c in text)


@dataclass
class Device:
    rank: int
    host: str
    device: int
    name: str = ""
    group: int = 0
    pid: int | None = None
    bus: str = ""

    def __post_init__(self):
        self.host, self.name, self.bus = printable(self.host), printable(self.name), printable(self.bus)


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


@dataclass
class Columns:
    lead: list[str]                 # columns between type and the first block: redop, root
    blocks: list[list[str]]         # column names of each block
    time_ends: list[int]            # character column where each block's time column ends
    timestamp: bool
    line: int


@dataclass
class Section:
    stated: str | None = None
    stated_line: int = 0
    devices: list[Device] = field(default_factory=list)
    info_hosts: dict[str, set] = field(default_factory=dict)   # host -> cuda devices seen
    info_rank_host: dict[int, str] = field(default_factory=dict)
    info_nranks: set = field(default_factory=set)
    warns: list[str] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)   # (line, text) of foreign lines in the table
    columns: Columns | None = None
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
