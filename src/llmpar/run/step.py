"""`llmpar step`'s work (the face is :func:`llmpar.api.step`): the layout's memory first (it must
resolve and its notes carry over), then the step time from :func:`llmpar.cost.step.step_time`,
the notes that say what the figure assumes, its evidence band (:mod:`llmpar.evidence`) and, with
``tokens``, the days and cost to train (:mod:`llmpar.cost.training`). Nothing here prints.
"""

from __future__ import annotations

from typing import Any

from llmpar.errors import UserError
from llmpar.inputs import fabric_note, generation_note, load_hardware_spec, load_model_spec, make_settings, moe_cost_note
from llmpar.options import LAYOUT, PRECISION, pick, refuse_expert_options
from llmpar.parallel import fraction
from llmpar.results import StepResult, step_numbers
from llmpar.run import memory as RM


def run(v: dict[str, Any]) -> StepResult:
    """:func:`llmpar.api.step` with its keywords as given in ``v``."""
    from llmpar import evidence as EV
    from llmpar.cost import training as TR
    from llmpar.cost.pipeline import check_schedule
    from llmpar.cost.step import step_time

    if v["model"] is None and v["hf"] is None:
        raise UserError("give a MODEL (e.g. llama-3-70b) or --hf path/config.json")
    overlaps = {k: fraction(v[k], k) for k in ("dp_overlap", "tp_overlap", "ep_overlap")}
    train_in = TR.parse_inputs(*(v[k] for k in ("tokens", "pue", "gpu_hour_price", "power_per_gpu", "failure_rate",
                                                "restart_time", "checkpoint_bandwidth", "checkpoint")))
    level = EV.level_value(v["interval_level"])
    mem = RM.run(dict(RM.MODE_DEFAULTS, model=v["model"], hardware=v["hardware"], hf=v["hf"],
                      **pick(v, LAYOUT + PRECISION)))
    spec, _ = load_model_spec(v["model"], v["hf"])
    refuse_expert_options(v, spec)
    hw = load_hardware_spec(v["hardware"])
    TR.check_prices_used(train_in["gpu_hour_price"], [hw])
    settings = _settings(spec, mem.settings, v, overlaps)
    par = mem.parallel
    check_schedule(int(par.schedule), int(par.pp), int(par.microbatches), int(par.virtual_stages))
    out = step_time(spec, hw, par, settings, with_memory=False)
    notes = list(mem.assumptions) + _notes(out, spec, hw, par, settings, v)
    numbers = step_numbers(out)
    training = None
    if train_in["tokens"] is not None:
        training = TR.estimate(hw, tokens=train_in["tokens"], tokens_per_s=numbers["tokens_per_s"], gpus=int(par.gpus),
                               tokens_per_step=int(par.tokens_per_step), pue=train_in["pue"],
                               gpu_hour_price=train_in["gpu_hour_price"], power_per_gpu_w=train_in["power_per_gpu_w"],
                               checkpoint_bytes=TR.checkpoint_bytes_of(spec, settings), train_in=train_in)
    iv = EV.query("speed", settings, hw, spec, par, level)
    interval = EV.speed_json(iv, numbers["step_time_s"], numbers["tokens_per_s"], numbers["mfu"], training,
                             hw.gpu.gemm.max_efficiency)
    if mem.interval is not None and level != EV.DEFAULT_LEVEL:
        mem.interval = EV.memory_json(EV.query("memory", settings, hw, spec, par, level),
                                      float(mem.memory["total_bytes"]), float(mem.capacity_bytes))
    plaus = EV.with_step_at_best(
        EV.plausibility(numbers["mfu_full_attention"], iv, hw.gpu.generation, spec.is_moe, settings.dtype,
                        gpus=float(par.gpus)), numbers["step_time_s"], numbers["mfu_full_attention"])
    if (note := EV.implausible_note(numbers["mfu_full_attention"], plaus, step_time_s=numbers["step_time_s"])) is not None:
        notes.append(note)
    return StepResult(
        model=spec.name, model_requested=mem.model_requested, hardware=hw.name, parallel=par, settings=settings,
        **numbers,
        memory=mem, detail=_detail(out, hw, settings), assumptions=notes, training=training, interval=interval,
        plausibility=plaus,
    )


def _settings(spec, s, v: dict[str, Any], overlaps: dict[str, float | None]):
    """The memory's settings with the time model's options (overlaps, dispatcher, rank order) added."""
    lora = s.finetune != "full"
    return make_settings(spec, dtype=s.dtype, optimizer=s.optimizer, grad_dtype=v["grad_dtype"],
                         convention=s.convention, attention=v["attention"], kv_dtype=s.kv_dtype, **overlaps,
                         ep_dispatcher=v["ep_dispatcher"], recompute_modules=s.recompute_modules,
                         rank_order=v["rank_order"], stack=s.stack, finetune=s.finetune,
                         lora_rank=s.lora_rank if lora else None, lora_targets=s.lora_targets if lora else None,
                         optimizer_offload=s.optimizer_offload, param_offload=s.param_offload)


def _notes(out, spec, hw, par, settings, v: dict[str, Any]) -> list[str]:
    """What the step time assumes, beyond the memory's notes: offload costs, the hardware's and the
    MoE's caveats, how MFU counts attention, and the batch when it was defaulted."""
    notes = []
    if settings.optimizer_offload:
        off = float(out["optimizer_offload_s"])
        notes.append(f"optimizer offload {settings.optimizer_offload:g}: {off:.3g} s per step of CPU optimizer step (its "
                     f"state traffic at {hw.host_memory_bandwidth / 1e9:g} GB/s of host DRAM per GPU, a peak) and "
                     f"copies over the {hw.host_bandwidth / 1e9:g} GB/s host link (gradients down, 16-bit weights up), "
                     "not overlapped with the backward or the GPU's share (docs/memory.md, Optimizer offload)")
    if settings.param_offload:
        notes.append(f"parameter offload: {float(out['param_offload_s']):.3g} s per step exposed of copying this GPU's "
                     f"16-bit shards in from host memory before each ZeRO-3 gather (2 per micro-batch, and the "
                     f"updated shard back after the GPU's step) over {hw.host_bandwidth / 1e9:g} GB/s shared by "
                     f"{hw.gpus_per_host_link} GPU(s), prefetched behind compute as the gathers are (a lower "
                     "bound: the raw link rate; docs/memory.md, Parameter offload)")
    for note in (generation_note(hw, settings), moe_cost_note(spec, hw, settings), fabric_note(hw, int(par.gpus))):
        if note:
            notes.append(note)
    full = float(out["mfu_full_attention"])
    if out["mfu_convention"] == "causal":
        notes.append(f"MFU counts attention causally (half of s²: what a causal model needs, never more than the "
                     f"kernel executes); counted in full as the papers do it is {full * 100:.1f} %"
                     + (" - above 100 % because it counts the masked half the kernel skips" if full > 1 else ""))
    else:
        notes.append("MFU counts attention in full (s²): the stack's kernel computes the masked half too")
    if v["global_batch"] is None and v["microbatches"] is None:
        notes.append(f"batch: {int(par.global_batch)} sequences x {int(par.seq)} tokens = {int(par.tokens_per_step):,} "
                     "tokens per step (--global-batch to change)")
    return notes


def _detail(out, hw, settings) -> dict[str, Any]:
    """The result's ``detail``: the critical stage's times and the FLOPs and efficiencies priced."""
    from llmpar.cost import compute

    return {
        "stage_forward_s": float(out["stage_forward_s"]),
        "stage_backward_s": float(out["stage_backward_s"]),
        "critical_stage_layers": int(out["critical_stage_layers"]),
        "model_flops_per_step": float(out["model_flops_per_step"]),
        "hardware_flops_per_step": float(out["hardware_flops_per_step"]),
        "peak_flops": hw.gpu.peak(settings.dtype),
        "generation": hw.gpu.generation,
        # the fused attention kernel's fractions as priced: the stack's, capped at the GPU's MAMF
        "attention_efficiency": [float(e) for e in compute.attention_efficiency(hw, settings.stack)],
        "gemm_max_efficiency": hw.gpu.gemm.max_efficiency,
        "parts": {k: float(v) for k, v in out["parts"].items()},
    }
