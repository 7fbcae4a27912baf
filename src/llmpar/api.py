"""Python API for scripts: the same computations as the CLI, returning result objects.

``import llmpar`` exposes these functions lazily (``llmpar.memory``, ``llmpar.plan`` ...); this
module is where they live. Each takes the command's options as keyword arguments, with
underscores (docs/architecture.md, CLI conventions: same names and meaning everywhere); a loaded
ModelSpec, Hardware or Stack works wherever a name does. Each returns a pydantic result
(:mod:`llmpar.results`) whose ``model_dump()`` is the command's ``--json`` object. Bad input
raises :class:`llmpar.errors.UserError` (the CLI's exit 2); a check that fails — nothing
feasible in ``plan``, ``validate`` over ``tolerance`` — raises
:class:`llmpar.errors.CheckFailed` (exit 1). Nothing here prints. docs/api.md has the reference.

Each function here is a face: its documented keywords (the shared ones declared once, in
:mod:`llmpar.options`), then the command's work in :mod:`llmpar.run` (``memory``, ``step``,
``collective``); the numbers come from :mod:`llmpar.cost` through :func:`llmpar.layout.resolve`.
:func:`plan` and :func:`sweep` are the planner's (:mod:`llmpar.planner`), :func:`validate` wraps
:mod:`llmpar.validation.core`.

    >>> import llmpar
    >>> r = llmpar.memory("llama-3-70b", hardware="h100-sxm", zero=3, dp=8)
    >>> r.fits, r.memory["total_bytes"], r.model_dump()["verdict"]
"""

from __future__ import annotations

from llmpar.errors import UserError, refuse_unknown
from llmpar.inputs import load_hardware_spec, load_model_spec, make_settings, parse_reserve, stack_note  # noqa: F401 (API)
from llmpar.parallel import callback, positive_int
from llmpar.run import memory as RM
from llmpar.results import (MEMORY_COMPONENTS, STEP_NUMBERS, CollectiveResult, CollectiveSweepResult, MemoryResult,
                            StepFigures, StepResult, ValidateResult, step_numbers)
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec
from llmpar.specs.registry import DEFAULT_HARDWARE
from llmpar.specs.stack import Stack
from llmpar.units import parse_tolerance  # noqa: F401 (parse_tolerance: API)

# ------------------------------------------------------------------------------ spec loading


def load_model(model: str | ModelSpec | None = None, *, hf: str | None = None, **unknown) -> ModelSpec:
    """A model spec: a shipped name or alias (``"llama-70b"``), a YAML path, a Hugging Face
    ``config.json`` path (or ``hf=`` one), or a loaded :class:`ModelSpec` (returned as is)."""
    refuse_unknown("load_model", unknown, ["model", "hf"])   # a UserError naming the closest keyword (docs/api.md)
    if model is None and hf is None:
        raise UserError("give a MODEL (e.g. llama-3-70b) or hf= a config.json")
    return load_model_spec(model, hf)[0]


def load_hardware(hardware: str | Hardware | None = DEFAULT_HARDWARE, **unknown) -> Hardware:
    """A hardware profile: a shipped name (``"h100-sxm"``), a YAML path, or a loaded :class:`Hardware`."""
    refuse_unknown("load_hardware", unknown, ["hardware"])
    return load_hardware_spec(hardware)


def load_stack(stack: str | Stack | None = None, **unknown) -> Stack:
    """A software stack: a shipped name (``"megatron-core"``), a YAML path, a loaded :class:`Stack`,
    or None for the default stack."""
    refuse_unknown("load_stack", unknown, ["stack"])
    from llmpar.specs.registry import load_stack as _load_stack

    return _load_stack(stack)


# ------------------------------------------------------------------------------------ memory

def memory(
    model: str | ModelSpec | None = None,
    *,
    hardware: str | Hardware | None = DEFAULT_HARDWARE,
    gpus: int | None = None,
    tp: int | None = None,
    pp: int | None = None,
    dp: int | None = None,
    cp: int | None = None,
    ep: int | None = None,
    etp: int | None = None,
    zero: int = 0,
    sp: bool | None = None,
    recompute: str = "none",
    micro_batch: int | None = None,
    global_batch: int | None = None,
    microbatches: int | None = None,
    seq: int | None = None,
    schedule: str | None = None,
    virtual_stages: int | None = None,
    recompute_layers: int | None = None,
    offload_layers: int | None = None,
    recompute_modules: str | list | None = None,
    dtype: str = "bf16",
    optimizer: str | None = None,
    grad_dtype: str | None = None,
    convention: str | None = None,
    attention: str | None = None,
    reserve: str | float | None = None,
    params: str | float | None = None,
    stack=None,
    hf: str | None = None,
    per_stage: bool = False,
    inference: bool = False,
    batch: int | None = None,
    context: int | None = None,
    kv_dtype: str | None = None,
    explain: bool = False,
    finetune: str | None = None,
    lora_rank: int | None = None,
    lora_targets: str | None = None,
    optimizer_offload: float | str | None = None,
    param_offload: bool | None = None,
    **unknown,
) -> MemoryResult:
    """Per-GPU memory of a training (or, with ``inference=True``, serving) layout.

    ``model``: shipped name or alias, YAML path or HF config.json path; or ``hf=`` a config.json;
    or ``params='7.5B'`` for the model states of a bare parameter count (ZeRO paper Table 1).
    Keyword arguments are the CLI's common options. Raises :class:`llmpar.errors.UserError` for
    bad input.
    """
    values = dict(locals())
    refuse_unknown("memory", values.pop("unknown"), values)
    return RM.run(values)


# -------------------------------------------------------------------------------------- step

def step(
    model: str | ModelSpec | None = None,
    *,
    hardware: str | Hardware | None = DEFAULT_HARDWARE,
    gpus: int | None = None,
    tp: int | None = None,
    pp: int | None = None,
    dp: int | None = None,
    cp: int | None = None,
    ep: int | None = None,
    etp: int | None = None,
    zero: int = 0,
    sp: bool | None = None,
    recompute: str = "none",
    micro_batch: int | None = None,
    global_batch: int | None = None,
    microbatches: int | None = None,
    seq: int | None = None,
    schedule: str | None = None,
    virtual_stages: int | None = None,
    recompute_layers: int | None = None,
    offload_layers: int | None = None,
    recompute_modules: str | list | None = None,
    dtype: str = "bf16",
    optimizer: str = "adam",
    grad_dtype: str | None = None,
    convention: str = "llmpar",
    attention: str | None = None,
    reserve: str | float | None = None,
    hf: str | None = None,
    dp_overlap: float | None = None,
    tp_overlap: float | None = None,
    rank_order: str | None = None,
    stack=None,
    ep_overlap: float | None = None,
    ep_dispatcher: str | None = None,
    tokens=None,
    pue=None,
    gpu_hour_price=None,
    power_per_gpu=None,
    failure_rate=None,
    restart_time=None,
    checkpoint_bandwidth=None,
    checkpoint=None,
    interval_level=None,
    finetune: str | None = None,
    lora_rank: int | None = None,
    lora_targets: str | None = None,
    optimizer_offload: float | str | None = None,
    param_offload: bool | None = None,
    **unknown,
) -> StepResult:
    """Step time, throughput, MFU/HFU and where the time goes, for one layout (issue 3).

    Keyword arguments are the CLI's common options; ``dp_overlap``/``tp_overlap``/``ep_overlap`` are the usable
    fractions of the compute DP/TP traffic can hide behind (defaults 0.5 and 0.8; see
    :class:`llmpar.parallel.Settings`), ``rank_order`` the rank order, innermost first.
    ``tokens`` (``"15T"``), ``pue``, ``gpu_hour_price``, ``power_per_gpu``: days, GPU-hours, energy
    and cost to train that budget on this layout (:func:`llmpar.cost.training.estimate`).
    ``interval_level`` (default 0.8): the level of the result's ``interval`` (:mod:`llmpar.evidence`).
    Raises :class:`llmpar.errors.UserError` for bad input."""
    values = dict(locals())
    refuse_unknown("step", values.pop("unknown"), values)
    from llmpar.run import step as RS   # here: `llmpar memory` need not load the time model

    return RS.run(values)


# ---------------------------------------------------------------------------- plan and sweep
#
# plan() and sweep() are the planner's own functions (llmpar.planner.search.plan,
# llmpar.planner.sweep.sweep): their keywords are documented there and in docs/api.md. Imported on
# first use, so `llmpar memory` and `llmpar step` do not load the planner.

_PLAN_RESULTS = ("Comparison", "PlanResult", "PlanRow", "SpaceSummary", "SweepResult", "SweepRow")


def __getattr__(name):
    if name in _PLAN_RESULTS:   # the planner's result types: loaded with the planner, not by `memory`
        from llmpar import results_plan

        return getattr(results_plan, name)
    if name == "plan":
        from llmpar.planner.search import plan as _plan

        return _plan
    if name == "sweep":
        from llmpar.planner.sweep import sweep as _sweep

        return _sweep
    if name == "ServeResult":
        from llmpar.serving.result import ServeResult

        return ServeResult
    if name == "serve":   # docs/serving.md; lives with the serving rooms
        from llmpar.serving.run import serve_api

        return serve_api
    if name == "serve_plan":
        from llmpar.serving.plan_api import serve_plan_api

        return serve_plan_api
    raise AttributeError(f"module 'llmpar.api' has no attribute {name!r}")

# -------------------------------------------------------------------------------- collective

def collective(
    collective: str,
    *,
    size: str | float | None = None,
    gpus: int | None = None,
    gpus_per_node: int | None = None,
    hardware: str | Hardware | None = DEFAULT_HARDWARE,
    algorithm: str | None = None,
    sweep: str | None = None,
    explain: bool = False,
    **unknown,
) -> CollectiveResult | CollectiveSweepResult:
    """Cost one collective (``"all-reduce"``, ``"all_gather"``, ``"reduce-scatter"``, ``"all-to-all"``,
    ``"broadcast"``, ...) over ``gpus`` GPUs per algorithm and protocol, and the one NCCL would pick,
    as `llmpar collective` does.

    ``size``: the message (``"1GiB"`` or bytes; nccl-tests convention: all-gather/reduce-scatter
    count the whole array; default 1 GiB). ``sweep="1KiB:8GiB"``: every doubling size instead,
    returned as a :class:`CollectiveSweepResult` (NCCL's choice at each size). ``gpus``: default
    one node. ``gpus_per_node``: group members per node / NVLink domain (default: consecutive
    ranks, the placement ``step`` and ``plan`` use). ``algorithm``: force one (``"ring"``,
    ``"tree"``, ``"nvls"``, ...). ``explain``: add each algorithm's latency and bandwidth terms.
    Raises :class:`~llmpar.errors.UserError` for bad input (and for a forced algorithm that
    cannot run this group)."""
    refuse_unknown("collective", unknown, [k for k in locals() if k != "unknown"])
    from llmpar.run import collective as RC

    return RC.run(collective, size=size, gpus=gpus, gpus_per_node=gpus_per_node, hardware=hardware,
                  algorithm=algorithm, sweep=sweep, explain=explain)


# ---------------------------------------------------------------------------------- validate

def validate(
    source: str | list[str] | None = None,
    *,
    stack: str | Stack | None = None,
    limit: int | None = None,
    tolerance: str | float | None = None,
    progress=None,
    serving: bool = False,
    finetune: bool = False,
    **unknown,
) -> ValidateResult:
    """Published vs predicted for every shipped published run (or those of ``source``: one name or
    a list), each under its source's stack or ``stack``, as `llmpar validate` does.

    ``limit``: only the first N runs of each source. ``tolerance`` (``0.1`` or ``"10%"``): raise
    :class:`~llmpar.errors.CheckFailed` if any group's mean absolute error exceeds it (the CLI's
    exit 1); :meth:`ValidateResult.over_tolerance` asks the same without raising.
    ``progress(name, done, total)`` is called before each source. ``serving=True``: the published
    serving runs instead (``validate --serving``; the result's ``serving`` holds the block).
    ``finetune=True``: the published LoRA / QLoRA runs (``validate --finetune``; in ``finetune``)."""
    refuse_unknown("validate", unknown, [k for k in locals() if k != "unknown"])
    from llmpar.parallel import flag
    from llmpar.validation.core import validate as _validate

    serving, finetune = flag(serving, "serving", False), flag(finetune, "finetune", False)
    if serving and finetune:
        raise UserError("serving=True and finetune=True are two sets of published runs: choose one")
    if serving or finetune:
        given = [n for n, v in (("source", source), ("stack", stack), ("limit", limit), ("tolerance", tolerance),
                                ("progress", progress)) if v is not None]
        if given:   # an option that changes nothing is refused (the CLI's rule)
            what = "serving" if serving else "finetune"
            raise UserError(f"{what}=True validates every published {'serving' if serving else 'fine-tuning'} run; "
                            f"{', '.join(given)} change{'s' if len(given) == 1 else ''} nothing there")
    if finetune:
        from llmpar.validation.finetune import validate_finetune

        return ValidateResult(rows=[], groups=[], sources=[], finetune=validate_finetune())
    if serving:
        from llmpar.serving.report import validate_block

        return ValidateResult(rows=[], groups=[], sources=[], serving=validate_block())

    tol = parse_tolerance(tolerance)
    if limit is not None:
        limit = positive_int(limit, "limit")
    if source is not None and not (isinstance(source, str) or (isinstance(source, (list, tuple))
                                                                 and all(isinstance(x, str) for x in source))):
        raise UserError(f"source must be a validation source name (a file stem of validation/*.yaml) or a list of "
                        f"them, got {source!r}")
    if isinstance(source, (list, tuple)) and not source:   # [] had validated nothing and passed any tolerance
        raise UserError("source=[] names no source: give one or more names (validation/*.yaml stems), or None for all")
    callback(progress, "progress", "progress(name, done, total)")
    r = _validate(source, stack, limit, progress)
    result = ValidateResult(rows=r.rows, groups=r.groups, sources=[s.as_dict() for s in r.sources], stack=r.stack,
                            cross_validation=r.cross_validation)
    if tol is not None:
        from llmpar.results import raise_over_tolerance

        raise_over_tolerance(result.groups, tol)
    return result


__all__ = ["CollectiveResult", "CollectiveSweepResult", "Comparison", "MemoryResult", "PlanResult", "PlanRow",
           "SpaceSummary", "StepFigures", "StepResult", "SweepResult", "SweepRow", "ValidateResult", "collective",
           "load_hardware", "load_hardware_spec", "load_model", "load_model_spec", "load_stack", "make_settings",
           "memory", "parse_reserve", "parse_tolerance", "plan", "serve", "serve_plan", "ServeResult", "stack_note",
           "step", "step_numbers", "sweep", "validate", "MEMORY_COMPONENTS", "STEP_NUMBERS"]
