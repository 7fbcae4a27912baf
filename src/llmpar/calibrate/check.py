"""Check the collective model against nccl-tests measurements.

``llmpar calibrate check LOG... --hardware PROFILE [--tolerance 10%] [--statistic ...]``.

For every usable row (out-of-place block; ``#wrong`` > 0 rows are left out): the measured and
predicted time and busbw, and ``error = predicted / measured - 1`` of time (negative: the model is
optimistic). Then the median and maximum |error| over the rows of >= 1 MB and of >= 64 MB
(2^20 and 2^26 bytes: nccl-tests sizes are powers of two). The check fails (exit 1) when the
chosen statistic - by default the median |error| at >= 1 MB, which ignores the latency-bound
sizes no training step cares about and a single odd row - exceeds the tolerance.

Predictions come from :mod:`llmpar.cost.collectives` through :func:`llmpar.calibrate.placement.predict`
with the group shape of :func:`llmpar.calibrate.placement.place` (the same the fitter uses). Nothing here
prints; the CLI renders the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmpar.calibrate.placement import error_summary, place, predict
from llmpar.cost.collective_params import bus_factor
from llmpar.cost.collectives import collective_report
from llmpar.errors import UserError

STATISTICS = ("median_abs_error_ge_1MB", "max_abs_error_ge_1MB", "median_abs_error_ge_64MB", "max_abs_error_ge_64MB")
DEFAULT_STATISTIC = "median_abs_error_ge_1MB"


def parse_tolerance(text) -> float:
    """'10%' -> 0.10; '0.1' -> 0.10: the one rule, :func:`llmpar.units.parse_tolerance`."""
    from llmpar.units import parse_tolerance as parse

    return parse(text)


@dataclass
class CheckRow:
    file: str
    collective: str
    size_bytes: int
    measured_time_s: float
    predicted_time_s: float
    measured_busbw_GBps: float
    predicted_busbw_GBps: float
    error: float
    algorithm: str | None = None
    protocol: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "collective": self.collective, "size_bytes": self.size_bytes,
                "measured_time_s": self.measured_time_s, "predicted_time_s": self.predicted_time_s,
                "measured_busbw_GBps": self.measured_busbw_GBps, "predicted_busbw_GBps": self.predicted_busbw_GBps,
                "error": self.error, "algorithm": self.algorithm, "protocol": self.protocol}


@dataclass
class CheckFile:
    file: str
    collective: str
    ranks: int
    nodes: int
    members_per_node: int
    tier: str
    summary: dict[str, float | None]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "collective": self.collective, "ranks": self.ranks, "nodes": self.nodes,
                "members_per_node": self.members_per_node, "tier": self.tier, "summary": self.summary,
                "notes": self.notes}


@dataclass
class CheckResult:
    hardware: str
    rows: list[CheckRow]
    files: list[CheckFile]
    summary: dict[str, float | None]
    statistic: str
    tolerance: float

    @property
    def value(self) -> float | None:
        return self.summary[self.statistic]

    @property
    def passed(self) -> bool:
        return self.value is not None and self.value <= self.tolerance

    def verdict(self) -> str:
        v = self.value
        if v is None:
            return f"no rows for {self.statistic}"
        return (f"{self.statistic} = {v:.1%} {'<=' if self.passed else '>'} tolerance {self.tolerance:.1%} "
                f"({'within' if self.passed else 'BEYOND'} tolerance)")

    def to_dict(self) -> dict[str, Any]:
        return {"hardware": self.hardware, "rows": [r.to_dict() for r in self.rows], "summary": self.summary,
                "files": [f.to_dict() for f in self.files],
                "check": {"statistic": self.statistic, "tolerance": self.tolerance, "value": self.value,
                          "passed": self.passed}}


def check(logs, hardware, *, tolerance: float = 0.10, statistic: str = DEFAULT_STATISTIC,
          algorithm: str | None = None) -> CheckResult:
    """Compare every usable row of the parsed logs with the model on ``hardware`` (name, path or
    :class:`Hardware`). ``algorithm``: the logs were measured with NCCL_ALGO forced to it."""
    from llmpar.specs import load_hardware

    if not logs:
        raise UserError("no logs given")
    if statistic not in STATISTICS:
        raise UserError(f"unknown statistic {statistic!r}; choose one of: {', '.join(STATISTICS)}")
    hw = load_hardware(hardware)
    rows: list[CheckRow] = []
    files: list[CheckFile] = []
    for log in logs:
        pl = place(log, hw, algorithm)
        pred = predict(hw, pl)
        err = pred / pl.times - 1.0
        factor = bus_factor(pl.collective, pl.ranks)
        for s, t, q, e in zip(pl.sizes, pl.times, pred, err):
            rep = collective_report(hw, pl.collective, float(s), pl.ranks, pl.members_per_node, algorithm=pl.algorithm)
            rows.append(CheckRow(
                file=pl.label, collective=pl.collective, size_bytes=int(s), measured_time_s=float(t),
                predicted_time_s=float(q), measured_busbw_GBps=float(s / t * factor / 1e9),
                predicted_busbw_GBps=float(s / q * factor / 1e9) if q > 0 else 0.0, error=float(e),
                algorithm=rep.chosen, protocol=rep.chosen_protocol))
        files.append(CheckFile(file=pl.label, collective=pl.collective, ranks=pl.ranks, nodes=pl.nodes,
                               members_per_node=pl.members_per_node, tier=pl.tier,
                               summary=error_summary(pl.sizes, err), notes=pl.notes))
    summary = error_summary([r.size_bytes for r in rows], [r.error for r in rows])
    if summary[statistic] is None:
        raise UserError(f"no rows of {'>= 64 MB' if '64MB' in statistic else '>= 1 MB'} in the logs: "
                        f"{statistic} is undefined (measure larger sizes, e.g. nccl-tests -e 1G)")
    return CheckResult(hardware=hw.name, rows=rows, files=files, summary=summary, statistic=statistic,
                       tolerance=float(tolerance))


def chart_points(result: CheckResult, file: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sizes, measured busbw, predicted busbw) of one file's rows, for the charts."""
    rows = [r for r in result.rows if r.file == file]
    return (np.array([r.size_bytes for r in rows], dtype=float), np.array([r.measured_busbw_GBps for r in rows]),
            np.array([r.predicted_busbw_GBps for r in rows]))
