"""A finite serving run: N requests arriving at λ/s, the fluid model in time.

docs/serving.md, "Under load" (a benchmark's ``--num-prompts``; ``vllm bench serve --request-rate λ
--num-prompts N``). Built on the steady state of :mod:`llmpar.cost.serving_load` (its figures at n
running, tabulated on a grid of n per stream):

* A finite run (N requests arriving at λ/s, a benchmark's ``--num-prompts``;
  :func:`finite_rate`): the fluid model in time. The number in the system follows
  ds/dt = λ − X(min(s, limit)) while the requests arrive, then drains; request j is admitted
  first come first served when min(arrived, completed + limit) reaches j; its TTFT is its wait +
  TTFT(n at admission), TPOT the run's token gaps pooled. Finite above capacity.

The steady figures are tabulated at n = limit^(i/GRID), i = 0 … GRID (geometric: equal steps of
log n) and interpolated linearly in log n. Until 2026-12-04 the grid was even on [1, limit], 38
requests apart for a limit of 1,858 (Llama 3.1 8B on one H200): a run at 5.5 running then read the
TPOT of n = 1 and n = 39.7 averaged, 19.6 ms where the steady state at 5.5 gives 9.9 ms.

Array-polymorphic in the lengths, the rate, N and the limit (one stream per entry).
"""

from __future__ import annotations

import math

import numpy as np

from llmpar.cost.serving_load import GRID, _metrics, _state


STEPS = 400


def _row_interp(lo, hi, table):
    """x -> table[r] sampled at GRID points evenly on [lo[r], hi[r]], at x[r] (linear, clamped),
    one row per request stream; x is (rows,) or (rows, k). The divisor, flat table and row offsets
    are computed once: the finite run's Euler steps call it ~3,600 times."""
    g = table.shape[1] - 1
    d = np.maximum(hi - lo, 1e-300)
    flat = np.ascontiguousarray(table).reshape(-1)
    base = np.arange(table.shape[0]) * (g + 1)

    def f(x):
        x = np.asarray(x, dtype=float)
        two = x.ndim == 2
        pos = np.minimum(np.maximum((x - (lo[:, None] if two else lo)) / (d[:, None] if two else d), 0.0), 1.0) * g
        i = np.minimum(pos.astype(np.int64), g - 1)      # floor: pos >= 0
        fr = pos - i
        k = (base[:, None] if two else base) + i
        return flat[k] * (1.0 - fr) + flat[k + 1] * fr
    return f


def _interp_rows(x, lo, hi, table):
    """table[r] sampled at GRID points evenly on [lo[r], hi[r]]: its value at x[r] (linear,
    clamped), one row per request stream."""
    return _row_interp(lo, hi, table)(x)


def _log_n(n):
    """The coordinate the steady table is even in: log n, n at least one request."""
    return np.log(np.maximum(np.asarray(n, dtype=float), 1.0))


def _fluid(lam, N, lim, dt, h, X_row):
    """One stream's fluid run (finite_rate): STEPS implicit-Euler steps of s' = s + a − dt·X(min(s',
    limit)), solved by Newton from the explicit step (stable at any step: X grows with n, so the
    root is unique on [0, s + a]). ``X_row``: completions/s at n = limit^(i/GRID), linear in log n
    between them (n/e2e below one request). Python floats: the steps are sequential and a stream is one number,
    so numpy's per-call cost (~1 µs a call, ~3,600 calls a run) would be all of the time.
    Returns (admitted so far: min(arrived, completed + limit), running) at each of the STEPS + 1 times."""
    g = len(X_row) - 1
    d = max(math.log(lim), 1e-300)

    def X(n):
        if n < 1.0:
            return n * X_row[0]
        pos = math.log(n) / d
        pos = (0.0 if pos < 0.0 else 1.0 if pos > 1.0 else pos) * g
        i = int(pos)
        if i > g - 1:
            i = g - 1
        fr = pos - i
        return X_row[i] * (1.0 - fr) + X_row[i + 1] * fr

    def clip(v, top):
        return 0.0 if v < 0.0 else top if v > top else v

    s = A = Dn = 0.0     # in the system (running + waiting), arrived, completed
    adm, ns = [0.0], [0.0]
    step = lam * dt
    for _ in range(STEPS):
        a = step if step < N - A else N - A
        top = s + a
        s_new = clip(top - dt * X(s if s < lim else lim), top)
        for _ in range(4):   # Newton; a repeated iterate is the fixed point (the rest would repeat it)
            n = s_new if s_new < lim else lim
            x = X(n)
            if s_new < lim:
                nh = n + h
                slope = (X(nh if nh < lim else lim) - x) / h
            else:
                slope = 0.0
            nxt = clip(s_new - (s_new - s - a + dt * x) / (1.0 + dt * (slope if slope > 0.0 else 0.0)), top)
            if nxt == s_new:
                break
            s_new = nxt
        Dn = Dn + (top - s_new)
        A = A + a
        s = s_new
        adm.append(A if A < Dn + lim else Dn + lim)
        ns.append(s if s < lim else lim)
    return adm, ns


def finite_rate(model, hw, engine, dep, isl, osl, rate, requests, limit, budget):
    """A benchmark of N = ``requests`` requests arriving at λ = ``rate`` per second (``vllm bench
    serve --request-rate λ --num-prompts N``; module docstring, "A finite run"): the fluid model
    in time, not its steady state, so a rate above capacity has finite figures (the queue and the
    batch grow only while the N requests arrive). Arrays of one entry per stream (lengths, rate,
    N and limit broadcast). Returns the _metrics keys, means over the N requests."""
    shape = np.broadcast(*(np.asarray(v) for v in (isl, osl, rate, requests, limit))).shape
    flat = [np.broadcast_to(np.asarray(v, dtype=float), shape).reshape(-1) for v in (isl, osl, rate, requests, limit)]
    I, O, lam, N, lim = flat
    lim = np.maximum(lim, 1.0)
    # the steady figures at n running, n = limit^(i/GRID) per stream (module docstring)
    grid = lim[:, None] ** (np.arange(GRID + 1, dtype=float) / GRID)[None, :]
    m = _metrics(engine, hw, I[:, None], O[:, None], grid,
                 _state(model, hw, engine, dep, I[:, None], O[:, None], grid, budget), dep=dep)
    tab = {k: np.broadcast_to(np.asarray(m[k], dtype=float), grid.shape)
           for k in ("requests_per_s", "ttft_s", "e2e_s", "tpot_s", "iteration_s", "prefill_iteration_s",
                     "prefill_iterations", "itl_median_s")}
    X_of = tab["requests_per_s"]
    zero, top = np.zeros_like(lim), np.log(lim)

    t_arr = N / lam
    # the horizon: every request arrived and served at the capacity, plus one request's time
    dt = (t_arr + N / X_of[:, -1] + tab["e2e_s"][:, -1]) / STEPS
    h = np.maximum(0.01 * lim, 1e-3)
    runs = [_fluid(float(lam[r]), float(N[r]), float(lim[r]), float(dt[r]), float(h[r]), X_of[r].tolist())
            for r in range(N.size)]
    adm = [a for a, _ in runs]
    ns = [n for _, n in runs]
    adm_t = np.array(adm, dtype=float)
    n_t = np.array(ns, dtype=float)
    times = dt[:, None] * np.arange(STEPS + 1, dtype=float)[None, :]
    # request j arrives at j/λ and is admitted when the admitted count reaches it (FIFO)
    j = N[:, None] * ((np.arange(64, dtype=float) + 0.5) / 64.0)[None, :]
    t_in = np.stack([np.interp(j[r], adm_t[r], times[r]) for r in range(N.size)])
    wait = np.maximum(t_in - j / lam[:, None], 0.0)
    n_in = np.stack([np.interp(t_in[r], times[r], n_t[r]) for r in range(N.size)])
    n_in = np.maximum(n_in, 1.0)

    def at(key, nn):   # a steady figure at each column's n
        return _interp_rows(_log_n(nn), zero, top, tab[key])

    ttft = (wait + at("ttft_s", n_in)).mean(axis=1)
    e2e = (wait + at("e2e_s", n_in)).mean(axis=1)
    # the run ends when the last request (arrived at N/λ) has been admitted and served
    t_last = np.array([np.interp(N[r] * (1.0 - 1e-9), adm_t[r], times[r]) for r in range(N.size)])   # first reach
    n_last = np.maximum([np.interp(t_last[r], times[r], n_t[r]) for r in range(N.size)], 1.0)
    makespan = np.maximum(t_last, N / lam) + at("e2e_s", n_last)
    # token gaps pooled over the run (a benchmark's mean ITL): ∫ n dt / ∫ n/TPOT(n) dt
    nn = np.maximum(n_t, 1e-9)
    tp = at("tpot_s", np.maximum(n_t, 1.0))
    tpot = (nn.sum(axis=1)) / np.maximum((nn / tp).sum(axis=1), 1e-300)
    Xrun = N / makespan
    # the mean batch while the run lasts, ∫ n dt / makespan (the horizon runs past the makespan:
    # averaged over it, the idle tail had read 1.7 running where 5.4 run throughout the arrivals)
    running = n_t.mean(axis=1) * (dt * STEPS) / makespan
    busy = np.maximum(running, 1.0)   # the iteration at the run's mean batch
    steady = {k: at(k, busy) for k in ("iteration_s", "prefill_iteration_s", "prefill_iterations", "itl_median_s")}
    out = {"ttft_s": ttft, "tpot_s": np.where(O > 1, tpot, np.nan), "e2e_s": e2e, "requests_per_s": Xrun,
           "output_tokens_per_s": Xrun * O, "running": running, "queue_s": wait.mean(axis=1),
           "duration_s": makespan, "capacity_requests_per_s": X_of[:, -1], "saturated": lam >= X_of[:, -1], **steady}
    if not shape:
        return {k: (bool(v[0]) if k == "saturated" else float(v[0])) for k, v in out.items()}
    return {k: v.reshape(shape) for k, v in out.items()}
