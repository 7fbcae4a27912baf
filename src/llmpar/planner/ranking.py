"""The planner's order: candidates best first by the objective (exact ties broken by the other
objective, then the simpler layout), the recommending re-order (TIGHT candidates last, near-ties by
robustness: docs/planner.md, "Ranking under uncertainty"), runs of exact ties, the time-memory
frontier, and "why #1 beats #N".

Nothing here computes a cost (:mod:`llmpar.cost`) or builds a row (:mod:`llmpar.planner.evaluate`).
"""

from __future__ import annotations

import numpy as np

from llmpar.parallel import Parallel
from llmpar.results_plan import Comparison, PlanRow

# the additive parts of a row's total memory (total = their sum), as "why #1 beats #N" names them
MEMORY_LABELS = {"weights_bytes": "weights", "gradients_bytes": "gradients", "optimizer_bytes": "optimizer",
                 "activations_bytes": "activations", "buffers_bytes": "buffers",
                 "allocator_overhead_bytes": "allocator", "runtime_bytes": "runtime"}


def objective_order(objective: str, t, mem, par: Parallel) -> np.ndarray:
    """Candidates best first; exact ties broken by the other objective, then the simpler layout."""
    primary, secondary = (t, mem) if objective == "time" else (mem, t)
    # a knob every candidate shares is a scalar (Parallel.shared_as_scalars): a constant key orders nothing
    knobs = [k for k in (par.recompute, par.zero, par.virtual_stages, par.ep, par.cp) if np.ndim(k)]
    return np.lexsort(tuple(_one_key(knobs)) + tuple(k for k in (secondary, primary) if np.ndim(k)))


def _one_key(knobs: list) -> list:
    """The integer tie-break keys (least significant first, as np.lexsort takes them) as one int64
    key in mixed radix - the same order, one sorting pass instead of five (0.45 -> 0.27 s on 600,000
    candidates); the keys as they are where one is not a small non-negative integer."""
    if len(knobs) < 2:
        return knobs
    arrays = [np.asarray(k) for k in knobs]
    if arrays[0].size == 0 or not all(np.all(a == np.floor(a)) and a.min() >= 0 for a in arrays):
        return knobs
    out = np.zeros(np.shape(arrays[0]), dtype=np.int64)
    scale = 1
    for a in arrays:
        radix = int(a.max()) + 1
        if scale * radix >= 2**62:
            return knobs
        out += a.astype(np.int64) * scale
        scale *= radix
    return [out]


# Layouts within this fraction of the fastest recommendable one's step time are ranked by how
# robust they are, not by their predicted time: fewer moving parts first (no activation offload,
# no context parallelism, fewer parallel dimensions > 1), then the faster. 2 % is below every
# published source's leave-one-source-out median error (docs/validation.md) and above the 0.2-0.9 %
# margins the planner used to present as wins (issue 23); docs/planner.md, "Ranking under uncertainty".
RANK_TOLERANCE = 0.02


def robust_order(order: np.ndarray, t, total, par: Parallel, tight, tolerance: float = RANK_TOLERANCE
                 ) -> tuple[np.ndarray, int]:
    """``order`` (best time first, exact ties adjacent) re-ranked for a recommendation: TIGHT
    candidates (``tight``: within the stack's memory uncertainty of the HBM) after every other
    one; among the others, those within ``tolerance`` of the fastest by robustness (no offload,
    cp 1, fewer parallel dimensions > 1), then time. Exact ties move together, ranked by their
    first (simplest) member. Returns (order, size of that band)."""
    tight = np.broadcast_to(np.asarray(tight, dtype=bool), np.shape(t))
    ok = order[~tight[order]]
    demoted = order[tight[order]]
    if ok.size == 0:
        return order, 0
    n_band = int(np.count_nonzero(t[ok] <= t[ok[0]] * (1.0 + tolerance)))
    band = ok[:n_band]
    groups = TieGroups(band, t, total)
    heads = np.array([band[a] for a in groups.starts[:-1]])

    def each(x):
        return np.broadcast_to(np.asarray(x), np.shape(t))[heads]

    dims = sum((each(getattr(par, k)) > 1).astype(int) for k in ("tp", "pp", "cp", "ep"))
    rank = np.lexsort((t[heads], dims, each(par.cp) > 1, each(par.offload_layers) > 0))
    moved = np.concatenate([band[groups.starts[g]:groups.starts[g + 1]] for g in rank])
    return np.concatenate([moved, ok[n_band:], demoted]), n_band


def tight_last(order: np.ndarray, t, tight) -> np.ndarray:
    """``order`` with the TIGHT candidates after every other one (the memory objective's recommendation)."""
    return np.concatenate([order[~np.broadcast_to(tight, t.shape)[order]],
                           order[np.broadcast_to(tight, t.shape)[order]]])


# Two layouts tie when their step times and their memory agree to this relative tolerance: the same
# numbers up to floating-point rounding of different but equivalent formula paths.
TIE_RTOL = 1e-12


class TieGroups:
    """``order`` cut into runs of exact ties (equal step time and equal memory), best first.
    Group ``r`` is sliced out only when asked for (the planner needs a handful of the tens of
    thousands: slicing them all cost more than the search)."""

    def __init__(self, order: np.ndarray, t, mem):
        self.order = order
        if order.size == 0:
            self.starts = np.zeros(1, dtype=np.int64)
            return
        to, mo = t[order], mem[order]
        same = (np.isclose(to[1:], to[:-1], rtol=TIE_RTOL, atol=0.0)
                & np.isclose(mo[1:], mo[:-1], rtol=TIE_RTOL, atol=0.0))
        self.starts = np.concatenate(([0], np.flatnonzero(~same) + 1, [order.size]))

    def __len__(self) -> int:
        return self.starts.size - 1

    def __getitem__(self, r: int) -> np.ndarray:
        return self.order[self.starts[r]:self.starts[r + 1]]

    def sizes(self) -> np.ndarray:
        return np.diff(self.starts)


def frontier(t, total) -> tuple[np.ndarray, np.ndarray]:
    """The time-memory frontier: (candidates by time, then memory; which of them are on it)."""
    # walk by time (then memory); keep each layout that needs less memory than every faster one
    by_time = np.lexsort((total, t))
    run_min = np.minimum.accumulate(total[by_time])
    keep = np.ones(by_time.size, dtype=bool)
    keep[1:] = total[by_time][1:] < run_min[:-1]
    return by_time, keep


def compare(a: PlanRow, b: PlanRow, objective: str) -> Comparison:
    """Why ``a`` beats ``b``: the terms that differ, largest first, and the knobs that differ."""
    if objective == "time":
        terms = [(k, a.breakdown_s[k], b.breakdown_s[k]) for k in a.breakdown_s]
        margin = b.step_time_s - a.step_time_s
    else:
        terms = [(label, a.memory[k], b.memory[k]) for k, label in MEMORY_LABELS.items()]
        margin = b.memory_bytes - a.memory_bytes
    terms = sorted([t for t in terms if t[1] != t[2]], key=lambda t: -abs(t[2] - t[1]))
    da, db = a.parallel.as_dict(), b.parallel.as_dict()
    knobs = [(k, da[k], db[k]) for k in da if da[k] != db[k]]
    return Comparison(winner=a, other=b, objective=objective, margin=margin, terms=terms, knobs=knobs)
