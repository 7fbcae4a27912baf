"""Result objects of every command: what ``llmpar memory|step|collective|validate`` computed, as
pydantic models (the planner's, ``plan`` and ``sweep``, are in :mod:`llmpar.results_plan`).

These sit below both the API (:mod:`llmpar.api`) and the planner (:mod:`llmpar.planner.search`,
:mod:`llmpar.planner.sweep`), which build them; nothing here computes a number or prints.

Each result keeps the objects it was built from (``parallel`` is a
:class:`~llmpar.parallel.Parallel`, ``settings`` a :class:`~llmpar.parallel.Settings`, a plan's
rows are :class:`PlanRow` objects), so a script can reach ``r.parallel.tp`` or
``r.settings.stack.name``. Its JSON is the contract: :meth:`Result.to_dict` builds it, and
``model_dump()`` / ``model_dump_json()`` return exactly that — the keys of the command's
``--json``, pinned by ``tests/test_json_schema.py`` and documented in docs/json.md, with numpy
scalars as Python numbers and non-finite floats as None (JSON null), as the CLI prints them.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, InstanceOf, model_serializer

from llmpar.parallel import Parallel, Settings

MEMORY_COMPONENTS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                     "buffers_bytes", "kv_cache_bytes", "allocated_bytes", "allocator_overhead_bytes",
                     "reserved_bytes", "runtime_bytes", "total_bytes", "margin_bytes")
STEP_NUMBERS = ("step_time_s", "tokens_per_s", "samples_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu",
                "mfu", "hfu", "mfu_full_attention")


def jsonable(obj: Any) -> Any:
    """A JSON-ready copy: numpy arrays/scalars as Python values, non-finite floats as None."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else None
    return obj


def num(x: float) -> int | float:
    """Counts as ints in JSON when they are whole (they are, except for uneven bare splits)."""
    return int(x) if float(x).is_integer() else float(x)


class Result(BaseModel):
    """Base of every result: pydantic fields for the attributes, :meth:`to_dict` for the JSON.

    ``model_dump()`` is ``jsonable(to_dict())``: the command's ``--json`` object, key for key.
    A subclass whose fields *are* its JSON keys needs no ``to_dict`` of its own."""

    # defer_build: a command builds the schema of the results it returns only (CLI latency);
    # protected_namespaces: "model" and "model_requested" are JSON keys
    model_config = ConfigDict(arbitrary_types_allowed=True, protected_namespaces=(), defer_build=True)

    #: keys left out of the JSON when their value is None (optional blocks such as ``explain``)
    _optional: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in type(self).model_fields
                if not (k in self._optional and getattr(self, k) is None)}

    @model_serializer(mode="plain")
    def _serialize(self) -> Any:
        return jsonable(self.to_dict())


# ------------------------------------------------------------------------------------ memory

class MemoryResult(Result):
    """What `llmpar memory` computed (issue 2)."""

    model: str
    model_requested: str | None
    hardware: str
    parallel: InstanceOf[Parallel]
    settings: InstanceOf[Settings]
    mode: str                               # "training" | "inference" | "model_states"
    params_total: float
    params_per_gpu: float
    memory: dict[str, float]
    activation_bytes_per_layer: float | None
    capacity_bytes: float
    fits: bool
    max_micro_batch: int | None
    most_loaded_stage: int
    bytes_per_param: dict[str, Any]
    assumptions: list[str] = []
    communicators: int = 0
    stages: list[dict] | None = None
    terms: list[Any] | None = None
    inference: dict[str, Any] | None = None
    # training mode: the total's interval from published peaks (llmpar.evidence.memory_json)
    interval: dict[str, Any] | None = None
    # training mode, DOES NOT FIT: the changes that would fit, each computed (llmpar.remedies)
    changes_that_fit: list[dict[str, Any]] | None = None

    @property
    def gpus(self) -> int:
        return int(self.parallel.gpus)

    @property
    def usable_bytes(self) -> float:
        """HBM left for the allocator's pool: capacity − runtime (CUDA context + NCCL, or --reserve)."""
        return self.capacity_bytes - self.memory["runtime_bytes"]

    @property
    def verdict(self) -> str:
        """'fits' | 'tight' | 'does_not_fit' (cost.runtime.verdict_code: within the stack's
        memory.uncertainty of the capacity on either side is 'tight')."""
        from llmpar.cost.runtime import verdict_code, verdict_name

        if not self.fits and self.memory["total_bytes"] <= self.capacity_bytes:
            return "does_not_fit"       # the HBM holds it; what it offloads exceeds host memory
        return verdict_name(verdict_code(self.memory["total_bytes"], self.capacity_bytes,
                                         self.settings.stack.memory.uncertainty))

    @property
    def margin_bytes(self) -> float:
        """HBM left after the total (negative: short by that much), as cost/memory.py computed it."""
        return self.memory["margin_bytes"]

    @property
    def model_states_bytes(self) -> float:
        return sum(self.memory[k] for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model,
            "model_requested": self.model_requested,
            "hardware": self.hardware,
            "gpus": self.gpus,
            "mode": self.mode,
            "parallel": self.parallel.as_dict(),
            "settings": self.settings.as_dict(),
            "params_total": num(self.params_total),
            "params_per_gpu": num(self.params_per_gpu),
            "bytes_per_param": self.bytes_per_param,
            "memory": dict(self.memory),
            "model_states_bytes": self.model_states_bytes,
            "activation_bytes_per_layer": self.activation_bytes_per_layer,
            "capacity_bytes": self.capacity_bytes,
            "usable_bytes": self.usable_bytes,
            "fits": self.fits,
            "verdict": self.verdict,
            "margin_bytes": self.margin_bytes,
            "uncertainty": self.settings.stack.memory.uncertainty,
            "communicators": self.communicators,
            "max_micro_batch": self.max_micro_batch,
            "most_loaded_stage": self.most_loaded_stage,
            "assumptions": list(self.assumptions),
        }
        if self.interval is not None:
            out["interval"] = dict(self.interval)
        if self.changes_that_fit is not None:
            out["changes_that_fit"] = [dict(c) for c in self.changes_that_fit]
        if self.inference is not None:
            out["inference"] = dict(self.inference)
        if self.stages is not None:
            out["stages"] = [dict(s) for s in self.stages]
        if self.terms is not None:
            out["terms"] = [t.as_dict() for t in self.terms]
        return out


# -------------------------------------------------------------------------------------- step

def step_numbers(out: dict[str, Any], i=None) -> dict[str, Any]:
    """The figures of one layout from :func:`llmpar.cost.step.step_time`'s output: the scalar
    result (``i`` None) or entry ``i`` of the planner's arrays."""
    def f(x):   # a term the same for every candidate may be one number (np.ndim 0): it is theirs
        a = np.asarray(x)
        return float(a if i is None or a.ndim == 0 else a[i])

    return {**{k: f(out[k]) for k in STEP_NUMBERS}, "mfu_convention": out["mfu_convention"],
            "breakdown_s": {k: f(v) for k, v in out["breakdown_s"].items()},
            "comm_bytes_per_gpu": {k: f(v) for k, v in out["comm_bytes_per_gpu"].items()}}


class StepFigures(Result):
    """What every step-time result carries (`llmpar step`, each row of `llmpar plan`)."""

    model: str
    hardware: str
    parallel: InstanceOf[Parallel]
    settings: InstanceOf[Settings]
    step_time_s: float
    tokens_per_s: float
    samples_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    hfu: float
    mfu_full_attention: float
    mfu_convention: str
    breakdown_s: dict[str, float]
    comm_bytes_per_gpu: dict[str, float]
    # how far off the figures may be (llmpar.evidence.speed_json): bounds, level, evidence class
    interval: dict[str, Any] | None = None
    # the prediction against the best published MFU of its class (llmpar.evidence.plausibility)
    plausibility: dict[str, Any] | None = None

    @property
    def gpus(self) -> int:
        return int(self.parallel.gpus)

    def step_json(self, memory: dict[str, Any], fits: bool) -> dict[str, Any]:
        """The JSON keys of a step-time result: the common keys of docs/architecture.md plus issue 3's."""
        return {
            "model": self.model,
            "hardware": self.hardware,
            "gpus": self.gpus,
            "parallel": self.parallel.as_dict(),
            "settings": self.settings.as_dict(),
            "tokens_per_step": int(self.parallel.tokens_per_step),
            **{k: getattr(self, k) for k in STEP_NUMBERS},
            "mfu_convention": self.mfu_convention,
            "breakdown_s": dict(self.breakdown_s),
            "comm_bytes_per_gpu": dict(self.comm_bytes_per_gpu),
            "memory": memory,
            "fits": fits,
            "interval": self.interval,
            "plausibility": self.plausibility,
        }


class StepResult(StepFigures):
    """What `llmpar step` computed (issue 3)."""

    model_requested: str | None = None
    memory: MemoryResult | None = None
    detail: dict[str, Any] = {}
    assumptions: list[str] = []
    training: dict[str, Any] | None = None   # days, GPU-hours, energy, cost to train `tokens` (cost.training)

    def terms(self) -> list:
        """Every component's formula, values and source (cost/step_explain.py; ``--explain``): the
        counted terms add up to ``breakdown_s``."""
        from llmpar.cost.step_explain import step_terms

        return step_terms(self)

    def to_dict(self) -> dict[str, Any]:
        mem = self.memory
        memory = {**mem.memory, "capacity_bytes": mem.capacity_bytes, "fits": mem.fits,
                  "max_micro_batch": mem.max_micro_batch, "params_per_gpu": num(mem.params_per_gpu),
                  **({"interval": dict(mem.interval)} if mem.interval is not None else {})}
        return {
            "model_requested": self.model_requested,
            **self.step_json(memory, mem.fits),
            "detail": dict(self.detail),
            "terms": [t.as_dict() for t in self.terms()],
            "assumptions": list(self.assumptions),
            **({"training": dict(self.training)} if self.training is not None else {}),
        }


# -------------------------------------------------------------------------------- collective

class _CollectiveGroup(Result):
    """The group a collective runs over, shared by `llmpar collective --size` and ``--sweep``:
    which collective, how many GPUs, how the one placement rule spreads them over scale-up
    domains, the tiers that crosses, and the nccl-tests bus factor."""

    collective: str
    gpus: int
    hardware: str
    members_per_node: int
    nodes: int
    crosses_nodes: bool
    tiers: list[str]
    bus_factor: float


class CollectiveResult(_CollectiveGroup):
    """What `llmpar collective --size` computed: one size, every algorithm, NCCL's choice.
    Its fields are its JSON keys (``explain`` only when asked)."""

    size_bytes: int | float
    chosen: str | None
    chosen_protocol: str | None
    time_s: float | None
    algorithms: list[dict[str, Any]]
    assumptions: list[str] = []
    explain: list[dict[str, Any]] | None = None
    _optional: ClassVar[tuple[str, ...]] = ("explain",)

    @property
    def chosen_row(self) -> dict[str, Any] | None:
        """The ``algorithms`` entry NCCL would pick (None when none can run)."""
        return next((a for a in self.algorithms if a["algorithm"] == self.chosen), None)


class CollectiveSweepResult(_CollectiveGroup):
    """What `llmpar collective --sweep A:B` computed: NCCL's choice at each size (nccl-tests layout).
    Its fields are its JSON keys."""

    algorithm: str | None
    sweep: list[dict[str, Any]]
    assumptions: list[str] = []


# ---------------------------------------------------------------------------------- validate

class ValidateResult(Result):
    """What `llmpar validate` computed: published vs predicted per row, and per group
    (source, metric, stack) the mean and max absolute error, and the leave-one-source-out figures
    (``cross_validation``; None under ``stack``). JSON keys: cross_validation, rows, groups, sources."""

    rows: list[dict[str, Any]]
    groups: list[dict[str, Any]]
    sources: list[dict[str, Any]]
    stack: str | None = None       # the stack every row was evaluated under, when one was asked for
    cross_validation: dict[str, Any] | None = None
    serving: dict[str, Any] | None = None   # validate(serving=True): the published serving runs (docs/serving.md)
    finetune: dict[str, Any] | None = None  # validate(finetune=True): the published LoRA/QLoRA runs (docs/finetune.md)

    def to_dict(self) -> dict[str, Any]:
        if self.serving is not None:
            return {"serving": self.serving}
        if self.finetune is not None:   # `validate --finetune --json`'s object
            return {"finetune": self.finetune}
        return {"cross_validation": self.cross_validation, "rows": self.rows, "groups": self.groups,
                "sources": self.sources}

    def over_tolerance(self, tolerance) -> list[dict[str, Any]]:
        """The groups whose mean absolute error exceeds ``tolerance`` (``0.1`` or ``"10%"``, as
        :func:`llmpar.api.validate` takes it)."""
        return groups_over_tolerance(self.groups, tolerance)


def groups_over_tolerance(groups: list[dict[str, Any]], tolerance) -> list[dict[str, Any]]:
    """The validation groups whose mean absolute error exceeds ``tolerance`` (a fraction or a
    percentage such as ``"10%"``; units.parse_tolerance): the one rule of `validate --tolerance`."""
    tol = _fraction(tolerance)
    return [g for g in groups if g.get("mean_abs_error") is not None and g["mean_abs_error"] > tol]


def _fraction(tolerance) -> float:
    """A tolerance as a fraction: a number is one already (the API's, or parse_tolerance's own
    result); text is read by the --tolerance rule (units.parse_tolerance)."""
    from llmpar.errors import UserError
    from llmpar.units import parse_tolerance

    if isinstance(tolerance, (int, float)) and not isinstance(tolerance, bool):
        if not (tolerance > 0 and math.isfinite(tolerance)):
            raise UserError(f"tolerance must be above 0, got {tolerance!r}")
        return float(tolerance)
    return parse_tolerance(tolerance)


def raise_over_tolerance(groups: list[dict[str, Any]], tolerance) -> None:
    """CheckFailed (exit 1) naming every group over ``tolerance``; nothing when none is."""
    from llmpar.errors import CheckFailed

    tol = _fraction(tolerance)
    bad = groups_over_tolerance(groups, tol)
    if bad:
        what = ", ".join(f"{g['source']} {g['metric']} ({g['stack']}) {g['mean_abs_error'] * 100:.1f} %" for g in bad)
        raise CheckFailed(f"validate: mean |error| above {tol * 100:g} % in {len(bad)} group(s): {what}")


__all__ = ["CollectiveResult", "CollectiveSweepResult", "MEMORY_COMPONENTS", "MemoryResult", "Result", "STEP_NUMBERS",
           "StepFigures", "StepResult", "ValidateResult", "groups_over_tolerance", "jsonable", "num",
           "raise_over_tolerance", "step_numbers"]
