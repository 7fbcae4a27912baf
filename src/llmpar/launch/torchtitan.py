"""A torchtitan job config (TOML) for one layout (docs/launch.md, torchtitan).

The section.key names are torchtitan's job-config dataclasses' (launch/flags/torchtitan.txt at a
pinned commit). Mapping: tp, pp, cp, ep -> parallelism.*_degree; ZeRO 0 -> DDP
(data_parallel_replicate_degree = dp), ZeRO 3 -> FSDP2 (data_parallel_shard_degree = dp), ZeRO 2 ->
FSDP2 that keeps the parameters after forward (fsdp_reshard_after_forward = "never"), ZeRO 1 under
PP -> FSDP2 with fsdp_reshard_after_forward = "default" (which torchtitan resolves to no reshard
when PP is on: what llmpar's ZeRO 1 prices for its PP rows, stacks/torchtitan.yaml); the batch:
training.local_batch_size is one rank's batch per step (b without PP; b·m with PP, split into
pipeline_parallel_microbatch_size = b), training.global_batch_size the sequences per step (torchtitan
accumulates gradients to reach it); recompute -> activation_checkpoint.mode; 1F1B, interleaved
1F1B and GPipe -> pipeline_parallel_schedule.

Refused, with the reason: ZeRO 1 at pp 1 (FSDP2 has no optimizer-only sharding), partial full recompute
(torchtitan recomputes every layer or an op-level selection), activation offloading, the ZB-H1
and DualPipe schedules, an expert TP degree other than torchtitan's.
"""

from __future__ import annotations

from llmpar.errors import UserError
from llmpar.launch.stages import layers_per_chunk

SCHEDULE = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe"}


def settings_of(model, hw, settings, par, *, global_batch: int, seq: int) -> dict[str, dict[str, object]]:
    d = par.as_dict()
    refuse = None
    if d["zero"] == 1 and d["pp"] == 1:
        refuse = ("ZeRO 1 at pp 1 (optimizer states only): torchtitan's FSDP2 shards parameters too, and keeps them "
                  "unsharded after forward only under PP; plan with --allow zero=0,2,3 (the torchtitan stack ranks "
                  "ZeRO 1 under pp > 1 only: pp_only_zero_stages)")
    elif d["recompute"] == "full" and d["recompute_layers"]:
        refuse = (f"full recompute of {d['recompute_layers']} layers per chunk: torchtitan recomputes every layer "
                  "(mode full) or an op selection (selective)")
    elif d["offload_layers"]:
        refuse = "activation offloading: torchtitan does not offload activations to host memory"
    elif getattr(settings, "optimizer_offload", 0.0) and not getattr(settings, "param_offload", False):
        refuse = ("optimizer offload alone: torchtitan's CPU offload (FSDP2 CPUOffloadPolicy) moves the parameters "
                  "and gradients too: plan with --param-offload --optimizer-offload 1")
    elif d["pp"] > 1 and d["schedule"] not in SCHEDULE:
        refuse = f"the {d['schedule']} schedule: torchtitan's names for it differ (1F1B, Interleaved1F1B, GPipe here)"
    elif model.moe is not None and d["etp"] not in (1, d["tp"]):
        refuse = f"expert TP {d['etp']}: torchtitan runs experts with TP 1 or the dense TP degree"
    if refuse:
        raise UserError(f"--emit torchtitan: {refuse}")
    par_ = {"tensor_parallel_degree": d["tp"], "pipeline_parallel_degree": d["pp"],
            "context_parallel_degree": d["cp"]}
    if d["zero"] == 0:
        par_.update(data_parallel_replicate_degree=d["dp"], data_parallel_shard_degree=1)
    else:
        par_.update(data_parallel_replicate_degree=1, data_parallel_shard_degree=d["dp"])
        if d["zero"] == 2:
            par_["fsdp_reshard_after_forward"] = "never"
        elif d["zero"] == 1:
            # ZeRO 1 under PP is FSDP2 as torchtitan runs it there: "default" keeps the parameters
            # unsharded after forward when PP is on (torchtitan/distributed/utils.py at b5bcd76)
            par_["fsdp_reshard_after_forward"] = "default"
    if model.moe is not None:
        par_["expert_parallel_degree"] = d["ep"]
    if d["pp"] > 1:
        par_["pipeline_parallel_schedule"] = SCHEDULE[d["schedule"]]
        par_["pipeline_parallel_microbatch_size"] = d["micro_batch"]
        # the plan's stages, not torchtitan's own split: L/(pp·v) layers in each (v per rank when interleaved)
        par_["pipeline_parallel_layers_per_stage"] = layers_per_chunk("torchtitan", model, d)
    local = d["micro_batch"] * (d["microbatches"] if d["pp"] > 1 else 1)
    training = {"local_batch_size": local, "global_batch_size": global_batch, "seq_len": seq}
    ac = {"mode": d["recompute"]}
    if d["recompute"] == "selective":
        ac["selective_ac_option"] = "op"
    if getattr(settings, "param_offload", False):
        # FSDP2 CPUOffloadPolicy: parameters, gradients and the optimizer step on the CPU (the stack's
        # param_offloading: with-optimizer, so --optimizer-offload 1 came with it)
        training["enable_cpu_offload"] = True
    out = {"parallelism": par_, "training": training, "activation_checkpoint": ac}
    if settings.dtype == "fp8":
        # torchtitan's Float8 training: the model converter plus its options section
        out["model"] = {"converters": ["quantize.linear.float8"]}
        out["quantize.linear.float8"] = {"enable_fsdp_float8_all_gather": d["zero"] >= 2}
    return out


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, (int, float)):
        return str(v)
    return '"' + str(v) + '"'


def emit(model, hw, settings, par, *, global_batch: int, seq: int) -> str:
    cfg = settings_of(model, hw, settings, par, global_batch=global_batch, seq=seq)
    d = par.as_dict()
    lines = [f"# llmpar plan for {model.name} on {hw.name}: tp {d['tp']} pp {d['pp']} dp {d['dp']} cp {d['cp']}, "
             f"ZeRO {d['zero']}, recompute {d['recompute']} (docs/launch.md)",
             "# Merge into your torchtitan job config (model, optimizer, data, checkpoint sections are yours).",
             "# Smoke run: a few dozen steps with [metrics] log_freq = 1; keep the log (the 'Building N-D device",
             "# mesh' and 'step: N ... tps ... mfu' lines) and check llmpar against it:",
             f"#   llmpar calibrate runs train.log --model {model.name} --hardware {hw.name} --stack torchtitan", ""]
    for section, kv in cfg.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in kv.items()]
        lines.append("")
    return "\n".join(lines)
