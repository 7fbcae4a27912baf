"""The planner's evaluation of its candidates: memory through :func:`llmpar.cost.memory.memory_per_gpu`
CHUNK candidates at a time (the same formula, the same numbers: docs/planner.md, Speed), and one
row of the result (:class:`llmpar.results_plan.PlanRow`) read out of the evaluated arrays.

Nothing here ranks (:mod:`llmpar.planner.ranking`) or prints.
"""

from __future__ import annotations

import numpy as np

from llmpar import evidence as EV
from llmpar.cost.runtime import fits_with_margin, verdict_name
from llmpar.parallel import Parallel
from llmpar.planner import space as SP
from llmpar.results import MEMORY_COMPONENTS, num, step_numbers
from llmpar.results_plan import PlanRow


def _pick(d: dict, idx) -> dict:
    return {k: (np.asarray(v)[idx] if np.ndim(v) else v) for k, v in d.items()}


#: candidates whose memory is evaluated at once: the arrays of a chunk stay in the CPU caches and
#: their buffers are reused chunk after chunk (one 1.9 M-candidate pass spent most of its time
#: faulting in fresh pages); the same formula, the same numbers (docs/planner.md, Speed)
CHUNK = 1 << 17
#: what every candidate keeps beyond the chunk (the rejection counts and the nothing-fits message)
_KEEP_ALL = ("total_bytes", "capacity_bytes", "runtime_bytes", "host_bytes")


def memory_in_chunks(model, hw, par: Parallel, settings, reserve, margin: float, n: int):
    """``cost.memory.memory_per_gpu`` over the candidates CHUNK at a time: ({"fit": the full result
    for the candidates that fit (HBM and host), "all": _KEEP_ALL for every candidate}, hbm, host)."""
    from llmpar.cost.memory import memory_per_gpu

    fit_parts, all_parts, hbm_parts, host_parts = [], {k: [] for k in _KEEP_ALL}, [], []
    for start in range(0, max(n, 1), CHUNK):
        stop = min(n, start + CHUNK)
        sub = SP.subset(par, slice(start, stop)) if n > CHUNK else par
        m = memory_per_gpu(model, hw, sub, settings, reserve)
        shape = (stop - start,)
        hbm = np.broadcast_to(np.asarray(fits_with_margin(m["total_bytes"], m["capacity_bytes"], margin), dtype=bool),
                              shape)
        host = np.broadcast_to(np.asarray(m["host_fits"], dtype=bool), shape)
        for k in _KEEP_ALL:
            all_parts[k].append(np.broadcast_to(np.asarray(m[k], dtype=float), shape))
        fit_parts.append(_pick(m, np.flatnonzero(hbm & host)))
        hbm_parts.append(hbm)
        host_parts.append(host)
    fit = {k: (np.concatenate([np.broadcast_to(np.asarray(p[k]), np.shape(p["total_bytes"])) for p in fit_parts])
               if any(np.ndim(p[k]) for p in fit_parts) else fit_parts[0][k]) for k in fit_parts[0]}
    return ({"fit": fit, "all": {k: np.concatenate(v) for k, v in all_parts.items()}},
            np.concatenate(hbm_parts), np.concatenate(host_parts))


def plan_row(rank, model, hw, settings, par, out, mem, i, group=None, evidence=None) -> PlanRow:
    """Row ``i`` of the candidates; ``evidence``: (interval, plausibility base) of the plan's class."""
    f = lambda x: float(np.asarray(x)[i])  # noqa: E731
    max_b = float(mem["max_micro_batch"][i])
    memory = {k: f(mem[k]) for k in MEMORY_COMPONENTS}
    memory.update({"capacity_bytes": f(mem["capacity_bytes"]), "fits": bool(mem["fits"][i]),
                   "max_micro_batch": None if max_b == float("inf") else int(max_b),
                   "params_per_gpu": num(f(mem["params_per_gpu"])), "stage": int(mem["stage"][i]),
                   "host_bytes": f(mem["host_bytes"]),
                   "verdict": str(verdict_name(int(np.asarray(mem["verdict_code"])[i])))})
    numbers = step_numbers(out, i)
    interval = plaus = None
    if evidence is not None:
        iv, base = evidence
        interval = EV.speed_json(iv, numbers["step_time_s"], numbers["tokens_per_s"], numbers["mfu"],
                                 mfu_cap=hw.gpu.gemm.max_efficiency)
        if base is not None:
            plaus = {**base, "above_published": bool(numbers["mfu_full_attention"] / iv.hi > base["best_published_mfu"])}
    return PlanRow(
        rank=rank, model=model.name, hardware=hw.name, parallel=par.take(i), settings=settings,
        **numbers, interval=interval, plausibility=plaus,
        memory=memory, equivalent=[par.take(int(j)) for j in (group if group is not None else ())[1:]],
    )
