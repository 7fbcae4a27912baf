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

from dataclasses import dataclass, field, fields, replace
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


class Named(int):
    """A categorical knob's integer code (the index the cost formulas and arrays use) that reads and
    compares as its name too, as the JSON writes it: a result's ``parallel.recompute`` is 2, prints
    ``full`` and equals both ``2`` and ``"full"`` (issue 24: API enums are the JSON's strings)."""

    names: tuple[str, ...] = ()

    def __str__(self) -> str:
        i = int(self)
        return self.names[i] if 0 <= i < len(self.names) else str(i)

    __repr__ = __str__

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            return str(self) == other
        return int(self) == other

    def __ne__(self, other) -> bool:
        return not self == other

    __hash__ = int.__hash__


class RecomputeCode(Named):
    names = RECOMPUTE


class ScheduleCode(Named):
    names = SCHEDULES


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

    def __post_init__(self):
        # a scalar layout's categorical knobs read as their names too (Named); arrays stay codes
        if isinstance(self.recompute, (int, np.integer)) and not isinstance(self.recompute, (bool, Named)):
            self.recompute = RecomputeCode(self.recompute)
        if isinstance(self.schedule, (int, np.integer)) and not isinstance(self.schedule, (bool, Named)):
            self.schedule = ScheduleCode(self.schedule)

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

    def shared_as_scalars(self) -> Parallel:
        """An array layout with each knob every entry shares as one Python number (the planner's
        sequence length always; etp, offloading, a knob ``--fix`` pins usually). The cost formulas
        broadcast, so such a term is evaluated once, not once per candidate (docs/planner.md,
        Performance); ``tp`` stays an array: it carries the candidate count."""
        vals = {}
        for f in fields(self):
            x = getattr(self, f.name)
            if f.name != "tp" and isinstance(x, np.ndarray) and x.size and (x == x.flat[0]).all():
                x = bool(x.flat[0]) if x.dtype == bool else x.flat[0].item()
            vals[f.name] = x
        return Parallel(**vals)


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

        self._check_finetune_and_offload()
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

    def _check_finetune_and_offload(self) -> None:
        """The fine-tuning and offload settings: their domains, and what they combine with."""
        if self.finetune not in FINETUNE:
            raise UserError(f"--finetune must be one of {', '.join(FINETUNE)}, got {self.finetune!r}")
        if self.lora_targets not in LORA_TARGETS:
            raise UserError(f"--lora-targets must be one of {', '.join(LORA_TARGETS)}, got {self.lora_targets!r}")
        r = self.lora_rank   # the API's whole-number rule (whole()): 8.0 is 8 (docs/api.md), True is refused
        if isinstance(r, (bool, np.bool_)) or not isinstance(r, (int, np.integer, float, np.floating)) \
                or not np.isfinite(r) or not float(r).is_integer() or r < 1:
            raise UserError(f"--lora-rank must be a whole number of 1 or more, got {self.lora_rank!r}")
        object.__setattr__(self, "lora_rank", int(r))
        off = self.optimizer_offload
        if isinstance(off, (bool, np.bool_)) or not isinstance(off, (int, float, np.integer, np.floating)) \
                or not 0.0 <= float(off) <= 1.0:
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

    def tp_overlap_on(self, generation: str | None) -> float:
        """The TP overlap on a GPU of ``generation``: ``--tp-overlap`` when given; else the stack's
        overlap.tp where the stack achieves it (overlap.tp_generations; a GPU of no stated generation
        takes it), and 0 on the other generations, where no measurement backs it (docs/stacks.md,
        TP overlap by GPU generation)."""
        gens = self.stack.overlap.tp_generations
        if self._given["tp_overlap"] or gens is None or generation is None or generation in gens:
            return self.tp_overlap
        return 0.0

    def changed(self, **changes) -> Settings:
        """These settings with ``changes``, the stack-backed values that were not given re-derived
        from the stack (``dataclasses.replace`` would pass them on as if typed: then --dp-overlap
        would look given and replace the stack's ZeRO-3 prefetch, Settings.zero3_overlap)."""
        vals = {f.name: getattr(self, f.name) for f in fields(self)}
        vals.update({k: None for k, given in self._given.items() if not given})
        vals.update(changes)
        return Settings(**vals)

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


def callback(value, what: str, call: str):
    """The rule for a function argument of the Python API (``progress=``): a callable or None; a
    string had been called and raised a TypeError mid-run (reliability: sweep(progress='x'))."""
    if value is not None and not callable(value):
        raise UserError(f"{what} must be a function {call}, got {value!r}")
    return value


def fraction(value, what: str) -> float | None:
    """The rule for a fraction argument of the Python API (``dp_overlap=0.5``): an int or a float,
    None stays None; a string or a bool is a UserError (the range is checked where it is used)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise UserError(f"{what} must be a number between 0 and 1, got {value!r}")
    return float(value)


def positive_int(value, what: str, hi: int | None = None) -> int:
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


# ------------------------------------------------------------ stage arithmetic and setting rules


def default_seq(model) -> int:
    """The sequence length when none is given: min(8192, the model's maximum) (docs/architecture.md,
    CLI conventions); memory, step, plan and sweep all take it from here."""
    return min(DEFAULT_SEQ, model.max_seq)


