"""`llmpar serve`: one deployment under one load, options in, a result out (nothing prints).

docs/serving.md. The numbers come from :mod:`llmpar.cost.serving` (one iteration),
:mod:`llmpar.cost.serving_capacity` (the KV pool) and :mod:`llmpar.cost.serving_load` (the load);
the interval from the serving residuals of published runs (:mod:`llmpar.serving.evidence`); the
options are checked in :mod:`llmpar.serving.deployment`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from llmpar.cost import serving_load as load
from llmpar.cost.serving import compute_dtype, iteration_terms
from llmpar.cost.serving_capacity import kv_capacity, max_concurrency
from llmpar.cost.serving_finite import finite_rate
from llmpar.cost.serving_tails import length_percentiles
from llmpar.errors import UserError
from llmpar.cost.serving_capacity import prompt_exceeds_budget
from llmpar.serving.deployment import BUDGET_RANGE, DEFAULT_ISL, DEFAULT_OSL, _int, _load_kind, _range, _rate, deployment, refuse_speculation_without_decode
from llmpar.specs.registry import DEFAULT_HARDWARE
from llmpar.specs.stack import per_gen

#: `vllm bench serve` defaults: --request-rate inf with --num-prompts 1000 (vllm benchmarks/serve.py)
DEFAULT_PROMPTS = 1000


def serve(model, hw, engine, *, gpus=None, tp=None, pp=None, ep=None, isl=DEFAULT_ISL, osl=DEFAULT_OSL, concurrency=None,
          rate=None, batch=None, prompts=None, weights="bf16", kv_dtype=None, max_num_seqs=None,
          max_num_batched_tokens=None, memory_fraction=None, spec_tokens=None, acceptance=None,
          prefix_hit=None, dp_attention=False, disagg=None, isl_range=None, osl_range=None, simulate=None,
          seed=None) -> dict[str, Any]:
    """One deployment under one load: the figures of docs/serving.md as a plain dict. ``isl_range`` /
    ``osl_range`` ((lo, hi), or "LO-HI"): uniform length spreads; the state is the mean lengths'
    and ``percentiles`` the requests' spread in it (cost/serving_tails.py)."""
    check_engine_runs_on(engine, hw)
    spread, isl, osl = _lengths(model, isl, osl, isl_range, osl_range, concurrency, rate, batch, disagg)
    refuse_speculation_without_decode(spec_tokens, spread[1][1] if spread is not None else osl)
    d = deployment(model, hw, gpus=gpus, tp=tp, pp=pp, ep=ep, weights=weights, kv_dtype=kv_dtype,
                   spec_tokens=spec_tokens, acceptance=acceptance, prefix_hit=prefix_hit, dp_attention=dp_attention)
    if engine.expert_parallel == "tp" and d.ep not in (1, d.tp):
        raise UserError(f"--ep {d.ep} with {engine.name}: its expert parallelism spans every TP rank of a replica "
                        f"(vLLM --enable-expert-parallel: ep = tp x dp): give --ep {d.tp} or leave --ep out")
    kind = _load_kind(concurrency, rate, batch, prompts)
    # every option is checked before the memory verdict: bad input is exit 2 whether or not the
    # deployment fits (a --concurrency 0 on a replica that does not fit is still --concurrency 0)
    _check_load_options(d, kind, concurrency, rate, batch, prompts, simulate, seed, disagg)
    cap = _capacity(model, hw, engine, d, max_num_seqs, max_num_batched_tokens, memory_fraction)
    budget = int(cap["max_num_batched_tokens"])
    limit = max_concurrency(cap, model, isl + osl)
    out: dict[str, Any] = {"deployment": d, "capacity": cap, "max_concurrency": int(limit * d.replicas),
                           "load": kind, "isl": isl, "osl": osl, "notes": _notes(hw, weights, d, model)}
    if not cap["fits"] or limit < 1:
        out["fits"] = False
        return out
    out["fits"] = True
    r = d.replicas
    if disagg is not None:
        return _disagg(model, hw, engine, d, out, disagg, rate, isl, osl, limit, budget)
    if prompt_exceeds_budget(engine, budget, isl):
        raise UserError(f"a prompt of {isl:,} tokens exceeds --max-num-batched-tokens {budget:,}, and {engine.name} "
                        "does not chunk prompts by default: raise --max-num-batched-tokens to at least the prompt "
                        "(TensorRT-LLM: max_num_tokens), or use an engine file with scheduler.chunked_prefill: true")
    res = _run_load(model, hw, engine, d, out, kind, concurrency, rate, batch, prompts, isl, osl, limit, budget,
                    spread)
    for key in ("requests_per_s", "output_tokens_per_s"):
        res[key] = res[key] * r
    res["running"] = res["running"] * r
    out["figures"] = res
    b = res["running"] / _busy(kind, concurrency, r) / d.pp
    out["breakdown"] = _breakdown(model, hw, engine, d, b, isl, osl)
    if simulate is not None:
        out["simulation"] = _simulate(model, hw, engine, d, cap, budget, rate, simulate, seed,
                                      spread or ((isl, isl), (osl, osl)))
        out["notes"].append(f"simulated: {out['simulation']['requests']:,} requests per replica through the scheduler "
                            f"(seed {out['simulation']['seed']}), from an empty replica as a benchmark counts them; the figures above are the fluid model's means, "
                            "the simulation's tails are its own (docs/serving.md, Simulated tails)")
    if spread is not None and math.isfinite(float(res["ttft_s"])):
        _percentiles(out, res, spread)
    return out


def _lengths(model, isl, osl, isl_range, osl_range, concurrency, rate, batch, disagg):
    """(spread or None, isl, osl): the request lengths, checked; a spread's mean lengths stand for isl/osl."""
    spread = None
    # None is the default, as every keyword of the API (docs/api.md): isl=None had been a TypeError
    isl = DEFAULT_ISL if isl is None else isl
    osl = DEFAULT_OSL if osl is None else osl
    if isl_range is not None or osl_range is not None:
        ir = _range(isl_range, "isl-range", model.max_seq) if isl_range is not None else (int(isl), int(isl))
        orr = _range(osl_range, "osl-range", model.max_seq) if osl_range is not None else (int(osl), int(osl))
        if ir[1] + orr[1] > model.max_seq:
            raise UserError(f"the longest request, {ir[1]:,} + {orr[1]:,} tokens, exceeds {model.name}'s context of "
                            f"{model.max_seq:,}")
        if concurrency is None and (rate is None or math.isinf(float(rate))) or batch is not None or disagg is not None:
            raise UserError("--isl-range / --osl-range spread the lengths of a --concurrency or --rate load (the "
                            "percentiles of its steady state); offline, --batch and --disagg runs are not modelled "
                            "with a spread")
        spread = (ir, orr)
        isl, osl = round((ir[0] + ir[1]) / 2), round((orr[0] + orr[1]) / 2)
    isl = _int(isl, "isl", 1, model.max_seq, f"{model.name}'s context, max_seq")
    osl = _int(osl, "osl", 1, model.max_seq, f"{model.name}'s context, max_seq")
    if isl + osl > model.max_seq:
        raise UserError(f"--isl {isl:,} + --osl {osl:,} = {isl + osl:,} tokens exceeds {model.name}'s context of "
                        f"{model.max_seq:,}")
    return spread, isl, osl


def runs_on(engine, hw) -> bool:
    """Whether ``engine`` runs on ``hw``'s GPU generation (Engine.generations; a GPU of no stated
    generation is taken to)."""
    gens = engine.generations
    return gens is None or hw.gpu.generation is None or hw.gpu.generation in gens


def check_engine_runs_on(engine, hw) -> None:
    if not runs_on(engine, hw):
        raise UserError(f"--engine {engine.name} runs on {', '.join(engine.generations)} GPUs only, not "
                        f"{hw.name}'s {hw.gpu.generation} (give --engine vllm or sglang)")


def _check_load_options(d, kind, concurrency, rate, batch, prompts, simulate, seed, disagg) -> None:
    """The load's own options, each checked once, before anything is priced: the numbers' ranges
    (concurrency, batch, prompts, rate, --simulate, --seed, --disagg) and which combinations are
    modelled (--simulate needs a Poisson --rate; --disagg whole replicas under a Poisson --rate)."""
    _int(concurrency, "concurrency")
    _int(batch, "batch")
    _int(prompts, "prompts")
    if rate is not None and not float(rate) > 0:
        raise UserError(f"--rate must be positive requests/s or inf, got {rate!r}")
    poisson = kind == "rate" and rate is not None and math.isfinite(float(rate))
    if seed is not None and simulate is None:   # an option that changes nothing is refused, not ignored
        raise UserError("--seed seeds --simulate's arrivals and lengths: give --simulate N with it (the fluid "
                        "model's figures have no randomness)")
    if simulate is not None and disagg is not None:
        raise UserError("--simulate with --disagg is not modelled: the scheduler simulation runs one colocated "
                        "replica, and the disaggregated pools are priced at their steady state")
    if simulate is not None:
        from llmpar.cost.serving_sim import MAX_REQUESTS as SIM_MAX   # only when asked: not on serve's start-up path

        _int(simulate, "simulate", 1, SIM_MAX)
        if seed is not None:
            _int(seed, "seed", 0, 2**31)
        if not poisson:
            # a closed loop of identical requests keeps its waves in the published runs (vLLM, 1,000
            # prompts at concurrency 100: TTFT 1.64 s measured), which this scheduler model does not
            # reproduce (it staggers them: 0.56 s): refused rather than printed (docs/serving.md,
            # Simulated tails)
            raise UserError("--simulate runs a Poisson --rate load; closed loops (--concurrency) keep waves this "
                            "simulation does not reproduce, and offline or --batch runs have no steady state to "
                            "sample")
    if disagg is not None:
        size = d.tp * d.pp
        P = _int(disagg, "disagg", 1, d.gpus)
        if P % size or (d.gpus - P) < size or (d.gpus - P) % size:
            # without --tp, tp fills --gpus: a suggestion of twice the GPUs would only double tp again
            # (--disagg 1 --gpus 2 had suggested --disagg 2 --gpus 4, which suggested --disagg 4 --gpus 8)
            raise UserError(f"--disagg {P}: the prefill and decode pools are whole replicas of tp x pp = {size} GPUs "
                            f"out of --gpus {d.gpus} (e.g. --disagg {size} with --gpus {2 * size} and --tp {d.tp}, or "
                            f"--tp {max(1, P // d.pp)} for a prefill pool of {P} GPU{'s' * (P != 1)})")
        if not poisson:
            raise UserError("--disagg is modelled under Poisson arrivals: give --rate R (requests/s)")
        if prompts is not None:   # the pools are modelled at their steady state only
            raise UserError("--prompts with --disagg is not modelled: the disaggregated pools are priced at "
                            "their steady state under --rate")
        if d.spec_tokens or d.prefix_hit:
            raise UserError("--disagg with --spec-tokens or --prefix-hit is not modelled")
        if d.dp_attention:
            # cost/serving_disagg.py splits a request's KV over the tp ranks; under data-parallel
            # attention one rank holds it whole, so the transfer would be understated by tp
            raise UserError("--disagg with --dp-attention is not modelled (the KV hand-off assumes tp-sharded KV)")


def _capacity(model, hw, engine, d, max_num_seqs, max_num_batched_tokens, memory_fraction) -> dict[str, Any]:
    """The replica's KV pool and scheduler limits (cost/serving_capacity.py), the engine's options checked."""
    seqs = _int(max_num_seqs, "max_num_seqs", 1, 1_048_576)
    budget = _int(max_num_batched_tokens, "max_num_batched_tokens", *BUDGET_RANGE)
    if memory_fraction is not None and (isinstance(memory_fraction, (bool, np.bool_)) or not (
            isinstance(memory_fraction, (int, float, np.integer, np.floating)) and 0 < memory_fraction <= 1)):
        raise UserError(f"--memory-fraction must be in (0, 1], got {memory_fraction!r}")
    sched, gen = engine.scheduler, hw.gpu.generation
    seqs_v = per_gen(sched.max_num_seqs, gen) if seqs is None else seqs
    budget_v = per_gen(sched.max_num_batched_tokens, gen) if budget is None else budget
    if sched.budget_covers_seqs and budget_v < seqs_v:
        given = ("--max-num-batched-tokens" if budget is not None else "--max-num-seqs" if seqs is not None
                 else f"engine {engine.name}'s scheduler")
        raise UserError(f"{given}: {engine.name} refuses max_num_batched_tokens {int(budget_v):,} below max_num_seqs "
                        f"{int(seqs_v):,} (every running sequence takes a token of the iteration): raise "
                        "--max-num-batched-tokens or lower --max-num-seqs")
    return kv_capacity(model, hw, engine, tp=d.tp, pp=d.pp, weights=d.weights, kv_dtype=d.kv_dtype,
                       memory_fraction=memory_fraction, max_num_seqs=seqs, max_num_batched_tokens=budget,
                       dp_attention=d.dp_attention)


def _notes(hw, weights, d, model=None) -> list[str]:
    """The notes a deployment's precision and options bring (the checkpoint's own precision,
    weight-only fp4, drafts, DP attention, prefix cache)."""
    notes = []
    served = {"fp8": "fp8", "mxfp4": "mxfp4", "awq 4-bit": "int4", "gptq 4-bit": "int4", "gptq 8-bit": "int8",
              "bitsandbytes 8-bit": "int8"}
    if model is not None and model.checkpoint and served.get(model.checkpoint) != weights:
        notes.append(f"the checkpoint is {model.checkpoint} (its config.json's quantization_config); the weights "
                     f"are costed as --weights {weights}: give the precision the engine will serve")
    if weights in ("nvfp4", "mxfp4") and compute_dtype(hw, weights) != "fp4":
        notes.append(f"{hw.name} states no fp4 peak: {weights} weights are read at 4 bits and "
                     "multiplied in 16-bit (weight-only)")
    elif weights == "fp8" and compute_dtype(hw, weights) != "fp8":
        # an A100 has no FP8 tensor cores: the weights are read at 8 bits and dequantised (vLLM's
        # Marlin FP8 weight-only kernels on Ampere), the prefill is a 16-bit GEMM
        notes.append(f"{hw.name} states no fp8 peak: fp8 weights are read at 8 bits and multiplied in 16-bit "
                     "(weight-only: the decode reads half the bytes, the prefill computes at the bf16 peak)")
    if d.spec_tokens:
        notes.append(f"speculative decoding: {d.spec_tokens} draft tokens at acceptance {d.acceptance:g} emit "
                     f"{load.accepted_per_step(d.dep()):.2f} tokens per step (Leviathan et al. 2023 eq. 1); no "
                     "published run with it is in the evidence: the bands do not cover it")
    if d.dp_attention:
        notes.append(f"data-parallel attention: each of the {d.tp} GPUs holds the whole attention and its own "
                     "sequences' KV cache, the experts spread over all of them (DeepSeek-V3 §3.4); no "
                     "comparable published run is in the evidence: the bands do not cover it")
    if d.prefix_hit:
        notes.append(f"prefix cache: {d.prefix_hit:.0%} of each prompt reused (prefill computes the rest); "
                     "no published run with it is in the evidence")
    return notes


def _busy(kind: str, concurrency, replicas: int) -> int:
    """Replicas with a request: all of them, but under a closed loop of fewer clients than replicas
    only as many as the clients (the others idle)."""
    return min(int(concurrency), replicas) if kind == "concurrency" else replicas


def _run_load(model, hw, engine, d, out, kind, concurrency, rate, batch, prompts, isl, osl, limit, budget,
              spread) -> dict[str, Any]:
    """One replica's figures under its share of the load (cost/serving_load.py, serving_finite.py); the
    load's options go into ``out``."""
    r = d.replicas
    if kind == "concurrency":
        C = int(concurrency)
        # requests of different lengths do not stay in step: a spread runs the steady mixed state,
        # not the waves of identical requests (cost/serving_load.closed_loop). Fewer clients than
        # replicas leave replicas idle: each busy one serves at least one client (C/r of a client
        # had read a TTFT below one prompt's prefill: 1 client on 2 replicas of tp 4)
        busy = _busy(kind, C, r)
        res = load.closed_loop(model, hw, engine, d.dep(), isl, osl, C / busy, limit, budget, waves=spread is None)
        for key in ("requests_per_s", "output_tokens_per_s", "running"):   # serve() scales by r
            res[key] = res[key] * busy / r
        out["concurrency"] = C
    elif kind == "batch":
        B = int(batch)
        if B > limit * r:
            raise UserError(f"--batch {B:,} exceeds what the KV cache holds at {isl + osl:,} tokens per request "
                            f"({int(limit * r):,})")
        res = load.static_batch(model, hw, engine, d.dep(), isl, osl, B / r)
        out["batch"] = B
    else:
        lam = math.inf if rate is None else float(rate)
        if math.isinf(lam):
            N = int(prompts if prompts is not None else DEFAULT_PROMPTS)
            res = load.offline(model, hw, engine, d.dep(), isl, osl, N / r, limit, budget)
            out["prompts"] = N
            out["load"] = "offline"
        elif prompts is not None:   # a benchmark of N requests at the rate: the run in time
            N = int(prompts)
            res = finite_rate(model, hw, engine, d.dep(), isl, osl, lam / r, N / r, limit, budget)
            res["capacity_requests_per_s"] *= r
            out["rate"] = lam
            out["prompts"] = N
        else:
            res = load.open_loop(model, hw, engine, d.dep(), isl, osl, lam / r, limit, budget)
            res["capacity_requests_per_s"] *= r
            out["rate"] = lam
    return res


def _percentiles(out, res, spread) -> None:
    """A length spread's percentiles in the steady state (cost/serving_tails.py), its ranges and its note."""
    out["percentiles"] = length_percentiles(res, *spread)
    out["isl_range"], out["osl_range"] = list(spread[0]), list(spread[1])
    out["notes"].append(f"length spread: prompts uniform on {spread[0][0]:,}-{spread[0][1]:,} tokens, outputs on "
                        f"{spread[1][0]:,}-{spread[1][1]:,}; the steady state is the mean lengths' and the "
                        "percentiles are the requests' spread in it: arrival and batch variance (a queue's own "
                        "tail) are not in them (docs/serving.md, Length spread)")


def _simulate(model, hw, engine, d, cap, budget, rate, n, seed, spread) -> dict[str, Any]:
    """--simulate N: one replica's discrete-event run (cost/serving_sim.py) at its share of the load."""
    from llmpar.cost.serving_sim import simulate as run_sim

    r = d.replicas   # a Poisson --rate load (_check_load_options)
    seed = 0 if seed is None else int(seed)   # None: the documented default seed
    sim = run_sim(model, hw, engine, d.dep(), isl_range=spread[0], osl_range=spread[1], n_requests=int(n),
                  kv_tokens=float(cap["kv_tokens"]), max_seqs=int(cap["max_num_seqs"]), budget=int(budget),
                  seed=seed, rate=float(rate) / r)
    for key in ("output_tokens_per_s", "requests_per_s"):
        if sim[key] is not None:
            sim[key] *= r
    return {**sim, "seed": int(seed), "replicas": r}

def _disagg(model, hw, engine, d, out, prefill_gpus, rate, isl, osl, limit, budget):
    """--disagg P: P of the GPUs prefill, the rest decode (cost/serving_disagg.py)."""
    from llmpar.cost.serving_disagg import disaggregated

    size = d.tp * d.pp
    P = int(prefill_gpus)   # whole replicas under a Poisson --rate (_check_load_options)
    res = disaggregated(model, hw, engine, d.dep(), isl, osl, float(rate), P // size, (d.gpus - P) // size, limit,
                        budget)
    out.update(figures=res, rate=float(rate), disagg={"prefill_gpus": P, "decode_gpus": d.gpus - P,
                                                      "prefill_replicas": P // size,
                                                      "decode_replicas": (d.gpus - P) // size})
    out["max_concurrency"] = int(limit * ((d.gpus - P) // size))
    out["breakdown"] = _breakdown(model, hw, engine, d, res["running"] / max(1, (d.gpus - P) // size) / d.pp,
                                  isl, osl)
    out["notes"].append(f"disaggregated: {P} GPUs prefill, {d.gpus - P} decode; the KV cache of a prompt crosses "
                        f"{hw.tiers[-1].name} in {res['kv_transfer_s'] * 1e3:.3g} ms; no comparable published run is "
                        "in the evidence (the shipped disaggregated rows measure one pool each): the bands do not "
                        "cover it")
    return out

def _breakdown(model, hw, engine, d, decode, isl, osl) -> dict[str, Any]:
    """The decode iteration at the modelled batch, by term (docs/serving.md, One iteration)."""
    terms = iteration_terms(model, hw, engine, tp=d.tp, pp=d.pp, ep=d.ep, weights=d.weights, kv_dtype=d.kv_dtype,
                            decode=max(decode, 1e-9), context=isl + osl / 2.0, dp_attention=d.dp_attention)
    pf = iteration_terms(model, hw, engine, tp=d.tp, pp=d.pp, ep=d.ep, weights=d.weights, kv_dtype=d.kv_dtype,
                         prefill=isl, dp_attention=d.dp_attention)
    return {"decode": terms, "prefill": pf, "decode_batch": decode,
            "bandwidth_bound_s": terms["weight_bytes"] / hw.gpu.memory_bandwidth,
            "engine_per_step_s": per_gen(engine.overhead.per_step_s, hw.gpu.generation)}

def serve_api(model=None, *, hardware=DEFAULT_HARDWARE, engine=None, hf=None, gpus=None, tp=None, pp=None, ep=None,
              isl=DEFAULT_ISL, osl=DEFAULT_OSL, concurrency=None, rate=None, batch=None, prompts=None, weights="bf16",
              kv_dtype=None, max_num_seqs=None, max_num_batched_tokens=None, memory_fraction=None,
              interval_level=None, spec_tokens=None, acceptance=None, prefix_hit=None, dp_attention=False,
              disagg=None, isl_range=None, osl_range=None, simulate=None, seed=None, **unknown):
    """``llmpar.serve(...)``: the ServeResult of one deployment (docs/api.md, serve)."""
    from llmpar.errors import refuse_unknown
    from llmpar.evidence import level_value
    from llmpar.inputs import load_hardware_spec, load_model_spec
    from llmpar.parallel import flag
    from llmpar.serving import evidence
    from llmpar.serving.result import build
    from llmpar.specs.registry import load_engine

    refuse_unknown("serve", unknown, [k for k in locals() if k != "unknown"])
    dp_attention = flag(dp_attention, "dp_attention", default_none=False)
    level = level_value(interval_level)
    spec = load_model_spec(model, hf)[0]
    hw = load_hardware_spec(hardware)
    eng = load_engine(engine)
    if rate is not None:   # a number or its text, checked as the CLI's (serving/deployment._rate)
        rate = _rate(rate)
    out = serve(spec, hw, eng, gpus=gpus, tp=tp, pp=pp, ep=ep, isl=isl, osl=osl, concurrency=concurrency, rate=rate,
                batch=batch, prompts=prompts, weights=weights, kv_dtype=kv_dtype, max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens, memory_fraction=memory_fraction,
                spec_tokens=spec_tokens, acceptance=acceptance, prefix_hit=prefix_hit, dp_attention=dp_attention,
                disagg=disagg, isl_range=isl_range, osl_range=osl_range, simulate=simulate, seed=seed)
    iv = None
    if out["fits"]:
        d = out["deployment"]
        key = evidence.serve_class(eng.name, hw.gpu.generation, spec.moe is not None, d.weights, d.tp * d.pp)
        bands = evidence.intervals(key, level)
        f = out["figures"]
        # open loop below capacity: the throughput is the offered rate (no error); the band goes on
        # the capacity, what the model predicts there
        thr_key = "capacity_requests_per_s" if "capacity_requests_per_s" in f else "output_tokens_per_s"
        iv = {thr_key: evidence.interval_json(bands["throughput"], f[thr_key], False)}
        if math.isfinite(f["ttft_s"]):
            iv["ttft_s"] = evidence.interval_json(bands["ttft"], f["ttft_s"], True)
        if out["osl"] > 1:   # the resolved length (osl=None is the default; a range its mean)
            iv["tpot_s"] = evidence.interval_json(bands["tpot"], f["tpot_s"], True)
            if "itl_median_s" in f and math.isfinite(f["itl_median_s"]):
                # the TPOT residuals hold both kinds of token gap (published means and medians are
                # each compared with their own figure): one band for both
                iv["itl_median_s"] = evidence.interval_json(bands["tpot"], f["itl_median_s"], True)
    result = build(spec, hw, eng, out, iv, disagg)
    result.settings["interval_level"] = level   # serve()'s keyword: a 95 % run round-trips at 95 %
    return result

