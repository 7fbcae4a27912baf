"""Python API for scripts: the same computations as the CLI, returning result objects.

Each function takes the CLI's common options as keyword arguments (DESIGN.md, CLI conventions:
same names and meaning everywhere) and is a thin layer over :mod:`llmpar.parallel` (resolution)
and :mod:`llmpar.cost` (formulas). Nothing here prints.

    >>> import llmpar.api as api
    >>> r = api.memory("llama-3-70b", zero=3, dp=8)
    >>> r.fits, r.memory["total_bytes"]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmpar.errors import UserError
from llmpar.parallel import DTYPES, Parallel, Resolved, Settings, resolve
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec
from llmpar.units import parse_bytes, parse_count

MEMORY_COMPONENTS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                     "buffers_bytes", "kv_cache_bytes", "allocated_bytes", "allocator_overhead_bytes",
                     "reserved_bytes", "runtime_bytes", "total_bytes", "margin_bytes")


# ------------------------------------------------------------------------------ spec loading

def load_model_spec(model: str | ModelSpec | None = None, hf: str | None = None) -> tuple[ModelSpec, str | None]:
    """(spec, alias typed or None) from a shipped name/alias, a YAML path, or a HF config.json."""
    from llmpar.specs import registry

    if model is not None and hf is not None:
        raise UserError("give either a MODEL or --hf config.json, not both")
    if isinstance(model, ModelSpec):
        return model, None
    if hf is not None:
        path = Path(hf)
        if not path.is_file():
            raise UserError(f"--hf: file not found: {hf}")
        try:
            from llmpar.specs.hf import load_hf_config
        except ModuleNotFoundError:  # pragma: no cover - shipped with the package
            raise UserError("reading Hugging Face configs is not available in this version") from None
        return load_hf_config(path), None
    spec = registry.load_model(str(model))
    _, alias = registry.resolved_name(str(model)) if not registry._looks_like_path(str(model)) else (None, None)
    return spec, alias


def load_hardware_spec(hardware: str | Hardware) -> Hardware:
    from llmpar.specs import registry

    return registry.load_hardware(hardware)


def parse_reserve(reserve, hw: Hardware) -> float | None:
    """--reserve as bytes: an explicit override of the runtime memory (CUDA context + NCCL buffers),
    or None = the stack's runtime model (a legacy ``reserve`` in a user's hardware profile counts
    as --reserve). Must leave room on the GPU."""
    if reserve is None and getattr(hw, "reserve", None) is None:
        return None
    value = float(hw.reserve) if reserve is None else parse_bytes(reserve, "--reserve", allow_zero=True)
    if value >= hw.gpu.memory:
        raise UserError(f"--reserve {reserve} is not smaller than the {hw.gpu.memory / 1e9:.2f} GB of GPU memory")
    return value


def _fraction(value, option: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UserError(f"--{option} must be a number between 0 and 1, got {value!r}") from None


def make_settings(model: ModelSpec | None, *, dtype="bf16", optimizer="adam", grad_dtype=None,
                  convention="llmpar", attention=None, kv_dtype=None, dp_overlap=None, tp_overlap=None,
                  rank_order=None, stack=None) -> Settings:
    """Settings from the CLI's precision/overlap options and ``--stack`` (a name, a YAML path or
    a loaded Stack; None = the default stack). An option left as None takes the stack's value."""
    kv = kv_dtype or ("fp16" if dtype == "fp16" else "bf16")
    extra = {}
    if dp_overlap is not None:
        extra["dp_overlap"] = _fraction(dp_overlap, "dp-overlap")
    if tp_overlap is not None:
        extra["tp_overlap"] = _fraction(tp_overlap, "tp-overlap")
    if rank_order is not None:
        extra["rank_order"] = str(rank_order)
    return Settings(dtype=dtype, optimizer=optimizer, grad_dtype=grad_dtype, convention=convention,
                    attention=attention, kv_dtype=kv, stack=stack, **extra)


def _bare_spec(count: float, text: str, tp, pp, seq) -> ModelSpec:
    """A stand-in spec for `--params`: lets parallel.resolve apply the usual degree rules
    (gpus = tp·cp·pp·dp, one-node default) to a bare parameter count without shapes."""
    heads = int(tp or 1)
    return ModelSpec(name=f"--params {text}", family="gpt", layers=max(int(pp or 1), 1), hidden=heads, heads=heads,
                     head_dim=1, ffn_hidden=1, vocab=1, max_seq=int(seq or 8192))


# ------------------------------------------------------------------------------------ memory

@dataclass
class MemoryResult:
    """What `llmpar memory` computed; :meth:`to_dict` is the JSON contract (issue 2)."""

    model: str
    model_requested: str | None
    hardware: str
    parallel: Parallel
    settings: Settings
    mode: str                               # "training" | "inference" | "model_states"
    params_total: float
    params_per_gpu: float
    memory: dict[str, float]
    activation_bytes_per_layer: float | None
    capacity_bytes: float
    fits: bool
    max_micro_batch: int | None
    most_loaded_stage: int
    bytes_per_param: dict[str, Any]
    assumptions: list[str] = field(default_factory=list)
    communicators: int = 0
    stages: list[dict] | None = None
    terms: list[Any] | None = None
    inference: dict[str, Any] | None = None

    @property
    def gpus(self) -> int:
        return int(self.parallel.gpus)

    @property
    def usable_bytes(self) -> float:
        """HBM left for the allocator's pool: capacity − runtime (CUDA context + NCCL, or --reserve)."""
        return self.capacity_bytes - self.memory["runtime_bytes"]

    @property
    def verdict(self) -> str:
        """'fits' | 'tight' | 'does_not_fit' (cost.runtime.verdict_code: within the stack's
        memory.uncertainty of the capacity on either side is 'tight')."""
        from llmpar.cost.runtime import verdict_code, verdict_name

        return verdict_name(verdict_code(self.memory["total_bytes"], self.capacity_bytes,
                                         self.settings.stack.memory.uncertainty))

    @property
    def margin_bytes(self) -> float:
        return self.capacity_bytes - self.memory["total_bytes"]

    @property
    def model_states_bytes(self) -> float:
        return sum(self.memory[k] for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model,
            "model_requested": self.model_requested,
            "hardware": self.hardware,
            "gpus": self.gpus,
            "mode": self.mode,
            "parallel": self.parallel.as_dict(),
            "settings": self.settings.as_dict(),
            "params_total": _num(self.params_total),
            "params_per_gpu": _num(self.params_per_gpu),
            "bytes_per_param": self.bytes_per_param,
            "memory": dict(self.memory),
            "model_states_bytes": self.model_states_bytes,
            "activation_bytes_per_layer": self.activation_bytes_per_layer,
            "capacity_bytes": self.capacity_bytes,
            "usable_bytes": self.usable_bytes,
            "fits": self.fits,
            "verdict": self.verdict,
            "margin_bytes": self.margin_bytes,
            "uncertainty": self.settings.stack.memory.uncertainty,
            "communicators": self.communicators,
            "max_micro_batch": self.max_micro_batch,
            "most_loaded_stage": self.most_loaded_stage,
            "assumptions": list(self.assumptions),
        }
        if self.inference is not None:
            out["inference"] = dict(self.inference)
        if self.stages is not None:
            out["stages"] = [dict(s) for s in self.stages]
        if self.terms is not None:
            out["terms"] = [t.as_dict() for t in self.terms]
        return out


def _num(x: float) -> int | float:
    """Counts as ints in JSON when they are whole (they are, except for uneven bare splits)."""
    return int(x) if float(x).is_integer() else float(x)


def _int_or_none(x) -> int | None:
    x = float(x)
    return None if x == float("inf") else int(x)


def _pos(value, what):
    if value is None:
        return None
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise UserError(f"--{what} must be a positive integer, got {value}")
    return int(value)


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
    zero: int = 0,
    sp: bool | None = None,
    recompute: str = "none",
    micro_batch: int | None = None,
    global_batch: int | None = None,
    microbatches: int | None = None,
    seq: int | None = None,
    schedule: str | None = None,
    virtual_stages: int | None = None,
    dtype: str = "bf16",
    optimizer: str = "adam",
    grad_dtype: str | None = None,
    convention: str = "llmpar",
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
) -> MemoryResult:
    """Per-GPU memory of a training (or, with ``inference=True``, serving) layout.

    ``model``: shipped name or alias, YAML path or HF config.json path; or ``hf=`` a config.json;
    or ``params='7.5B'`` for the model states of a bare parameter count (ZeRO paper Table 1).
    Keyword arguments are the CLI's common options. Raises :class:`llmpar.errors.UserError` for
    bad input.
    """
    from llmpar.cost import memory as M
    from llmpar.cost import params as P
    from llmpar.cost.pipeline import check_schedule

    if zero not in (0, 1, 2, 3):
        raise UserError(f"--zero must be 0, 1, 2 or 3, got {zero}")
    if kv_dtype is not None and kv_dtype not in DTYPES:
        raise UserError(f"unknown kv dtype {kv_dtype!r}; choose one of: {', '.join(DTYPES)}")
    if not inference and (batch is not None or context is not None):
        raise UserError("--batch/--context describe serving and need --inference (training uses --micro-batch/--seq)")
    hw = load_hardware_spec(hardware)
    res_bytes = parse_reserve(reserve, hw)
    layout = dict(gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, zero=zero, sp=sp, recompute=recompute,
                  micro_batch=micro_batch, global_batch=global_batch, microbatches=microbatches, seq=seq,
                  schedule=schedule, virtual_stages=virtual_stages)

    # ---- a bare parameter count: model states only
    if params is not None:
        if model is not None or hf is not None:
            raise UserError("give either a MODEL (or --hf) or --params, not both")
        if inference:
            raise UserError("--inference needs a model's shapes (KV cache); --params gives model states only")
        if per_stage:
            raise UserError("--per-stage needs a model's layers; --params splits the count evenly over tp·pp")
        count = parse_count(params, "--params")
        text = str(params).strip()
        settings = make_settings(None, dtype=dtype, optimizer=optimizer, grad_dtype=grad_dtype,
                                 convention=convention, attention=attention, stack=stack)
        M.check_convention(settings, zero)
        stub = _bare_spec(count, text, tp, pp, seq)
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
        prec = M.bytes_per_param(settings, zero)
        cap = float(hw.gpu.memory)
        return MemoryResult(
            model=stub.name, model_requested=None, hardware=hw.name, parallel=par, settings=settings,
            mode="model_states", params_total=count, params_per_gpu=float(states["params_per_gpu"]), memory=mem,
            activation_bytes_per_layer=None, capacity_bytes=cap, fits=bool(tot["fits"]), max_micro_batch=None,
            most_loaded_stage=0, bytes_per_param=_bpp(prec), assumptions=notes + _runtime_notes(settings, res_bytes),
            communicators=int(tot["communicators"]),
            terms=M.memory_terms(None, hw, par, settings, res_bytes, params=count) if explain else None,
        )

    if model is None and hf is None:
        raise UserError("give a MODEL (e.g. llama-3-70b), --hf path/config.json, or --params 7.5B")
    spec, alias = load_model_spec(model, hf)
    settings = make_settings(spec, dtype=dtype, optimizer=optimizer, grad_dtype=grad_dtype, convention=convention,
                             attention=attention, kv_dtype=kv_dtype, stack=stack)
    notes: list[str] = []
    if alias:
        notes.append(f"model {alias} -> {spec.name}")
    notes.append(stack_note(settings))

    if inference:
        if zero:
            raise UserError("--zero shards training state; drop it with --inference")
        if per_stage:
            raise UserError("--per-stage is for training; --inference reports the most-loaded stage")
        b = _pos(batch, "batch") or 1
        if microbatches is None and global_batch is None:
            layout["microbatches"] = 1
        r: Resolved = resolve(spec, hw, settings=settings, **layout)
        par = r.parallel
        T = _pos(context, "context") or int(par.seq)
        notes += [a for a in r.assumptions if "one node" in a]
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
        mem = {k: float(out[k]) for k in MEMORY_COMPONENTS}
        return MemoryResult(
            model=spec.name, model_requested=alias, hardware=hw.name, parallel=par, settings=settings, mode="inference",
            params_total=float(P.total_params(spec)), params_per_gpu=float(out["params_per_gpu"]), memory=mem,
            activation_bytes_per_layer=float(out["activation_bytes_per_layer"]), capacity_bytes=float(out["capacity_bytes"]),
            fits=bool(out["fits"]), max_micro_batch=_int_or_none(out["max_micro_batch"]),
            most_loaded_stage=int(out["stage"]),
            bytes_per_param={"weights": M.INFERENCE_WEIGHT_BYTES[settings.dtype], "gradients": 0.0, "optimizer": 0.0,
                             "fp8_weight_cache": 0.0},
            assumptions=notes + _runtime_notes(settings, res_bytes), communicators=int(out["communicators"]),
            inference={"batch": b, "context": T, "kv_dtype": settings.kv_dtype},
            terms=M.inference_terms(spec, hw, par, settings, b, T, res_bytes) if explain else None,
        )

    M.check_convention(settings, zero)
    r = resolve(spec, hw, settings=settings, **layout)
    par = r.parallel
    check_schedule(int(par.schedule), int(par.pp), int(par.microbatches), int(par.virtual_stages))
    # with pp = 1 the number of micro-batches per step does not change memory: drop that note
    notes += [a for a in r.assumptions if int(par.pp) > 1 or "micro-batches" not in a]
    out = M.memory_per_gpu(spec, hw, par, settings, res_bytes)
    mem = {k: float(out[k]) for k in MEMORY_COMPONENTS}
    stage = int(out["stage"])
    if int(par.pp) > 1:
        notes.append(f"most-loaded pipeline stage: {stage} of 0..{int(par.pp) - 1} (--per-stage lists all)")
    prec = M.bytes_per_param(settings, zero)
    return MemoryResult(
        model=spec.name, model_requested=alias, hardware=hw.name, parallel=par, settings=settings, mode="training",
        params_total=float(P.total_params(spec)), params_per_gpu=float(out["params_per_gpu"]), memory=mem,
        activation_bytes_per_layer=float(out["activation_bytes_per_layer"]), capacity_bytes=float(out["capacity_bytes"]),
        fits=bool(out["fits"]), max_micro_batch=_int_or_none(out["max_micro_batch"]), most_loaded_stage=stage,
        bytes_per_param=_bpp(prec), assumptions=notes + _runtime_notes(settings, res_bytes),
        communicators=int(out["communicators"]),
        stages=M.memory_per_stage(spec, hw, par, settings, res_bytes) if per_stage else None,
        terms=M.memory_terms(spec, hw, par, settings, res_bytes, stage=stage) if explain else None,
    )


def _runtime_notes(settings: Settings, reserve) -> list[str]:
    mem = settings.stack.memory
    if reserve is not None:
        return [f"--reserve {reserve / 2**30:.2f} GiB replaces the stack's runtime (CUDA context + NCCL buffers); "
                f"the allocator overhead ({mem.allocator_overhead:g}) still applies"]
    return []


def _bpp(prec) -> dict[str, Any]:
    return {"weights": prec.weights, "gradients": float(prec.gradients), "optimizer": prec.optimizer,
            "fp8_weight_cache": prec.fp8_cache, "convention": prec.convention}






def stack_note(settings: Settings) -> str:
    """One line naming the stack and the values of it a result used, and what overrode it."""
    st = settings.stack
    over = settings.overrides()
    parts = [f"attention {settings.attention} ({st.kernels.attention.kernel} kernel)",
             f"grad dtype {settings.grad_dtype}", f"tp overlap {settings.tp_overlap:g}", f"dp overlap {settings.dp_overlap:g}"]
    text = f"stack {st.name}: " + ", ".join(parts)
    if over:
        text += " (given: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in over.items()) + ")"
    return text + " (`llmpar stacks show " + st.name + "`)"


# -------------------------------------------------------------------------------------- step

STEP_NUMBERS = ("step_time_s", "tokens_per_s", "samples_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu",
                "mfu", "hfu", "mfu_full_attention")


def step_numbers(out: dict[str, Any], i=None) -> dict[str, Any]:
    """The figures of one layout from :func:`llmpar.cost.step.step_time`'s output: the scalar
    result (``i`` None) or entry ``i`` of the planner's arrays."""
    def f(x):
        return float(np.asarray(x) if i is None else np.asarray(x)[i])

    return {**{k: f(out[k]) for k in STEP_NUMBERS}, "mfu_convention": out["mfu_convention"],
            "breakdown_s": {k: f(v) for k, v in out["breakdown_s"].items()},
            "comm_bytes_per_gpu": {k: f(v) for k, v in out["comm_bytes_per_gpu"].items()}}


@dataclass
class StepFigures:
    """What every step-time result carries (`llmpar step`, each row of `llmpar plan`)."""

    model: str
    hardware: str
    parallel: Parallel
    settings: Settings
    step_time_s: float
    tokens_per_s: float
    samples_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    hfu: float
    mfu_full_attention: float
    mfu_convention: str
    breakdown_s: dict[str, float]
    comm_bytes_per_gpu: dict[str, float]

    @property
    def gpus(self) -> int:
        return int(self.parallel.gpus)

    def step_json(self, memory: dict[str, Any], fits: bool) -> dict[str, Any]:
        """The JSON keys of a step-time result: the common keys of DESIGN.md plus issue 3's."""
        return {
            "model": self.model,
            "hardware": self.hardware,
            "gpus": self.gpus,
            "parallel": self.parallel.as_dict(),
            "settings": self.settings.as_dict(),
            "tokens_per_step": int(self.parallel.tokens_per_step),
            **{k: getattr(self, k) for k in STEP_NUMBERS},
            "mfu_convention": self.mfu_convention,
            "breakdown_s": dict(self.breakdown_s),
            "comm_bytes_per_gpu": dict(self.comm_bytes_per_gpu),
            "memory": memory,
            "fits": fits,
        }


@dataclass
class StepResult(StepFigures):
    """What `llmpar step` computed; :meth:`to_dict` is the JSON contract (issue 3)."""

    model_requested: str | None = None
    memory: MemoryResult | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)
    training: dict[str, Any] | None = None   # days, GPU-hours, energy, cost to train `tokens` (cost.training)

    def to_dict(self) -> dict[str, Any]:
        mem = self.memory
        memory = {**mem.memory, "capacity_bytes": mem.capacity_bytes, "fits": mem.fits,
                  "max_micro_batch": mem.max_micro_batch, "params_per_gpu": _num(mem.params_per_gpu)}
        return {
            "model_requested": self.model_requested,
            **self.step_json(memory, mem.fits),
            "detail": dict(self.detail),
            "assumptions": list(self.assumptions),
            **({"training": dict(self.training)} if self.training is not None else {}),
        }


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
    zero: int = 0,
    sp: bool | None = None,
    recompute: str = "none",
    micro_batch: int | None = None,
    global_batch: int | None = None,
    microbatches: int | None = None,
    seq: int | None = None,
    schedule: str | None = None,
    virtual_stages: int | None = None,
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
    tokens=None,
    pue=None,
    gpu_hour_price=None,
    power_per_gpu=None,
) -> StepResult:
    """Step time, throughput, MFU/HFU and where the time goes, for one layout (issue 3).

    Keyword arguments are the CLI's common options; ``dp_overlap``/``tp_overlap`` are the usable
    fractions of the compute DP/TP traffic can hide behind (defaults 0.5 and 0.8; see
    :class:`llmpar.parallel.Settings`), ``rank_order`` the rank order, innermost first.
    ``tokens`` (``"15T"``), ``pue``, ``gpu_hour_price``, ``power_per_gpu``: days, GPU-hours, energy
    and cost to train that budget on this layout (:func:`llmpar.cost.training.estimate`).
    Raises :class:`llmpar.errors.UserError` for bad input."""
    from llmpar.cost import training as TR
    from llmpar.cost.pipeline import check_schedule
    from llmpar.cost.step import step_time

    if model is None and hf is None:
        raise UserError("give a MODEL (e.g. llama-3-70b) or --hf path/config.json")
    train_in = TR.parse_inputs(tokens, pue, gpu_hour_price, power_per_gpu)
    mem = memory(model, hardware=hardware, gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, zero=zero, sp=sp,
                 recompute=recompute, micro_batch=micro_batch, global_batch=global_batch, microbatches=microbatches,
                 seq=seq, schedule=schedule, virtual_stages=virtual_stages, dtype=dtype, optimizer=optimizer,
                 grad_dtype=grad_dtype, convention=convention, attention=attention, reserve=reserve, hf=hf,
                 stack=stack)
    spec, _ = load_model_spec(model, hf)
    hw = load_hardware_spec(hardware)
    s = mem.settings
    settings = make_settings(spec, dtype=s.dtype, optimizer=s.optimizer, grad_dtype=grad_dtype, convention=s.convention,
                             attention=attention, kv_dtype=s.kv_dtype, dp_overlap=dp_overlap, tp_overlap=tp_overlap,
                             rank_order=rank_order, stack=s.stack)
    par = mem.parallel
    check_schedule(int(par.schedule), int(par.pp), int(par.microbatches), int(par.virtual_stages))
    out = step_time(spec, hw, par, settings, with_memory=False)
    notes = list(mem.assumptions)
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
        "parts": {k: float(v) for k, v in out["parts"].items()},
    }
    numbers = step_numbers(out)
    training = None
    if train_in["tokens"] is not None:
        training = TR.estimate(hw, tokens=train_in["tokens"], tokens_per_s=numbers["tokens_per_s"], gpus=int(par.gpus),
                               tokens_per_step=int(par.tokens_per_step), pue=train_in["pue"],
                               gpu_hour_price=train_in["gpu_hour_price"], power_per_gpu_w=train_in["power_per_gpu_w"])
    return StepResult(
        model=spec.name, model_requested=mem.model_requested, hardware=hw.name, parallel=par, settings=settings,
        **numbers,
        memory=mem, detail=detail, assumptions=notes, training=training,
    )


# -------------------------------------------------------------------------------------- plan

def plan(model: str | ModelSpec | None = None, **options):
    """Rank the layouts of ``gpus`` GPUs for ``model`` (issue 4): see :func:`llmpar.plan.search.plan`
    for the keywords. Returns a :class:`llmpar.plan.search.PlanResult`."""
    from llmpar.plan.search import plan as _plan

    return _plan(model, **options)


def sweep(model: str | ModelSpec | None = None, **options):
    """Plan a list of GPU counts on one or more hardware profiles, with days, GPU-hours, energy and
    cost to train ``tokens`` (issue 10): see :func:`llmpar.plan.sweep.sweep` for the keywords.
    Returns a :class:`llmpar.plan.sweep.SweepResult`."""
    from llmpar.plan.sweep import sweep as _sweep

    return _sweep(model, **options)


__all__ = ["MemoryResult", "StepResult", "load_hardware_spec", "load_model_spec", "make_settings", "memory",
           "parse_reserve", "plan", "step", "sweep"]
