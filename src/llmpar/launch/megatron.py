"""Megatron-LM / Megatron-Core arguments for one layout (docs/launch.md, Megatron).

The names are megatron/training/arguments.py's (launch/flags/megatron.txt holds them at a pinned
commit); what each llmpar knob becomes:

| llmpar | Megatron-LM |
|---|---|
| tp, pp, cp | --tensor-model-parallel-size, --pipeline-model-parallel-size, --context-parallel-size |
| ep, etp (MoE) | --expert-model-parallel-size, --expert-tensor-parallel-size (when etp differs from tp) |
| sp (tp > 1) | --sequence-parallel |
| micro-batch, global batch (sequences), seq | --micro-batch-size, --global-batch-size, --seq-length |
| interleaved, v virtual stages | --num-layers-per-virtual-pipeline-stage L/(pp·v) |
| L not a multiple of pp (1F1B) | --decoder-first/last-pipeline-num-layers: the middle stages ceil(L/pp) each, the rest split over the first and last (launch/stages.py) |
| recompute selective | --recompute-granularity selective (--recompute-modules when the stack's set is not the default) |
| recompute full (N layers per chunk) | --recompute-granularity full --recompute-method block --recompute-num-layers N (all: uniform, 1) |
| ZeRO 1 | --use-distributed-optimizer (optimizer states sharded over DP: Megatron-Core's distributed optimizer) |
| ZeRO 2 / 3 | --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads / optim_grads_params |
| overlap dp / param gather / tp (stack) | --overlap-grad-reduce, --overlap-param-gather, --tp-comm-overlap |
| bf16, fp8 | --bf16; --fp8-format hybrid --fp8-recipe delayed / tensorwise / blockwise / mxfp8 |
| offload N layers | --cpu-offloading-num-layers N (Megatron sets cpu_offloading itself when N > 0) |
| model | --num-layers --hidden-size --ffn-hidden-size --num-attention-heads (--group-query-attention --num-query-groups) --max-position-embeddings, SwiGLU/RMSNorm/RoPE flags, MoE flags |

Refused, with the reason: the GPipe, ZB-H1 and DualPipe schedules (Megatron-LM runs 1F1B and
its interleaved form), a layer count that does not split evenly into pp·v chunks (launch.layers_per_chunk).
"""

from __future__ import annotations

from llmpar.errors import UserError
from llmpar.launch.stages import first_last, layers_per_chunk

FP8_RECIPE = {"delayed": "delayed", "current": "tensorwise", "blockwise": "blockwise", "mxfp8": "mxfp8"}


def flags(model, hw, settings, par, *, global_batch: int, seq: int) -> list[tuple[str, str | None]]:
    """(flag, value or None for a switch) in the order a launch script lists them."""
    d = par.as_dict()
    sched = d["schedule"]
    if getattr(settings, "param_offload", False):
        raise UserError("--emit megatron: Megatron-LM has no option that holds parameters in host memory "
                        "(--param-offload); DeepSpeed's offload_param does (--emit deepspeed)")
    off = float(getattr(settings, "optimizer_offload", 0.0))
    if off and d["zero"] != 1:
        raise UserError(f"--emit megatron: --optimizer-cpu-offload offloads the distributed optimizer's states "
                        f"(--use-distributed-optimizer, ZeRO 1); llmpar does not emit it with ZeRO-{d['zero']} "
                        "(Megatron-FSDP): plan with --zero 1")
    if par.pp > 1 and sched in ("gpipe", "zb-h1", "dualpipe"):
        raise UserError(f"--emit megatron: the {sched} schedule is not one Megatron-LM runs (1F1B and interleaved "
                        "1F1B only): plan with --fix schedule=1f1b or --allow schedule=interleaved")
    out: list[tuple[str, str | None]] = [
        ("--tensor-model-parallel-size", str(d["tp"])), ("--pipeline-model-parallel-size", str(d["pp"])),
        ("--context-parallel-size", str(d["cp"]))]
    if model.moe is not None:
        out.append(("--expert-model-parallel-size", str(d["ep"])))
        if d["etp"] != d["tp"]:
            out.append(("--expert-tensor-parallel-size", str(d["etp"])))
    if d["sp"] and d["tp"] > 1:
        out.append(("--sequence-parallel", None))
    uneven = first_last(model, d)
    if uneven is not None:
        out += [("--decoder-first-pipeline-num-layers", str(uneven[0])),
                ("--decoder-last-pipeline-num-layers", str(uneven[1]))]
    elif sched == "interleaved" and d["virtual_stages"] > 1:
        out.append(("--num-layers-per-virtual-pipeline-stage", str(layers_per_chunk("megatron", model, d))))
    out += [("--micro-batch-size", str(d["micro_batch"])), ("--global-batch-size", str(global_batch)),
            ("--seq-length", str(seq))]
    rec = d["recompute"]
    if rec == "selective":
        out.append(("--recompute-granularity", "selective"))
        mods = getattr(settings, "recompute_modules", None)
        if mods:
            out.append(("--recompute-modules", " ".join(mods)))
    elif rec == "full":
        out.append(("--recompute-granularity", "full"))
        n = d["recompute_layers"]
        if n:
            out += [("--recompute-method", "block"), ("--recompute-num-layers", str(n))]
        else:
            out += [("--recompute-method", "uniform"), ("--recompute-num-layers", "1")]
    z = d["zero"]
    if z == 1:
        out.append(("--use-distributed-optimizer", None))
        if off:
            out += [("--optimizer-cpu-offload", None), ("--optimizer-offload-fraction", f"{off:g}")]
    elif z in (2, 3):
        out += [("--use-megatron-fsdp", None),
                ("--data-parallel-sharding-strategy", "optim_grads" if z == 2 else "optim_grads_params")]
    ov = settings.stack.overlap
    if (settings.dp_overlap or 0) > 0 and d["dp"] * d["cp"] > 1:   # resolved: the stack's unless overridden
        out.append(("--overlap-grad-reduce", None))
    if z == 1 and (ov.param_gather or 0) > 0:
        out.append(("--overlap-param-gather", None))
    if d["tp"] > 1 and ov.tp_mode == "userbuffers":
        out.append(("--tp-comm-overlap", None))
    if settings.dtype in ("bf16", "fp8"):
        out.append(("--bf16", None))
    elif settings.dtype == "fp16":
        out.append(("--fp16", None))
    if settings.dtype == "fp8":
        out += [("--fp8-format", "hybrid"), ("--fp8-recipe", FP8_RECIPE[settings.stack.kernels.fp8.recipe])]
    if d["offload_layers"]:
        out.append(("--cpu-offloading-num-layers", str(d["offload_layers"])))   # sets cpu_offloading itself
    out += _model_flags(model)
    return out


def _model_flags(model) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = [
        ("--num-layers", str(model.layers)), ("--hidden-size", str(model.hidden)),
        ("--ffn-hidden-size", str(model.ffn_hidden)), ("--num-attention-heads", str(model.heads))]
    if model.n_kv_heads != model.heads:
        out += [("--group-query-attention", None), ("--num-query-groups", str(model.n_kv_heads))]
    if model.head_dim is not None and model.head_dim != model.hidden // model.heads:
        out.append(("--kv-channels", str(model.head_dim)))
    out.append(("--max-position-embeddings", str(model.max_seq)))
    if model.ffn_type == "swiglu":
        out.append(("--swiglu", None))
    if model.norm == "rmsnorm":
        out.append(("--normalization", "RMSNorm"))
    if model.position == "rope":
        out.append(("--position-embedding-type", "rope"))
    if not model.tied_embeddings:
        out.append(("--untie-embeddings-and-output-weights", None))
    if not model.linear_bias:
        out.append(("--disable-bias-linear", None))
    if model.moe is not None:
        m = model.moe
        out += [("--num-experts", str(m.experts)), ("--moe-router-topk", str(m.top_k)),
                ("--moe-ffn-hidden-size", str(m.expert_ffn_hidden)), ("--moe-token-dispatcher-type", "alltoall")]
        if m.shared_experts:
            out.append(("--moe-shared-expert-intermediate-size", str(m.shared_experts * m.expert_ffn_hidden)))
    return out


def emit(model, hw, settings, par, *, global_batch: int, seq: int) -> str:
    """A shell fragment: the arguments, one per line, and the smoke run that `llmpar calibrate runs`
    reads back (docs/launch.md, The loop back)."""
    fl = flags(model, hw, settings, par, global_batch=global_batch, seq=seq)
    d = par.as_dict()
    gpus = d["tp"] * d["pp"] * d["dp"] * d["cp"]
    lines = [f"# llmpar plan for {model.name} on {gpus} x {hw.name}: tp {d['tp']} pp {d['pp']} dp {d['dp']} "
             f"cp {d['cp']}" + (f" ep {d['ep']}" if model.moe is not None else "")
             + f", ZeRO {d['zero']}, recompute {d['recompute']}, schedule {d['schedule']}",
             "# Megatron-LM arguments (names from megatron/training/arguments.py; docs/launch.md). Add your data,",
             "# tokenizer, optimizer and checkpoint arguments; run on the GPUs the plan is for.",
             "# Smoke run: a few dozen iterations with --log-interval 1 --log-throughput; keep the log (the",
             "# '---- arguments ----' block and the 'elapsed time per iteration (ms)' lines) and fit or check",
             "# llmpar against it: llmpar calibrate runs train.log --model " + model.name + " --hardware " + hw.name,
             "MEGATRON_ARGS=("]
    for f, v in fl:
        lines.append(f"    {f}" + (f" {v}" if v is not None else ""))
    lines.append(")")
    return "\n".join(lines) + "\n"
