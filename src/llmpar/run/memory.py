"""`llmpar memory`'s work (the face is :func:`llmpar.api.memory`): which options each mode takes,
and the three results, training, ``--inference`` and ``--params`` (a bare count's model states).

The numbers come from :mod:`llmpar.cost.memory` through :func:`llmpar.layout.resolve`; nothing
here prints. The options are the table's (:mod:`llmpar.options`); an option given in a mode it
changes nothing in is refused by :func:`llmpar.options.refuse_moot`.
"""

from __future__ import annotations

from typing import Any

from llmpar.errors import UserError
from llmpar.inputs import load_hardware_spec, load_model_spec, make_settings, parse_reserve, stack_note, stack_support_note
from llmpar.layout import resolve
from llmpar.options import ACTIVATIONS, LAYOUT, TRAINING, pick, refuse_expert_options, refuse_moot
from llmpar.parallel import DTYPES, MAX_BATCH, MAX_GPUS, MAX_SEQ, Resolved, Settings, flag, positive_int, whole
from llmpar.results import MEMORY_COMPONENTS, MemoryResult
from llmpar.specs.model import ModelSpec
from llmpar.units import parse_count

# api.memory's keywords that are not shared options (llmpar.options), at their defaults: what
# `step` passes when it asks for a layout's training memory (tests/test_options_declared_once.py)
MODE_DEFAULTS: dict[str, Any] = {"params": None, "per_stage": False, "inference": False, "batch": None, "context": None,
                                 "kv_dtype": None, "explain": False}

# the settings keywords of a model's memory: the precision options but --reserve, which is bytes
_SETTINGS = ("dtype", "optimizer", "grad_dtype", "convention", "attention", "kv_dtype", "stack", "recompute_modules",
             "finetune", "lora_rank", "lora_targets", "optimizer_offload", "param_offload")
# a bare count has no shapes: the settings that price shapes are refused before (ACTIVATIONS)
_COUNT_SETTINGS = ("dtype", "optimizer", "grad_dtype", "convention", "attention", "stack", "optimizer_offload",
                   "param_offload")


def run(v: dict[str, Any]) -> MemoryResult:
    """:func:`llmpar.api.memory` with its keywords as given in ``v``."""
    v = _checked(v)
    hw = load_hardware_spec(v["hardware"])
    res_bytes = parse_reserve(v["reserve"], hw)
    layout = pick(v, LAYOUT)
    if v["params"] is not None:
        _check_count(v)
        settings = make_settings(None, **{k: v[k] for k in _COUNT_SETTINGS})
        return of_count(v["params"], hw, settings, layout, res_bytes, v["explain"])
    if v["model"] is None and v["hf"] is None:
        raise UserError("give a MODEL (e.g. llama-3-70b), --hf path/config.json, or --params 7.5B")
    spec, alias = load_model_spec(v["model"], v["hf"])
    refuse_expert_options(v, spec)
    settings = make_settings(spec, **{k: v[k] for k in _SETTINGS})
    if v["recompute_modules"] is not None and v["recompute"] != "selective" and not v["inference"]:
        raise UserError(f"--recompute-modules names what selective recompute re-runs: it needs --recompute selective "
                        f"(got {v['recompute']})")
    notes = [f"model {alias} -> {spec.name}"] if alias else []
    notes.append(stack_note(settings, hw.gpu.generation))
    if v["inference"]:
        _check_inference(v)
        return inference(spec, alias, hw, settings, layout, res_bytes, notes, v["batch"], v["context"], v["explain"])
    return training(spec, alias, hw, settings, layout, res_bytes, notes, v["per_stage"], v["explain"])


def _checked(v: dict[str, Any]) -> dict[str, Any]:
    """The keywords with zero, sp and the flags checked, and the options of the other mode refused."""
    zero = whole(v["zero"], "zero")
    if zero not in (0, 1, 2, 3):
        raise UserError(f"--zero must be 0, 1, 2 or 3, got {zero}")
    v = dict(v, zero=zero, sp=flag(v["sp"], "sp"), per_stage=flag(v["per_stage"], "per_stage", False),
             inference=flag(v["inference"], "inference", False), explain=flag(v["explain"], "explain", False))
    kv_dtype, inference = v["kv_dtype"], v["inference"]
    if kv_dtype is not None and kv_dtype not in DTYPES:
        raise UserError(f"unknown kv dtype {kv_dtype!r}; choose one of: {', '.join(DTYPES)}")
    if not inference and (v["batch"] is not None or v["context"] is not None):
        raise UserError("--batch/--context describe serving and need --inference (training uses --micro-batch/--seq)")
    if not inference and kv_dtype is not None:
        raise UserError("--kv-dtype is the KV cache's dtype and needs --inference")
    if inference:   # training knobs a serving layout has no use for: refused, not silently ignored
        refuse_moot(v, TRAINING, "{flags} describe{s} training; drop {it} with --inference "
                                 "(serving uses --batch and --context)")
    # None = not given: training takes Adam and llmpar's convention; serving keeps no optimizer state
    return dict(v, optimizer="adam" if v["optimizer"] is None else v["optimizer"],
                convention="llmpar" if v["convention"] is None else v["convention"])


def _check_count(v: dict[str, Any]) -> None:
    """``--params``: no MODEL beside it, and none of the options a bare count has no use for."""
    if isinstance(v["model"], str) and v["model"].strip().upper() in ("K", "M", "B", "G", "T"):
        # `--params 7.5 B`: the shell split the count, and its suffix arrived as the MODEL
        raise UserError(f"--params {v['params']} {v['model']}: write the count without a space "
                        f"(--params {v['params']}{v['model'].strip()})")
    if v["model"] is not None or v["hf"] is not None:
        raise UserError("give either a MODEL (or --hf) or --params, not both")
    if v["inference"]:
        raise UserError("--inference needs a model's shapes (KV cache); --params gives model states only")
    if v["per_stage"]:
        raise UserError("--per-stage needs a model's layers; --params splits the count evenly over tp·pp")
    # options about activations, which a bare count has none of: refused, not silently ignored
    # (reliability review, item 15); the batch split stays (a stack that accumulates gradients
    # unsharded counts them per micro-batch step)
    refuse_moot(v, ACTIVATIONS, "{flags} change{s} activations, which --params (model states of a bare count) "
                                "has none of: give a MODEL for them, or drop {it}")


def _check_inference(v: dict[str, Any]) -> None:
    """``--inference``: no ZeRO, no per-stage listing, one way to give the context."""
    if v["zero"]:
        raise UserError("--zero shards training state; drop it with --inference")
    if v["per_stage"]:
        raise UserError("--per-stage is for training; --inference reports the most-loaded stage")
    if v["seq"] is not None and v["context"] is not None:   # reliability review, item 18: --seq was dropped
        raise UserError("--seq and --context both give the serving context: give one (--context)")


# Results are built with MemoryResult.model_construct: the fields are llmpar's own computed values,
# and skipping validation skips pydantic's first schema build of the process, about a tenth of
# `llmpar memory`'s start-up (docs/cli.md, start-up time). `.model_dump()` and `--json` build the
# serializer when asked.

def bare_spec(count: float, text: str, tp, pp, seq) -> ModelSpec:
    """A stand-in spec for `--params`: lets layout.resolve apply the usual degree rules
    (gpus = tp·cp·pp·dp, one-node default) to a bare parameter count without shapes."""
    heads = positive_int(tp, "tp", MAX_GPUS) or 1
    layers = positive_int(pp, "pp", MAX_GPUS) or 1
    # built unvalidated: a stand-in, not a model, whose tp heads and pp layers may pass the bounds
    # of a real model's shapes (specs/model.py: 65,536 heads, 10,000 layers) within resolve's own
    return ModelSpec.model_construct(name=f"--params {text}", family="gpt", layers=layers, hidden=heads, heads=heads,
                                     head_dim=1, ffn_hidden=1, vocab=1, max_seq=positive_int(seq, "seq", MAX_SEQ) or 8192)


def _int_or_none(x) -> int | None:
    x = float(x)
    return None if x == float("inf") else int(x)


def _host_line(what: str, nbytes, out, hw, tail: str) -> str:
    """One assumption line for a share of the states held in host memory: its bytes, what the host
    holds in all (with any other offload) of ``host_memory_per_gpu``, and whether that fits."""
    return (f"{what}, {float(nbytes) / 1e9:,.2f} GB, in host memory ({float(out['host_bytes']) / 1e9:,.2f} GB offloaded "
            f"in all of the {hw.host_memory_per_gpu / 1e9:,.0f} GB per GPU, host_memory_per_gpu)"
            + (": more than it holds, DOES NOT FIT" if not bool(out["host_fits"]) else "") + "; " + tail)


def of_count(params, hw, settings, layout, res_bytes, explain) -> MemoryResult:
    """``--params 7.5B``: the model states of a bare parameter count (ZeRO paper Table 1)."""
    from llmpar.cost import memory as M
    from llmpar.cost import memory_explain as ME

    zero = layout["zero"]
    count = parse_count(params, "--params")
    if not 1.0 <= count <= 1e15:     # a quadrillion parameters: far beyond any model, short of a typo's 1e300
        raise UserError(f"--params {params} is outside 1 .. 1e15 parameters")
    from llmpar.units import refuse_bare_small

    refuse_bare_small(params, count, 1e6, "--params", "B")     # no model has under a million parameters
    text = str(params).strip()
    M.check_convention(settings, zero)
    stub = bare_spec(count, text, layout["tp"], layout["pp"], layout["seq"])
    r = resolve(stub, hw, settings=settings, **layout)
    par = r.parallel
    states = M.model_states_for_count(count, par, settings)
    mem = {"weights_bytes": float(states["weights_bytes"]), "gradients_bytes": float(states["gradients_bytes"]),
           "optimizer_bytes": float(states["optimizer_bytes"]), "activations_bytes": 0.0, "buffers_bytes": 0.0,
           "kv_cache_bytes": 0.0}
    tot = M.memory_totals(sum(mem.values()), hw, par, settings, res_bytes)
    mem.update({k: float(tot[k]) for k in MEMORY_COMPONENTS if k in tot})
    notes = [a for a in r.assumptions if "one node" in a]
    notes.append(f"--params {text}: model states only (no shapes, so no activations), split evenly over "
                 f"tp·pp = {int(par.tp) * int(par.pp)}, ZeRO-{zero} over dp·cp = {int(par.dp) * int(par.cp)}")
    if settings.convention == "deepspeed" and zero == 3:
        notes.append("DeepSpeed's ZeRO-3 estimator adds 4 x largest layer: unknown for a bare count, taken as 0")
    host_ok = bool(M.host_fits(hw, states["host_bytes"]))
    if settings.optimizer_offload or settings.param_offload:
        what = " and ".join(w for w, on in (("optimizer states with their fp32 gradients", settings.optimizer_offload),
                                            ("ZeRO-3 parameter shards", settings.param_offload)) if on)
        notes.append(_host_line(f"offload: {what}", states["host_bytes"],
                                {"host_bytes": states["host_bytes"], "host_fits": host_ok}, hw,
                                "ZeRO-Offload / ZeRO-Infinity (Ren et al. 2021 §4; Rajbhandari et al. 2021 §5)"))
    prec = M.bytes_per_param(settings, zero, par.microbatches)
    batch_flags = [f for f, k in (("--global-batch", "global_batch"), ("--microbatches", "microbatches"))
                   if layout.get(k) is not None]
    if batch_flags and _bpp(M.bytes_per_param(settings, zero, 1)) == _bpp(M.bytes_per_param(settings, zero, 2)):
        # the batch split reaches a bare count's states only through a stack that accumulates unsharded
        # fp32 gradients over micro-batches (torchtitan's FSDP2 under PP); anywhere else it changes
        # nothing: refused, not ignored (reliability review, item 15)
        raise UserError(f"{' and '.join(batch_flags)} change{'s' if len(batch_flags) == 1 else ''} nothing for --params "
                        f"here (model states do not depend on the batch split under stack {settings.stack.name} at "
                        f"ZeRO-{zero}, pp {int(par.pp)}): drop {'it' if len(batch_flags) == 1 else 'them'}")
    return MemoryResult.model_construct(
        model=stub.name, model_requested=None, hardware=hw.name, parallel=par, settings=settings,
        mode="model_states", params_total=count, params_per_gpu=float(states["params_per_gpu"]), memory=mem,
        activation_bytes_per_layer=None, capacity_bytes=float(hw.gpu.memory), fits=bool(tot["fits"]) and host_ok,
        max_micro_batch=None, most_loaded_stage=0, bytes_per_param=_bpp(prec),
        assumptions=notes + _runtime_notes(settings, res_bytes), communicators=int(tot["communicators"]),
        terms=ME.memory_terms(None, hw, par, settings, res_bytes, params=count) if explain else None,
    )


def inference(spec, alias, hw, settings, layout, res_bytes, notes, batch, context, explain) -> MemoryResult:
    """``--inference``: weights, KV cache and one prefill's working activations per GPU."""
    from llmpar.cost import memory as M
    from llmpar.cost import memory_explain as ME
    from llmpar.cost import params as P

    b = positive_int(batch, "batch", MAX_BATCH) or 1
    if layout["microbatches"] is None and layout["global_batch"] is None:
        layout = dict(layout, microbatches=1)
    r: Resolved = resolve(spec, hw, settings=settings, **layout)
    par = r.parallel
    T = positive_int(context, "context", MAX_SEQ) or int(par.seq)
    notes = notes + [a for a in r.assumptions if "one node" in a]
    if context is None:
        notes.append(f"context defaults to min(8192, model max {spec.max_seq}) = {T}")
    elif T > spec.max_seq:
        notes.append(f"context {T} exceeds the model's max sequence {spec.max_seq}")
    if T % int(par.cp):
        raise UserError(f"cp={int(par.cp)} does not divide the context length {T}")
    notes.append(f"KV cache in {settings.kv_dtype}; working activations: one prefill of {T} tokens at a time")
    if spec.checkpoint:   # as `serve` says it: the config's quantization is not a cost input here
        notes.append(f"the checkpoint is {spec.checkpoint} (its config.json's quantization_config); the weights are "
                     f"counted at --dtype {settings.dtype} ({M.INFERENCE_WEIGHT_BYTES[settings.dtype]:g} B/param): "
                     "`llmpar serve --weights` prices quantized weights")
    if int(par.dp) > 1:
        notes.append(f"dp={int(par.dp)}: {int(par.dp)} independent replicas, each GPU holds its own copy of its shard")
    out = M.inference_memory_per_gpu(spec, hw, par, settings, b, T, res_bytes)
    return MemoryResult.model_construct(
        model=spec.name, model_requested=alias, hardware=hw.name, parallel=par, settings=settings, mode="inference",
        params_total=float(P.total_params(spec)), params_per_gpu=float(out["params_per_gpu"]),
        memory={k: float(out[k]) for k in MEMORY_COMPONENTS},
        activation_bytes_per_layer=float(out["activation_bytes_per_layer"]), capacity_bytes=float(out["capacity_bytes"]),
        fits=bool(out["fits"]), max_micro_batch=_int_or_none(out["max_micro_batch"]),
        most_loaded_stage=int(out["stage"]),
        bytes_per_param={"weights": M.INFERENCE_WEIGHT_BYTES[settings.dtype], "gradients": 0.0, "optimizer": 0.0,
                         "fp8_weight_cache": 0.0},
        assumptions=notes + _runtime_notes(settings, res_bytes), communicators=int(out["communicators"]),
        inference={"batch": b, "context": T, "kv_dtype": settings.kv_dtype},
        terms=ME.inference_terms(spec, hw, par, settings, b, T, res_bytes) if explain else None,
    )


def training(spec, alias, hw, settings, layout, res_bytes, notes, per_stage, explain) -> MemoryResult:
    """Training memory of the most-loaded pipeline stage (and every stage with ``per_stage``)."""
    from llmpar.cost import memory as M
    from llmpar.cost import memory_explain as ME
    from llmpar.cost import params as P
    from llmpar.cost.pipeline import check_schedule

    M.check_convention(settings, layout["zero"])
    r = resolve(spec, hw, settings=settings, **layout)
    par = r.parallel
    check_schedule(int(par.schedule), int(par.pp), int(par.microbatches), int(par.virtual_stages))
    # with pp = 1 the number of micro-batches per step does not change memory: drop that note
    notes = notes + [a for a in r.assumptions if int(par.pp) > 1 or "micro-batches" not in a]
    if (support := stack_support_note(settings, par)) is not None:
        notes.append(support)
    out = M.memory_per_gpu(spec, hw, par, settings, res_bytes)
    stage = int(out["stage"])
    if int(par.pp) > 1:
        notes.append(f"most-loaded pipeline stage: {stage} of 0..{int(par.pp) - 1} (--per-stage lists all)")
    prec = M.bytes_per_param(settings, layout["zero"], par.microbatches)
    if settings.finetune != "full":
        from llmpar.cost import finetune as FT

        notes.append(FT.note(spec, settings, float(out["trainable_params_per_gpu"]), float(P.total_params(spec))))
    if settings.optimizer_offload:
        notes.append(_host_line(f"optimizer offload {settings.optimizer_offload:g}: that share of this GPU's optimizer "
                                "states and an fp32 gradient buffer for them", out["host_optimizer_bytes"], out, hw,
                                "the 16-bit weights and the gradients stay in HBM (ZeRO-Offload, Ren et al. 2021 §4)"))
    if settings.param_offload:
        notes.append(_host_line("parameter offload: this GPU's 16-bit ZeRO-3 parameter shards", out["host_param_bytes"],
                                out, hw, "the two gathered layers stay in HBM (ZeRO-Infinity, Rajbhandari et al. 2021 §5)"))
    if int(par.offload_layers):
        host, cap = float(out["host_bytes"]), hw.host_memory_per_gpu
        # host_bytes is everything offloaded: the activations are what the optimizer and parameter
        # offloads leave of it (the line had called the optimizer's 141 GB activations too)
        act = host - float(out.get("host_optimizer_bytes", 0.0) or 0.0) - float(out.get("host_param_bytes", 0.0) or 0.0)
        total = f"; {host / 1e9:,.2f} GB per GPU in host memory in all" if host > act * (1 + 1e-9) else ""
        notes.append(f"offloaded activations: {act / 1e9:,.2f} GB per GPU in host memory{total}"
                     + (f" of {cap / 1e9:,.0f} GB (host_memory_per_gpu)" if cap is not None else
                        f": {hw.name} states no host_memory_per_gpu, so offloading cannot be checked and does not fit")
                     + (" - more than it holds: DOES NOT FIT" if cap is not None and host > cap else "")
                     + (f"; copies share the host link {hw.gpus_per_host_link} GPUs to a link" if hw.gpus_per_host_link > 1
                        else ""))
    from llmpar import evidence as EV

    interval = EV.memory_json(EV.query("memory", settings, hw, spec, par), float(out["total_bytes"]),
                              float(out["capacity_bytes"]))
    changes = None
    if not bool(out["fits"]):
        from llmpar.remedies import fit_changes

        changes = fit_changes(spec, hw, settings, par, layout, res_bytes)
    return MemoryResult.model_construct(
        interval=interval, changes_that_fit=changes,
        model=spec.name, model_requested=alias, hardware=hw.name, parallel=par, settings=settings, mode="training",
        params_total=float(P.total_params(spec)), params_per_gpu=float(out["params_per_gpu"]),
        memory={k: float(out[k]) for k in MEMORY_COMPONENTS},
        activation_bytes_per_layer=float(out["activation_bytes_per_layer"]), capacity_bytes=float(out["capacity_bytes"]),
        fits=bool(out["fits"]), max_micro_batch=_int_or_none(out["max_micro_batch"]), most_loaded_stage=stage,
        bytes_per_param=_bpp(prec), assumptions=notes + _runtime_notes(settings, res_bytes),
        communicators=int(out["communicators"]),
        stages=M.memory_per_stage(spec, hw, par, settings, res_bytes) if per_stage else None,
        terms=ME.memory_terms(spec, hw, par, settings, res_bytes, stage=stage) if explain else None,
    )


def _runtime_notes(settings: Settings, reserve) -> list[str]:
    mem = settings.stack.memory
    if reserve is not None:
        return [f"--reserve {reserve / 2**30:.2f} GiB replaces the stack's runtime (CUDA context + NCCL buffers); "
                f"the allocator overhead ({mem.allocator_overhead:g}) still applies"]
    return []


def _bpp(prec) -> dict[str, Any]:
    import numpy as np

    return {"weights": prec.weights, "gradients": float(prec.gradients), "optimizer": prec.optimizer,
            "fp8_weight_cache": prec.fp8_cache, "convention": prec.convention,
            "gradients_fp32_accumulated": bool(np.any(prec.fp32_accumulated))}


