"""The planner's result objects: what ``llmpar plan`` and ``llmpar sweep`` computed, as pydantic
models (the rows are :class:`~llmpar.results.StepFigures`, with ``llmpar step``'s numbers and keys).

The same contract as :mod:`llmpar.results`: built by the planner (:mod:`llmpar.planner.search`,
:mod:`llmpar.planner.sweep`), nothing here computes a number or prints, and ``model_dump()`` is
the command's ``--json`` object (tests/test_json_schema.py, docs/json.md).
"""

from __future__ import annotations

from typing import Any

from pydantic import InstanceOf

from llmpar.parallel import Parallel, Settings
from llmpar.results import Result, StepFigures

# -------------------------------------------------------------------------------------- plan

class PlanRow(StepFigures):
    """One ranked layout, with the numbers and keys of ``llmpar step``."""

    rank: int = 0
    memory: dict[str, Any] = {}
    # layouts with exactly this row's step time and memory (an exact tie: e.g. ZeRO-0 and ZeRO-1
    # when dp*cp = 1 leaves nothing to shard): listed here instead of filling the ranking
    equivalent: list[InstanceOf[Parallel]] = []
    # days, GPU-hours, energy and cost to train --tokens on this layout (cost.training); None without
    training: dict[str, Any] | None = None
    # the same layout at other interleaving depths (planner/families.py): schedule, virtual_stages,
    # step_time_s and memory_bytes of each, best first; they rank below this row
    variants: list[dict[str, Any]] = []

    @property
    def fits(self) -> bool:
        return bool(self.memory["fits"])

    @property
    def memory_bytes(self) -> float:
        return float(self.memory["total_bytes"])

    def largest_overhead(self) -> tuple[str, float]:
        """The largest breakdown term other than compute (compute is nearly always the largest)."""
        name = max((k for k in self.breakdown_s if k != "compute"), key=lambda k: self.breakdown_s[k])
        return name, self.breakdown_s[name]

    def to_dict(self) -> dict[str, Any]:
        out = {"rank": self.rank, **self.step_json(dict(self.memory), self.fits),
               "equivalent": [p.as_dict() for p in self.equivalent], "variants": [dict(v) for v in self.variants]}
        if self.training is not None:
            out["training"] = dict(self.training)
        return out


class SpaceSummary(Result):
    """How many layouts the planner enumerated, rejected (per reason) and evaluated."""

    candidates: int
    feasible: int
    rejected: dict[str, int]
    memory_evaluated: int      # candidates whose memory went through cost.memory
    step_evaluated: int        # candidates timed through cost.step (the ones that fit)
    search_s: float = 0.0      # enumeration + evaluation + ranking (no spec loading)
    tight: int = 0             # feasible candidates whose verdict is TIGHT (within the stack's memory.uncertainty)
    margin: float = 0.0        # --margin: a candidate fits when total * (1 + margin) <= HBM
    recommended: bool = False  # no --margin: TIGHT ranked last, the band within rank_tolerance by robustness
    within_error: int = 0      # feasible layouts other than #1 whose intervals overlap #1's
    robust_band: int = 0       # candidates within rank_tolerance of the fastest recommendable one
    rank_tolerance: float = 0.0


class Comparison(Result):
    """Why plan #1 ranks above plan #n: the breakdown terms (or memory components) that differ."""

    winner: PlanRow
    other: PlanRow
    objective: str
    margin: float                        # other - winner, in seconds (time) or bytes (memory)
    terms: list[tuple[str, float, float]]   # (name, winner value, other value), largest |difference| first
    knobs: list[tuple[str, Any, Any]]       # layout keys that differ

    def to_dict(self) -> dict[str, Any]:
        unit = "s" if self.objective == "time" else "bytes"
        return {
            "winner_rank": self.winner.rank, "other_rank": self.other.rank, "objective": self.objective,
            f"margin_{unit}": self.margin,
            "terms": [{"term": n, f"winner_{unit}": a, f"other_{unit}": b, f"difference_{unit}": b - a}
                      for n, a, b in self.terms],
            "layout_differences": [{"key": k, "winner": a, "other": b} for k, a, b in self.knobs],
        }


class PlanResult(Result):
    """What `llmpar plan` computed (issue 4)."""

    model: str
    model_requested: str | None
    hardware: str
    gpus: int
    seq: int
    global_batch: int
    objective: str
    settings: InstanceOf[Settings]
    capacity_bytes: float
    reserved_bytes: float
    plans: list[PlanRow]
    space: SpaceSummary
    elapsed_s: float
    defaults_used: list[str] = []
    assumptions: list[str] = []
    pareto: list[PlanRow] | None = None
    comparison: Comparison | None = None
    training: dict[str, Any] | None = None   # time/energy/cost to train --tokens with plan #1 (cost.training)
    generation: str | None = None            # the GPU's generation (Settings.tp_overlap_on); not part of the JSON
    # every feasible candidate (arrays: step_time_s, memory_bytes, tp, pp, schedule, frontier) when asked
    # for (``keep_points``: `plan --plot`); not part of the JSON
    points: dict[str, Any] | None = None

    @property
    def best(self) -> PlanRow:
        return self.plans[0]

    def to_dict(self) -> dict[str, Any]:
        out = {
            "model": self.model,
            "model_requested": self.model_requested,
            "hardware": self.hardware,
            "gpus": self.gpus,
            "seq": self.seq,
            "global_batch": self.global_batch,
            "tokens_per_step": self.global_batch * self.seq,
            "objective": self.objective,
            "settings": self.settings.as_dict(),
            "plans": [p.to_dict() for p in self.plans],
            "space": self.space.to_dict(),
            "elapsed_s": self.elapsed_s,
            "defaults_used": list(self.defaults_used),
            "assumptions": list(self.assumptions),
        }
        if self.comparison is not None:
            out["comparison"] = self.comparison.to_dict()
        if self.pareto is not None:
            out["pareto"] = [p.to_dict() for p in self.pareto]
        if self.training is not None:
            out["training"] = dict(self.training)
        return out


# ------------------------------------------------------------------------------------- sweep

class SweepRow(Result):
    """One (hardware, GPU count): plan #1 and the cost to train, or why nothing runs."""

    gpus: int
    hardware: str
    status: str                           # one of llmpar.planner.sweep.STATUSES
    reason: str | None = None
    plan: PlanRow | None = None           # plan #1 when status == "ok"
    training: dict[str, Any] | None = None
    scaling_efficiency: float | None = None
    scaling_reference_gpus: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        t = self.training or {}
        return {
            "gpus": self.gpus,
            "hardware": self.hardware,
            "status": self.status,
            "reason": self.reason,
            "plan": self.plan.to_dict() if self.plan is not None else None,
            "days": t.get("days"),
            "gpu_hours": t.get("gpu_hours"),
            "energy_mwh": t.get("energy_mwh"),
            "cost": t.get("cost"),
            "scaling_efficiency": self.scaling_efficiency,
            "scaling_reference_gpus": self.scaling_reference_gpus,
            "training": dict(self.training) if self.training is not None else None,
            "interval": self.interval(),
        }

    def interval(self) -> dict[str, Any] | None:
        """Plan #1's interval, with days, GPU-hours, energy and cost scaled as its step time."""
        if self.plan is None or self.plan.interval is None:
            return None
        iv = dict(self.plan.interval)
        lo, hi = (x / self.plan.step_time_s for x in iv["step_time_s"])
        for k in ("days", "gpu_hours", "energy_mwh", "cost"):
            v = (self.training or {}).get(k)
            if v is not None:
                iv[k] = [float(v) * lo, float(v) * hi]
        return iv


class SweepResult(Result):
    """What `llmpar sweep` computed (issue 10)."""

    model: str
    model_requested: str | None
    hardware: list[str]
    gpus: list[int]
    seq: int
    global_batch: int
    tokens: float | None
    rows: list[SweepRow]
    settings: InstanceOf[Settings] | None = None
    elapsed_s: float = 0.0
    defaults_used: list[str] = []
    assumptions: list[str] = []
    # --deadline: per profile, the smallest count that trains the budget in time (None: none does)
    deadline: dict[str, Any] | None = None

    @property
    def any_ok(self) -> bool:
        return any(r.ok for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_requested": self.model_requested,
            "hardware": list(self.hardware),
            "gpus": list(self.gpus),
            "seq": self.seq,
            "global_batch": self.global_batch,
            "tokens_per_step": self.global_batch * self.seq,
            "tokens": self.tokens,
            "settings": self.settings.as_dict() if self.settings is not None else None,
            "rows": [r.to_dict() for r in self.rows],
            "elapsed_s": self.elapsed_s,
            "defaults_used": list(self.defaults_used),
            "assumptions": list(self.assumptions),
            "deadline": self.deadline,
        }


__all__ = ["Comparison", "PlanResult", "PlanRow", "SpaceSummary", "SweepResult", "SweepRow"]
