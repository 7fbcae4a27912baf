"""A DeepSpeed config (ds_config JSON) for one layout (docs/launch.md, DeepSpeed).

The keys are DeepSpeed's config keys (launch/flags/deepspeed.txt at a pinned commit):
train_batch_size (sequences per step), train_micro_batch_size_per_gpu, gradient_accumulation_steps,
bf16/fp16.enabled, zero_optimization.stage with overlap_comm (the stack's DP overlap),
contiguous_gradients and reduce_bucket_size (the stack's bucket). DeepSpeed's config holds no
tensor, pipeline or context degree (Megatron-DeepSpeed takes those as Megatron flags, a
PipelineModule its stages in code): such a layout is refused with the reason, as are FP8,
activation offloading and recompute, which the config does not set by itself.
"""

from __future__ import annotations

import json

from llmpar.errors import UserError


def _refuse_what_the_config_cannot_hold(model, settings, d: dict) -> None:
    """Every part of the layout a ds_config cannot express, in one line with the one ``--fix`` that
    keeps the planner to layouts it can: every such knob pinned, not only this layout's (naming only
    the degrees had let the next #1 offload activations, refused in turn)."""
    reasons = []
    over = [k for k in ("tp", "pp", "cp", "ep") if d[k] > 1]
    if over:
        # an expert degree is DeepSpeed-MoE's ep_size, an argument of deepspeed.moe.layer.MoE in the
        # model code, never a config key
        moe = "; DeepSpeed-MoE takes the expert degree as deepspeed.moe.layer.MoE(ep_size=...) in the model code" \
            if d["ep"] > 1 else ""
        reasons.append(f"no tensor, pipeline, context or expert degree ({' '.join(f'{k} {d[k]}' for k in over)} here: "
                       f"Megatron-DeepSpeed takes them as Megatron flags, --emit megatron{moe})")
    if d["recompute"] != "none":
        reasons.append(f"no recompute (recompute {d['recompute']} here: deepspeed.checkpointing in the model's forward)")
    if d["offload_layers"]:
        reasons.append(f"no activation offloading ({d['offload_layers']} layers offloaded here)")
    if settings.dtype == "fp8":   # a setting, not a layout knob: no --fix removes it
        reasons.append("no FP8 (Transformer Engine's, set in the model code; plan without --dtype fp8)")
    if reasons:
        layout = len(reasons) > (settings.dtype == "fp8")
        fix = ("; plan with --fix tp=1,pp=1,cp=1" + (",ep=1" if model.is_moe else "") + ",recompute=none"
               + (",offload_layers=0" if settings.stack.activation_offloading else "")) if layout else ""
        raise UserError(f"--emit deepspeed: DeepSpeed's config has {'; '.join(reasons)}{fix}")


def config_of(model, hw, settings, par, *, global_batch: int, seq: int) -> dict:
    d = par.as_dict()
    _refuse_what_the_config_cannot_hold(model, settings, d)
    ov = settings.stack.overlap
    zero = {"stage": d["zero"], "overlap_comm": (settings.dp_overlap or 0) > 0, "contiguous_gradients": True}
    if ov.dp_bucket_bytes:
        zero["reduce_bucket_size"] = int(ov.dp_bucket_bytes)
    f = float(getattr(settings, "optimizer_offload", 0.0))
    if f:
        # DeepSpeedZeroOffloadOptimizerConfig: device cpu; ratio (the offloaded share) is ZeRO-3's only
        if f < 1.0 and d["zero"] != 3:
            raise UserError(f"--emit deepspeed: a partial optimizer offload ({f:g}) is offload_optimizer.ratio, which "
                            f"DeepSpeed applies under ZeRO-3 only (here ZeRO-{d['zero']}); plan with --optimizer-offload 1 "
                            "or --zero 3")
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True, **({"ratio": f} if f < 1.0 else {})}
    if getattr(settings, "param_offload", False):
        # DeepSpeedZeroOffloadParamConfig (stage 3 only): the 16-bit parameter shards in pinned CPU memory
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    cfg = {"train_batch_size": global_batch, "train_micro_batch_size_per_gpu": d["micro_batch"],
           "gradient_accumulation_steps": d["microbatches"], "zero_optimization": zero}
    if settings.dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif settings.dtype == "fp16":
        cfg["fp16"] = {"enabled": True}
    cfg["steps_per_print"] = 1   # the smoke run's per-step lines (docs/launch.md, The loop back)
    return cfg


def emit(model, hw, settings, par, *, global_batch: int, seq: int) -> str:
    return json.dumps(config_of(model, hw, settings, par, global_batch=global_batch, seq=seq), indent=2) + "\n"


def dotted_keys(cfg: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in cfg.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out += dotted_keys(v, name + ".")
        else:
            out.append(name)
    return out
