"""A bounded discrete-event simulation of one serving replica (docs/serving.md, Simulated tails).

`serve --simulate N`: N requests through the scheduler the fluid model (cost/serving_load.py)
averages, so that a queue's own tail shows: Poisson arrivals bunching, the batch growing and
shrinking, prompts waiting for KV space. Each iteration is priced by the same
:func:`llmpar.cost.serving.iteration_terms` (through serving_load._iter), tabulated once on a grid
of decode batch x prefill tokens and interpolated bilinearly.

The scheduler (vLLM V1 / Sarathi-Serve's stall-free batching, Agrawal et al. 2024 §4): each
iteration first takes one token of every decoding request, then fills the rest of the token budget
(``max_num_batched_tokens``) with prompt chunks, first come first served; a request is admitted
when a sequence slot (``max_num_seqs``) is free and the KV pool holds its whole I + O tokens
(windows applied: ``effective_context``, as ``max_concurrency`` counts them; a
reservation: the engines allocate blocks as tokens come and preempt when they run out, which this
leaves out). Without chunked prefill a prompt waits until it fits the budget whole. Without mixed
prefill (``scheduler.mixed_prefill`` false, SGLang's default) an iteration with prompts waiting
takes only them, with the whole budget, and the decodes advance in the other iterations. A prompt's
first token comes at the end of the iteration that computes its last chunk; every later iteration
gives it one token. Closed loop: each of C clients sends its next request when one ends;
open loop: Poisson arrivals at λ (exponential gaps, a seeded generator: the same N, seed and
inputs give the same figures).

Figures are over every request, from an empty replica, as a benchmark run of N requests counts
them (``vllm bench serve --num-prompts N``): TTFT, TPOT
((e2e − TTFT)/(O − 1), vLLM's) and end-to-end, their mean and p50/p90/p99, and the throughput over
the simulated span. Bounded: at most :data:`MAX_REQUESTS` requests and :data:`MAX_STEPS`
iterations (a run that would exceed it says so).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections import deque

import numpy as np

from llmpar.errors import UserError
from llmpar.cost.serving import effective_context

MAX_REQUESTS = 10_000
MAX_STEPS = 2_000_000
LEVELS = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


def _axis(top: int, n: int) -> list[float]:
    """0 and a geometric grid up to ``top`` (the step time is smooth in both, roofline-shaped)."""
    if top <= 0:
        return [0.0]
    pts = np.unique(np.concatenate([[0.0, 1.0], np.geomspace(1.0, float(top), n)]))
    return [float(x) for x in pts]


def step_table(model, hw, engine, dep, isl, osl, max_seqs, budget):
    """(decode axis, prefill axis, table[d][c]) of iteration seconds, one vectorised evaluation."""
    from llmpar.cost.serving_load import _iter

    D = _axis(max_seqs, 40)
    C = _axis(budget, 24)
    dd, cc = np.meshgrid(np.asarray(D), np.asarray(C), indexing="ij")
    mb = float(dep["pp"])
    I = float(isl)
    t = _iter(model, hw, engine, dep, dd / mb, I + osl / 2.0, cc, 0.0, cc / I, np.minimum(cc, I))["total_s"]
    t = np.asarray(t, dtype=float)
    return D, C, t.tolist()


def _interp(axis: list[float], x: float) -> tuple[int, float]:
    j = min(max(bisect_right(axis, x) - 1, 0), len(axis) - 2) if len(axis) > 1 else 0
    if len(axis) == 1:
        return 0, 0.0
    lo, hi = axis[j], axis[j + 1]
    return j, (x - lo) / (hi - lo) if hi > lo else 0.0


def _time(D, C, T, d: float, c: float) -> float:
    i, u = _interp(D, d)
    j, v = _interp(C, c)
    if len(D) == 1 and len(C) == 1:
        return T[0][0]
    i1 = min(i + 1, len(D) - 1)
    j1 = min(j + 1, len(C) - 1)
    return ((1 - u) * (1 - v) * T[i][j] + u * (1 - v) * T[i1][j] + (1 - u) * v * T[i][j1] + u * v * T[i1][j1])


def simulate(model, hw, engine, dep, *, isl_range, osl_range, n_requests, kv_tokens, max_seqs, budget,
             rate=None, concurrency=None, seed: int = 0) -> dict:
    """Simulate ``n_requests`` (module docstring); lengths uniform on the integer ranges (lo == hi:
    fixed). Returns means, percentiles, throughput and the run's size."""
    if not 1 <= n_requests <= MAX_REQUESTS:
        raise UserError(f"--simulate {n_requests}: between 1 and {MAX_REQUESTS:,} requests")
    if (rate is None) == (concurrency is None):
        raise AssertionError("one of rate or concurrency")
    if dep.get("spec_tokens") or dep.get("prefix_hit"):
        raise UserError("--simulate with --spec-tokens or --prefix-hit is not modelled")
    rng = np.random.default_rng(seed)
    I = rng.integers(isl_range[0], isl_range[1] + 1, n_requests).tolist()
    O = rng.integers(osl_range[0], osl_range[1] + 1, n_requests).tolist()
    need = np.asarray(effective_context(model, np.add(I, O)), dtype=float).tolist()
    if max(need) > kv_tokens:
        raise UserError(f"the longest simulated request ({max(a + b for a, b in zip(I, O)):,} tokens) exceeds the "
                        f"KV pool of {int(kv_tokens):,} tokens")
    chunked = engine.scheduler.chunked_prefill
    mixed = engine.scheduler.mixed_prefill   # false: a prefill batch is an iteration of its own (SGLang)
    if not chunked and max(I) > budget:
        raise UserError(f"a prompt of {max(I):,} tokens exceeds --max-num-batched-tokens {budget:,} without chunked prefill")
    D, C, T = step_table(model, hw, engine, dep, (isl_range[0] + isl_range[1]) / 2.0,
                         (osl_range[0] + osl_range[1]) / 2.0, max_seqs, budget)
    arrival, next_new = _arrivals(rng, n_requests, rate, concurrency)
    run = _Replica(I, O, need, arrival, next_new, closed=rate is None, kv_tokens=kv_tokens, max_seqs=max_seqs,
                   budget=budget, chunked=chunked, mixed=mixed)
    run.run(lambda d, c: _time(D, C, T, d, c))
    return _summary(arrival, run.first, run.done_t, O, I)


def _arrivals(rng, n_requests, rate, concurrency) -> tuple[list[float], int]:
    """(arrival times, the next request a closed loop sends): Poisson times, or C clients at 0."""
    arrival = [math.inf] * n_requests
    if rate is not None:
        gaps = rng.exponential(1.0 / rate, n_requests)
        acc = 0.0
        for k in range(n_requests):
            acc += float(gaps[k])
            arrival[k] = acc
    else:
        for k in range(min(concurrency, n_requests)):
            arrival[k] = 0.0
    next_new = n_requests if rate is not None else min(concurrency, n_requests)
    return arrival, next_new


class _Replica:
    """The scheduler's state through a run (module docstring): the queues, the KV pool and the clock."""

    def __init__(self, I, O, need, arrival, next_new, *, closed, kv_tokens, max_seqs, budget, chunked, mixed):
        self.need = need    # KV tokens a request reserves (per layer on average, windows applied)
        self.I, self.O, self.arrival, self.next_new, self.closed = I, O, arrival, next_new, closed
        self.kv_tokens, self.max_seqs, self.budget, self.chunked, self.mixed = kv_tokens, max_seqs, budget, chunked, mixed
        self.n = len(I)
        self.first = [math.nan] * self.n
        self.done_t = [math.nan] * self.n
        self.waiting: deque = deque()
        self.prefilling: deque = deque()     # [id, prompt tokens left]
        self.decoding: list = []             # heap of (the step whose end gives the last token, id)
        self.kv_used = 0
        self.running = 0
        self.clock = 0.0
        self.step = 0
        self.dstep = 0                       # iterations in which the decodes advance (all of them when mixed)
        self.arrived = 0                     # requests whose arrival time is known and <= clock, in id order
        self.finished = 0

    def finish(self, k: int, now: float) -> None:
        """A request ends: its KV reservation and sequence slot are released; a closed loop sends
        its next request at that moment."""
        self.done_t[k] = now
        self.kv_used -= self.need[k]
        self.running -= 1
        self.finished += 1
        if self.closed and self.next_new < self.n:
            self.arrival[self.next_new] = now
            self.next_new += 1

    def admit_arrivals(self, now: float) -> None:
        """Queue the requests arrived by ``now``: ids arrive in order (Poisson times increase with
        the id; a closed loop's next request is sent, its time set, when one ends: until then inf)."""
        while self.arrived < self.n and self.arrival[self.arrived] <= now:
            self.waiting.append(self.arrived)
            self.arrived += 1

    def admit(self) -> None:
        """Start the waiting requests a sequence slot and the KV pool hold, first come first served."""
        waiting = self.waiting
        while waiting and self.running < self.max_seqs and \
                self.kv_used + self.need[waiting[0]] <= self.kv_tokens:
            k = waiting.popleft()
            self.kv_used += self.need[k]
            self.running += 1
            self.prefilling.append([k, self.I[k]])

    def chunks(self, d: int) -> tuple[bool, int, list[int]]:
        """(prefill only, prompt tokens taken, requests whose prefill ends) of the next iteration."""
        # mixed: the chunks share the budget with the decodes; not mixed (prefill first): an
        # iteration with prompts waiting takes only them, the whole budget, and the decodes wait
        prefill_only = not self.mixed and bool(self.prefilling)
        room = self.budget if prefill_only else (max(self.budget - d, 0) if self.mixed else 0)
        c = 0
        done_pf = []
        for item in self.prefilling:
            if room <= 0:
                break
            if not self.chunked and item[1] > room:
                break
            take = min(item[1], room)
            item[1] -= take
            room -= take
            c += take
            if item[1] == 0:
                done_pf.append(item[0])
        for _ in done_pf:
            self.prefilling.popleft()
        return prefill_only, c, done_pf

    def run(self, time) -> None:
        """Iterate until every request has finished; ``time(d, c)``: seconds of one iteration."""
        while self.finished < self.n:
            self.admit_arrivals(self.clock)
            if not self.waiting and self.running == 0:
                nxt = self.arrival[self.arrived] if self.arrived < self.n else math.inf
                if not math.isfinite(nxt):
                    raise AssertionError("no request left to arrive")   # pragma: no cover - closed loop spawns them
                self.clock = max(self.clock, nxt)
                continue
            self.admit()
            d = len(self.decoding)
            prefill_only, c, done_pf = self.chunks(d)
            if d == 0 and c == 0:
                # admitted nothing and nothing runs that can move: wait for the next event (a release)
                raise AssertionError("scheduler stalled")   # pragma: no cover - admission needs a free pool
            self.clock += time(0.0 if prefill_only else float(d), float(c))
            self.step += 1
            if self.step > MAX_STEPS:
                raise UserError(f"--simulate {self.n}: more than {MAX_STEPS:,} iterations; simulate fewer requests")
            if not prefill_only:
                self.dstep += 1
                while self.decoding and self.decoding[0][0] <= self.dstep:
                    self.finish(heapq.heappop(self.decoding)[1], self.clock)
            for k in done_pf:
                self.first[k] = self.clock
                if self.O[k] <= 1:
                    self.finish(k, self.clock)
                else:
                    heapq.heappush(self.decoding, (self.dstep + self.O[k] - 1, k))


def _summary(arrival, first, done_t, O, I) -> dict:
    # every request counts, from an empty replica, as a benchmark counts them (no warm-up cut)
    arr = np.asarray(arrival)
    ttft = np.asarray(first) - arr
    e2e = np.asarray(done_t) - arr
    o = np.asarray(O, dtype=float)
    multi = o > 1
    tpot = (e2e[multi] - ttft[multi]) / (o[multi] - 1.0)
    span = float(np.max(np.asarray(done_t)) - np.min(arr))

    def stats(x):
        if x.size == 0:
            return None
        return {"mean": float(np.mean(x)), **{k: float(np.quantile(x, q)) for k, q in LEVELS.items()}}

    n = len(arr)
    return {"requests": n, "measured_requests": n, "ttft_s": stats(ttft), "tpot_s": stats(tpot),
            "e2e_s": stats(e2e), "output_tokens_per_s": float(o.sum() / span) if span > 0 else None,
            "requests_per_s": float(n / span) if span > 0 else None,
            "mean_isl": float(np.mean(np.asarray(I, dtype=float)))}
