"""What one `llmpar plan` asks for, read and checked before the search, in the order the checks
refuse: the scalar options (:mod:`llmpar.planner.arguments`), the model, hardware and settings
(:mod:`llmpar.inputs`, the rules ``memory`` and ``step`` apply), then the batch and the knob values
held by --fix/--allow as the space to search (:class:`llmpar.planner.space.SpaceSpec`). What was
assumed goes into the request's ``defaults`` and ``notes`` (the result's assumptions).

Nothing here searches (:mod:`llmpar.planner.search`) or prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmpar import evidence as EV
from llmpar import inputs
from llmpar.errors import UserError, refuse_unknown
from llmpar.layout_settings import check_optimizer_offload, check_settings
from llmpar.parallel import MAX_GPUS, RECOMPUTE, SCHEDULES, Settings, flag, fraction
from llmpar.planner import arguments as ARG
from llmpar.planner import space as SP
from llmpar.specs.model import ModelSpec
from llmpar.options import refuse_expert_options
from llmpar.units import memory_units

# plan()'s keywords that are the run's settings (inputs.make_settings), as `memory` and `step` take them
_SETTINGS_KEYWORDS = ("dtype", "optimizer", "grad_dtype", "convention", "attention", "dp_overlap", "tp_overlap",
                      "ep_overlap", "ep_dispatcher", "recompute_modules", "rank_order", "stack", "finetune",
                      "lora_rank", "lora_targets", "optimizer_offload", "param_offload")
# plan()'s keywords (checked) that shape the search itself (search()'s own keywords)
_SEARCH_KEYWORDS = ("objective", "top", "pareto", "explain_rank", "units", "margin", "keep_points", "level")


@dataclass
class PlanRequest:
    """One plan's inputs, checked: the specs and settings, the space to search, the search's options."""

    model: ModelSpec
    alias: str | None
    hw: Any
    reserve: Any
    settings: Settings
    space: SP.SpaceSpec
    train_in: dict
    search_options: dict
    defaults: list[str]
    notes: list[str]


def read_request(args: dict) -> PlanRequest:
    """plan()'s keywords (``args``: its locals, ``layout`` the layout keywords) read and checked."""
    defaults: list[str] = []
    notes: list[str] = []
    a = _checked_options(args)
    model, alias, hw, reserve, settings = _specs_and_settings(a, defaults, notes)
    space, train_in = _space_to_search(a, model, hw, settings, defaults, notes)
    return PlanRequest(model=model, alias=alias, hw=hw, reserve=reserve, settings=settings, space=space,
                       train_in=train_in, search_options={k: a[k] for k in _SEARCH_KEYWORDS}, defaults=defaults,
                       notes=notes)


def _checked_options(args: dict) -> dict:
    """The scalar options checked (a copy of ``args`` with the checked values), before any spec is loaded."""
    a = dict(args)
    unknown = {k: v for k, v in a["layout"].items() if k not in ARG.LAYOUT_KNOBS}
    refuse_unknown("plan", unknown, [*(k for k in a if k != "layout"), *ARG.LAYOUT_KNOBS])
    a["units"] = memory_units(a["units"])
    if a["objective"] not in ARG.OBJECTIVES:
        raise UserError(f"unknown objective {a['objective']!r}; choose one of: {', '.join(ARG.OBJECTIVES)}")
    if a["gpus"] is None:
        raise UserError("--gpus is required: the number of GPUs to plan for")
    a["gpus"] = ARG.checked_int(a["gpus"], "gpus", MAX_GPUS)
    a["top"] = ARG.checked_int(a["top"], "top", ARG.MAX_TOP, required=True)
    a["max_tp"] = ARG.checked_int(a["max_tp"], "max-tp")
    a["explain_rank"] = ARG.checked_int(a["explain_rank"], "explain-rank", required=True)
    a["margin"] = ARG.margin_value(a["margin"])
    a["level"] = EV.level_value(a["interval_level"])
    a["pareto"], a["keep_points"] = flag(a["pareto"], "pareto", False), flag(a["keep_points"], "keep_points", False)
    a["dp_overlap"], a["tp_overlap"], a["ep_overlap"] = (
        fraction(a["dp_overlap"], "dp_overlap"), fraction(a["tp_overlap"], "tp_overlap"),
        fraction(a["ep_overlap"], "ep_overlap"))
    if a["explain_rank"] < 2:
        raise UserError("--explain-rank must be 2 or more (it explains why #1 beats #N)")
    return a


def _specs_and_settings(a: dict, defaults: list[str], notes: list[str]):
    """(model spec, the alias asked for, hardware, reserve in bytes, settings), checked as `memory` and `step` check them."""
    from llmpar.cost.memory import check_convention

    model, hardware = a["model"], a["hardware"]
    if model is None and a["hf"] is None:
        model = ARG.DEFAULT_MODEL
        defaults.append(f"model {ARG.DEFAULT_MODEL}")
    spec_model, alias = inputs.load_model_spec(model, a["hf"])
    refuse_expert_options({k: a.get(k) for k in ("ep_overlap", "ep_dispatcher")}, spec_model)
    if alias:
        notes.append(f"model {alias} -> {spec_model.name}")
    if hardware is None:
        hardware = ARG.DEFAULT_HARDWARE
        defaults.append(f"hardware {ARG.DEFAULT_HARDWARE}")
    hw = inputs.load_hardware_spec(hardware)
    reserve_bytes = inputs.parse_reserve(a["reserve"], hw)
    settings = inputs.make_settings(spec_model, **{k: a[k] for k in _SETTINGS_KEYWORDS})
    check_optimizer_offload(hw, settings)
    check_settings(hw, settings)   # the rule memory and step apply (layout.resolve)
    notes.append(inputs.stack_note(settings, hw.gpu.generation))
    for note in (inputs.generation_note(hw, settings), inputs.moe_cost_note(spec_model, hw, settings),
                 inputs.fabric_note(hw, a["gpus"])):
        if note:
            notes.append(note)
    if a["convention"] == "deepspeed":
        check_convention(settings, 2)   # its optimizer rule; ZeRO stages are masked per candidate
    return spec_model, alias, hw, reserve_bytes, settings


def _space_to_search(a: dict, model, hw, settings: Settings, defaults: list[str], notes: list[str]):
    """(the space to search, the training-cost inputs): the batch, the knob values held, and their contradictions."""
    from llmpar.cost import training as TR

    seq, global_batch, microbatches = ARG.resolve_batch(model, a["seq"], a["global_batch"], a["tokens_per_batch"],
                                                      a["microbatches"], defaults, notes)
    allowed = ARG.knob_values(a["fix"], a["allow"], a["layout"])
    ARG.check_fixed_degrees(allowed, a["gpus"], model, a["max_tp"], global_batch)
    _check_held_values(allowed, a["recompute_modules"])
    if "schedule" not in allowed and (note := _schedules_note(settings)) is not None:
        notes.append(note)
    train_in = TR.parse_inputs(a["tokens"], a["pue"], a["gpu_hour_price"], a["power_per_gpu"], a["failure_rate"],
                               a["restart_time"], a["checkpoint_bandwidth"], a["checkpoint"])
    TR.check_prices_used(train_in["gpu_hour_price"], [hw])

    # activation offloading is searched where the framework has it and the hardware states its host link
    offload = (settings.stack.activation_offloading and hw.host_bandwidth is not None
               and hw.host_memory_per_gpu is not None)
    if "offload_layers" in allowed and any(allowed["offload_layers"]) and hw.host_bandwidth is None:
        raise UserError(f"offload_layers needs the hardware's host_bandwidth (the CPU-GPU link); {hw.name} states none")
    spec = SP.SpaceSpec(gpus=a["gpus"], seq=seq, global_batch=global_batch, allowed=allowed, max_tp=a["max_tp"],
                        microbatches=microbatches, offload=offload or "offload_layers" in allowed)
    return spec, train_in


def _check_held_values(allowed: dict, recompute_modules) -> None:
    """Values held by --fix/--allow that contradict each other or another option: UserError (exit 2)."""
    v_vals, s_vals = allowed.get("virtual_stages"), allowed.get("schedule")
    if v_vals and s_vals and min(v_vals) > 1 and SCHEDULES.index("interleaved") not in [int(s) for s in s_vals]:
        # contradictory input, as `step` says it (reliability review, item 27: plan exited 1, "nothing left")
        raise UserError(f"--fix/--allow virtual_stages={','.join(str(int(v)) for v in v_vals)} needs the interleaved "
                        f"schedule, and schedule={','.join(SCHEDULES[int(s)] for s in s_vals)} leaves it out")
    if recompute_modules is not None and "recompute" in allowed and RECOMPUTE.index("selective") not in [
            int(x) for x in allowed["recompute"]]:
        # memory and step refuse the same (api.memory): the modules only say what selective re-runs
        raise UserError("--recompute-modules names what selective recompute re-runs: the recompute values held "
                        "by --fix/--allow/--recompute leave selective out")


def _schedules_note(settings: Settings) -> str | None:
    """Which pipeline schedules were searched, and why not the others (the stack's list); None when all were."""
    left = [SCHEDULES[x] for x in SP.DEFAULT_SCHEDULES if SCHEDULES[x] not in settings.stack.schedules]
    if left:
        return (f"pipeline schedules searched: those stack {settings.stack.name} implements "
                f"({', '.join(x for x in settings.stack.schedules if x != 'gpipe')}); not "
                f"{', '.join(left)} (--allow schedule=NAME to add one)")
    return None
