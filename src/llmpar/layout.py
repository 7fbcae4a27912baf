"""The layout's rules, stage arithmetic and resolution: what a layout must satisfy to run (each rule
one array-polymorphic mask with one message, applied alike by memory, step, plan and calibrate
runs: tests/test_rules_once.py) and how the common options resolve into a checked layout. The
settings rules (offload, fine-tuning's degrees, the hardware-dependent checks) are
layout_settings.py's, beside it; the types and option domains are parallel.py's, below it
(docs/architecture.md, The house)."""

from __future__ import annotations

from typing import Any

import numpy as np

from llmpar.errors import UserError
from llmpar.layout_settings import (check_optimizer_offload, check_settings, finetune_layout_message,
                                    finetune_layout_violations, out_mask)
from llmpar.parallel import (
    DEFAULT_BATCH_TOKENS, MAX_BATCH, MAX_GPUS, MAX_TOKENS_PER_STEP, RECOMPUTE, SCHEDULES, Parallel, Resolved, Settings,
    code, default_global_batch, default_seq, flag, positive_int, whole,
)
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import MAX_SEQ, ModelSpec


def virtual_stages_message(v: int, layers: int, pp: int) -> str:
    """Why ``v`` virtual stages do not split ``layers`` over ``pp`` stages: the busiest stage's
    ceil(L/p) layers go into v equal chunks (Megatron-LM), so v must divide them. One text for
    memory/step/plan (layout rule ``virtual_stages``) and ``llmpar bubble --layers``."""

    per = int(stage_layers(layers, pp))
    divs = [d for d in range(2, per + 1) if per % d == 0]
    return (f"--virtual-stages {v} does not divide the {per} layers per pipeline stage ({layers} layers / "
            f"pp={pp}, most-loaded stage; Megatron-LM splits a stage into v equal chunks): "
            + (f"use one of {', '.join(map(str, divs))}" if divs else "this pp leaves no v > 1"))


# Layout rules, in the order the planner counts rejections (llmpar.planner.space.REASONS). Each is an
# array-polymorphic mask (True = the layout breaks the rule) so that ``check_layout`` (one scalar
# layout, a message) and the planner (every candidate at once, a count) apply the same rules.
LAYOUT_RULES = ("tp_heads", "pp_layers", "cp_seq", "ep", "etp", "sp_seq", "sp_tp", "virtual_stages", "schedule_pp",
                "zero")
_ONE_F_ONE_B, _INTERLEAVED = SCHEDULES.index("1f1b"), SCHEDULES.index("interleaved")


def layout_violations(model: ModelSpec, par: Parallel, only: tuple[str, ...] = LAYOUT_RULES) -> dict[str, Any]:
    """rule -> mask of layouts that break it (scalars or arrays, as ``par``); ``only`` names the
    rules to evaluate (all by default: the planner asks for the knob-level ones over millions of
    candidates after masking the degree-level ones over a few thousand).

    - tp_heads: tp divides the attention heads and the KV heads (Megatron: num_query_groups % tp == 0)
    - pp_layers: pp <= layers
    - cp_seq: cp divides the sequence
    - ep: ep = 1, or the model has experts, ep divides them, and ep*etp divides tp*cp*dp (with etp
      = tp: ep divides dp*cp)
    - etp: etp not given (= tp), or the model has experts, etp divides tp*cp*dp and the expert FFN
      width (Megatron-Core splits each expert's FFN over the etp ranks)
    - sp_seq: with SP (tp > 1), tp divides seq/cp
    - sp_tp: SP asked for at tp = 1 is refused, not ignored: it splits activations over the TP
      ranks (Korthikanti et al. 2022 §4.2.2), and at tp 1 there are none (Megatron-LM's
      arguments.py turns sequence_parallel off when tensor_model_parallel_size == 1)
    - virtual_stages: v = 1, or pp > 1 and v divides the layers of the most-loaded stage
      ceil(layers/pp) (Megatron-LM splits a stage into v equal model chunks)
    - schedule_pp: a schedule other than 1F1B needs pp > 1: at pp 1 every schedule is the same
      (no bubble, one micro-batch's activations in flight: cost/pipeline.py), so naming one is
      refused, not printed as if it ran (interleaved at pp 1 is the virtual_stages rule)
    - zero: ZeRO stage in 0..3
    """

    tp, pp, dp, cp, ep = par.tp, par.pp, par.dp, par.cp, par.ep
    seq, v, sp, zero = par.seq, par.virtual_stages, par.sp, par.zero
    moe = model.moe
    experts = moe.experts if moe is not None else 1
    f_e = moe.expert_ffn_hidden if moe is not None else 1

    def etp_rule():
        etp = par.expert_tp
        return (np.asarray(par.etp) > 0) & (etp != tp) & ((moe is None) | ((tp * cp * dp) % etp != 0)
                                                         | (f_e % etp != 0))

    rules = {
        "tp_heads": lambda: (model.heads % tp != 0) | (model.n_kv_heads % tp != 0),
        "pp_layers": lambda: pp > model.layers,
        "cp_seq": lambda: seq % cp != 0,
        "ep": lambda: (ep > 1) & ((moe is None) | (experts % ep != 0) | ((tp * cp * dp) % (ep * par.expert_tp) != 0)),
        "etp": etp_rule,
        "sp_seq": lambda: np.logical_and(sp, tp > 1) & ((seq // cp) % tp != 0),
        "sp_tp": lambda: np.logical_and(sp, tp == 1),
        "virtual_stages": lambda: (v > 1) & ((pp == 1) | (stage_layers(model.layers, np.maximum(pp, 1)) % v != 0)),
        "schedule_pp": lambda: (pp == 1) & (par.schedule != _ONE_F_ONE_B) & (par.schedule != _INTERLEAVED),
        "zero": lambda: (zero < 0) | (zero > 3),
    }
    return {name: rules[name]() for name in only}


def stack_violations(stack, par: Parallel) -> dict[str, Any]:
    """rule -> mask of layouts the stack's framework refuses to launch (scalars or arrays):

    - pp_zero: pp > 1 with a ZeRO stage outside the stack's ``pp_zero_stages`` (DeepSpeed
      deepspeed/runtime/pipe/engine.py at edaa722, PipelineEngine.__init__: "ZeRO-2 and ZeRO-3 are
      incompatible with pipeline parallelism"). Megatron-Core's Megatron-FSDP runs under PP
      (megatron/training/arguments.py at d98e8a6 refuses only --use-torch-fsdp2 with PP), torchtitan
      composes FSDP2 with PP (parallel_dims.py at b5bcd76), so their stacks state none.

    - zero_pp_only: pp = 1 with a ZeRO stage in the stack's ``pp_only_zero_stages``: torchtitan's
      ZeRO 1 is FSDP2 under PP, which keeps the parameters unsharded between forward and backward
      (torchtitan/distributed/utils.py at b5bcd76: reshard_after_forward "default" is False when
      PP is enabled); without PP its FSDP2 reshards (ZeRO 3) or is replicated (0), so ZeRO 1 at
      pp 1 is no torchtitan layout (`--emit torchtitan` had refused the plans the stack ranked).

    The planner masks with it (planner/space.py), calibrate runs searches within it, and ``step`` says
    so (inputs.stack_support_note)."""
    allowed = getattr(stack, "pp_zero_stages", None)
    pp_only = getattr(stack, "pp_only_zero_stages", None)
    pp, zero = np.asarray(par.pp), np.asarray(par.zero)
    none = np.zeros(np.broadcast_shapes(pp.shape, zero.shape), dtype=bool)
    bad = none if allowed is None else (pp > 1) & ~np.isin(zero, np.asarray(allowed))
    only = none if not pp_only else (pp == 1) & np.isin(zero, np.asarray(pp_only))
    return {"pp_zero": out_mask(bad), "zero_pp_only": out_mask(only)}




def _scalar(x):
    """0-d results back to Python numbers (as cost/arrays.scalar_out, which is above this module)."""
    return x.item() if isinstance(x, (np.ndarray, np.generic)) and np.ndim(x) == 0 else x


def stack_violation_message(rule: str, stack, par: Parallel) -> str:
    if rule == "pp_zero":
        return (f"stack {stack.name} does not launch ZeRO-{int(par.zero)} with pipeline parallelism (pp "
                f"{int(par.pp)}): its framework allows ZeRO " + ", ".join(str(z) for z in stack.pp_zero_stages)
                + " under pp > 1 (`llmpar stacks show " + stack.name + "`)")
    if rule == "zero_pp_only":
        return (f"stack {stack.name} has ZeRO-{int(par.zero)} only under pipeline parallelism (pp > 1; here pp 1): "
                f"its framework has no such sharding without PP (`llmpar stacks show {stack.name}`)")
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
    if rule == "sp_tp":
        return ("--sp needs tp > 1: sequence parallelism splits activations over the tensor-parallel ranks "
                "and at tp 1 there are none (Megatron-LM turns it off there); drop --sp or raise --tp")
    if rule == "schedule_pp":
        return (f"--schedule {SCHEDULES[int(par.schedule)]} needs pp > 1: at pp 1 there is no pipeline and every "
                f"schedule is 1F1B's (no bubble, one micro-batch in flight); drop --schedule or raise --pp")
    if rule == "virtual_stages":
        if pp == 1:
            return "--virtual-stages > 1 (interleaved schedule) needs pp > 1"
        return virtual_stages_message(v, model.layers, pp)
    if rule == "zero":
        return f"--zero must be 0, 1, 2 or 3, got {int(par.zero)}"
    raise AssertionError(rule)


def check_layout(model: ModelSpec, par: Parallel) -> None:
    """The layout rules of :func:`layout_violations` for one scalar layout: the first rule it breaks
    is one UserError. The planner masks with the same function (planner/space.py)."""
    for rule, bad in layout_violations(model, par).items():
        if bool(bad):
            raise UserError(_violation_message(rule, model, par))


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
    tp, pp, cp, ep, etp = (positive_int(tp, "tp", MAX_GPUS) or 1, positive_int(pp, "pp", MAX_GPUS) or 1,
                           positive_int(cp, "cp", MAX_GPUS) or 1, positive_int(ep, "ep", MAX_GPUS) or 1,
                           positive_int(etp, "etp", MAX_GPUS) or 0)
    gpus, dp = positive_int(gpus, "gpus", MAX_GPUS), positive_int(dp, "dp", MAX_GPUS)
    b = positive_int(micro_batch, "micro-batch", MAX_BATCH) or 1
    dp = _data_parallel(hardware, gpus, dp, tp, cp, pp, notes)
    if seq is None:
        seq = default_seq(model)
        notes.append(f"seq defaults to min(8192, model max {model.max_seq}) = {seq}")
    else:
        seq = positive_int(seq, "seq", MAX_SEQ)
    if (note := seq_note(model, seq)) is not None:
        notes.append(note)
    if sp is None:
        sp = tp > 1
    sched, v = _schedule(schedule, virtual_stages, notes)
    rec = code(RECOMPUTE, recompute, "recompute")
    n_rec = _recompute_layers(recompute_layers, rec, model.layers, pp, v)
    n_off = _offload_layers(offload_layers, rec, model.layers, pp, hardware)
    m = _microbatches(global_batch, microbatches, b * dp, seq, dp, default_batch_tokens, notes)
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


def _data_parallel(hardware: Hardware, gpus: int | None, dp: int | None, tp: int, cp: int, pp: int,
                   notes: list[str]) -> int:
    """dp from --gpus and --dp: gpus = tp·cp·pp·dp, either given, both agreeing, or one node."""
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
    return dp


def _schedule(schedule: str | None, virtual_stages: int | None, notes: list[str]) -> tuple[int, int]:
    """The schedule's code and chunks per stage: interleaved needs v >= 2 (assumed 2 when not given)."""
    if virtual_stages is not None:
        positive_int(virtual_stages, "virtual-stages", MAX_GPUS)
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
    return sched, v


def _recompute_layers(recompute_layers, rec: int, layers: int, pp: int, v: int) -> int:
    """--recompute-layers N: with full recompute, at most a pipeline chunk's layers; 0 = every layer."""
    # 0 is "every layer", as the JSON's parallel.recompute_layers writes it: a result's own layout
    # feeds back (reliability review, item 30)
    if recompute_layers is None or whole(recompute_layers, "recompute-layers") == 0:
        return 0
    n_rec = positive_int(recompute_layers, "recompute-layers", MAX_GPUS)
    if RECOMPUTE[rec] != "full":
        raise UserError(f"--recompute-layers {n_rec} needs --recompute full (got {RECOMPUTE[rec]})")
    per_chunk = int(chunk_layers(layers, pp, v))
    if n_rec > per_chunk:
        raise UserError(f"--recompute-layers {n_rec} exceeds the {per_chunk} layers of a pipeline chunk "
                        f"({layers} layers / pp={pp}" + (f" / v={v})" if v > 1 else ")"))
    return n_rec


def _offload_layers(offload_layers, rec: int, layers: int, pp: int, hardware: Hardware) -> int:
    """--offload-layers N: fewer than the model's layers, pp 1, no recompute, a host link to copy over."""
    # whole() first: offload_layers=False had passed "== 0" as none
    if offload_layers is None or whole(offload_layers, "offload-layers") == 0:
        return 0
    # Megatron-Core TransformerConfig (cpu_offloading): fewer layers than the model has, no
    # pipeline parallelism, no activation recomputation
    if whole(offload_layers, "offload-layers") < 0:     # 0 is "none" (above)
        raise UserError(f"--offload-layers must be 0 (none) or a positive integer, got {offload_layers}")
    n_off = positive_int(offload_layers, "offload-layers", MAX_GPUS)
    if n_off >= layers:
        raise UserError(f"--offload-layers {n_off} must be below the model's {layers} layers")
    if pp > 1:
        raise UserError(f"--offload-layers needs --pp 1 (Megatron-Core: no CPU offloading with pipeline "
                        f"parallelism; got --pp {pp})")
    if RECOMPUTE[rec] != "none":
        raise UserError(f"--offload-layers needs --recompute none (Megatron-Core: no CPU offloading with "
                        f"activation recomputation; got {RECOMPUTE[rec]})")
    if hardware.host_bandwidth is None:
        raise UserError(f"--offload-layers needs the hardware's host_bandwidth (the CPU-GPU link); "
                        f"{hardware.name} states none")
    return n_off


def _microbatches(global_batch, microbatches, per_step: int, seq: int, dp: int, default_batch_tokens: int,
                  notes: list[str]) -> int:
    """m micro-batches per step: --global-batch / (b·dp), --microbatches, or the default batch's tokens."""
    b = per_step // dp
    if global_batch is not None:
        global_batch = positive_int(global_batch, "global-batch", MAX_BATCH)
        if global_batch % per_step:
            raise UserError(
                f"--global-batch {global_batch} is not divisible by micro-batch*dp = {b}*{dp} = {per_step}"
            )
        m = global_batch // per_step
        if microbatches is not None and positive_int(microbatches, "microbatches", MAX_BATCH) != m:
            raise UserError(f"--microbatches {microbatches} disagrees with --global-batch {global_batch} / (b*dp) = {m}")
    elif microbatches is not None:
        m = positive_int(microbatches, "microbatches", MAX_BATCH)
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
    return m
