"""The parallel layout and training settings, and how the CLI's options resolve into them.

:class:`Parallel` holds degrees and knobs as plain numbers *or numpy arrays* (one entry per
candidate), so every ``llmpar.cost`` formula evaluates one layout (``llmpar step``) or all of
them at once (``llmpar plan``) with the same code. Categorical knobs are integer codes so they
can live in arrays: see RECOMPUTE and SCHEDULES.

Resolution rules (docs/architecture.md, CLI conventions):
- gpus = tp*cp*pp*dp. MoE layers: expert-TP etp (--etp; default tp) and ep with ep*etp dividing
  tp*cp*dp; expert data-parallel = tp*cp*dp/(ep*etp). With etp = tp this is ep | dp*cp, experts
  sharded inside the data-parallel group; etp < tp folds EP over the TP ranks too (Megatron-Core
  MoE parallel folding: Liu et al. 2025, arXiv:2504.14960, §3).
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
from llmpar.specs.model import MAX_SEQ, ModelSpec   # MAX_SEQ: tokens per sequence, one bound for specs and options

# fine-tuning methods and LoRA target sets (cost/finetune.py prices them; docs/finetune.md)
FINETUNE = ("full", "lora", "qlora")
LORA_TARGETS = ("all", "attention", "qv")

RECOMPUTE = ("none", "selective", "full")
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe")
DTYPES = ("bf16", "fp16", "fp8")
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")  # Megatron-Core
EP_DISPATCHERS = ("alltoall", "deepep")   # stack kernels.ep_dispatcher / --ep-dispatcher (cost/comm.py ep_moe_layer)
OPTIMIZERS = ("adam", "adamw", "sgd", "adam-8bit", "adam-bf16")
GRAD_DTYPES = ("bf16", "fp32")
CONVENTIONS = ("llmpar", "megatron", "deepspeed")
ATTENTION = ("standard", "flash")

DEFAULT_SEQ = 8192
DEFAULT_BATCH_TOKENS = 4_194_304  # docs/architecture.md: the plan's default batch is 4,194,304 tokens / seq sequences


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
    etp: Any = 0                # expert tensor-parallel degree; 0 = tp (Megatron-Core's default)
    zero: Any = 0
    sp: Any = False
    recompute: Any = 0          # index into RECOMPUTE
    micro_batch: Any = 1
    microbatches: Any = 1       # m, micro-batches per step per pipeline
    seq: Any = 2048
    schedule: Any = 1           # index into SCHEDULES
    virtual_stages: Any = 1
    recompute_layers: Any = 0   # full recompute covers N layers of each pipeline chunk (0: all of them)
    offload_layers: Any = 0     # activations of the first N layers held in host memory (Megatron-Core CPU offloading)

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
    def expert_tp(self):
        """Expert tensor-parallel degree: etp, or tp when etp is 0 (not given)."""
        if isinstance(self.etp, np.ndarray) or isinstance(self.tp, np.ndarray):
            return np.where(np.asarray(self.etp) > 0, self.etp, self.tp)
        return self.etp or self.tp

    @property
    def expert_dp(self):
        """Expert data-parallel degree: tp*cp*dp/(ep*etp) (docs/architecture.md, Degrees); dp*cp/ep when etp = tp."""
        return self.tp * self.dp * self.cp // (self.ep * self.expert_tp)

    def as_dict(self) -> dict[str, Any]:
        """The common JSON ``parallel`` object (scalar layouts only)."""
        return {
            "tp": int(self.tp), "pp": int(self.pp), "dp": int(self.dp), "cp": int(self.cp), "ep": int(self.ep),
            "etp": int(self.expert_tp), "zero": int(self.zero), "sp": bool(self.sp), "recompute": RECOMPUTE[int(self.recompute)],
            "micro_batch": int(self.micro_batch), "global_batch": int(self.global_batch),
            "microbatches": int(self.microbatches), "seq": int(self.seq),
            "schedule": SCHEDULES[int(self.schedule)], "virtual_stages": int(self.virtual_stages),
            "recompute_layers": int(self.recompute_layers), "offload_layers": int(self.offload_layers),
        }

    def take(self, i) -> Parallel:
        """Entry ``i`` of an array layout as a scalar layout."""
        vals = {f.name: getattr(self, f.name) for f in fields(self)}   # (asdict would deep-copy the arrays)
        vals = {k: v[i] if isinstance(v, np.ndarray) else v for k, v in vals.items()}
        return Parallel(**{k: (bool(v) if k == "sp" else int(v)) for k, v in vals.items()})

    def replace(self, **kw) -> Parallel:
        return replace(self, **kw)


@dataclass(frozen=True)
class Settings:
    """Precision and accounting choices, scalar for a whole run (the planner does not search them).

    The software assumptions come from ``stack`` (a :class:`~llmpar.specs.stack.Stack`; None =
    the default stack, ``megatron-core``). Fields left as None take the stack's value; a value
    given here (the CLI's ``--tp-overlap``, ``--attention``, ``--grad-dtype`` ...) overrides it,
    and :meth:`overrides` says which were overridden (docs/architecture.md, Three inputs).
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
    ep_overlap: float | None = None    # None = the stack's overlap.ep (DualPipe hides its F&B pairs' EP regardless)
    ep_dispatcher: str | None = None   # None = the stack's kernels.ep_dispatcher (alltoall | deepep)
    # what --recompute selective re-runs, as Megatron-Core --recompute-modules (None: the stack's
    # memory.selective_recompute, and its recompute_modules when that is "modules")
    recompute_modules: tuple | None = None
    # Rank order, innermost first (docs/architecture.md, Placement): which parallel groups share a node.
    rank_order: str = "tp-cp-dp-pp"
    stack: Any = None
    # fine-tuning (cost/finetune.py, docs/finetune.md): full, or LoRA / QLoRA adapters of rank
    # lora_rank on the lora_targets linears over a frozen (QLoRA: NF4) base
    finetune: str = "full"
    lora_rank: int = 16
    lora_targets: str = "all"
    # share of the optimizer states (and their step) kept in host memory and run on the CPU
    # (Megatron-Core --optimizer-cpu-offload --optimizer-offload-fraction F; DeepSpeed ZeRO-Offload
    # offload_optimizer: F = 1): cost/states.offload_optimizer, cost/step.py _data_parallel
    optimizer_offload: float = 0.0
    # ZeRO-3's 16-bit parameter shards held in host memory and fetched over the host link for each
    # gather (DeepSpeed ZeRO-Infinity offload_param device cpu; torch FSDP2 CPUOffloadPolicy):
    # cost/states.offload_params, cost/step.py _data_parallel
    param_offload: bool = False

    def __post_init__(self):
        from llmpar.specs.registry import load_stack   # specs below parallel; lazy to keep import cheap

        if self.finetune not in FINETUNE:
            raise UserError(f"--finetune must be one of {', '.join(FINETUNE)}, got {self.finetune!r}")
        if self.lora_targets not in LORA_TARGETS:
            raise UserError(f"--lora-targets must be one of {', '.join(LORA_TARGETS)}, got {self.lora_targets!r}")
        if isinstance(self.lora_rank, bool) or not isinstance(self.lora_rank, (int, np.integer)) or self.lora_rank < 1:
            raise UserError(f"--lora-rank must be a whole number of 1 or more, got {self.lora_rank!r}")
        off = self.optimizer_offload
        if isinstance(off, bool) or not isinstance(off, (int, float, np.floating)) or not 0.0 <= float(off) <= 1.0:
            raise UserError(f"--optimizer-offload must be a fraction from 0 to 1 (the share of the optimizer states "
                            f"kept in host memory), got {off!r}")
        object.__setattr__(self, "optimizer_offload", float(off))
        if not isinstance(self.param_offload, (bool, np.bool_)):
            raise UserError(f"--param-offload is a switch (on or off), got {self.param_offload!r}")
        object.__setattr__(self, "param_offload", bool(self.param_offload))
        if self.param_offload and self.finetune != "full":
            raise UserError(f"--param-offload with --finetune {self.finetune}: offloading a frozen base is not "
                            "modelled (its shards are gathered without gradients or optimizer states)")
        if self.finetune != "full":
            if self.dtype not in ("bf16", "fp16"):
                raise UserError(f"--finetune {self.finetune} computes in 16 bits (the adapters and the dequantised "
                                f"base: QLoRA §3), not --dtype {self.dtype}")
            if self.convention != "llmpar":
                raise UserError(f"--convention {self.convention} counts full-model training states; "
                                f"--finetune {self.finetune} needs --convention llmpar")

        stack = load_stack(self.stack)
        given = {k: getattr(self, k) is not None
                 for k in ("grad_dtype", "attention", "dp_overlap", "tp_overlap", "ep_overlap", "ep_dispatcher")}
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
        if self.ep_overlap is None:
            object.__setattr__(self, "ep_overlap", float(stack.overlap.ep))
        if self.ep_dispatcher is None:
            object.__setattr__(self, "ep_dispatcher", stack.kernels.ep_dispatcher)
        elif self.ep_dispatcher not in EP_DISPATCHERS:
            raise UserError(f"--ep-dispatcher must be one of {', '.join(EP_DISPATCHERS)}, got {self.ep_dispatcher!r}")
        if isinstance(self.recompute_modules, str):
            object.__setattr__(self, "recompute_modules", self.recompute_modules.split(","))
        elif self.recompute_modules is not None and not isinstance(self.recompute_modules, (list, tuple)):
            raise UserError(f"recompute_modules must be a comma-separated string or a list of module names "
                            f"({', '.join(RECOMPUTE_MODULES)}), got {self.recompute_modules!r}")
        if self.recompute_modules is not None:
            mods = tuple(dict.fromkeys(str(m).strip() for m in self.recompute_modules if str(m).strip()))
            bad = [m for m in mods if m not in RECOMPUTE_MODULES]
            if bad or not mods:
                raise UserError(f"--recompute-modules takes {', '.join(RECOMPUTE_MODULES)} (comma-separated); "
                                f"got {', '.join(bad) if bad else 'none'}")
            object.__setattr__(self, "recompute_modules", mods)
        for value, names, what in (
            (self.dtype, DTYPES, "dtype"), (self.optimizer, OPTIMIZERS, "optimizer"),
            (self.grad_dtype, GRAD_DTYPES, "grad dtype"), (self.convention, CONVENTIONS, "convention"),
            (self.attention, ATTENTION, "attention"), (self.kv_dtype, DTYPES, "kv dtype"),
        ):
            code(names, value, what)
        if sorted(self.rank_order.split("-")) != ["cp", "dp", "pp", "tp"]:
            raise UserError(f"--rank-order must order tp, cp, dp, pp (innermost first), e.g. tp-cp-dp-pp; got {self.rank_order!r}")
        for name in ("dp_overlap", "tp_overlap", "ep_overlap"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise UserError(f"--{name.replace('_', '-')} must be between 0 and 1, got {value}")
        # effective values resolved once here, so no formula asks where a value came from:
        # - bytes per gradient the DP reduction moves: the stack's overlap.grad_reduce_dtype, but
        #   gradients given as bf16 (--grad-dtype bf16, a runs table's grad_dtype) are reduced in bf16
        #   whatever the stack says (Megatron-Core grad_reduce_in_fp32 = False reduces the bf16 buffer)
        # - ZeRO-3 prefetch and ZeRO-1/2 weight-gather overlap: the stack's zero3_prefetch and
        #   param_gather (unset: as overlap.dp), unless --dp-overlap is given, which sets every DP overlap
        ov = stack.overlap
        object.__setattr__(self, "grad_reduce_bytes", 2.0 if (given["grad_dtype"] and self.grad_dtype == "bf16")
                           or ov.grad_reduce_dtype != "fp32" else 4.0)
        object.__setattr__(self, "zero3_overlap", self.dp_overlap if given["dp_overlap"] else float(ov.zero3_prefetch))
        object.__setattr__(self, "param_gather_overlap", self.dp_overlap if given["dp_overlap"] or ov.param_gather is None
                           else float(ov.param_gather))

    @property
    def selective_policy(self):
        """What selective recompute keeps and re-runs: a tuple of Megatron-Core recompute modules
        (--recompute-modules, or the stack's memory.recompute_modules when its selective_recompute
        is "modules"), else the stack's policy name (attention-core, torchtitan-op)."""
        if self.recompute_modules is not None:
            return self.recompute_modules
        mem = self.stack.memory
        return tuple(mem.recompute_modules) if mem.selective_recompute == "modules" else mem.selective_recompute

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


# Bounds on what llmpar models (issue 9, item 7): beyond them a formula is asked about a machine or a
# job that does not exist, and integer products would leave int64. One line says so (exit 2).
MAX_GPUS = 2**22            # 4,194,304 GPUs (a 1,048,576-GPU cluster is 4x below it)
MAX_BATCH = 2**32           # sequences per step, micro-batches per step, sequences per micro-batch
MAX_TOKENS_PER_STEP = 2**40 # ~1.1e12 tokens per step (a 4M-token batch is 2^22)
# The default batch (docs/architecture.md: 4,194,304 tokens / seq sequences) is capped at this many sequences
# (what 4M tokens give at seq 1024): at seq 1 the uncapped default is 4.19 M one-token sequences,
# and a step of 4.19 M micro-batches reads as a broken model, not as an odd batch (issue 9, item 9).
DEFAULT_MAX_BATCH_SEQUENCES = 4096


def whole(value, what: str) -> int | None:
    """The one rule for an integer argument of the Python API (docs/api.md): an int, a numpy
    integer or a float with a whole value (``2.0``, as the CLI's options have always been read) is
    that integer, None stays None; a bool, a string, ``2.5``, nan or inf is a UserError naming the
    keyword argument (``what`` as written on the CLI, ``micro-batch`` -> ``micro_batch``). The CLI
    passes ints, so only the API can get these messages."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        pass
    elif isinstance(value, (int, np.integer)):
        return int(value)
    elif isinstance(value, (float, np.floating)) and np.isfinite(value) and float(value).is_integer():
        return int(value)
    raise UserError(f"{what.replace('-', '_')} must be a whole number, got {value!r}")


def flag(value, what: str, default_none: bool = True) -> bool | None:
    """The rule for a boolean argument of the Python API: True or False (None too where it means
    the default); ``"no"``, ``0`` or ``1`` are a UserError, not a truth value (``sp="no"`` turned
    sequence parallelism on)."""
    if value is None and default_none:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise UserError(f"{what} must be True or False{' (or None for the default)' if default_none else ''}, "
                    f"got {value!r}")


def fraction(value, what: str) -> float | None:
    """The rule for a fraction argument of the Python API (``dp_overlap=0.5``): an int or a float,
    None stays None; a string or a bool is a UserError (the range is checked where it is used)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise UserError(f"{what} must be a number between 0 and 1, got {value!r}")
    return float(value)


def virtual_stages_message(v: int, layers: int, pp: int) -> str:
    """Why ``v`` virtual stages do not split ``layers`` over ``pp`` stages: the busiest stage's
    ceil(L/p) layers go into v equal chunks (Megatron-LM), so v must divide them. One text for
    memory/step/plan (layout rule ``virtual_stages``) and ``llmpar bubble --layers``."""

    per = int(stage_layers(layers, pp))
    divs = [d for d in range(2, per + 1) if per % d == 0]
    return (f"--virtual-stages {v} does not divide the {per} layers per pipeline stage ({layers} layers / "
            f"pp={pp}, most-loaded stage; Megatron-LM splits a stage into v equal chunks): "
            + (f"use one of {', '.join(map(str, divs))}" if divs else "this pp leaves no v > 1"))


def _pos_int(value, what: str, hi: int | None = None) -> int:
    value = whole(value, what)
    if value is None:
        return None
    if value < 1:
        raise UserError(f"--{what} must be a positive integer, got {value}")
    if hi is not None and value > hi:
        # bounded before any divisor search: --gpus 10^20 used to enumerate divisors up to 10^10
        raise UserError(f"--{what} {value:,} is beyond what llmpar models (at most {hi:,})")
    return value


def default_global_batch(seq: int, batch_tokens: int = DEFAULT_BATCH_TOKENS) -> tuple[int, str | None]:
    """(sequences, note or None): ``batch_tokens`` / seq sequences, at least 1 and at most
    :data:`DEFAULT_MAX_BATCH_SEQUENCES`; the note says when the cap applied."""
    target = max(1, round(batch_tokens / seq))
    if target <= DEFAULT_MAX_BATCH_SEQUENCES:
        return target, None
    return DEFAULT_MAX_BATCH_SEQUENCES, (
        f"default batch capped at {DEFAULT_MAX_BATCH_SEQUENCES:,} sequences ({DEFAULT_MAX_BATCH_SEQUENCES * seq:,} "
        f"tokens): {batch_tokens:,} tokens at seq {seq} would be {target:,} sequences; give --global-batch to choose")


# Layout rules, in the order the planner counts rejections (llmpar.plan.space.REASONS). Each is an
# array-polymorphic mask (True = the layout breaks the rule) so that ``check_layout`` (one scalar
# layout, a message) and the planner (every candidate at once, a count) apply the same rules.
LAYOUT_RULES = ("tp_heads", "pp_layers", "cp_seq", "ep", "etp", "sp_seq", "virtual_stages", "zero")


def layout_violations(model: ModelSpec, par: Parallel) -> dict[str, Any]:
    """rule -> mask of layouts that break it (scalars or arrays, as ``par``).

    - tp_heads: tp divides the attention heads and the KV heads (Megatron: num_query_groups % tp == 0)
    - pp_layers: pp <= layers
    - cp_seq: cp divides the sequence
    - ep: ep = 1, or the model has experts, ep divides them, and ep*etp divides tp*cp*dp (with etp
      = tp: ep divides dp*cp)
    - etp: etp not given (= tp), or the model has experts, etp divides tp*cp*dp and the expert FFN
      width (Megatron-Core splits each expert's FFN over the etp ranks)
    - sp_seq: with SP (tp > 1), tp divides seq/cp
    - virtual_stages: v = 1, or pp > 1 and v divides the layers of the most-loaded stage
      ceil(layers/pp) (Megatron-LM splits a stage into v equal model chunks)
    - zero: ZeRO stage in 0..3
    """

    tp, pp, dp, cp, ep = par.tp, par.pp, par.dp, par.cp, par.ep
    seq, v, sp, zero = par.seq, par.virtual_stages, par.sp, par.zero
    etp, etp_given = par.expert_tp, np.asarray(par.etp) > 0
    moe = model.moe
    experts = moe.experts if moe is not None else 1
    f_e = moe.expert_ffn_hidden if moe is not None else 1
    per_stage = stage_layers(model.layers, np.maximum(pp, 1))
    return {
        "tp_heads": (model.heads % tp != 0) | (model.n_kv_heads % tp != 0),
        "pp_layers": pp > model.layers,
        "cp_seq": seq % cp != 0,
        "ep": (ep > 1) & ((moe is None) | (experts % ep != 0) | ((tp * cp * dp) % (ep * etp) != 0)),
        "etp": etp_given & (etp != tp) & ((moe is None) | ((tp * cp * dp) % etp != 0) | (f_e % etp != 0)),
        "sp_seq": np.logical_and(sp, tp > 1) & ((seq // cp) % tp != 0),
        "virtual_stages": (v > 1) & ((pp == 1) | (per_stage % v != 0)),
        "zero": (zero < 0) | (zero > 3),
    }


def stack_violations(stack, par: Parallel) -> dict[str, Any]:
    """rule -> mask of layouts the stack's framework refuses to launch (scalars or arrays):

    - pp_zero: pp > 1 with a ZeRO stage outside the stack's ``pp_zero_stages`` (DeepSpeed
      deepspeed/runtime/pipe/engine.py at edaa722, PipelineEngine.__init__: "ZeRO-2 and ZeRO-3 are
      incompatible with pipeline parallelism"). Megatron-Core's Megatron-FSDP runs under PP
      (megatron/training/arguments.py at d98e8a6 refuses only --use-torch-fsdp2 with PP), torchtitan
      composes FSDP2 with PP (parallel_dims.py at b5bcd76), so their stacks state none.

    The planner masks with it (plan/space.py), calibrate runs searches within it, and ``step`` says
    so (inputs.stack_support_note)."""
    allowed = getattr(stack, "pp_zero_stages", None)
    pp, zero = np.asarray(par.pp), np.asarray(par.zero)
    bad = np.zeros(np.broadcast_shapes(pp.shape, zero.shape), dtype=bool) if allowed is None else \
        (pp > 1) & ~np.isin(zero, np.asarray(allowed))
    return {"pp_zero": _out_mask(bad)}


def _out_mask(x):
    return bool(x) if np.ndim(x) == 0 else x


def _scalar(x):
    """0-d results back to Python numbers (as cost/arrays.scalar_out, which is above this module)."""
    return x.item() if isinstance(x, (np.ndarray, np.generic)) and np.ndim(x) == 0 else x


def stack_violation_message(rule: str, stack, par: Parallel) -> str:
    if rule == "pp_zero":
        return (f"stack {stack.name} does not launch ZeRO-{int(par.zero)} with pipeline parallelism (pp "
                f"{int(par.pp)}): its framework allows ZeRO " + ", ".join(str(z) for z in stack.pp_zero_stages)
                + " under pp > 1 (`llmpar stacks show " + stack.name + "`)")
    raise AssertionError(rule)


def _violation_message(rule: str, model: ModelSpec, par: Parallel) -> str:
    tp, pp, dp, cp, ep, v = (int(x) for x in (par.tp, par.pp, par.dp, par.cp, par.ep, par.virtual_stages))
    seq = int(par.seq)
    if rule == "tp_heads":
        if model.heads % tp:
            return f"tp={tp} does not divide the {model.heads} attention heads of {model.name}"
        return (f"tp={tp} does not divide the {model.n_kv_heads} KV heads of {model.name} "
                "(Megatron needs num_query_groups % tp == 0)")
    if rule == "pp_layers":
        return f"pp={pp} exceeds the {model.layers} layers of {model.name}"
    if rule == "cp_seq":
        return f"cp={cp} does not divide the sequence length {seq}"
    if rule == "ep":
        if not model.moe:
            return f"ep={ep} given but {model.name} has no experts"
        if model.moe.experts % ep:
            return f"ep={ep} does not divide the {model.moe.experts} experts of {model.name}"
        etp = int(par.expert_tp)
        if etp == tp:
            return (f"ep={ep} does not divide dp*cp = {dp * cp} (experts are sharded inside the data-parallel "
                    f"group; --etp 1 folds EP over the TP ranks too, as Megatron-Core's MoE parallel folding)")
        return f"ep*etp = {ep}*{etp} does not divide tp*cp*dp = {tp * cp * dp} (the GPUs of one pipeline stage)"
    if rule == "etp":
        etp = int(par.expert_tp)
        if not model.moe:
            return f"--etp {etp} given but {model.name} has no experts"
        if (tp * cp * dp) % etp:
            return f"--etp {etp} does not divide tp*cp*dp = {tp * cp * dp} (the GPUs of one pipeline stage)"
        return f"--etp {etp} does not divide the expert FFN width {model.moe.expert_ffn_hidden} of {model.name}"
    if rule == "sp_seq":
        return f"sequence parallelism needs seq/cp = {seq // cp} divisible by tp={tp}"
    if rule == "virtual_stages":
        if pp == 1:
            return "--virtual-stages > 1 (interleaved schedule) needs pp > 1"
        return virtual_stages_message(v, model.layers, pp)
    if rule == "zero":
        return f"--zero must be 0, 1, 2 or 3, got {int(par.zero)}"
    raise AssertionError(rule)


def check_layout(model: ModelSpec, par: Parallel) -> None:
    """The layout rules of :func:`layout_violations` for one scalar layout: the first rule it breaks
    is one UserError. The planner masks with the same function (plan/space.py)."""
    for rule, bad in layout_violations(model, par).items():
        if bool(bad):
            raise UserError(_violation_message(rule, model, par))


# ------------------------------------------------------------ stage arithmetic and setting rules

def stage_layers(layers, pp):
    """Transformer layers on the most-loaded stage: ceil(L/p).

    Uneven splits are valid (Llama 3, arXiv:2407.21783 §3.3.2: 126 layers on 16 stages, the
    first and last stages one layer short -> 8 on the busiest stage)."""
    L = np.asarray(layers)
    p = np.asarray(pp)
    return _scalar(-(-L // p))


def chunk_layers(layers, pp, virtual_stages=1):
    """Layers of one pipeline chunk on the busiest stage: ceil(L/p)/v (the interleaved schedule
    splits a stage into v equal chunks; the layout rule makes v divide ceil(L/p)). 405B, pp 16,
    v 4: 8/4 = 2. Array-polymorphic."""
    return _scalar(np.asarray(stage_layers(layers, pp)) // np.asarray(virtual_stages))


def optimizer_offload_violations(settings: Settings, zero):
    """Mask of layouts outside what llmpar models for optimizer offload: ZeRO-0 (the offloaded states
    are ZeRO's partition: DeepSpeed offload_optimizer needs a ZeRO stage, Megatron-Core offloads the
    distributed optimizer's shard)."""
    z = np.asarray(zero)
    return _out_mask((z < 1) & (float(getattr(settings, "optimizer_offload", 0.0)) > 0.0))


def param_offload_violations(settings: Settings, zero):
    """Mask of layouts where --param-offload has nothing to move: below ZeRO-3 the GPU holds the
    full replica it computes with (DeepSpeed offload_param is a stage-3 option)."""
    return _out_mask((np.asarray(zero) < 3) & bool(getattr(settings, "param_offload", False)))


def finetune_layout_violations(finetune: str, tp, pp, cp, ep):
    """Mask of layouts outside what llmpar models for LoRA/QLoRA: tp, pp, cp or ep > 1 (fine-tuning
    is priced data-parallel, with any ZeRO stage: cost/finetune.py's module doc). Full fine-tuning is unrestricted."""
    if finetune == "full":
        return _out_mask(np.zeros(np.broadcast_shapes(*(np.shape(x) for x in (tp, pp, cp, ep))), dtype=bool))
    return _out_mask((np.asarray(tp) > 1) | (np.asarray(pp) > 1) | (np.asarray(cp) > 1) | (np.asarray(ep) > 1))


def finetune_layout_message(finetune: str, tp: int, pp: int, cp: int, ep: int) -> str:
    given = ", ".join(f"{k} {v}" for k, v in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep)) if v > 1)
    return (f"--finetune {finetune} is modelled data-parallel only (tp = pp = cp = ep = 1, any ZeRO stage: the "
            f"Hugging Face PEFT / FSDP / DeepSpeed setting of the published runs), not {given}; "
            "TP-sharded adapters (NeMo) are not modelled (docs/finetune.md)")


def check_optimizer_offload(hardware: Hardware, settings: Settings, zero=None) -> None:
    """--optimizer-offload F needs the profile's host link, host DRAM bandwidth and host memory, and
    (when ``zero`` is given) a ZeRO stage >= 1 (cost/states.optimizer_offload_violations); so does
    --param-offload (check_param_offload)."""
    check_param_offload(hardware, settings, zero)
    f = settings.optimizer_offload
    if not f:
        return
    _need_host(hardware, f"--optimizer-offload {f:g}", ("host_bandwidth", "host_memory_bandwidth", "host_memory_per_gpu"))
    if zero is not None:
        if bool(optimizer_offload_violations(settings, zero)):
            raise UserError(f"--optimizer-offload {f:g} offloads ZeRO's optimizer partition: it needs --zero 1, 2 or 3 "
                            "(DeepSpeed offload_optimizer; Megatron-Core's distributed optimizer), got --zero 0")


def _need_host(hardware: Hardware, option: str, keys) -> None:
    """An offload option needs these host fields of the hardware profile (one line naming them)."""
    missing = [k for k in keys if getattr(hardware, k) is None]
    if missing:
        raise UserError(f"{option} needs the hardware's {', '.join(missing)}; {hardware.name} states none "
                        "(add them to a copy of the profile: docs/hardware.md)")


def check_param_offload(hardware: Hardware, settings: Settings, zero=None) -> None:
    """--param-offload needs a stack whose framework offloads parameters (stack
    ``param_offloading``), the profile's host link and host memory, and (when ``zero`` is given)
    ZeRO-3, whose parameter shards are what moves (cost/states.param_offload_violations)."""
    if not settings.param_offload:
        return
    stack = settings.stack
    if not stack.param_offloading:
        raise UserError(f"--param-offload: stack {stack.name} does not offload parameters to host memory (stack "
                        "param_offloading; deepspeed does: ZeRO-Infinity offload_param)")
    if stack.param_offloading == "with-optimizer" and settings.optimizer_offload < 1.0:
        raise UserError(f"--param-offload under stack {stack.name}: its CPU offload (torch FSDP2 CPUOffloadPolicy) "
                        "moves parameters, gradients and the optimizer step together: add --optimizer-offload 1")
    _need_host(hardware, "--param-offload", ("host_bandwidth", "host_memory_per_gpu"))
    if zero is not None:
        if bool(param_offload_violations(settings, zero)):
            raise UserError(f"--param-offload moves ZeRO-3's parameter shards to host memory: it needs --zero 3 "
                            f"(DeepSpeed offload_param is a stage-3 option), got --zero {int(np.asarray(zero))}")


def check_settings(hardware: Hardware, settings: Settings) -> None:
    """Rules on the precision settings that every command applies the same way: the compute dtype
    needs a peak on this hardware (A100 has no FP8 tensor cores: `memory` refused nothing while
    `step` and `plan` refused it, issue 9 item 6)."""
    try:
        hardware.gpu.peak(settings.dtype)
    except UserError as exc:
        raise UserError(f"--dtype {settings.dtype}: {exc}; choose a dtype this GPU computes in") from None
    sms = hardware.gpu.sms
    for key in ("ep_sms", "dp_sms"):
        held = getattr(settings.stack.overlap, key)
        if sms is not None and held > sms:    # reliability review, item 4: priced as more than every SM
            raise UserError(f"stack {settings.stack.name}: overlap.{key} {held} is more than the {sms} SMs of "
                            f"{hardware.gpu.name} ({hardware.name})")


def seq_note(model: ModelSpec, seq: int) -> str | None:
    """One line when the sequence exceeds the model's maximum (None otherwise).

    Decision (issue 9, item 6): a note, not a refusal — planning a context extension is a real
    question. With learned position embeddings the model has no positions past its maximum: the
    note says the count keeps the shipped table (give a copy of the spec a larger max_seq to count
    a larger table). With rope/alibi positions are computed, and the trained length is exceeded."""
    if seq <= model.max_seq:
        return None
    if model.position == "learned":
        return (f"seq {seq:,} exceeds {model.name}'s maximum {model.max_seq:,} and its position embeddings are "
                f"learned: positions past {model.max_seq:,} do not exist in the model; llmpar counts the "
                f"{model.max_seq:,}-row table as shipped (edit max_seq in a copy of the spec to count a larger one)")
    return (f"seq {seq:,} exceeds {model.name}'s maximum {model.max_seq:,} ({model.position} positions: beyond "
            "the trained length, computed as given)")


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
    settings: Settings | None = None,
    default_batch_tokens: int = DEFAULT_BATCH_TOKENS,
    recompute_layers: int | None = None,
    offload_layers: int | None = None,
) -> Resolved:
    """Resolve the common option group into a scalar :class:`Parallel` (docs/architecture.md, CLI conventions)."""
    notes: list[str] = []
    zero = whole(zero, "zero") or 0  # its range: the layout rule "zero" (check_layout)
    sp = flag(sp, "sp")
    tp = _pos_int(tp, "tp", MAX_GPUS) or 1
    pp = _pos_int(pp, "pp", MAX_GPUS) or 1
    cp = _pos_int(cp, "cp", MAX_GPUS) or 1
    ep = _pos_int(ep, "ep", MAX_GPUS) or 1
    etp = _pos_int(etp, "etp", MAX_GPUS) or 0
    gpus = _pos_int(gpus, "gpus", MAX_GPUS)
    dp = _pos_int(dp, "dp", MAX_GPUS)
    b = _pos_int(micro_batch, "micro-batch", MAX_BATCH) or 1
    model_par = tp * cp * pp
    if model_par * (dp or 1) > MAX_GPUS:
        raise UserError(f"tp*cp*pp*dp = {model_par * (dp or 1):,} GPUs is beyond what llmpar models "
                        f"(at most {MAX_GPUS:,})")
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
        seq = _pos_int(seq, "seq", MAX_SEQ)
    if (note := seq_note(model, seq)) is not None:
        notes.append(note)
    if sp is None:
        sp = tp > 1
    if virtual_stages is not None:
        _pos_int(virtual_stages, "virtual-stages", MAX_GPUS)
    v = virtual_stages or 1
    if schedule is None:
        schedule = "interleaved" if v > 1 else "1f1b"
    sched = code(SCHEDULES, schedule, "schedule")
    if schedule == "interleaved" and virtual_stages == 1:
        raise UserError("--schedule interleaved needs --virtual-stages >= 2 (got 1; 1 chunk per stage is 1f1b)")
    if schedule == "interleaved" and v == 1:
        v = 2
        notes.append("interleaved schedule without --virtual-stages: assumed v=2")
    if schedule != "interleaved" and v > 1:
        raise UserError(f"--virtual-stages {v} needs --schedule interleaved (got {schedule})")
    rec = code(RECOMPUTE, recompute, "recompute")
    n_rec = 0
    # 0 is "every layer", as the JSON's parallel.recompute_layers writes it: a result's own layout
    # feeds back (reliability review, item 30)
    if recompute_layers is not None and not (whole(recompute_layers, "recompute-layers") == 0):
        n_rec = _pos_int(recompute_layers, "recompute-layers", MAX_GPUS)
        if RECOMPUTE[rec] != "full":
            raise UserError(f"--recompute-layers {n_rec} needs --recompute full (got {RECOMPUTE[rec]})")

        per_chunk = int(chunk_layers(model.layers, pp, v))
        if n_rec > per_chunk:
            raise UserError(f"--recompute-layers {n_rec} exceeds the {per_chunk} layers of a pipeline chunk "
                            f"({model.layers} layers / pp={pp}" + (f" / v={v})" if v > 1 else ")"))
    n_off = 0
    if offload_layers is not None and offload_layers != 0:
        # Megatron-Core TransformerConfig (cpu_offloading): fewer layers than the model has, no
        # pipeline parallelism, no activation recomputation
        if whole(offload_layers, "offload-layers") < 0:     # 0 is "none" (above)
            raise UserError(f"--offload-layers must be 0 (none) or a positive integer, got {offload_layers}")
        n_off = _pos_int(offload_layers, "offload-layers", MAX_GPUS)
        if n_off >= model.layers:
            raise UserError(f"--offload-layers {n_off} must be below the model's {model.layers} layers")
        if pp > 1:
            raise UserError(f"--offload-layers needs --pp 1 (Megatron-Core: no CPU offloading with pipeline "
                            f"parallelism; got --pp {pp})")
        if RECOMPUTE[rec] != "none":
            raise UserError(f"--offload-layers needs --recompute none (Megatron-Core: no CPU offloading with "
                            f"activation recomputation; got {RECOMPUTE[rec]})")
        if hardware.host_bandwidth is None:
            raise UserError(f"--offload-layers needs the hardware's host_bandwidth (the CPU-GPU link); "
                            f"{hardware.name} states none")
    per_step = b * dp
    if global_batch is not None:
        global_batch = _pos_int(global_batch, "global-batch", MAX_BATCH)
        if global_batch % per_step:
            raise UserError(
                f"--global-batch {global_batch} is not divisible by micro-batch*dp = {b}*{dp} = {per_step}"
            )
        m = global_batch // per_step
        if microbatches is not None and _pos_int(microbatches, "microbatches", MAX_BATCH) != m:
            raise UserError(f"--microbatches {microbatches} disagrees with --global-batch {global_batch} / (b*dp) = {m}")
    elif microbatches is not None:
        m = _pos_int(microbatches, "microbatches", MAX_BATCH)
    else:
        target, capped = default_global_batch(seq, default_batch_tokens)
        m = max(1, round(target / per_step))
        raised = (f" (raised from ~{default_batch_tokens:,} tokens: one sequence per micro-batch of each of the "
                  f"dp={dp} replicas is {per_step * seq:,} tokens)" if target < per_step else "")
        notes.append(
            f"no --global-batch/--microbatches: assumed ~{default_batch_tokens:,} tokens per step "
            f"-> {m * per_step} sequences ({m * per_step * seq:,} tokens), m={m} micro-batches{raised}"
        )
        if capped:
            notes.append(capped)
    if m * per_step * seq > MAX_TOKENS_PER_STEP:
        raise UserError(f"{m * per_step:,} sequences x {seq:,} tokens = {m * per_step * seq:,} tokens per step is "
                        f"beyond what llmpar models (at most {MAX_TOKENS_PER_STEP:,})")
    par = Parallel(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=0 if etp == tp else etp, zero=int(zero), sp=bool(sp), recompute=rec,
        micro_batch=b, microbatches=m, seq=seq, schedule=sched, virtual_stages=v, recompute_layers=n_rec,
        offload_layers=n_off,
    )
    check_layout(model, par)
    if settings is None:
        settings = Settings()
    check_settings(hardware, settings)
    if bool(finetune_layout_violations(settings.finetune, par.tp, par.pp, par.cp, par.ep)):
        raise UserError(finetune_layout_message(settings.finetune, int(par.tp), int(par.pp), int(par.cp), int(par.ep)))
    check_optimizer_offload(hardware, settings, par.zero)
    return Resolved(model=model, hardware=hardware, parallel=par, settings=settings, assumptions=notes)


def ceil_div(a, b):
    """Integer ceiling that works on ints and numpy integer arrays."""
    return -(-a // b)
