"""Python API for scripts: the same computations as the CLI, returning result objects.

``import llmpar`` exposes these functions lazily (``llmpar.memory``, ``llmpar.plan`` ...); this
module is where they live. Each takes the command's options as keyword arguments, with
underscores (docs/architecture.md, CLI conventions: same names and meaning everywhere); a loaded
ModelSpec, Hardware or Stack works wherever a name does. Each returns a pydantic result
(:mod:`llmpar.results`) whose ``model_dump()`` is the command's ``--json`` object. Bad input
raises :class:`llmpar.errors.UserError` (the CLI's exit 2); a check that fails — nothing
feasible in ``plan``, ``validate`` over ``tolerance`` — raises
:class:`llmpar.errors.CheckFailed` (exit 1). Nothing here prints. docs/api.md has the reference.

The numbers come from :mod:`llmpar.cost` through :mod:`llmpar.parallel` (resolution);
:func:`plan` and :func:`sweep` are the planner's (:mod:`llmpar.planner`), :func:`validate` wraps
:mod:`llmpar.validation.core`.

    >>> import llmpar
    >>> r = llmpar.memory("llama-3-70b", hardware="h100-sxm", zero=3, dp=8)
    >>> r.fits, r.memory["total_bytes"], r.model_dump()["verdict"]
"""

from __future__ import annotations

from typing import Any

from llmpar.errors import CheckFailed, UserError
from llmpar.inputs import (fabric_note, generation_note, load_hardware_spec, load_model_spec, make_settings, moe_cost_note,
                           parse_reserve, stack_note, stack_support_note)
from llmpar.parallel import DTYPES, MAX_BATCH, MAX_GPUS, MAX_SEQ, Resolved, Settings, positive_int, flag, fraction, whole
from llmpar.layout import resolve
from llmpar.results import (MEMORY_COMPONENTS, STEP_NUMBERS, CollectiveResult, CollectiveSweepResult, Comparison,
                            MemoryResult, PlanResult, PlanRow, SpaceSummary, StepFigures, StepResult, SweepResult,
                            SweepRow, ValidateResult, num, step_numbers)
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec
from llmpar.specs.stack import Stack
from llmpar.units import parse_bytes, parse_count, parse_tolerance  # noqa: F401 (parse_tolerance: API)

# ------------------------------------------------------------------------------ spec loading


def load_model(model: str | ModelSpec | None = None, *, hf: str | None = None) -> ModelSpec:
    """A model spec: a shipped name or alias (``"llama-70b"``), a YAML path, a Hugging Face
    ``config.json`` path (or ``hf=`` one), or a loaded :class:`ModelSpec` (returned as is)."""
    if model is None and hf is None:
        raise UserError("give a MODEL (e.g. llama-3-70b) or hf= a config.json")
    return load_model_spec(model, hf)[0]


def load_hardware(hardware: str | Hardware = "h100-sxm") -> Hardware:
    """A hardware profile: a shipped name (``"h100-sxm"``), a YAML path, or a loaded :class:`Hardware`."""
    return load_hardware_spec(hardware)


def load_stack(stack: str | Stack | None = None) -> Stack:
    """A software stack: a shipped name (``"megatron-core"``), a YAML path, a loaded :class:`Stack`,
    or None for the default stack."""
    from llmpar.specs.registry import load_stack as _load_stack

    return _load_stack(stack)


def _bare_spec(count: float, text: str, tp, pp, seq) -> ModelSpec:
    """A stand-in spec for `--params`: lets layout.resolve apply the usual degree rules
    (gpus = tp·cp·pp·dp, one-node default) to a bare parameter count without shapes."""
    heads = positive_int(tp, "tp", MAX_GPUS) or 1
    layers = positive_int(pp, "pp", MAX_GPUS) or 1
    # built unvalidated: a stand-in, not a model, whose tp heads and pp layers may pass the bounds
    # of a real model's shapes (specs/model.py: 65,536 heads, 10,000 layers) within resolve's own
    return ModelSpec.model_construct(name=f"--params {text}", family="gpt", layers=layers, hidden=heads, heads=heads,
                                     head_dim=1, ffn_hidden=1, vocab=1, max_seq=positive_int(seq, "seq", MAX_SEQ) or 8192)


# ------------------------------------------------------------------------------------ memory

def _int_or_none(x) -> int | None:
    x = float(x)
    return None if x == float("inf") else int(x)


# `memory` builds its result with MemoryResult.model_construct: the fields are llmpar's own computed
# values, and skipping validation skips pydantic's first schema build of the process, about a tenth
# of `llmpar memory`'s start-up (docs/cli.md, start-up time; issue 10's 0.3 s). `.model_dump()`
# and `--json` build the serializer when asked.
def memory(
    model: str | ModelSpec | None = None,
    *,
    hardware: str | Hardware = "h100-sxm",
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
) -> MemoryResult:
    """Per-GPU memory of a training (or, with ``inference=True``, serving) layout.

    ``model``: shipped name or alias, YAML path or HF config.json path; or ``hf=`` a config.json;
    or ``params='7.5B'`` for the model states of a bare parameter count (ZeRO paper Table 1).
    Keyword arguments are the CLI's common options. Raises :class:`llmpar.errors.UserError` for
    bad input.
    """
    zero = whole(zero, "zero")
    if zero not in (0, 1, 2, 3):
        raise UserError(f"--zero must be 0, 1, 2 or 3, got {zero}")
    sp = flag(sp, "sp")
    per_stage, inference, explain = (flag(per_stage, "per_stage", False), flag(inference, "inference", False),
                                     flag(explain, "explain", False))
    if kv_dtype is not None and kv_dtype not in DTYPES:
        raise UserError(f"unknown kv dtype {kv_dtype!r}; choose one of: {', '.join(DTYPES)}")
    if not inference and (batch is not None or context is not None):
        raise UserError("--batch/--context describe serving and need --inference (training uses --micro-batch/--seq)")
    if not inference and kv_dtype is not None:
        raise UserError("--kv-dtype is the KV cache's dtype and needs --inference")
    if inference:
        # training knobs a serving layout has no use for: refused, not silently ignored
        given = {"--recompute": recompute not in (None, "none"), "--global-batch": global_batch is not None,
                 "--microbatches": microbatches is not None, "--micro-batch": micro_batch is not None,
                 "--schedule": schedule is not None, "--virtual-stages": virtual_stages is not None,
                 "--recompute-layers": recompute_layers is not None, "--offload-layers": offload_layers is not None,
                 "--recompute-modules": recompute_modules is not None, "--grad-dtype": grad_dtype is not None,
                 "--sp/--no-sp": sp is not None, "--optimizer": optimizer is not None,
                 "--convention": convention is not None, "--finetune": finetune is not None,
                 "--lora-rank": lora_rank is not None, "--lora-targets": lora_targets is not None,
                 "--optimizer-offload": optimizer_offload is not None, "--param-offload": bool(param_offload)}
        bad = [k for k, v in given.items() if v]
        if bad:
            raise UserError(f"{', '.join(bad)} describe{'s' if len(bad) == 1 else ''} training; drop "
                            f"{'it' if len(bad) == 1 else 'them'} with --inference (serving uses --batch and --context)")
    # None = not given: training takes Adam and llmpar's convention; serving keeps no optimizer state
    optimizer = "adam" if optimizer is None else optimizer
    convention = "llmpar" if convention is None else convention
    hw = load_hardware_spec(hardware)
    res_bytes = parse_reserve(reserve, hw)
    layout = dict(gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, zero=zero, sp=sp, recompute=recompute,
                  micro_batch=micro_batch, global_batch=global_batch, microbatches=microbatches, seq=seq,
                  schedule=schedule, virtual_stages=virtual_stages, recompute_layers=recompute_layers,
                  offload_layers=offload_layers)
    if params is not None:
        if model is not None or hf is not None:
            raise UserError("give either a MODEL (or --hf) or --params, not both")
        if inference:
            raise UserError("--inference needs a model's shapes (KV cache); --params gives model states only")
        if per_stage:
            raise UserError("--per-stage needs a model's layers; --params splits the count evenly over tp·pp")
        # options about activations, which a bare count has none of: refused, not silently ignored
        # (reliability review, item 15); the batch split stays (a stack that accumulates gradients
        # unsharded counts them per micro-batch step)
        moot = {"--seq": seq is not None, "--micro-batch": micro_batch is not None,
                "--recompute": recompute not in (None, "none"), "--recompute-layers": recompute_layers is not None,
                "--recompute-modules": recompute_modules is not None, "--attention": attention is not None,
                "--schedule": schedule is not None, "--virtual-stages": virtual_stages is not None,
                "--offload-layers": offload_layers not in (None, 0),
                "--finetune": finetune not in (None, "full"), "--lora-rank": lora_rank is not None,
                "--lora-targets": lora_targets is not None}
        bad = [k for k, v in moot.items() if v]
        if bad:
            raise UserError(f"{', '.join(bad)} change{'s' if len(bad) == 1 else ''} activations, which --params (model "
                            "states of a bare count) has none of: give a MODEL for them, or drop "
                            f"{'it' if len(bad) == 1 else 'them'}")
        settings = make_settings(None, dtype=dtype, optimizer=optimizer, grad_dtype=grad_dtype,
                                 convention=convention, attention=attention, stack=stack,
                                 optimizer_offload=optimizer_offload, param_offload=param_offload)
        return _memory_of_count(params, hw, settings, layout, res_bytes, explain)
    if model is None and hf is None:
        raise UserError("give a MODEL (e.g. llama-3-70b), --hf path/config.json, or --params 7.5B")
    spec, alias = load_model_spec(model, hf)
    settings = make_settings(spec, dtype=dtype, optimizer=optimizer, grad_dtype=grad_dtype, convention=convention,
                             attention=attention, kv_dtype=kv_dtype, stack=stack, recompute_modules=recompute_modules,
                             finetune=finetune, lora_rank=lora_rank, lora_targets=lora_targets,
                             optimizer_offload=optimizer_offload, param_offload=param_offload)
    if recompute_modules is not None and recompute != "selective" and not inference:
        raise UserError(f"--recompute-modules names what selective recompute re-runs: it needs --recompute selective "
                        f"(got {recompute})")
    notes: list[str] = []
    if alias:
        notes.append(f"model {alias} -> {spec.name}")
    notes.append(stack_note(settings))
    if inference:
        if zero:
            raise UserError("--zero shards training state; drop it with --inference")
        if per_stage:
            raise UserError("--per-stage is for training; --inference reports the most-loaded stage")
        if seq is not None and context is not None:   # reliability review, item 18: --seq was dropped
            raise UserError("--seq and --context both give the serving context: give one (--context)")
        return _memory_inference(spec, alias, hw, settings, layout, res_bytes, notes, batch, context, explain)
    return _memory_training(spec, alias, hw, settings, layout, res_bytes, notes, per_stage, explain)


def _host_line(what: str, nbytes, out, hw, tail: str) -> str:
    """One assumption line for a share of the states held in host memory: its bytes, what the host
    holds in all (with any other offload) of ``host_memory_per_gpu``, and whether that fits."""
    return (f"{what}, {float(nbytes) / 1e9:,.2f} GB, in host memory ({float(out['host_bytes']) / 1e9:,.2f} GB offloaded "
            f"in all of the {hw.host_memory_per_gpu / 1e9:,.0f} GB per GPU, host_memory_per_gpu)"
            + (": more than it holds, DOES NOT FIT" if not bool(out["host_fits"]) else "") + "; " + tail)


def _memory_of_count(params, hw, settings, layout, res_bytes, explain) -> MemoryResult:
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
    stub = _bare_spec(count, text, layout["tp"], layout["pp"], layout["seq"])
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
    return MemoryResult.model_construct(
        model=stub.name, model_requested=None, hardware=hw.name, parallel=par, settings=settings,
        mode="model_states", params_total=count, params_per_gpu=float(states["params_per_gpu"]), memory=mem,
        activation_bytes_per_layer=None, capacity_bytes=float(hw.gpu.memory), fits=bool(tot["fits"]) and host_ok,
        max_micro_batch=None, most_loaded_stage=0, bytes_per_param=_bpp(prec),
        assumptions=notes + _runtime_notes(settings, res_bytes), communicators=int(tot["communicators"]),
        terms=ME.memory_terms(None, hw, par, settings, res_bytes, params=count) if explain else None,
    )


def _memory_inference(spec, alias, hw, settings, layout, res_bytes, notes, batch, context, explain) -> MemoryResult:
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


def _memory_training(spec, alias, hw, settings, layout, res_bytes, notes, per_stage, explain) -> MemoryResult:
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
        notes.append(f"offloaded activations: {host / 1e9:,.2f} GB per GPU in host memory"
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


# -------------------------------------------------------------------------------------- step

def step(
    model: str | ModelSpec | None = None,
    *,
    hardware: str | Hardware = "h100-sxm",
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
) -> StepResult:
    """Step time, throughput, MFU/HFU and where the time goes, for one layout (issue 3).

    Keyword arguments are the CLI's common options; ``dp_overlap``/``tp_overlap``/``ep_overlap`` are the usable
    fractions of the compute DP/TP traffic can hide behind (defaults 0.5 and 0.8; see
    :class:`llmpar.parallel.Settings`), ``rank_order`` the rank order, innermost first.
    ``tokens`` (``"15T"``), ``pue``, ``gpu_hour_price``, ``power_per_gpu``: days, GPU-hours, energy
    and cost to train that budget on this layout (:func:`llmpar.cost.training.estimate`).
    ``interval_level`` (default 0.8): the level of the result's ``interval`` (:mod:`llmpar.evidence`).
    Raises :class:`llmpar.errors.UserError` for bad input."""
    from llmpar import evidence as EV
    from llmpar.cost import compute
    from llmpar.cost import training as TR
    from llmpar.cost.pipeline import check_schedule
    from llmpar.cost.step import step_time

    if model is None and hf is None:
        raise UserError("give a MODEL (e.g. llama-3-70b) or --hf path/config.json")
    dp_overlap, tp_overlap, ep_overlap = (fraction(dp_overlap, "dp_overlap"), fraction(tp_overlap, "tp_overlap"),
                                          fraction(ep_overlap, "ep_overlap"))
    train_in = TR.parse_inputs(tokens, pue, gpu_hour_price, power_per_gpu, failure_rate, restart_time,
                               checkpoint_bandwidth, checkpoint)
    level = EV.level_value(interval_level)
    mem = memory(model, hardware=hardware, gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, zero=zero, sp=sp,
                 recompute=recompute, micro_batch=micro_batch, global_batch=global_batch, microbatches=microbatches,
                 seq=seq, schedule=schedule, virtual_stages=virtual_stages, recompute_layers=recompute_layers,
                 offload_layers=offload_layers, recompute_modules=recompute_modules, dtype=dtype, optimizer=optimizer,
                 grad_dtype=grad_dtype, convention=convention, attention=attention,
                 reserve=reserve, hf=hf, stack=stack, finetune=finetune, lora_rank=lora_rank, lora_targets=lora_targets,
                 optimizer_offload=optimizer_offload, param_offload=param_offload)
    spec, _ = load_model_spec(model, hf)
    hw = load_hardware_spec(hardware)
    s = mem.settings
    settings = make_settings(spec, dtype=s.dtype, optimizer=s.optimizer, grad_dtype=grad_dtype, convention=s.convention,
                             attention=attention, kv_dtype=s.kv_dtype, dp_overlap=dp_overlap, tp_overlap=tp_overlap,
                             ep_overlap=ep_overlap, ep_dispatcher=ep_dispatcher,
                             recompute_modules=s.recompute_modules, rank_order=rank_order, stack=s.stack,
                             finetune=s.finetune, lora_rank=s.lora_rank if s.finetune != "full" else None,
                             lora_targets=s.lora_targets if s.finetune != "full" else None,
                             optimizer_offload=s.optimizer_offload, param_offload=s.param_offload)
    par = mem.parallel
    check_schedule(int(par.schedule), int(par.pp), int(par.microbatches), int(par.virtual_stages))
    out = step_time(spec, hw, par, settings, with_memory=False)
    notes = list(mem.assumptions)
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
    if global_batch is None and microbatches is None:
        notes.append(f"batch: {int(par.global_batch)} sequences x {int(par.seq)} tokens = {int(par.tokens_per_step):,} "
                     "tokens per step (--global-batch to change)")
    detail = {
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
    plaus = EV.plausibility(numbers["mfu_full_attention"], iv, hw.gpu.generation, spec.is_moe, settings.dtype,
                            gpus=float(par.gpus))
    if (note := EV.implausible_note(numbers["mfu_full_attention"], plaus)) is not None:
        notes.append(note)
    return StepResult(
        model=spec.name, model_requested=mem.model_requested, hardware=hw.name, parallel=par, settings=settings,
        **numbers,
        memory=mem, detail=detail, assumptions=notes, training=training, interval=interval, plausibility=plaus,
    )


# ---------------------------------------------------------------------------- plan and sweep
#
# plan() and sweep() are the planner's own functions (llmpar.planner.search.plan,
# llmpar.planner.sweep.sweep): their keywords are documented there and in docs/api.md. Imported on
# first use, so `llmpar memory` and `llmpar step` do not load the planner.

def __getattr__(name):
    if name == "plan":
        from llmpar.planner.search import plan as _plan

        return _plan
    if name == "sweep":
        from llmpar.planner.sweep import sweep as _sweep

        return _sweep
    if name == "serve":   # docs/serving.md; lives with the serving rooms
        from llmpar.serving.run import serve_api

        return serve_api
    if name == "serve_plan":
        from llmpar.serving.plan import serve_plan_api

        return serve_plan_api
    raise AttributeError(f"module 'llmpar.api' has no attribute {name!r}")

# -------------------------------------------------------------------------------- collective

_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "reduce": "sum"}
_ROOTED = ("broadcast", "reduce", "gather", "scatter")
_TYPE_BYTES = 4  # nccl-tests default type: float


def _whole_bytes(nbytes: float, given, option: str) -> float:
    """A message is a whole number of bytes, at least one (reliability review, item 25: 1.5 B was
    reported as 2 B and 1e-3 as 0 B, and priced)."""
    if nbytes < 1 or nbytes != int(nbytes):
        raise UserError(f"{option} {given}: a message is a whole number of bytes, at least 1 (got {nbytes:g} B)")
    return nbytes


def _sweep_sizes(text: str) -> list[float]:
    parts = str(text).split(":")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise UserError(f"--sweep expects A:B (e.g. 1KiB:8GiB), got {text!r}")
    lo = _whole_bytes(parse_bytes(parts[0], "sweep start"), parts[0].strip(), "--sweep")
    hi = _whole_bytes(parse_bytes(parts[1], "sweep end"), parts[1].strip(), "--sweep")
    if lo > hi:
        raise UserError(f"--sweep start {parts[0].strip()} is larger than its end {parts[1].strip()}")
    sizes = []
    s = lo
    while s <= hi * (1 + 1e-12):
        sizes.append(s)
        s *= 2
    return sizes


def _collective_group(hw, gpus: int | None, per_node: int | None) -> tuple[int, dict, list[str]]:
    """Check gpus/gpus_per_node and place the group by the rule ``step`` and ``plan`` use
    (:func:`llmpar.cost.topology.collective_group`)."""
    from llmpar.cost.topology import collective_group

    notes: list[str] = []
    domain = hw.nvlink_domain
    if gpus is None:
        gpus = hw.gpus_per_node
        notes.append(f"no --gpus: one node of {hw.name} ({gpus} GPUs)")
    gpus = whole(gpus, "gpus")
    if gpus < 2:
        raise UserError(f"--gpus must be at least 2 for a collective, got {gpus}")
    if gpus > MAX_GPUS:
        raise UserError(f"--gpus {gpus} is beyond what llmpar models (at most {MAX_GPUS:,})")
    if per_node is not None:
        per_node = positive_int(per_node, "gpus-per-node")
        if per_node > domain:
            raise UserError(
                f"--gpus-per-node {per_node} is larger than the {domain}-GPU NVLink domain of {hw.name}"
            )
        if per_node > gpus:
            raise UserError(f"--gpus-per-node {per_node} is larger than the group (--gpus {gpus})")
        if gpus % per_node:
            raise UserError(f"--gpus {gpus} is not a multiple of --gpus-per-node {per_node}")
    place = collective_group(hw, gpus, per_node)
    k = place["members_per_node"]
    fill = hw.placement_domain     # the GPUs of a domain a job fills (job_domain), as step and plan place ranks
    if per_node is None and place["crosses_nodes"] and gpus % fill:
        notes.append(f"{gpus} consecutive ranks fill {place['domains']} domains of {fill} unevenly "
                     f"({gpus - (place['domains'] - 1) * fill} in the last): the smallest part, "
                     f"k = {k} per domain, sets the NIC pace, as in step and plan")
    elif per_node is not None and domain % per_node:
        notes.append(f"--gpus-per-node {per_node} does not divide the {domain}-GPU domain: "
                     f"taken as stated, {per_node} per domain")
    return gpus, place, notes


def _algorithm_dict(r) -> dict[str, Any]:
    return {
        "algorithm": r.algorithm, "protocol": r.protocol, "time_s": r.time_s if r.available else None,
        "bytes_per_rank": r.bytes_per_rank, "algbw_GBps": r.algbw_GBps if r.available else None,
        "busbw_GBps": r.busbw_GBps if r.available else None, "tiers": r.tiers if r.available else [],
        "available": r.available, "nccl_choice": r.nccl,
        "latency_s": r.latency_s if r.available else None, "bandwidth_s": r.bandwidth_s if r.available else None,
        **({} if r.available else {"unavailable_because": r.unavailable_because}),
    }


def _placement(place: dict) -> dict[str, Any]:
    return {"members_per_node": place["members_per_node"], "nodes": place["domains"],
            "crosses_nodes": place["crosses_nodes"], "tiers": place["tiers"]}


def collective(
    collective: str,
    *,
    size: str | float | None = None,
    gpus: int | None = None,
    gpus_per_node: int | None = None,
    hardware: str | Hardware = "h100-sxm",
    algorithm: str | None = None,
    sweep: str | None = None,
    explain: bool = False,
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
    from llmpar.cost import collective_params as CP
    from llmpar.cost import collectives as C

    explain = flag(explain, "explain", False)
    name = C.normalize_collective(collective)
    if algorithm:
        algorithm = CP.normalize_algorithm(algorithm, name)
    hw = load_hardware_spec(hardware)
    gpus, place, notes = _collective_group(hw, gpus, gpus_per_node)
    if sweep and size is not None:
        raise UserError("give --size or --sweep, not both")
    if sweep:
        rows = []
        for s in _sweep_sizes(sweep):
            rep = C.collective_report(hw, name, s, gpus, place["members_per_node"], algorithm=algorithm)
            r = rep.chosen_row
            count = s / _TYPE_BYTES / (gpus if rep.collective in CP.GATHERED else 1)
            rows.append({
                "size_bytes": num(s), "count": int(count), "type": "float", "redop": _REDOP.get(rep.collective, "none"),
                "root": 0 if rep.collective in _ROOTED else -1,
                "time_s": r.time_s if r else None, "algbw_GBps": r.algbw_GBps if r else None,
                "busbw_GBps": r.busbw_GBps if r else None,
                "algorithm": r.algorithm if r else None, "protocol": r.protocol if r else None,
            })
        return CollectiveSweepResult(collective=name, gpus=gpus, hardware=hw.name, **_placement(place),
                                     bus_factor=CP.bus_factor(name, gpus), algorithm=algorithm, sweep=rows,
                                     assumptions=notes)
    if size is None:
        size = "1GiB"
        notes.append("no --size: 1 GiB")
    nbytes = _whole_bytes(parse_bytes(size, "size"), size, "--size")
    rep = C.collective_report(hw, name, nbytes, gpus, place["members_per_node"], algorithm=algorithm)
    result = CollectiveResult(
        collective=rep.collective, size_bytes=num(rep.size_bytes), gpus=gpus, hardware=hw.name, **_placement(place),
        bus_factor=rep.bus_factor, chosen=rep.chosen, chosen_protocol=rep.chosen_protocol,
        time_s=rep.chosen_row.time_s if rep.chosen_row else None,
        algorithms=[_algorithm_dict(r) for r in rep.rows], assumptions=notes,
        explain=C.explain(rep, hw) if explain else None,
    )
    if algorithm and result.chosen is None:
        raise UserError(
            f"algorithm {algorithm!r} cannot run {name} over {gpus} GPUs with {place['members_per_node']} per node "
            f"on {hw.name}: " + next(a["unavailable_because"] for a in result.algorithms if a["algorithm"] == algorithm)
        )
    return result


# ---------------------------------------------------------------------------------- validate

def validate(
    source: str | list[str] | None = None,
    *,
    stack: str | Stack | None = None,
    limit: int | None = None,
    tolerance: str | float | None = None,
    progress=None,
    serving: bool = False,
) -> ValidateResult:
    """Published vs predicted for every shipped published run (or those of ``source``: one name or
    a list), each under its source's stack or ``stack``, as `llmpar validate` does.

    ``limit``: only the first N runs of each source. ``tolerance`` (``0.1`` or ``"10%"``): raise
    :class:`~llmpar.errors.CheckFailed` if any group's mean absolute error exceeds it (the CLI's
    exit 1); :meth:`ValidateResult.over_tolerance` asks the same without raising.
    ``progress(name, done, total)`` is called before each source. ``serving=True``: the published
    serving runs instead (``validate --serving``; the result's ``serving`` holds the block)."""
    from llmpar.validation.core import validate as _validate

    if serving:
        if source is not None or stack is not None or limit is not None or tolerance is not None:
            raise UserError("serving=True validates every published serving run; source, stack, limit and tolerance "
                            "change nothing there")
        from llmpar.serving.report import validate_block

        return ValidateResult(rows=[], groups=[], sources=[], serving=validate_block())

    tol = parse_tolerance(tolerance)
    if limit is not None:
        limit = positive_int(limit, "limit")
    if source is not None and not (isinstance(source, str) or (isinstance(source, (list, tuple))
                                                                 and all(isinstance(x, str) for x in source))):
        raise UserError(f"source must be a validation source name (a file stem of validation/*.yaml) or a list of "
                        f"them, got {source!r}")
    if progress is not None and not callable(progress):
        raise UserError(f"progress must be a function progress(name, done, total), got {progress!r}")
    r = _validate(source, stack, limit, progress)
    result = ValidateResult(rows=r.rows, groups=r.groups, sources=[s.as_dict() for s in r.sources], stack=r.stack,
                            cross_validation=r.cross_validation)
    if tol is not None:
        bad = result.over_tolerance(tol)
        if bad:
            what = ", ".join(f"{g['source']} {g['metric']} ({g['stack']}) {g['mean_abs_error'] * 100:.1f} %" for g in bad)
            raise CheckFailed(f"validate: mean |error| above {tol * 100:g} % in {len(bad)} group(s): {what}")
    return result


__all__ = ["CollectiveResult", "CollectiveSweepResult", "Comparison", "MemoryResult", "PlanResult", "PlanRow",
           "SpaceSummary", "StepFigures", "StepResult", "SweepResult", "SweepRow", "ValidateResult", "collective",
           "load_hardware", "load_hardware_spec", "load_model", "load_model_spec", "load_stack", "make_settings",
           "memory", "parse_reserve", "parse_tolerance", "plan", "stack_note", "step", "step_numbers", "sweep",
           "validate", "MEMORY_COMPONENTS", "STEP_NUMBERS"]
