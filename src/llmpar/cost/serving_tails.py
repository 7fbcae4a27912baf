"""Latency percentiles from a spread of request lengths (docs/serving.md, Length spread).

`serve --isl-range LO-HI --osl-range LO-HI`: prompt and output lengths uniform on those integer
ranges, independent. The steady state is the fluid model's at the mean lengths
(cost/serving_load.py); each request then sees that state's iterations:

* TTFT_i = TTFT + k_p · t_pf · (I_i − Ī) / Ī: its prompt spends k_p · I_i / Ī prefill iterations of
  t_pf (k_p, t_pf: the state's prefill iterations per prompt and their length), the wait and the
  per-request overhead as everyone's;
* E2E_i = E2E + (TTFT_i − TTFT) + (O_i − Ō) · TPOT: one more output token, one more iteration;
* TPOT is the state's iteration time per token for every request (it does not depend on a
  request's own lengths in a continuous batch).

Percentiles are those of TTFT_i and E2E_i over the two uniforms, computed on a midpoint grid
(exact for TTFT, which is linear in one uniform; for E2E the grid of G x G points has a quantile
error below (HI − LO) / G). What this leaves out, and the docs say: the variance of arrivals and of
the batch (a Poisson queue's own tail), and lengths that change the state beyond their mean.
"""

from __future__ import annotations

import numpy as np

LEVELS = (0.5, 0.9, 0.99)
GRID = 256


def _grid(lo: int, hi: int, n: int = GRID) -> np.ndarray:
    """Midpoint quantiles of the uniform distribution on the integers lo..hi."""
    q = (np.arange(n) + 0.5) / n
    return lo + q * (hi - lo)


def length_percentiles(fig: dict, isl_range: tuple[int, int], osl_range: tuple[int, int],
                       levels=LEVELS) -> dict[str, dict[str, float]]:
    """{"ttft_s": {"p50": ..}, "e2e_s": {..}, "tpot_s": {..}} for a state ``fig`` (the load model's
    figures at the mean lengths: ttft_s, e2e_s, tpot_s, prefill_iterations, prefill_iteration_s)."""
    (i_lo, i_hi), (o_lo, o_hi) = isl_range, osl_range
    i_mean, o_mean = (i_lo + i_hi) / 2.0, (o_lo + o_hi) / 2.0
    ttft, e2e, tpot = float(fig["ttft_s"]), float(fig["e2e_s"]), float(fig["tpot_s"])
    slope = float(fig["prefill_iterations"]) * float(fig["prefill_iteration_s"]) / i_mean   # s per prompt token
    I = _grid(i_lo, i_hi)
    O = _grid(o_lo, o_hi)
    d_ttft = slope * (I - i_mean)
    t = ttft + d_ttft
    e = (e2e + d_ttft[:, None] + ((O - o_mean) * (tpot if np.isfinite(tpot) else 0.0))[None, :]).ravel()
    name = {0.5: "p50", 0.9: "p90", 0.99: "p99"}
    out = {"ttft_s": {}, "e2e_s": {}, "tpot_s": {}}
    for q in levels:
        k = name.get(q, f"p{q * 100:g}")
        out["ttft_s"][k] = float(np.quantile(t, q))
        out["e2e_s"][k] = float(np.quantile(e, q))
        out["tpot_s"][k] = tpot
    return out
