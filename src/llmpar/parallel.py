"""The parallel layout and training settings, and how the CLI's options resolve into them.

:class:`Parallel` holds degrees and knobs as plain numbers *or numpy arrays* (one entry per
candidate), so every ``llmpar.cost`` formula evaluates one layout (``llmpar step``) or all of
them at once (``llmpar plan``) with the same code. Categorical knobs are integer codes so they
can live in arrays: see RECOMPUTE and SCHEDULES.

Resolution rules (DESIGN.md, CLI conventions):
- gpus = tp*cp*pp*dp; ep divides dp*cp (expert data-parallel = dp*cp/ep); expert-TP = tp.
- --gpus without --dp: dp = gpus/(tp*cp*pp) (must be an integer). --dp without --gpus: gpus is
  the product. Both: must agree. Neither: one node of the hardware.
- --global-batch B (sequences): m = B/(b*dp) micro-batches; --microbatches m sets m directly.
- seq defaults to min(8192, model max); SP is on whenever tp > 1 unless --no-sp.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from llmpar.errors import UserError
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec

RECOMPUTE = ("none", "selective", "full")
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe")
DTYPES = ("bf16", "fp16", "fp8")
OPTIMIZERS = ("adam", "adamw", "sgd", "adam-8bit")
GRAD_DTYPES = ("bf16", "fp32")
CONVENTIONS = ("llmpar", "megatron", "deepspeed")
ATTENTION = ("standard", "flash")

DEFAULT_SEQ = 8192
DEFAULT_BATCH_TOKENS = 4_194_304  # DESIGN.md: the plan's default batch is 4,194,304 tokens / seq sequences


def code(names: tuple[str, ...], value: str, what: str) -> int:
    try:
        return names.index(value)
    except ValueError:
        raise UserError(f"unknown {what} {value!r}; choose one of: {', '.join(names)}") from None


@dataclass
class Parallel:
    """Degrees and knobs of one layout, or arrays of them (one entry per candidate)."""

    tp: Any = 1
    pp: Any = 1
    dp: Any = 1
    cp: Any = 1
    ep: Any = 1
    zero: Any = 0
    sp: Any = False
    recompute: Any = 0          # index into RECOMPUTE
    micro_batch: Any = 1
    microbatches: Any = 1       # m, micro-batches per step per pipeline
    seq: Any = 2048
    schedule: Any = 1           # index into SCHEDULES
    virtual_stages: Any = 1

    @property
    def gpus(self):
        return self.tp * self.cp * self.pp * self.dp

    @property
    def global_batch(self):
        """Sequences per step: m * b * dp."""
        return self.microbatches * self.micro_batch * self.dp

    @property
    def tokens_per_step(self):
        return self.global_batch * self.seq

    @property
    def expert_dp(self):
        """Expert data-parallel degree: dp*cp/ep (DESIGN.md, Degrees)."""
        return self.dp * self.cp // self.ep

    def as_dict(self) -> dict[str, Any]:
        """The common JSON ``parallel`` object (scalar layouts only)."""
        return {
            "tp": int(self.tp), "pp": int(self.pp), "dp": int(self.dp), "cp": int(self.cp), "ep": int(self.ep),
            "zero": int(self.zero), "sp": bool(self.sp), "recompute": RECOMPUTE[int(self.recompute)],
            "micro_batch": int(self.micro_batch), "global_batch": int(self.global_batch),
            "microbatches": int(self.microbatches), "seq": int(self.seq),
            "schedule": SCHEDULES[int(self.schedule)], "virtual_stages": int(self.virtual_stages),
        }

    def take(self, i) -> Parallel:
        """Entry ``i`` of an array layout as a scalar layout."""
        vals = {k: v[i] if isinstance(v, np.ndarray) else v for k, v in asdict(self).items()}
        return Parallel(**{k: (bool(v) if k == "sp" else int(v)) for k, v in vals.items()})

    def replace(self, **kw) -> Parallel:
        return replace(self, **kw)


@dataclass(frozen=True)
class Settings:
    """Precision and accounting choices, scalar for a whole run (the planner does not search them).

    The software assumptions come from ``stack`` (a :class:`~llmpar.specs.stack.Stack`; None =
    the default stack, ``megatron-core``). Fields left as None take the stack's value; a value
    given here (the CLI's ``--tp-overlap``, ``--attention``, ``--grad-dtype`` ...) overrides it,
    and :meth:`overrides` says which were overridden (DESIGN.md, Three inputs).
    """

    dtype: str = "bf16"
    optimizer: str = "adam"
    grad_dtype: str | None = None      # None: fp32 when the stack keeps an fp32 main-grad buffer, else bf16
    convention: str = "llmpar"
    attention: str | None = None       # None: 'standard' when the stack's attention kernel is eager, else 'flash'
    kv_dtype: str = "bf16"
    # Communication overlap (docs/time-model.md, docs/stacks.md): the usable fraction of the
    # compute window a collective can hide behind; None = the stack's ``overlap.dp`` / ``overlap.tp``.
    dp_overlap: float | None = None
    tp_overlap: float | None = None
    # Rank order, innermost first (DESIGN.md, Placement): which parallel groups share a node.
    rank_order: str = "tp-cp-dp-pp"
    stack: Any = None

    def __post_init__(self):
        from llmpar.specs.registry import load_stack   # specs below parallel; lazy to keep import cheap

        stack = load_stack(self.stack)
        given = {k: getattr(self, k) is not None for k in ("grad_dtype", "attention", "dp_overlap", "tp_overlap")}
        object.__setattr__(self, "stack", stack)
        object.__setattr__(self, "_given", given)
        if self.grad_dtype is None:
            object.__setattr__(self, "grad_dtype", "fp32" if stack.memory.main_grad_fp32 else "bf16")
        if self.attention is None:
            object.__setattr__(self, "attention", "standard" if stack.kernels.attention.kernel == "eager" else "flash")
        if self.dp_overlap is None:
            object.__setattr__(self, "dp_overlap", float(stack.overlap.dp))
        if self.tp_overlap is None:
            object.__setattr__(self, "tp_overlap", float(stack.overlap.tp))
        for value, names, what in (
            (self.dtype, DTYPES, "dtype"), (self.optimizer, OPTIMIZERS, "optimizer"),
            (self.grad_dtype, GRAD_DTYPES, "grad dtype"), (self.convention, CONVENTIONS, "convention"),
            (self.attention, ATTENTION, "attention"), (self.kv_dtype, DTYPES, "kv dtype"),
        ):
            code(names, value, what)
        if sorted(self.rank_order.split("-")) != ["cp", "dp", "pp", "tp"]:
            raise UserError(f"--rank-order must order tp, cp, dp, pp (innermost first), e.g. tp-cp-dp-pp; got {self.rank_order!r}")
        for name in ("dp_overlap", "tp_overlap"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise UserError(f"--{name.replace('_', '-')} must be between 0 and 1, got {value}")

    def overrides(self) -> dict[str, Any]:
        """The stack-backed settings that were given explicitly (they override the stack)."""
        return {k: getattr(self, k) for k, given in self._given.items() if given}

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "stack"}
        out["stack"] = self.stack.name
        return out


@dataclass
class Resolved:
    """What the common option group resolved to, and what was assumed on the way."""

    model: ModelSpec
    hardware: Hardware
    parallel: Parallel
    settings: Settings
    assumptions: list[str] = field(default_factory=list)


def _pos_int(value, what: str) -> int:
    if value is None:
        return None
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise UserError(f"--{what} must be a positive integer, got {value}")
    return int(value)


def check_layout(model: ModelSpec, par: Parallel) -> None:
    """Divisibility rules that make a layout runnable (scalar layouts; the planner masks instead)."""
    tp, pp, cp, ep, dp = int(par.tp), int(par.pp), int(par.cp), int(par.ep), int(par.dp)
    if model.heads % tp:
        raise UserError(f"tp={tp} does not divide the {model.heads} attention heads of {model.name}")
    if model.n_kv_heads % tp:
        raise UserError(
            f"tp={tp} does not divide the {model.n_kv_heads} KV heads of {model.name} "
            "(Megatron needs num_query_groups % tp == 0)"
        )
    if pp > model.layers:
        raise UserError(f"pp={pp} exceeds the {model.layers} layers of {model.name}")
    if par.seq % cp:
        raise UserError(f"cp={cp} does not divide the sequence length {par.seq}")
    if par.sp and tp > 1 and (par.seq // cp) % tp:
        raise UserError(f"sequence parallelism needs seq/cp = {par.seq // cp} divisible by tp={tp}")
    if ep > 1:
        if not model.moe:
            raise UserError(f"ep={ep} given but {model.name} has no experts")
        if model.moe.experts % ep:
            raise UserError(f"ep={ep} does not divide the {model.moe.experts} experts of {model.name}")
        if (dp * cp) % ep:
            raise UserError(f"ep={ep} does not divide dp*cp = {dp * cp} (experts are sharded inside the data-parallel group)")
    if not 0 <= int(par.zero) <= 3:
        raise UserError(f"--zero must be 0, 1, 2 or 3, got {par.zero}")
    v = int(par.virtual_stages)
    if v > 1:
        layers_per_stage = ceil_div(model.layers, pp)   # the most-loaded stage (cost.pipeline.stage_layers)
        if v > layers_per_stage:
            raise UserError(
                f"--virtual-stages {v} exceeds the {layers_per_stage} layers per pipeline stage "
                f"({model.layers} layers / pp={pp})"
            )
        if pp == 1:
            raise UserError("--virtual-stages > 1 (interleaved schedule) needs pp > 1")


def resolve(
    model: ModelSpec,
    hardware: Hardware,
    *,
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
    settings: Settings | None = None,
    default_batch_tokens: int = DEFAULT_BATCH_TOKENS,
) -> Resolved:
    """Resolve the common option group into a scalar :class:`Parallel` (DESIGN.md, CLI conventions)."""
    notes: list[str] = []
    tp = _pos_int(tp, "tp") or 1
    pp = _pos_int(pp, "pp") or 1
    cp = _pos_int(cp, "cp") or 1
    ep = _pos_int(ep, "ep") or 1
    gpus = _pos_int(gpus, "gpus")
    dp = _pos_int(dp, "dp")
    b = _pos_int(micro_batch, "micro-batch") or 1
    model_par = tp * cp * pp
    if gpus is not None and dp is None:
        if gpus % model_par:
            raise UserError(f"--gpus {gpus} is not divisible by tp*cp*pp = {tp}*{cp}*{pp} = {model_par}")
        dp = gpus // model_par
    elif gpus is not None and dp is not None:
        if gpus != model_par * dp:
            raise UserError(f"--gpus {gpus} disagrees with tp*cp*pp*dp = {tp}*{cp}*{pp}*{dp} = {model_par * dp}")
    elif gpus is None and dp is None:
        node = hardware.gpus_per_node
        dp = node // model_par if node % model_par == 0 else 1
        notes.append(
            f"no --gpus/--dp: assumed one node of {hardware.name} "
            f"({node} GPUs) -> dp={dp}, {model_par * dp} GPUs in all"
        )
    if seq is None:
        seq = min(DEFAULT_SEQ, model.max_seq)
        notes.append(f"seq defaults to min(8192, model max {model.max_seq}) = {seq}")
    else:
        seq = _pos_int(seq, "seq")
    if sp is None:
        sp = tp > 1
    if virtual_stages is not None:
        _pos_int(virtual_stages, "virtual-stages")
    v = virtual_stages or 1
    if schedule is None:
        schedule = "interleaved" if v > 1 else "1f1b"
    sched = code(SCHEDULES, schedule, "schedule")
    if schedule == "interleaved" and v == 1:
        v = 2
        notes.append("interleaved schedule without --virtual-stages: assumed v=2")
    if schedule != "interleaved" and v > 1:
        raise UserError(f"--virtual-stages {v} needs --schedule interleaved (got {schedule})")
    rec = code(RECOMPUTE, recompute, "recompute")
    per_step = b * dp
    if global_batch is not None:
        global_batch = _pos_int(global_batch, "global-batch")
        if global_batch % per_step:
            raise UserError(
                f"--global-batch {global_batch} is not divisible by micro-batch*dp = {b}*{dp} = {per_step}"
            )
        m = global_batch // per_step
        if microbatches is not None and _pos_int(microbatches, "microbatches") != m:
            raise UserError(f"--microbatches {microbatches} disagrees with --global-batch {global_batch} / (b*dp) = {m}")
    elif microbatches is not None:
        m = _pos_int(microbatches, "microbatches")
    else:
        target = max(1, round(default_batch_tokens / seq))
        m = max(1, round(target / per_step))
        notes.append(
            f"no --global-batch/--microbatches: assumed ~{default_batch_tokens:,} tokens per step "
            f"-> {m * per_step} sequences, m={m} micro-batches"
        )
    par = Parallel(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, zero=int(zero), sp=bool(sp), recompute=rec,
        micro_batch=b, microbatches=m, seq=seq, schedule=sched, virtual_stages=v,
    )
    check_layout(model, par)
    if settings is None:
        settings = Settings()
    return Resolved(model=model, hardware=hardware, parallel=par, settings=settings, assumptions=notes)


def ceil_div(a, b):
    """Integer ceiling that works on ints and numpy integer arrays."""
    return -(-a // b)
