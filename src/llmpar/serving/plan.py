"""`llmpar serve-plan`: the deployment that serves a load within latency targets at least cost.

docs/serving.md, "serve-plan". Every candidate is evaluated with the same functions as
`llmpar serve` (:mod:`llmpar.cost.serving_load`), on arrays of concurrencies at once:

* candidates: engine x weight precision x KV-cache precision (``--kv-dtype bf16,fp8``) x (tp, pp)
  with tp a power of two dividing the heads, at most the scale-up domain, x for an MoE model the
  experts sharded over TP (ep 1) or spread over the replica's GPUs (ep = tp: vLLM
  --enable-expert-parallel), and tp·pp replicas that fit the model and hold a KV pool;
* operating point of one replica: the closed loop at C = 1, 2, 4, ... up to its max concurrency
  (and the max itself); the steady state of a closed loop at C is that of an open loop at its
  throughput X(C), so the largest X(C) whose TTFT and TPOT meet the targets is the replica's rate
  under the SLO (the "goodput" of Zhong et al. 2024, DistServe, arXiv:2401.09670, §2.2);
* ``--gpus N``: replicas = N / (tp·pp), ranked by output tokens/s within the SLO;
  ``--rate R``: replicas = ceil(R / rate under SLO) on the steady mixed state's points (waves
  are a closed loop's, not Poisson arrivals'), and the row's figures are ``serve --rate R``'s for
  it: the open loop at R / replicas on each (one replica more while that misses a target),
  ranked by GPUs (then tokens/s per GPU); by
  rate with ``--disagg`` also disaggregated pools of the same replica shape (p prefill + d decode
  replicas, cost/serving_disagg.py under Poisson arrivals at R), the fewest replicas whose TTFT and
  TPOT meet the targets, a colocated deployment first on equal GPUs (the simpler one); opt-in,
  because no comparable published run validates the disaggregated model;
* cost per million output tokens = GPUs x price per GPU-hour / (output tokens/s x 3600) x 1e6;
* the frontier: for each candidate's points, output tokens/s per GPU against per-user tokens/s
  (1/TPOT), the non-dominated ones (the plot serving engineers read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmpar.cost import serving_load as load
from llmpar.cost.serving import KV_DTYPES, WEIGHT_DTYPES
from llmpar.cost.serving_capacity import kv_capacity, max_concurrency, prompt_exceeds_budget
from llmpar.errors import CheckFailed, UserError

MAX_TP = 64


@dataclass
class Candidate:
    engine: str
    weights: str
    tp: int
    pp: int
    replicas: int
    gpus: int
    max_concurrency: int
    concurrency: int | None = None    # per replica, at the chosen operating point
    ttft_s: float | None = None
    tpot_s: float | None = None
    output_tokens_per_s: float | None = None   # the deployment
    requests_per_s: float | None = None
    cost_per_million_tokens: float | None = None
    meets: bool = False
    binding: str = ""
    miss_ratio: float = 0.0           # the binding target's value at C = 1 over the target (> 1: missed)
    points: list[dict[str, float]] = field(default_factory=list)
    kv_dtype: str = "bf16"
    ep: int = 1
    max_num_batched_tokens: int | None = None   # the engine's per-iteration token budget
    disagg: dict[str, int] | None = None        # {prefill_replicas, decode_replicas}: disaggregated pools
    dp_attention: bool = False                  # attention data-parallel over the tp GPUs, experts over all
    spec: dict[str, Any] | None = None          # {spec_tokens, acceptance}: speculative decoding
    interval: dict[str, Any] | None = None      # bands of ttft_s, tpot_s, output_tokens_per_s (serve's)

    @property
    def output_tokens_per_s_per_gpu(self) -> float | None:
        return (self.output_tokens_per_s / self.gpus) if self.output_tokens_per_s else None

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("engine", "weights", "kv_dtype", "tp", "pp", "ep", "replicas", "gpus",
                                           "max_num_batched_tokens", "disagg", "dp_attention", "spec", "interval", "max_concurrency",
                                           "concurrency", "ttft_s", "tpot_s", "output_tokens_per_s",
                                           "requests_per_s", "cost_per_million_tokens", "meets", "binding", "miss_ratio")}
        d["output_tokens_per_s_per_gpu"] = self.output_tokens_per_s_per_gpu
        return d


def _tps(model, hw) -> list[int]:
    out, t = [], 1
    while t <= min(MAX_TP, hw.nvlink_domain):
        if model.heads % t == 0:
            out.append(t)
        t *= 2
    return out


DISAGG_MAX_REPLICAS = 64   # the largest pool pair serve-plan --rate tries


def _disagg_choice(model, hw, engine, dep, isl, osl, rate, limit, budget, ttft, tpot, most):
    """The fewest replicas n <= ``most`` (a colocated deployment's count: more would never win) and
    the split p + d = n whose disaggregated pools meet the targets at ``rate`` (the lowest TTFT
    among the splits that do), as {prefill_replicas, decode_replicas, figures}; None when none
    does. Every split of one n is one array evaluation (cost/serving_disagg.py is array-polymorphic
    in the pool sizes through the rate per replica)."""
    from llmpar.cost.serving_disagg import disaggregated

    # every split of every n at once (one call: a loop over n had taken a minute at --rate 1e5,
    # where no n meets the targets)
    n = np.concatenate([np.full(k - 1, float(k)) for k in range(2, int(most) + 1)]) if most >= 2 else np.zeros(0)
    p = np.concatenate([np.arange(1, k, dtype=float) for k in range(2, int(most) + 1)]) if most >= 2 else np.zeros(0)
    if not n.size:
        return None
    f = disaggregated(model, hw, engine, dep, isl, osl, float(rate) + 0.0 * p, p, n - p, limit, budget)
    ok = ~np.asarray(f["saturated"], dtype=bool)
    if ttft is not None:
        ok &= np.asarray(f["ttft_s"]) <= ttft
    if tpot is not None and osl > 1:
        ok &= np.asarray(f["tpot_s"]) <= tpot
    if not ok.any():
        return None
    ok &= n == n[ok].min()          # the fewest replicas, then the lowest TTFT among their splits
    i = int(np.flatnonzero(ok)[np.argmin(np.asarray(f["ttft_s"])[ok])])
    return {"prefill_replicas": int(p[i]), "decode_replicas": int(n[i] - p[i]),
            "figures": {k: float(np.asarray(v)[i]) for k, v in f.items() if np.ndim(v)}}


def _fill_disagg(c: Candidate, split: dict[str, Any], rate: float, osl: int, price) -> None:
    f = split["figures"]
    size = c.tp * c.pp
    c.disagg = {"prefill_replicas": split["prefill_replicas"], "decode_replicas": split["decode_replicas"]}
    c.replicas = split["prefill_replicas"] + split["decode_replicas"]
    c.gpus = c.replicas * size
    c.ttft_s, c.tpot_s = f["ttft_s"], f["tpot_s"]
    c.requests_per_s, c.output_tokens_per_s = float(rate), float(rate) * osl
    c.meets = True
    if price is not None:
        c.cost_per_million_tokens = c.gpus * price / (c.output_tokens_per_s * 3600.0) * 1e6


def _bands(model, hw, c: Candidate) -> dict[str, Any]:
    """A shown candidate's 80 % bands, as `serve` prints them for the same deployment
    (serving/evidence.py: engine x GPU generation x dense/MoE x weights x replica size). A row that
    rests on an option no published run measured (disaggregated pools, data-parallel attention,
    speculative decoding) carries its class's band and says the option is outside it."""
    from llmpar.serving import evidence

    bands = evidence.intervals(evidence.serve_class(c.engine, hw.gpu.generation, model.moe is not None, c.weights,
                                                    c.tp * c.pp))
    out = {"output_tokens_per_s": evidence.interval_json(bands["throughput"], c.output_tokens_per_s, False)}
    for key, kind in (("ttft_s", "ttft"), ("tpot_s", "tpot")):
        value = getattr(c, key)
        if value is not None and math.isfinite(value):
            out[key] = evidence.interval_json(bands[kind], value, True)
    unmeasured = [name for name, on in (("disaggregated pools", c.disagg), ("data-parallel attention", c.dp_attention),
                                        ("speculative decoding", c.spec)) if on]
    if unmeasured:
        out["note"] = f"{' and '.join(unmeasured)}: no published run measured it; the band is its class's without it"
    return out


def _spec(spec_tokens, acceptance) -> dict[str, Any] | None:
    """``--spec-tokens K --acceptance A`` (serve's rules, serving/deployment.py): every deployment is
    also evaluated with speculative decoding of K draft tokens accepted at A; None without."""
    from llmpar.serving.deployment import speculation

    k, a = speculation(spec_tokens, acceptance)
    return {"spec_tokens": k, "acceptance": a} if k else None


def _eps(model, tp: int, dp_attention: bool = False) -> list[tuple[int, bool]]:
    """(ep, data-parallel attention) searched at ``tp``: ep 1 (every expert sharded over the TP
    ranks) and, for an MoE model whose experts divide over them, ep = tp (each GPU holds experts/tp
    whole experts: vLLM --enable-expert-parallel, TRT-LLM --ep); with ``dp_attention``, ep = tp
    with the attention data-parallel too (SGLang --enable-dp-attention, TRT-LLM enable_attention_dp;
    DeepSeek-V3 §3.4)."""
    if model.moe is None or tp == 1 or model.moe.experts % tp:
        return [(1, False)]
    return [(1, False), (tp, False)] + ([(tp, True)] if dp_attention else [])


def _grid(limit: int) -> np.ndarray:
    """Concurrencies 1 .. limit in steps of 2^(1/4) (about 19 %), whole numbers, and the limit."""
    k = np.arange(0, math.floor(4 * math.log2(max(limit, 1))) + 1)
    return np.unique(np.append(np.round(2.0 ** (k / 4.0)), float(limit)))


def _points(model, hw, engine, weights, tp, pp, isl, osl, kv_dtype="bf16", ep=1, budget=None, dpa=False,
            spec=None, waves=True):
    """Closed-loop operating points of one replica: (cap, grid, figures) or None if it does not fit.
    ``budget``: the engine's max_num_batched_tokens (None: the engine profile's); ``dpa``:
    data-parallel attention (ep = tp); ``spec``: {spec_tokens, acceptance} of speculative decoding;
    ``waves``: clients in step (a benchmark's closed loop), else the steady mixed state."""
    cap = kv_capacity(model, hw, engine, tp=tp, pp=pp, weights=weights, kv_dtype=kv_dtype,
                      max_num_batched_tokens=budget, dp_attention=dpa)
    if not cap["fits"] or prompt_exceeds_budget(engine, cap["max_num_batched_tokens"], isl):
        return None
    limit = int(max_concurrency(cap, model, isl + osl))
    if limit < 1:
        return None
    C = _grid(limit)
    dep = {"tp": tp, "pp": pp, "ep": ep, "weights": weights, "kv_dtype": kv_dtype, "dp_attention": dpa,
           **(spec or {})}
    f = load.closed_loop(model, hw, engine, dep, isl, osl, C, limit, int(cap["max_num_batched_tokens"]), waves=waves)
    return limit, C, {k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in f.items()}, int(
        cap["max_num_batched_tokens"])


def plan(model, hw, engines: list, *, isl: int, osl: int, ttft: float | None, tpot: float | None,
         gpus: int | None = None, rate: float | None = None, weights: list[str] | None = None,
         price: float | None = None, max_pp: int = 8, kv_dtypes: list[str] | None = None,
         budgets: list[int] | None = None, disagg: bool = False, dp_attention: bool = False,
         spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rank every candidate (module docstring). ``engines``: loaded Engine profiles."""
    if (gpus is None) == (rate is None):
        raise UserError("give --gpus N (the best use of N GPUs) or --rate R (the fewest GPUs for R requests/s)")
    if isl + osl > model.max_seq:
        raise UserError(f"--isl {isl:,} + --osl {osl:,} exceeds {model.name}'s context of {model.max_seq:,}")
    weights = weights or ["bf16"]
    for w in weights:
        if w not in WEIGHT_DTYPES:
            raise UserError(f"unknown --weights {w!r}; choose from {', '.join(WEIGHT_DTYPES)}")
    kv_dtypes = kv_dtypes or ["bf16"]
    for k in kv_dtypes:
        if k not in KV_DTYPES:
            raise UserError(f"unknown --kv-dtype {k!r}; choose from {', '.join(KV_DTYPES)}")
    for name, vals in (("--weights", weights), ("--kv-dtype", kv_dtypes)):
        if len(set(vals)) != len(vals):
            raise UserError(f"{name}: {next(v for v in vals if vals.count(v) > 1)!r} is given twice")
    cands: list[Candidate] = []
    # pp: every depth up to max_pp that fills whole replicas of --gpus (3 GPUs: tp 1 x pp 3, which
    # a power-of-two list missed, and said "no KV pool at any tp x pp"); by rate, powers of two
    pps = [p for p in (range(1, max_pp + 1) if gpus is not None else (1, 2, 4, 8)) if p <= max_pp and p <= model.layers]
    for eng in engines:
        for w in weights:
            # data-parallel attention at pp 1 only, as `serve --dp-attention` models it
            for tp, pp, kv, (ep, dpa), bt, sp in ((t, p, k, e, b, s) for t in _tps(model, hw) for p in pps
                                                  for k in kv_dtypes for e in _eps(model, t, dp_attention and p == 1)
                                                  for b in (budgets or [None]) for s in ([None] + ([spec] if spec else []))):
                size = tp * pp
                if gpus is not None and (gpus % size):
                    continue
                got = _points(model, hw, eng, w, tp, pp, isl, osl, kv, ep, bt, dpa, sp, waves=gpus is not None)
                if got is None:
                    continue
                limit, C, f, budget = got
                cand = _choose(eng.name, w, tp, pp, limit, C, f, isl, osl, ttft, tpot, gpus, rate, price)
                cand.kv_dtype, cand.ep, cand.max_num_batched_tokens, cand.dp_attention = kv, ep, budget, dpa
                cand.spec = sp
                if rate is not None and cand.meets:
                    _at_rate(cand, model, hw, eng, {"tp": tp, "pp": pp, "ep": ep, "weights": w, "kv_dtype": kv,
                                                    "dp_attention": dpa, **(sp or {})}, isl, osl, budget, rate,
                             ttft, tpot, price)
                cands.append(cand)
                if disagg and not dpa and sp is None:
                    dep = {"tp": tp, "pp": pp, "ep": ep, "weights": w, "kv_dtype": kv}
                    split = _disagg_choice(model, hw, eng, dep, isl, osl, rate, limit, budget, ttft, tpot,
                                           min(cand.replicas, DISAGG_MAX_REPLICAS) if cand.meets else DISAGG_MAX_REPLICAS)
                    if split is not None:
                        dc = Candidate(eng.name, w, tp, pp, 0, 0, limit, kv_dtype=kv, ep=ep,
                                       max_num_batched_tokens=budget)
                        _fill_disagg(dc, split, rate, osl, price)
                        cands.append(dc)
    if not cands:
        raise_nothing_fits(model, hw, gpus, _tps(model, hw), pps)
    key = ((lambda c: (-c.output_tokens_per_s,)) if gpus is not None
           else (lambda c: (c.gpus, c.disagg is not None, -(c.output_tokens_per_s / c.gpus))))
    ok = sorted((c for c in cands if c.meets), key=key)
    miss = sorted((c for c in cands if not c.meets), key=lambda c: c.miss_ratio)
    return {"candidates": ok, "missed": miss, "frontier": _frontier(cands), "evaluated": len(cands)}


def raise_nothing_fits(model, hw, gpus, tps=(), pps=()):
    searched = (f" searched: tp in {{{', '.join(map(str, tps))}}} (powers of two dividing {model.heads} heads, within "
                f"the {hw.nvlink_domain}-GPU NVLink domain), pp in {{{', '.join(map(str, pps))}}}"
                + (f", tp x pp dividing {gpus}" if gpus else "")) if tps else ""
    raise CheckFailed(f"no deployment of {model.name} fits on {hw.name}" + (f" within {gpus} GPUs" if gpus else "")
                      + ": the weights leave no KV pool at any tp x pp" + (";" + searched if searched else ""))


def _choose(engine, weights, tp, pp, limit, C, f, isl, osl, ttft, tpot, gpus, rate, price) -> Candidate:
    ok = np.ones(C.shape, dtype=bool)
    if ttft is not None:
        ok &= f["ttft_s"] <= ttft
    if tpot is not None and osl > 1:
        ok &= f["tpot_s"] <= tpot
    size = tp * pp
    points = [{"concurrency": float(c), "ttft_s": float(a), "tpot_s": float(b), "requests_per_s": float(x),
               "output_tokens_per_s_per_gpu": float(x * osl / size)}
              for c, a, b, x in zip(C, f["ttft_s"], f["tpot_s"], f["requests_per_s"])]
    cand = Candidate(engine, weights, tp, pp, 0, 0, limit, points=points)
    if not ok.any():
        # the loosest point (C = 1) still misses: say which target binds there
        cand.binding = ("TTFT" if ttft is not None and f["ttft_s"][0] > ttft else "TPOT")
        cand.ttft_s, cand.tpot_s = float(f["ttft_s"][0]), float(f["tpot_s"][0])
        cand.miss_ratio = (cand.ttft_s / ttft if cand.binding == "TTFT" else cand.tpot_s / tpot)
        cand.replicas = (gpus // size) if gpus else 0
        cand.gpus = cand.replicas * size
        return cand
    i = int(np.flatnonzero(ok)[np.argmax(f["requests_per_s"][ok])])
    X = float(f["requests_per_s"][i])
    replicas = gpus // size if gpus is not None else max(1, math.ceil(rate / X))
    cand.replicas, cand.gpus = replicas, replicas * size
    cand.concurrency = int(C[i])
    cand.ttft_s, cand.tpot_s = float(f["ttft_s"][i]), float(f["tpot_s"][i])
    served = X * replicas if gpus is not None else rate
    cand.requests_per_s = served
    cand.output_tokens_per_s = served * osl
    cand.meets = True
    if price is not None:
        cand.cost_per_million_tokens = cand.gpus * price / (cand.output_tokens_per_s * 3600.0) * 1e6
    return cand


def _at_rate(cand, model, hw, engine, dep, isl, osl, budget, rate, ttft, tpot, price, tries: int = 8) -> None:
    """A --rate row's figures: `serve --rate R`'s for its deployment, Poisson arrivals at R/replicas
    on each replica (load.open_loop, as serving/run.py splits a rate). The replicas came from the
    mixed state's X(C), which is the open loop's rate at C running, so they meet the targets there;
    where rounding the grid does not, one replica more, up to ``tries``."""
    for _ in range(tries):
        f = load.open_loop(model, hw, engine, dep, isl, osl, rate / cand.replicas, cand.max_concurrency, budget)
        slow_ttft = ttft is not None and not f["ttft_s"] <= ttft
        slow_tpot = tpot is not None and osl > 1 and not f["tpot_s"] <= tpot
        if not (f["saturated"] or slow_ttft or slow_tpot):
            break
        cand.replicas += 1
    else:   # still missing: listed among those that miss, with the target that binds
        cand.replicas -= 1
        cand.meets = False
        cand.binding = "TTFT" if slow_ttft else "TPOT"
        cand.miss_ratio = float(f["ttft_s"]) / ttft if slow_ttft else float(f["tpot_s"]) / tpot if slow_tpot else 1.0
    cand.gpus = cand.replicas * cand.tp * cand.pp
    cand.ttft_s, cand.tpot_s = float(f["ttft_s"]), float(f["tpot_s"])
    cand.concurrency = max(1, round(float(f["running"])))
    if price is not None:
        cand.cost_per_million_tokens = cand.gpus * price / (cand.output_tokens_per_s * 3600.0) * 1e6


def _frontier(cands: list[Candidate]) -> list[dict[str, Any]]:
    """Non-dominated (output tokens/s per GPU, tokens/s per user) points over every candidate."""
    pts = []
    for c in cands:
        for p in c.points:
            if p["tpot_s"] and math.isfinite(p["tpot_s"]):
                pts.append({"engine": c.engine, "weights": c.weights, "tp": c.tp, "pp": c.pp,
                            "concurrency": p["concurrency"], "tokens_per_s_per_gpu": p["output_tokens_per_s_per_gpu"],
                            "tokens_per_s_per_user": 1.0 / p["tpot_s"], "ttft_s": p["ttft_s"]})
    pts.sort(key=lambda p: (-p["tokens_per_s_per_user"], -p["tokens_per_s_per_gpu"]))
    out, best = [], -1.0
    for p in pts:
        if p["tokens_per_s_per_gpu"] > best:
            out.append(p)
            best = p["tokens_per_s_per_gpu"]
    return out
