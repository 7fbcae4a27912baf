"""NeMo 2 recipe overrides for one layout (docs/launch.md, NeMo).

NeMo 2 runs a recipe (``nemo llm pretrain --factory llama3_8b``, or ``nemo llm finetune`` for
LoRA) and takes dotted overrides of its config. The names are NeMo's at a pinned commit
(launch/flags/nemo.txt: MegatronStrategy's parameters, the data module's, the recipe trainer's,
the LoRA dataclass's fields, the precision plugins and the recipe modules) and Megatron-Core's for
``model.config.*``, ``optim.config.*`` and ``trainer.strategy.ddp.*`` (its TransformerConfig,
OptimizerConfig and DistributedDataParallelConfig: the Megatron-LM flags of the same names).

| llmpar | NeMo 2 override |
|---|---|
| GPUs | trainer.num_nodes, trainer.devices (GPUs per node) |
| tp, pp, v, cp, sp, ep, etp | trainer.strategy.tensor_model_parallel_size, pipeline_model_parallel_size, virtual_pipeline_model_parallel_size (None when 1), context_parallel_size, sequence_parallel, expert_model_parallel_size, expert_tensor_parallel_size |
| micro-batch, global batch, seq | data.micro_batch_size, data.global_batch_size, data.seq_length |
| recompute | model.config.recompute_granularity / recompute_method / recompute_num_layers (/ recompute_modules) |
| ZeRO 1 | optim.config.use_distributed_optimizer=True |
| ZeRO 2 / 3 | trainer.strategy.fsdp=megatron, trainer.strategy.ddp.data_parallel_sharding_strategy=optim_grads / optim_grads_params |
| activation offload N | model.config.cpu_offloading=True, model.config.cpu_offloading_num_layers=N |
| optimizer offload F | optim.config.optimizer_cpu_offload=True, optim.config.optimizer_offload_fraction=F (distributed optimizer) |
| dtype | trainer.plugins=bf16_mixed / fp16_mixed; fp8 by the stack's recipe: bf16_with_fp8_mixed (delayed), bf16_with_fp8_current_scaling_mixed, bf16_with_fp8_subchannel_scaling_mixed (blockwise), bf16_with_mxfp8_mixed |
| --finetune lora | nemo llm finetune; peft.dim=r, peft.target_modules=[linear_qkv, linear_proj(, linear_fc1, linear_fc2)] |

Refused, with the reason: the GPipe, ZB-H1 and DualPipe schedules, QLoRA (NeMo has no NF4 base),
LoRA on q and v only (NeMo adapts the fused linear_qkv as one matrix), ZeRO 0 with optimizer
offload (as everywhere), parameter offload (no NeMo 2 option holds parameters in host memory).
"""

from __future__ import annotations

from llmpar.errors import UserError
from llmpar.launch.stages import layers_per_chunk

#: shipped model -> the NeMo recipe module at the pinned commit (launch/flags/nemo.txt "recipe")
RECIPES = {"llama-2-7b": "llama2_7b", "llama-3-8b": "llama3_8b", "llama-3-70b": "llama3_70b",
           "llama-3.1-8b": "llama31_8b", "llama-3.1-70b": "llama31_70b", "llama-3.1-405b": "llama31_405b",
           "mixtral-8x7b": "mixtral_8x7b", "deepseek-v3": "deepseek_v3", "gpt3-175b": "gpt3_175b",
           "gpt-oss-120b": "gpt_oss_120b", "qwen2.5-72b": "qwen25_72b", "qwen3-30b-a3b": "qwen3_30b_a3b",
           "qwen3-32b": "qwen3_32b", "qwen3-235b-a22b": "qwen3_235b_a22b"}
PLUGIN = {"bf16": "bf16_mixed", "fp16": "fp16_mixed"}
FP8_PLUGIN = {"delayed": "bf16_with_fp8_mixed", "current": "bf16_with_fp8_current_scaling_mixed",
              "blockwise": "bf16_with_fp8_subchannel_scaling_mixed", "mxfp8": "bf16_with_mxfp8_mixed"}
LORA_TARGETS = {"attention": ["linear_qkv", "linear_proj"],
                "all": ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]}


def overrides(model, hw, settings, par, *, global_batch: int, seq: int) -> list[tuple[str, str]]:
    """(dotted name, value) in the order a launch command lists them."""
    d = par.as_dict()
    if par.pp > 1 and d["schedule"] in ("gpipe", "zb-h1", "dualpipe"):
        raise UserError(f"--emit nemo: the {d['schedule']} schedule is not one NeMo's Megatron-Core runs (1F1B and "
                        "interleaved 1F1B): plan with --fix schedule=1f1b or --allow schedule=interleaved")
    gpus = d["tp"] * d["pp"] * d["dp"] * d["cp"]
    per_node = min(hw.gpus_per_node, gpus)
    if gpus % per_node:
        raise UserError(f"--emit nemo: {gpus} GPUs do not fill whole nodes of {hw.gpus_per_node} (trainer.num_nodes x "
                        "trainer.devices)")
    layers_per_chunk("nemo", model, d)
    v = d["virtual_stages"] if d["schedule"] == "interleaved" and d["virtual_stages"] > 1 else None
    out = [("trainer.num_nodes", str(gpus // per_node)), ("trainer.devices", str(per_node)),
           ("trainer.strategy.tensor_model_parallel_size", str(d["tp"])),
           ("trainer.strategy.pipeline_model_parallel_size", str(d["pp"])),
           ("trainer.strategy.virtual_pipeline_model_parallel_size", str(v) if v else "None"),
           ("trainer.strategy.context_parallel_size", str(d["cp"])),
           ("trainer.strategy.sequence_parallel", "True" if d["sp"] and d["tp"] > 1 else "False")]
    if model.moe is not None:
        out += [("trainer.strategy.expert_model_parallel_size", str(d["ep"])),
                ("trainer.strategy.expert_tensor_parallel_size", str(d["etp"]))]
    out += [("data.micro_batch_size", str(d["micro_batch"])), ("data.global_batch_size", str(global_batch)),
            ("data.seq_length", str(seq))]
    rec = d["recompute"]
    if rec == "selective":
        out.append(("model.config.recompute_granularity", "selective"))
        mods = getattr(settings, "recompute_modules", None)
        if mods:
            out.append(("model.config.recompute_modules", "[" + ",".join(mods) + "]"))
    elif rec == "full":
        n = d["recompute_layers"]
        out += [("model.config.recompute_granularity", "full"),
                ("model.config.recompute_method", "block" if n else "uniform"),
                ("model.config.recompute_num_layers", str(n or 1))]
    else:
        out.append(("model.config.recompute_granularity", "None"))
    z = d["zero"]
    if z == 1:
        out.append(("optim.config.use_distributed_optimizer", "True"))
    elif z in (2, 3):
        out += [("trainer.strategy.fsdp", "megatron"),
                ("trainer.strategy.ddp.data_parallel_sharding_strategy", "optim_grads" if z == 2 else "optim_grads_params")]
    else:
        out.append(("optim.config.use_distributed_optimizer", "False"))
    if d["offload_layers"]:
        out += [("model.config.cpu_offloading", "True"), ("model.config.cpu_offloading_num_layers", str(d["offload_layers"]))]
    if getattr(settings, "param_offload", False):
        raise UserError("--emit nemo: NeMo 2's Megatron strategy has no parameter offload to host memory "
                        "(--param-offload); DeepSpeed's offload_param does (--emit deepspeed)")
    off = float(getattr(settings, "optimizer_offload", 0.0))
    if off:
        if z != 1:
            raise UserError(f"--emit nemo: optimizer offload offloads the distributed optimizer's states (ZeRO 1); "
                            f"llmpar does not emit it with ZeRO-{z} (Megatron-FSDP): plan with --zero 1")
        out += [("optim.config.optimizer_cpu_offload", "True"), ("optim.config.optimizer_offload_fraction", f"{off:g}")]
    if settings.dtype == "fp8":
        out.append(("trainer.plugins", FP8_PLUGIN[settings.stack.kernels.fp8.recipe]))
    else:
        out.append(("trainer.plugins", PLUGIN[settings.dtype]))
    ft = getattr(settings, "finetune", "full")
    if ft == "qlora":
        raise UserError("--emit nemo: QLoRA's NF4 base is not a NeMo option (NeMo's LoRA adapts a 16-bit base): "
                        "plan with --finetune lora")
    if ft == "lora":
        if settings.lora_targets not in LORA_TARGETS:
            raise UserError("--emit nemo: LoRA on q and v alone is not a NeMo target (NeMo adapts the fused linear_qkv "
                            "as one matrix): plan with --lora-targets attention or all")
        out += [("peft.dim", str(settings.lora_rank)),
                ("peft.target_modules", "[" + ",".join(LORA_TARGETS[settings.lora_targets]) + "]")]
    return out


def emit(model, hw, settings, par, *, global_batch: int, seq: int) -> str:
    """A shell fragment: the NeMo-Run command with the overrides, and the smoke run that
    `llmpar calibrate runs` reads back (docs/launch.md, The loop back)."""
    ov = overrides(model, hw, settings, par, global_batch=global_batch, seq=seq)
    d = par.as_dict()
    recipe = RECIPES.get(model.name)
    verb = "finetune" if getattr(settings, "finetune", "full") == "lora" else "pretrain"
    lines = [f"# llmpar plan for {model.name} on {d['tp'] * d['pp'] * d['dp'] * d['cp']} x {hw.name}: tp {d['tp']} "
             f"pp {d['pp']} dp {d['dp']} cp {d['cp']}" + (f" ep {d['ep']}" if model.moe is not None else "")
             + f", ZeRO {d['zero']}, recompute {d['recompute']}, schedule {d['schedule']}",
             "# NeMo 2 recipe overrides (names from NVIDIA/NeMo at 8cfedd7 and Megatron-Core; docs/launch.md).",
             ("# Recipe: " + recipe + " (nemo/collections/llm/recipes/" + recipe + ".py)") if recipe else
             f"# No NeMo recipe of {model.name} at 8cfedd7: give --factory the recipe you built for it (RECIPE below).",
             "# Smoke run: trainer.max_steps=50 trainer.log_every_n_steps=1; keep the log (its per-step",
             "# train_step_timing lines) and check llmpar against it: llmpar calibrate runs train.log --model "
             + model.name + " --hardware " + hw.name,
             f"nemo llm {verb} --factory {recipe or 'RECIPE'} \\"]
    for i, (k, v) in enumerate(ov):
        lines.append(f"    {k}={v}" + (" \\" if i < len(ov) - 1 else ""))
    return "\n".join(lines) + "\n"
