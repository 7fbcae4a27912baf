"""A serving replica under load: TTFT, TPOT, end-to-end latency and throughput.

docs/serving.md, "Under load". A fluid (mean-value) model of continuous batching with chunked
prefill (Agrawal et al. 2024, Sarathi-Serve, arXiv:2403.02310, §3-4; vLLM's V1 scheduler), for
requests of I prompt and O output tokens, built on :func:`llmpar.cost.serving.iteration_terms`.
With n requests running and an iteration budget of B tokens (``max_num_batched_tokens``):

* **Flow balance.** Per iteration r requests finish their prefill and r finish decoding; the d
  decoding sequences each add one token, so d = (O − 1)·r. A prompt alone needs
  k₁ = max(1, I/(B − d)) iterations (chunks of at most B − d tokens), so with the cycle unhindered
  r = n/(O − 1 + k₁); the budget caps the prompt tokens an iteration takes: r·I ≤ B − d. Hence
  r = min(n/(O − 1 + k₁), (B − d)/I), solved with d (a few passes: B − d moves with d).
* **Iterations.** Prompt tokens arrive at p̄ = r·I per iteration, in chunks of
  c = min(max(I, p̄), B − d); a share φ = min(1, p̄/c) of the iterations carries one. The mean
  iteration t̄ = (1 − φ)·t(d, 0) + φ·t(d, c): decodes wait for the chunks their iterations carry
  (prefill–decode interference, Sarathi-Serve §3).
* **Figures.** A request spends k_p = (n − d)/r iterations in prefill (waiting for budget
  included). TPOT = t̄ (vLLM's TPOT: (e2e − ttft)/(O − 1), the mean iteration a request decodes
  in); TTFT = t̄/2 (the iteration under way when it arrives) + k_p·t(d, c) + the engine's
  per-request cost + queueing; e2e = TTFT + (O − 1)·TPOT; requests/s X = min(n / e2e_run, r/t̄)
  (Little's law, Little 1961, and the flow); output tokens/s = X·O. The median token gap (a
  benchmark's median ITL): t(d, 0) while φ < 1/2 (most iterations carry no chunk), else the gap
  of one that does.
* **Prefill of its own** (``scheduler.mixed_prefill`` false: SGLang's default, ServerArgs
  enable_mixed_chunk False). A prefill iteration takes the whole budget and no decodes; the
  decodes wait for it: t̄ = t(d, 0) + φ·t(0, c), a prompt's time in prefill t(0, c) + (k_p − 1)·t̄,
  and in waves no decode step runs inside the prefill phase.
* Closed loop (C clients, each sending its next request when the last one ends; ``vllm bench
  serve --max-concurrency C``): n = min(C, max concurrency); queueing W = C/X − e2e when C > n.
* **Waves.** Clients that start together with identical requests (a fixed-length benchmark, an
  offline batch) stay in step: each wave prefills its n·I prompt tokens in
  k = ceil(n·I/(B − d_p)) iterations of t_p (d_p = n(k − 1)/(2k), the prompts already done
  decoding meanwhile), then decodes at batch n (t_d). A prompt in chunk j has its first token at
  j·t_p: TTFT = (k + 1)/2·t_p; it takes m = min(O − 1, (k − 1)/2) of its decode steps inside the
  prefill phase: TPOT = (m·t_p + (O − 1 − m)·t_d)/(O − 1); X = n/e2e (Little), at most one
  wave's n requests per k·t_p + (O − 1)·t_d (the last prompt's prefill and decode). On a published
  vLLM run (Llama 3.1 70B, 8 x H100, TP 8, 1,000 prompts of 1,023/128 tokens at concurrency 100,
  tests/data/serving/) the waves give TTFT 1.6 s where the mixed state gives 0.1 s: the run
  measured 1.64 s. A prompt longer than the budget is prefilled in chunks one prompt after
  another, which staggers the clients: there the mixed state holds (vLLM's FP8-KV runs of
  20,000-token prompts at concurrency 8 measured TTFT 0.74-0.76 s; waves would say about 4 s).
* Open loop (Poisson arrivals at λ requests/s): n solves n = λ·e2e(n) (Little's law); above the
  rate the largest n sustains, the queue grows without bound (saturated: no steady state).
* Offline (N requests at once, ``--rate inf``): the engine runs as the closed loop at n = min(N,
  limit); a request waits for a slot once (:func:`offline_wait`: in waves of n, or one slot at a
  time when staggered, both ≈ N/(2X) for N ≫ n), where the closed loop's clients wait C/X − e2e
  every cycle; duration N/X. Every prompt admitted at once (N ≤ limit) is one wave however long
  each prompt is (``burst``): the staggering of prompts longer than the budget needs clients that
  resubmit.
* A finite run (N requests arriving at λ/s, a benchmark's ``--num-prompts``): the fluid model in
  time, :func:`llmpar.cost.serving_finite.finite_rate`.
* Static batch (B requests prefilled together, then decoded together; no new arrivals).

Speculative decoding (``dep["spec_tokens"]`` k, ``dep["acceptance"]`` a) turns the O − 1 decode
iterations of a request into D = (O − 1)/E, E the expected tokens per step
(:func:`accepted_per_step`); a prefix-cache hit share (``dep["prefix_hit"]``) prefills only
I·(1 − h) tokens, attending to all I. The fluid model gives means (p50 of a fixed-length workload
equals its mean up to the iteration phase); it does not model tails. Array-polymorphic in the
load and the degrees.
"""

from __future__ import annotations

import numpy as np

from llmpar.cost.arrays import scalar_out
from llmpar.cost.serving import iteration_terms
from llmpar.specs.stack import per_gen


def accepted_per_step(dep):
    """Tokens a decode step emits: 1, or with speculative decoding of k draft tokens each accepted
    with probability a, E = (1 − a^(k+1))/(1 − a) (Leviathan et al. 2023, arXiv:2211.17192, §3.1,
    eq. 1; a = 1: k + 1)."""
    k, a = dep.get("spec_tokens", 0), dep.get("acceptance", 0.0)
    if not k:
        return 1.0
    return float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def _steps(dep, O):
    """Decode iterations a request of O output tokens takes: (O − 1)/E, and at least one while any
    token is left after the first (a step emits at most k + 1 tokens; the fluid mean had read a
    sixteenth of a step, and a TPOT of 1 ms under a 10 ms iteration, at O = 2 with 16 drafts)."""
    m = np.maximum(np.asarray(O, dtype=float) - 1.0, 0.0)
    return np.where(m > 0, np.maximum(m / accepted_per_step(dep), 1.0), 0.0)


def _prompt(dep, I):
    """(prompt tokens computed, tokens before them): with a prefix-cache hit share h the first I·h
    tokens' KV is reused, the other I·(1 − h) are computed and attend to all I."""
    h = dep.get("prefix_hit", 0.0)
    I = np.asarray(I, dtype=float)
    return np.maximum(I * (1.0 - h), 1.0), I * h


def _iter(model, hw, engine, dep, d, ctx, c, c0, seqs, span=None):
    """One iteration; with speculative decoding each decoding sequence verifies k + 1 tokens in the
    target and the draft proposes k (an EAGLE/MTP draft of one block: Li et al. 2024, EAGLE,
    arXiv:2401.15077, §3; DeepSeek-V3 §2.2), costing k/L of the target's decode-only iteration."""
    k = dep.get("spec_tokens", 0)
    dpa = bool(dep.get("dp_attention"))
    t = iteration_terms(model, hw, engine, tp=dep["tp"], pp=dep["pp"], ep=dep["ep"], weights=dep["weights"],
                        kv_dtype=dep["kv_dtype"], decode=d, context=ctx, prefill=c, prefill_context=c0,
                        prefill_seqs=seqs, prefill_span=span, decode_tokens=1 + k, dp_attention=dpa)
    if k:
        draft = iteration_terms(model, hw, engine, tp=dep["tp"], pp=dep["pp"], ep=dep["ep"], weights=dep["weights"],
                                kv_dtype=dep["kv_dtype"], decode=d, context=ctx, dp_attention=dpa)["total_s"]
        t = dict(t, total_s=t["total_s"] + np.where(np.asarray(d) > 0, k * draft / model.layers, 0.0))
    return t


def _chunk_context(cached, I, c):
    """Tokens a prefill chunk of c tokens attends to before itself: the cached prefix, and where a
    prompt of I tokens is longer than the chunk, on average the (I − c)/2 tokens of its earlier
    chunks (the chunks of a prompt go in order)."""
    return cached + np.where(I > c, (I - c) / 2.0, 0.0)


def _state(model, hw, engine, dep, isl, osl, n, budget):
    """The steady iteration with n running (module docstring): a dict of t̄, t(d, c), k_p, r, d."""
    I_full = np.asarray(isl, dtype=float)
    I, cached = _prompt(dep, I_full)
    O = np.asarray(osl, dtype=float)
    D = _steps(dep, O)
    n = np.asarray(n, dtype=float)
    chunked = engine.scheduler.chunked_prefill
    mixed = engine.scheduler.mixed_prefill
    d = n * D / (D + 1.0)

    def room_for(d):   # prompt tokens one iteration can take (a prefill-only iteration has the whole budget)
        share = d if mixed else 0.0
        return np.maximum(budget - share, 1.0) if chunked else np.maximum(budget - share, I)
    for _ in range(3):
        room = room_for(d)
        k1 = np.maximum(1.0, I / room)
        r = np.minimum(n / (D + k1), room / I)
        d = D * r
    room = room_for(d)
    p_bar = r * I
    c = np.minimum(np.maximum(I, p_bar), room)
    phi = np.minimum(1.0, p_bar / c)
    k_p = np.maximum(n - d, 0.0) / np.maximum(r, 1e-300)
    c0 = _chunk_context(cached, I, c)
    mb = np.asarray(dep["pp"], dtype=float)
    ctx = I_full + O / 2.0
    t_dec = _iter(model, hw, engine, dep, d / mb, ctx, 0.0, 0.0, 0.0)["total_s"]
    # With pp micro-batches in flight, an iteration is a round in which each of them passes every
    # stage once (each sequence gains one token): a micro-batch that carries the chunk takes t_pf
    # through the pipeline, and the round, bound by the sum of its micro-batches' stage times,
    # grows by (t_pf − t_dec)/pp (pp = 1: the iteration itself). The prompt's own prefill takes
    # t_pf: its micro-batch carries it whole.
    if mixed:
        t_pf = _iter(model, hw, engine, dep, d / mb, ctx, c, c0, c / I, np.minimum(c, I))["total_s"]
        round_pf = t_dec + (t_pf - t_dec) / mb
        t_bar = (1.0 - phi) * t_dec + phi * round_pf
        gap_pf = round_pf             # the token gap of a decode whose round carries a chunk
        prefill_s = np.maximum(k_p - 1.0, 0.0) * round_pf + np.minimum(k_p, 1.0) * t_pf
    else:
        # a prefill iteration of its own (no decodes in it) after a share φ of the decode iterations:
        # every decode waits for it (SGLang's default: prefill first, --enable-mixed-chunk off)
        t_pf = _iter(model, hw, engine, dep, 0.0, ctx, c, c0, c / I, np.minimum(c, I))["total_s"]
        t_bar = t_dec + phi * t_pf / mb
        gap_pf = t_dec + t_pf / mb
        # the prompt runs in the first prefill iteration after it arrives, after any cycles it waited
        prefill_s = t_pf + np.maximum(k_p - 1.0, 0.0) * t_bar
    return {"t_bar": t_bar, "t_pf": t_pf, "t_dec": t_dec, "phi": phi, "gap_pf": gap_pf, "prefill_s": prefill_s,
            "k_p": k_p, "r": r, "d": d}


def _metrics(engine, hw, isl, osl, n, st, users=None, dep=None):
    O = np.asarray(osl, dtype=float)
    D = _steps(dep or {}, O)
    t_bar, t_pf, k_p = st["t_bar"], st["t_pf"], st["k_p"]
    req = per_gen(engine.overhead.per_request_s, hw.gpu.generation)
    ttft_run = t_bar / 2.0 + st["prefill_s"]
    e2e_run = ttft_run + D * t_bar
    X = np.minimum(n / e2e_run, st["r"] / t_bar)
    wait = 0.0
    if users is not None:   # closed loop: the queue is what C clients beyond n wait (Little's law)
        wait = np.maximum(users / X - e2e_run - req, 0.0)
    ttft = ttft_run + req + wait
    tpot = np.where(O > 1, D * t_bar / np.maximum(O - 1.0, 1.0), np.nan)
    # the median token gap (a benchmark's median ITL): a share φ of the iterations carries a prefill
    # chunk, so most gaps are the decode-only iteration while φ < 1/2 (module docstring, "Figures")
    per_tok = D / np.maximum(O - 1.0, 1.0)
    itl_med = np.where(O > 1, np.where(st["phi"] < 0.5, st["t_dec"], st["gap_pf"]) * per_tok, np.nan)
    return {"ttft_s": ttft, "tpot_s": tpot, "itl_median_s": itl_med, "e2e_s": ttft + D * t_bar,
            "requests_per_s": X, "output_tokens_per_s": X * O, "running": n + 0.0 * X, "queue_s": wait + 0.0 * X,
            "prefill_iterations": k_p, "iteration_s": t_bar, "prefill_iteration_s": t_pf}


def _waves(model, hw, engine, dep, isl, osl, n, budget, users):
    """n requests of identical lengths that start together and stay together (module docstring,
    "Waves"): k prefill iterations of ≤ B tokens, then decode at batch n."""
    I_full = np.asarray(isl, dtype=float)
    I, cached = _prompt(dep, I_full)
    O = np.asarray(osl, dtype=float)
    D = _steps(dep, O)
    n = np.asarray(n, dtype=float)
    mb = np.asarray(dep["pp"], dtype=float)
    k = np.maximum(1.0, np.ceil(n * I / budget))
    # with mixed prefill the prompts already done decode during the wave's prefill (sharing the
    # budget: k grows with them); without it (SGLang's default) the decodes wait for the prefills
    share = 1.0 if engine.scheduler.mixed_prefill else 0.0
    for _ in range(3):
        d_p = share * n * (k - 1.0) / (2.0 * k)
        k = np.maximum(1.0, np.ceil(n * I / np.maximum(budget - d_p, 1.0)))
    d_p = share * n * (k - 1.0) / (2.0 * k)
    c = n * I / k
    c0 = _chunk_context(cached, I, c)
    # the chunk's prompts spread over the pp micro-batches, as many as it holds prompts (one prompt
    # in one chunk is one micro-batch's: pp 2 had halved a lone prompt and read a TTFT below its prefill)
    spread = np.clip(c / I, 1.0, mb)
    t_p = _iter(model, hw, engine, dep, d_p / mb, I_full + 1.0, c / spread, c0, c / I / spread,
                np.minimum(c, I))["total_s"]
    t_d = _iter(model, hw, engine, dep, n / mb, I_full + O / 2.0, 0.0, 0.0, 0.0)["total_s"]
    ttft_run = (k + 1.0) / 2.0 * t_p
    m = share * np.minimum(D, (k - 1.0) / 2.0)   # decode steps taken inside the prefill phase
    tpot = np.where(O > 1, (m * t_p + (D - m) * t_d) / np.maximum(O - 1.0, 1.0), np.nan)
    # median gap: m of a request's D steps run inside the prefill phase (t_p), the rest at t_d
    itl_med = np.where(O > 1, np.where(m < D / 2.0, t_d, t_p) * D / np.maximum(O - 1.0, 1.0), np.nan)
    e2e_run = ttft_run + np.where(O > 1, (O - 1.0) * tpot, 0.0)
    # Little's law (n always in the system), capped by one wave's work per wave: the last prompt of a
    # wave ends its prefill at k·t_p and decodes D more iterations
    X = np.minimum(n / e2e_run, n / (k * t_p + D * t_d))
    req = per_gen(engine.overhead.per_request_s, hw.gpu.generation)
    wait = np.maximum(users / X - e2e_run - req, 0.0)
    ttft = ttft_run + req + wait
    return {"ttft_s": ttft, "tpot_s": tpot, "itl_median_s": itl_med + 0.0 * X,
            "e2e_s": ttft + np.where(O > 1, (O - 1.0) * tpot, 0.0), "requests_per_s": X, "output_tokens_per_s": X * O,
            "running": n + 0.0 * X, "queue_s": wait + 0.0 * X,
            "prefill_iterations": k + 0.0 * X, "iteration_s": t_d + 0.0 * X, "prefill_iteration_s": t_p + 0.0 * X}


def closed_loop(model, hw, engine, dep, isl, osl, concurrency, limit, budget, waves=True, burst=False):
    """C = ``concurrency`` clients; ``limit`` the replica's max concurrency (KV pool, max_num_seqs).
    ``waves``: the clients start together with identical requests and stay in step (a benchmark
    such as ``vllm bench serve --max-concurrency`` on fixed lengths); False: the steady mixed state.
    ``burst`` (array or bool): the figures are those of one wave only (an offline run whose every
    prompt is admitted at once: :func:`offline`), so the wave holds even where a prompt needs
    several chunks."""
    C = np.asarray(concurrency, dtype=float)
    n = np.minimum(C, limit)
    mixed = _metrics(engine, hw, isl, osl, n, _state(model, hw, engine, dep, isl, osl, n, budget), users=C, dep=dep)
    if not waves:
        return {k: scalar_out(v) for k, v in mixed.items()}
    # waves hold while a prompt fits one iteration's budget; a prompt that needs several chunks is
    # prefilled one after another, which staggers the clients into the mixed state
    # (docs/serving.md, Under load: the published runs behind this rule)
    w = _waves(model, hw, engine, dep, isl, osl, n, budget, C)
    one_chunk = (_prompt(dep, isl)[0] <= budget) | np.asarray(burst, dtype=bool)
    return {k: scalar_out(np.where(one_chunk, w[k], mixed[k])) for k in w}


def capacity_rate(model, hw, engine, dep, isl, osl, limit, budget):
    """The largest rate of Poisson arrivals the replica sustains: requests/s of the steady mixed
    state at n = ``limit`` running."""
    return closed_loop(model, hw, engine, dep, isl, osl, limit, limit, budget, waves=False)["requests_per_s"]


def _e2e_run(model, hw, engine, dep, isl, osl, n, budget):
    """Engine time of one request (no queueing) with n running: t̄/2 + k_p·t(d, c) + (O − 1)·t̄."""
    st = _state(model, hw, engine, dep, isl, osl, n, budget)
    return st["t_bar"] / 2.0 + st["prefill_s"] + _steps(dep, osl) * st["t_bar"]


GRID = 48


def _running_at_rate(model, hw, engine, dep, isl, osl, lam, limit, budget):
    """The n that solves n = λ·e2e_run(n) (Little's law) on [0, limit]: g(n) = λ·e2e_run(n) − n is
    positive at 0 and falls while the rate is sustainable; three grid passes of GRID points bracket
    the first root (a vectorised bisection: one array evaluation per pass). Array-polymorphic: one
    row of the grid per rate (with its own lengths and limit)."""
    lam = np.atleast_1d(np.asarray(lam, dtype=float))
    shape = np.broadcast(lam, np.asarray(isl), np.asarray(osl), np.asarray(limit)).shape
    lam = np.broadcast_to(lam, shape).reshape(-1)
    I = np.broadcast_to(np.asarray(isl, dtype=float), shape).reshape(-1, 1)
    O = np.broadcast_to(np.asarray(osl, dtype=float), shape).reshape(-1, 1)
    top = np.broadcast_to(np.asarray(limit, dtype=float), shape).reshape(-1)
    lo, hi = np.zeros_like(top), top.copy()
    done = np.zeros(top.shape, dtype=bool)
    frac = np.arange(1, GRID + 1, dtype=float) / GRID
    for _ in range(3):
        n = lo[:, None] + (hi - lo)[:, None] * frac[None, :]
        g = lam[:, None] * _e2e_run(model, hw, engine, dep, I, O, n, budget) - n
        below = g <= 0
        has = below.any(axis=1)
        i = np.argmax(below, axis=1)
        rows = np.arange(top.size)
        new_hi = n[rows, i]
        new_lo = np.where(i > 0, n[rows, np.maximum(i - 1, 0)], lo)
        done |= ~has & (_ == 0)
        lo = np.where(has, new_lo, lo)
        hi = np.where(has, new_hi, hi)
    out = np.where(done, top, hi).reshape(shape)
    return scalar_out(out if out.ndim else out[()]) if out.size > 1 else float(out.reshape(-1)[0])


def open_loop(model, hw, engine, dep, isl, osl, rate, limit, budget):
    """Poisson arrivals at ``rate`` requests/s (a number or an array, with the lengths and limits
    broadcast against it); ``saturated`` where it exceeds capacity."""
    lam = np.asarray(rate, dtype=float)
    cap = np.asarray(capacity_rate(model, hw, engine, dep, isl, osl, limit, budget), dtype=float)
    O = np.asarray(osl, dtype=float)
    n = np.minimum(_running_at_rate(model, hw, engine, dep, isl, osl, lam, limit, budget), limit)
    out = _metrics(engine, hw, isl, osl, n, _state(model, hw, engine, dep, isl, osl, n, budget), dep=dep)
    out["requests_per_s"] = np.minimum(lam, cap)
    out["output_tokens_per_s"] = out["requests_per_s"] * O
    out["capacity_requests_per_s"] = cap + 0.0 * lam
    out["saturated"] = lam >= cap
    return {k: scalar_out(v) for k, v in out.items()}


def offline_wait(N, n, X, in_step):
    """Mean wait for a slot of N requests submitted at once to n slots that complete X requests/s
    (module docstring, "Offline"). In step (waves): wave w of n starts w·n/X after the first, so
    with W = ceil(N/n) waves, the last of N − (W − 1)·n requests, the mean wait is
    (n/X)·[n(W − 1)(W − 2)/2 + (W − 1)(N − (W − 1)n)]/N; staggered, request j > n takes the slot
    the (j − n)-th completion frees: (N − n)(N − n + 1)/(2·N·X). Both tend to N/(2X) for N ≫ n."""
    N = np.maximum(np.asarray(N, dtype=float), 1.0)
    n = np.maximum(np.minimum(np.asarray(n, dtype=float), N), 1.0)
    X = np.maximum(np.asarray(X, dtype=float), 1e-300)
    W = np.ceil(N / n - 1e-9)
    last = N - (W - 1.0) * n
    waves = (n / X) * (n * (W - 1.0) * (W - 2.0) / 2.0 + (W - 1.0) * last) / N
    m = np.maximum(N - n, 0.0)
    return np.where(in_step, waves, m * (m + 1.0) / (2.0 * N * X))


def offline(model, hw, engine, dep, isl, osl, prompts, limit, budget, waves=True):
    """N = ``prompts`` requests submitted at once (``--rate inf``; module docstring, "Offline"):
    the closed loop's engine-side figures at n = min(N, limit) running, and the mean wait for a
    slot of requests submitted once (:func:`offline_wait`), not the closed loop's C/X − e2e (its
    clients resubmit, so every one of them waits a whole cycle: twice the offline mean for N ≫ n)."""
    N = np.asarray(prompts, dtype=float)
    n = np.minimum(N, limit)
    # every prompt admitted at once (N <= limit) is one wave whatever its length: the k = N·I/B
    # iterations of prefill are shared by all of them, so the mean first token is (k + 1)/2
    # iterations in, not one prompt's chunks (the staggering of the module docstring's "Waves"
    # needs clients that resubmit; a one-shot batch has none)
    burst = N <= n
    out = closed_loop(model, hw, engine, dep, isl, osl, N, limit, budget, waves=waves, burst=burst)
    in_step = np.asarray(waves) & ((_prompt(dep, isl)[0] <= budget) | burst)
    wait = offline_wait(N, n, out["requests_per_s"], in_step)
    run = np.asarray(out["ttft_s"]) - np.asarray(out["queue_s"])
    ttft = run + wait
    out["e2e_s"] = scalar_out(np.asarray(out["e2e_s"]) - np.asarray(out["ttft_s"]) + ttft)
    out["ttft_s"] = scalar_out(ttft)
    out["queue_s"] = scalar_out(wait + 0.0 * run)
    out["duration_s"] = scalar_out(N / np.asarray(out["requests_per_s"]))
    return out


def static_batch(model, hw, engine, dep, isl, osl, batch):
    """B requests prefilled in one pass, then decoded together for O − 1 iterations."""
    B = np.asarray(batch, dtype=float)
    I_full = np.asarray(isl, dtype=float)
    I, cached = _prompt(dep, I_full)
    O = np.asarray(osl, dtype=float)
    D = _steps(dep, O)
    mb = np.asarray(dep["pp"], dtype=float)
    t_pf = _iter(model, hw, engine, dep, 0.0, 0.0, B * I / mb, cached, B / mb, I)["total_s"]
    t_dec = _iter(model, hw, engine, dep, B / mb, I_full + O / 2.0, 0.0, 0.0, 0.0)["total_s"]
    req = per_gen(engine.overhead.per_request_s, hw.gpu.generation)
    ttft = t_pf + req
    e2e = ttft + D * t_dec
    tpot = np.where(O > 1, D * t_dec / np.maximum(O - 1.0, 1.0), np.nan)
    out = {"ttft_s": ttft, "tpot_s": tpot, "itl_median_s": tpot, "e2e_s": e2e, "requests_per_s": B / e2e,
           "output_tokens_per_s": B * O / e2e, "running": B, "queue_s": 0.0 * B, "prefill_iterations": 1.0 + 0.0 * B,
           "iteration_s": t_dec, "prefill_iteration_s": t_pf}
    return {k: scalar_out(v) for k, v in out.items()}
