"""The layout a training log states, in llmpar's option names (split from ``train_logs``).

Megatron-LM's ``---- arguments ----`` block (argument names -> ``tp``, ``pp``, ``recompute``,
``dtype``, ``zero`` ...: :func:`megatron_layout`), its ``using world size: ...`` line
(:data:`USING_NAMES`) and torchtitan's ``Building N-D device mesh with [names], [sizes]`` line
(:func:`mesh_layout`); what each format looks like: :mod:`llmpar.calibrate.train_logs` and
``docs/runs-format.md``. Nothing here prints and nothing is fitted.
"""

from __future__ import annotations

import re
from typing import Any


def positive_int(v) -> bool:
    """A JSON/YAML value that is a whole number >= 1 (a bool is not one)."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1



def arg_value(raw: str):
    v = re.sub(r"\.{2,}\s*\w*$", "", raw).strip()  # Megatron-DeepSpeed: "value.......default"
    if v in ("", "None"):
        return None
    if v in ("True", "False"):
        return v == "True"
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def megatron_layout(args: dict[str, Any], where: str, notes: list[str],
                     lines: dict[str, int] | None = None) -> dict[str, Any]:
    """Megatron argument names -> CLI option names (``lines``: argument -> its line, for notes)."""
    out: dict[str, Any] = {}

    def at(arg: str) -> str:
        return f"{where}:{lines[arg]}" if lines and arg in lines else where

    direct = {
        "tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
        "context_parallel_size": "cp", "expert_model_parallel_size": "ep",
        "expert_tensor_parallel_size": "etp",
        "data_parallel_size": "dp", "world_size": "gpus", "micro_batch_size": "micro_batch",
        "global_batch_size": "global_batch", "seq_length": "seq", "sequence_parallel": "sp",
    }
    for arg, name in direct.items():
        if args.get(arg) is not None:
            out[name] = args[arg]
    gran = args.get("recompute_granularity")
    if gran is not None:
        out["recompute"] = str(gran)
    elif args.get("recompute_activations") is True:
        out["recompute"] = "selective"
    elif "recompute_granularity" in args:
        out["recompute"] = "none"
    v = args.get("virtual_pipeline_model_parallel_size")
    per_stage = args.get("num_layers_per_virtual_pipeline_stage")
    if v is not None and not positive_int(v):
        notes.append(f"{at('virtual_pipeline_model_parallel_size')}: virtual_pipeline_model_parallel_size={v} is not "
                     f"a positive number of model "
                     f"chunks: virtual stages not set")
        v = None
    if v is None and per_stage is not None and not positive_int(per_stage):
        notes.append(f"{at('num_layers_per_virtual_pipeline_stage')}: num_layers_per_virtual_pipeline_stage="
                     f"{per_stage} is not a positive layer count: "
                     f"virtual stages not set")
    elif v is None and isinstance(per_stage, int) and per_stage > 0:
        layers, pp = args.get("num_layers"), args.get("pipeline_model_parallel_size")
        if isinstance(layers, int) and isinstance(pp, int) and pp > 0 and layers % (pp * per_stage) == 0:
            v = layers // (pp * per_stage)
        else:
            notes.append(f"{at('num_layers_per_virtual_pipeline_stage')}: num_layers_per_virtual_pipeline_stage="
                         f"{per_stage} but num_layers/pp "
                         f"not readable or not divisible: virtual stages not set")
    if isinstance(v, int) and v > 1:
        out["virtual_stages"] = v
        out["schedule"] = "interleaved"
    if args.get("fp8") not in (None, False):
        out["dtype"] = "fp8"
    elif args.get("bf16") is True:
        out["dtype"] = "bf16"
    elif args.get("fp16") is True:
        out["dtype"] = "fp16"
    # settings the arguments block states (printed after Megatron-LM's validate_args, so effective):
    # bf16 gradients reduced in bf16 unless accumulate_allreduce_grads_in_fp32 (arguments.py sets it
    # for fp32 main grads; --grad-reduce-in-bf16 clears it); the combined-1F1B all-to-all overlap;
    # TP and DP overlap switched off (switched on, the stack's fractions stand); the dispatcher
    acc = args.get("accumulate_allreduce_grads_in_fp32")
    if acc is True:
        out["grad_dtype"] = "fp32"
    elif acc is False and out.get("dtype") in ("bf16", "fp8"):
        out["grad_dtype"] = "bf16"
    if isinstance(args.get("overlap_moe_expert_parallel_comm"), bool):
        out["ep_overlap"] = 1.0 if args["overlap_moe_expert_parallel_comm"] else 0.0
    if args.get("tp_comm_overlap") is False and out.get("tp", 1) > 1:
        out["tp_overlap"] = 0.0
    if args.get("overlap_grad_reduce") is False:
        out["dp_overlap"] = 0.0
    if args.get("moe_enable_deepep") is True:
        out["ep_dispatcher"] = "deepep"
    elif args.get("moe_token_dispatcher_type") == "alltoall":
        out["ep_dispatcher"] = "alltoall"
    if args.get("use_distributed_optimizer") is True:
        out["zero"] = 1
        notes.append(f"{where}: Megatron's distributed optimizer read as zero=1 (optimizer states sharded)")
    elif args.get("use_distributed_optimizer") is False:
        out["zero"] = 0
    return out


USING_NAMES = {"world": "gpus", "data-parallel": "dp", "tensor-model-parallel": "tp",
                "pipeline-model-parallel": "pp", "context-parallel": "cp", "expert-model-parallel": "ep"}
MESH_DP = {"dp_replicate", "dp_shard", "dp_shard_mod_ep", "dp_shard_in_ep"}


def mesh_layout(names_raw: str, sizes_raw: str, where: str, notes: list[str]) -> dict[str, Any]:
    names = [n.strip().strip("'\"") for n in names_raw.split(",") if n.strip()]
    try:
        sizes = [int(s) for s in sizes_raw.split(",") if s.strip()]
    except ValueError:
        notes.append(f"{where}: device mesh sizes {sizes_raw!r} not readable; layout not taken from it")
        return {}
    if len(names) != len(sizes) or not names:
        notes.append(f"{where}: device mesh names and sizes differ in length; layout not taken from it")
        return {}
    out: dict[str, Any] = {}
    dp, understood = 1, True
    for n, s in zip(names, sizes):
        if n in ("tp", "pp", "cp"):
            out[n] = s
        elif n in MESH_DP:
            dp *= s
        else:
            understood = False
            notes.append(f"{where}: device mesh dimension {n!r}={s} not read (give ep etc. explicitly)")
    if understood:
        out["dp"] = dp
        total = 1
        for s in sizes:
            total *= s
        out["gpus"] = total
    return out
