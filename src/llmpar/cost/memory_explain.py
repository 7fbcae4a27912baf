"""The explain layer of per-GPU memory (``--explain``): every term of one scalar layout with
its bytes, formula, substituted values and source. It calls the same private helpers as the
vectorised core (cost/memory.py, cost/memory_stage.py, cost/inference.py), so the two cannot disagree; tests check
that the terms add up to the core's components.
"""

from __future__ import annotations

import numpy as np

from llmpar.cost import params as P
from llmpar.cost.activations import CHECKPOINT_SOURCE, ActTerm, checkpoint_term, stack_activation_terms, term_bytes
from llmpar.cost.activations_ends import first_stage_extra_terms, last_stage_extra_terms
from llmpar.cost.inflight import in_flight_on_stage, logits_in_flight, stage_span
from llmpar.cost.pipeline import DUALPIPE
from llmpar.cost.shards import (
    SRC_MEGATRON_PP, SRC_MEGATRON_TP, _word_embedding, embedding_shard, head_shard, largest_layer_params, layer_shard,
)
from llmpar.cost.states import (
    INFERENCE_WEIGHT_BYTES, KV_BYTES, SRC_DS2, SRC_DS3, SRC_MEGATRON_CONV,
    SRC_TE_FP8, SRC_ZERO, SRC_ZERO3_BUF, BytesPerParam, _zero3_buffers, _zero_divisors,
    bytes_per_param, optimized_params, optimizer_step_bytes, SRC_OFFLOAD, SRC_PARAM_OFFLOAD,
)
from llmpar.cost.inference import SRC_KV, SRC_KV_MLA, kv_cache_per_token_layer
from llmpar.cost.memory import memory_per_gpu
from llmpar.cost.memory_stage import _layer_coeffs, _stage_eval
from llmpar.cost.runtime import (
    SRC_ALLOC, SRC_CONTEXT, SRC_GROUPS, SRC_NCCL, SRC_RESERVE, _capacity, communicators,
)
from llmpar.parallel import Parallel, Settings

SRC_BUCKET = ("DeepSpeed config docs: reduce_bucket_size (5e8 elements), contiguous_gradients; "
              "PyTorch DDP bucket_cap_mb")
SRC_DDP = "PyTorch DistributedDataParallel docs, gradient_as_bucket_view (False: buckets copy every gradient)"
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec

from llmpar.cost.terms import Term  # the one explained-term type (memory's are in bytes)


def _g(x) -> str:
    x = float(x)
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:.4g}"


def state_terms(params_ne, params_e, lin_ne, lin_e, prec: BytesPerParam, par: Parallel, settings: Settings) -> list[Term]:
    """Weights, gradients and optimizer terms of a scalar layout (the same arithmetic as :func:`_states`)."""
    (wd, gd, od), (wde, gde, ode) = _zero_divisors(par)
    z = int(par.zero)
    src = {"llmpar": SRC_ZERO, "megatron": SRC_MEGATRON_CONV, "deepspeed": SRC_DS2 if z < 3 else SRC_DS3}[prec.convention]
    zdesc = f"ZeRO-{z} over dp·cp = {_g(np.asarray(par.dp) * np.asarray(par.cp))}" if z else "ZeRO-0 (replicated over dp)"
    out = []
    for comp, nb, (d, de) in (("weights", prec.weights, (wd, wde)), ("gradients", prec.gradients, (gd, gde)),
                              ("optimizer", prec.optimizer, (od, ode))):
        val = float(nb) * (float(params_ne) / float(d) + float(params_e) / float(de))
        if float(params_e):
            formula = f"{prec.describe[comp].split(':')[0]}: {_g(nb)} B × (Ψ_gpu/{'N' if float(d) > 1 else '1'} + Ψ_exp/{'N_e' if float(de) > 1 else '1'})"
            values = f"{_g(nb)} × ({_g(params_ne)}/{_g(d)} + {_g(params_e)}/{_g(de)})"
        else:
            formula = f"{_g(nb)} B/param × Ψ_gpu{' / N' if float(d) > 1 else ''}"
            values = f"{_g(nb)} × {_g(params_ne)}{'' if float(d) == 1 else ' / ' + _g(d)}"
        out.append(Term(comp, f"{comp} ({prec.describe[comp]})", val, formula, f"{values}; {zdesc}", src))
        if comp == "weights" and getattr(settings, "param_offload", False) and z >= 3 and settings.finetune == "full":
            out.append(Term("weights", "shards held in host memory (--param-offload)", -val, "− the ZeRO-3 shard above",
                            f"−{_g(val / 1e9)} GB to host memory", SRC_PARAM_OFFLOAD))
        off = float(getattr(settings, "optimizer_offload", 0.0))
        if comp == "optimizer" and off and val:
            out.append(Term("optimizer", f"share held in host memory (--optimizer-offload {off:g})", -off * val,
                            "− F × the optimizer states above", f"−{off:g} × {_g(val / 1e9)} GB", SRC_OFFLOAD))
    if prec.fp8_cache and (float(lin_ne) or float(lin_e)):
        val = prec.fp8_cache * (float(lin_ne) / float(wd) + float(lin_e) / float(wde))
        out.append(Term("weights", "fp8 weight cache (copy + transpose of linear weights)", val,
                        "2 B × linear params", f"2 × ({_g(lin_ne)}/{_g(wd)} + {_g(lin_e)}/{_g(wde)})", SRC_TE_FP8))
    return out


def memory_terms(model: ModelSpec | None, hw: Hardware, par: Parallel, settings: Settings, reserve=None, *,
                 stage: int | None = None, params: float | None = None) -> list[Term]:
    """Every term of one scalar layout's memory on ``stage`` (default: the most-loaded stage).

    Sums per component equal :func:`memory_per_gpu`'s (or :func:`model_states_for_count`'s)."""
    prec = bytes_per_param(settings, par.zero, par.microbatches)
    cap, res = _capacity(hw, reserve)
    if model is None:
        return _bare_count_terms(params, par, settings, prec, res)
    if stage is None:
        stage = int(memory_per_gpu(model, hw, par, settings, reserve)["stage"])
    shard = layer_shard(model, par)
    coeffs = _layer_coeffs(model, settings)
    e = _stage_eval(model, par, settings, prec, shard, coeffs, stage)
    nd, nm = int(e["dense_layers"]), int(e["moe_layers"])
    terms = _param_terms(model, par, shard, stage, nd, nm)
    terms += state_terms(e["params_nonexpert"], e["params_expert"],
                         nd * float(shard.dense_linear) + nm * float(shard.moe_linear), nm * float(shard.experts_linear),
                         prec, par, settings)
    terms += _zero3_terms(model, par, prec, shard, e)
    terms += _activation_terms(model, par, settings, e, nd, nm)
    terms += _buffer_terms(par, settings, prec, e)
    allocated = sum(t.bytes for t in terms if t.component in ("weights", "gradients", "optimizer", "activations", "buffers"))
    return terms + runtime_terms(allocated, settings, int(e["communicators"]), res)


def _bare_count_terms(params, par: Parallel, settings: Settings, prec: BytesPerParam, res) -> list[Term]:
    """The terms of a bare parameter count (``--params``): an even split, its states, the runtime."""
    terms: list[Term] = []
    shard = float(params) / (int(par.tp) * int(par.pp))
    terms.append(Term("params", "parameters per GPU", shard, "Ψ / (tp·pp)",
                      f"{_g(params)} / ({int(par.tp)}·{int(par.pp)})", "even split of a bare count"))
    terms += state_terms(shard, 0.0, shard if prec.fp8_cache else 0.0, 0.0, prec, par, settings)
    allocated = sum(t.bytes for t in terms if t.component in ("weights", "gradients", "optimizer"))
    n_comm = int(communicators(par.tp, par.pp, par.dp, par.cp, par.ep))
    return terms + runtime_terms(allocated, settings, n_comm, res)


def _param_terms(model: ModelSpec, par: Parallel, shard, stage: int, nd: int, nm: int) -> list[Term]:
    """The parameters on this GPU: its dense and MoE layers, the embedding, the LM head."""
    terms: list[Term] = []
    t = int(par.tp)
    emb = float(embedding_shard(model, par)) if (stage == 0 or _is_dual_end(par, stage, 0)) else 0.0
    head = float(head_shard(model, par)) if (stage == int(par.pp) - 1 or _is_dual_end(par, stage, int(par.pp) - 1)) else 0.0
    src_shard = SRC_MEGATRON_TP + "; " + SRC_MEGATRON_PP
    if nd:
        terms.append(Term("params", f"{nd} dense layer(s)", nd * float(shard.dense),
                          "L_stage × [(attn − attn_rep)/t + attn_rep + (mlp − b_row)/t + b_row + norms]",
                          f"{nd} × {_g(shard.dense)} (t={t})", src_shard))
    if nm:
        terms.append(Term("params", f"{nm} MoE layer(s), non-expert", nm * float(shard.moe),
                          "L_stage × [(attn)/t + shared/t + router + norms]", f"{nm} × {_g(shard.moe)} (t={t})", src_shard))
        terms.append(Term("params", f"{nm} MoE layer(s), routed experts", nm * float(shard.experts),
                          "L_stage × E·expert / (ep·etp)  (etp = expert-TP, t unless --etp)",
                          f"{nm} × {model.moe.experts}·{_g(P.expert_params(model))} / ({int(par.ep)}·{int(par.expert_tp)})",
                          src_shard))
    if emb:
        terms.append(Term("params", "embedding (vocab-parallel)", emb, "V·h/t + positions",
                          f"{model.vocab}·{model.hidden}/{t} + {_g(P.embedding_params(model) - _word_embedding(model))}",
                          SRC_MEGATRON_TP))
    if head:
        tied = model.tied_embeddings and int(par.pp) > 1
        terms.append(Term("params", "LM head (vocab-parallel) + final norm" + (" (tied copy, pp > 1)" if tied else ""), head,
                          "V·h/t + final norm" if (P.head_params(model) or tied) else "final norm (tied, counted once)",
                          f"{_g(P.head_params(model) or (_word_embedding(model) if tied else 0))}/{t} + {P.final_norm_params(model)}",
                          SRC_MEGATRON_PP))
    return terms


def _zero3_terms(model: ModelSpec, par: Parallel, prec: BytesPerParam, shard, e: dict) -> list[Term]:
    """ZeRO-3's transient buffers: the gathered layers and the unsharded gradient (or DeepSpeed's)."""
    if not float(e["zero3_buffer_bytes"]):
        return []
    bw, bg = _zero3_buffers(model, par, prec, shard, True)
    if prec.convention == "deepspeed":
        big = float(largest_layer_params(model, par))
        return [Term("weights", "ZeRO-3 largest-layer buffer (weights)", float(bw), "2 × largest_layer",
                     f"2 × {_g(big)}", SRC_DS3),
                Term("gradients", "ZeRO-3 largest-layer buffer (gradients)", float(bg), "2 × largest_layer",
                     f"2 × {_g(big)}", SRC_DS3)]
    return [Term("weights", "ZeRO-3 gathered layers (current + prefetch)", float(bw),
                 "2 × bytes_w × layer params/GPU", f"2 × {_g(prec.weights)} × {_g(float(bw) / (2 * prec.weights))}",
                 SRC_ZERO3_BUF),
            Term("gradients", "ZeRO-3 unsharded layer gradient", float(bg), "bytes_g × layer params/GPU",
                 f"{_g(prec.gradients)} × {_g(float(bg) / float(prec.gradients))}", SRC_ZERO3_BUF)]


def _activation_terms(model: ModelSpec, par: Parallel, settings: Settings, e: dict, nd: int, nm: int) -> list[Term]:
    """The stage's activations (× the stack's fitted activation_factor, when it is not 1): each
    kept tensor of its layers, the recompute working set, the end stages' terms, the backward's."""
    terms: list[Term] = []
    mem = settings.stack.memory
    fac = float(mem.activation_factor)
    fdesc = " × activation_factor" if fac != 1 else ""
    fval = f" × {fac:g} (stack {settings.stack.name})" if fac != 1 else ""
    terms += _layer_act_terms(model, par, settings, float(e["in_flight"]), nd, nm, fac, fdesc, fval)
    if float(e["act_recompute_bytes"]):
        terms.append(Term("activations", "recompute working set (one layer rematerialised in backward)",
                          float(e["act_recompute_bytes"]) * fac, "one layer's activations without recompute − kept" + fdesc,
                          f"{_g(e['act_recompute_bytes'])}" + fval, CHECKPOINT_SOURCE))
    for flag, key, tlist, inflight in (
        ("first", "act_first_extra_bytes", first_stage_extra_terms(model),
         in_flight_on_stage(par.schedule, par.pp, par.microbatches, par.virtual_stages, 0)),
        ("last", "act_last_extra_bytes", last_stage_extra_terms(model, mem),
         logits_in_flight(par.schedule, par.pp, par.microbatches)),
    ):
        if not float(e[key]):
            continue
        for x in tlist:
            per = float(term_bytes(x, par))
            terms.append(Term("activations", f"{flag} stage: {x.name}", per * float(inflight) * fac,
                              _act_formula(x) + " × in-flight" + fdesc, f"{_g(per)} × {_g(inflight)}" + fval, x.source))
    if float(e["act_working_bytes"]):
        terms.append(Term("activations", "backward working set (temporaries, live once)", float(e["act_working_bytes"]),
                          "memory.working_layers × one layer's kept activations of one micro-batch",
                          f"{_g(mem.working_layers)} × {_g(float(e['act_working_bytes']) / mem.working_layers)} "
                          f"(stack {settings.stack.name})",
                          "fitted per stack (docs/stacks.md): gradient and upcast temporaries of the layer in backward"))
    return terms


def _layer_act_terms(model: ModelSpec, par: Parallel, settings: Settings, fl: float, nd: int, nm: int, fac: float,
                     fdesc: str, fval: str) -> list[Term]:
    """Each tensor the stage's dense and MoE layers keep, × layers × micro-batches in flight."""
    terms: list[Term] = []
    rec = int(par.recompute)
    for kind, n, moe_layer in (("dense", nd, False), ("MoE", nm, True)):
        if not n:
            continue
        tt = stack_activation_terms(model, moe_layer, settings)
        kept = [x for x in tt if (rec == 0 and not x.only_selective) or (rec == 1 and x.selective)] if rec < 2 \
            else [checkpoint_term(model)]
        dual = int(par.schedule) == DUALPIPE and int(par.pp) > 1
        n_eff = n / 2.0 if dual else n
        for x in kept:
            per = float(term_bytes(x, par))
            terms.append(Term("activations", f"{kind} layer: {x.name}", per * n_eff * fl * fac,
                              _act_formula(x) + " × layers × in-flight" + fdesc,
                              f"{_g(per)} B/layer × {_g(n_eff)} × {_g(fl)}" + fval, x.source))
    return terms


def _buffer_terms(par: Parallel, settings: Settings, prec: BytesPerParam, e: dict) -> list[Term]:
    """The reduction buckets (and DDP's gradient copy) and the optimizer step's working buffers."""
    terms: list[Term] = []
    mem = settings.stack.memory
    buf = float(e["buffers_bytes"])
    if not buf:
        return terms
    n = int(par.dp) * int(par.cp)
    local = float(optimized_params(float(e["optimizer_bytes"]), prec))
    opt_step = float(optimizer_step_bytes(mem, float(e["optimizer_bytes"]), prec))
    bucket = float(mem.grad_bucket_bytes) if n > 1 else 0.0
    if bucket:
        terms.append(Term("buffers", "gradient-reduction bucket", bucket,
                          "memory.grad_bucket_bytes (dp·cp > 1)", f"{_g(mem.grad_bucket_bytes)} (dp·cp = {n})",
                          SRC_BUCKET))
    if mem.ddp_bucket_copy and n > 1:
        terms.append(Term("buffers", "DDP buckets: 16-bit copy of every gradient", buf - bucket - opt_step,
                          "2 B × Ψ_gpu (dp·cp > 1)", f"2 × {_g(e['params_per_gpu'])}", SRC_DDP))
    if opt_step:
        terms.append(Term("buffers", "optimizer step's working buffers", opt_step,
                          "memory.optimizer_step_bytes_per_param × parameters this GPU optimises",
                          f"{_g(mem.optimizer_step_bytes_per_param)} × {_g(local)} (stack {settings.stack.name})",
                          "fitted per stack (docs/stacks.md); torch/optim/adam.py _multi_tensor_adam: fp32 sqrt(v)"))
    return terms


def runtime_terms(allocated: float, settings: Settings, n_comm: int, reserve) -> list[Term]:
    """The allocator's overhead over ``allocated`` and the runtime (CUDA context + NCCL buffers per
    communicator, or the explicit --reserve in their place): the same arithmetic as
    :func:`llmpar.cost.runtime.reserved_bytes` and :func:`~llmpar.cost.runtime.runtime_bytes`."""
    mem = settings.stack.memory
    name = settings.stack.name
    oh = float(mem.allocator_overhead)
    out = [Term("allocator", "caching-allocator overhead (reserved − allocated)", allocated * oh,
                "allocated × allocator_overhead", f"{_g(allocated)} × {oh:g} (stack {name})", SRC_ALLOC)]
    if reserve is not None:
        out.append(Term("runtime", "runtime reserve (--reserve: replaces CUDA context + NCCL)", float(reserve),
                        "--reserve", _g(reserve), SRC_RESERVE))
        return out
    out.append(Term("runtime", "CUDA context + library workspaces", float(mem.cuda_context_bytes),
                    "memory.cuda_context_bytes", f"{_g(mem.cuda_context_bytes)} (stack {name})", SRC_CONTEXT))
    out.append(Term("runtime", f"NCCL buffers ({n_comm} communicators)", float(mem.nccl_bytes_per_communicator) * n_comm,
                    "nccl_bytes_per_communicator × communicators (tp, pp, dp, cp, ep, world, embedding; size > 1)",
                    f"{_g(mem.nccl_bytes_per_communicator)} × {n_comm}", SRC_NCCL + "; " + SRC_GROUPS))
    return out


def _is_dual_end(par: Parallel, stage: int, end: int) -> bool:
    return int(par.schedule) == DUALPIPE and int(par.pp) > 1 and int(par.pp) - 1 - stage == end


def _act_formula(x: ActTerm) -> str:
    coef = f"{x.coef:g}" if x.coef != 1 else ""
    seq = "b·(s/c)·s" if x.s2 else "b·(s/c)"
    div = " / t" if x.tp else (" / t_sp" if x.sp else "")
    if x.etp:
        div = " × etp/t"   # the tokens the expert-TP group gathered (= 1 unless MoE parallel folding)
    return f"{coef}·{seq}·{x.unit}{div}".lstrip("·")


def inference_terms(model: ModelSpec, hw: Hardware, par: Parallel, settings: Settings, batch, context,
                    reserve=None) -> list[Term]:
    """Terms of :func:`inference_memory_per_gpu` for one scalar layout."""
    from llmpar.cost.inference import inference_memory_per_gpu
    r = inference_memory_per_gpu(model, hw, par, settings, batch, context, reserve)
    stage = int(r["stage"])
    _, n = stage_span(model.layers, par.pp, stage)
    kv_tok = float(kv_cache_per_token_layer(model, par, settings.kv_dtype))
    T = float(context) / int(par.cp)
    wb = INFERENCE_WEIGHT_BYTES[settings.dtype]
    cap, res = _capacity(hw, reserve)
    if model.mla is not None:
        kvf = "L_stage·(d_c + d_R)·T/c·B·bytes"
        kvv = f"{int(n)}·({model.mla.kv_lora_rank}+{model.mla.qk_rope_head_dim})·{_g(T)}·{batch}·{KV_BYTES[settings.kv_dtype]:g}"
        kvs = SRC_KV_MLA
    else:
        kvf = "2·L_stage·kv_heads·d_head·T/c·B·bytes / t"
        kvv = (f"2·{int(n)}·{model.n_kv_heads}·{model.d_head}·{_g(T)}·{batch}·{KV_BYTES[settings.kv_dtype]:g} / {int(par.tp)}")
        kvs = SRC_KV
    return [
        Term("params", "parameters on this GPU", float(r["params_per_gpu"]), "stage layers + embedding/head, ÷ t, ep",
             _g(r["params_per_gpu"]), SRC_MEGATRON_TP),
        Term("weights", f"weights ({settings.dtype}, {wb:g} B/param)", float(r["weights_bytes"]), "bytes × Ψ_gpu",
             f"{wb:g} × {_g(r['params_per_gpu'])}", SRC_MEGATRON_TP),
        Term("kv_cache", f"KV cache ({settings.kv_dtype})", float(r["kv_cache_bytes"]), kvf, kvv + f" (= {_g(kv_tok)} B/token/layer)", kvs),
        Term("activations", "working activations (one prefill + last-position logits)", float(r["activations_bytes"]),
             "T/c·[4h + max(attn/t, mlp/t)] + B·4V/t (last stage)", f"T={_g(T)}, B={batch}",
             "llmpar estimate (docs/memory.md, Inference)"),
    ] + runtime_terms(float(r["allocated_bytes"]), settings, int(r["communicators"]), res)
