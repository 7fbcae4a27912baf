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


#: candidates evaluated at once: the arrays of a chunk stay in the CPU caches and their buffers
#: are reused chunk after chunk (one 1.9 M-candidate pass spent most of its time faulting in fresh
#: pages); the same formulas, the same numbers (docs/planner.md, Speed)
CHUNK = 1 << 17
#: what every candidate keeps beyond the chunk (the rejection counts and the nothing-fits message)
_KEEP_ALL = ("total_bytes", "capacity_bytes", "runtime_bytes", "host_bytes")
# what memory_in_chunks reads of memory_per_gpu (its ``only``: the rest is not selected per candidate)
_MEMORY_WANTED = _KEEP_ALL + ("host_fits", "verdict_code", "reserved_bytes")


def memory_in_chunks(model, hw, par: Parallel, settings, reserve, margin: float, n: int, timed: bool = False):
    """``cost.memory.memory_per_gpu`` over the candidates CHUNK at a time, and with ``timed``
    ``cost.step.step_time`` on each chunk's candidates that fit (HBM and host): ({"all": _KEEP_ALL
    for every candidate, "fit": {"index", "total_bytes", "verdict_code", "capacity_bytes",
    "reserved_bytes" and with ``timed`` "step_time_s"} of the candidates that fit}, hbm, host).

    Only what ranking needs is kept for the candidates that fit; a row's full memory and step
    figures come from :class:`Shown`, which evaluates the same two functions on the few layouts
    shown (elementwise formulas: the same numbers, tests/test_plan.py checks them against
    ``step``)."""
    from llmpar.cost.memory import memory_per_gpu
    from llmpar.cost.step import step_time

    fit_keys = ("total_bytes", "verdict_code", "capacity_bytes", "reserved_bytes")
    fit_parts = {k: [] for k in fit_keys + ("index", "step_time_s")}
    all_parts, hbm_parts, host_parts = {k: [] for k in _KEEP_ALL}, [], []
    for start in range(0, max(n, 1), CHUNK):
        stop = min(n, start + CHUNK)
        sub = SP.subset(par, slice(start, stop)) if n > CHUNK else par
        m = memory_per_gpu(model, hw, sub, settings, reserve, only=_MEMORY_WANTED)
        shape = (stop - start,)
        hbm = np.broadcast_to(np.asarray(fits_with_margin(m["total_bytes"], m["capacity_bytes"], margin), dtype=bool),
                              shape)
        host = np.broadcast_to(np.asarray(m["host_fits"], dtype=bool), shape)
        for k in _KEEP_ALL:
            all_parts[k].append(np.broadcast_to(np.asarray(m[k], dtype=float), shape))
        idx = np.flatnonzero(hbm & host)
        for k in fit_keys:
            fit_parts[k].append(np.broadcast_to(np.asarray(m[k]), shape)[idx])
        fit_parts["index"].append(idx + start)
        if timed and idx.size:
            t = step_time(model, hw, SP.subset(sub, idx), settings, with_memory=False)["step_time_s"]
            fit_parts["step_time_s"].append(np.broadcast_to(np.asarray(t, dtype=float), idx.shape))
        hbm_parts.append(hbm)
        host_parts.append(host)
    fit = {k: np.concatenate(v) for k, v in fit_parts.items() if v}
    return ({"fit": fit, "all": {k: np.concatenate(v) for k, v in all_parts.items()}},
            np.concatenate(hbm_parts), np.concatenate(host_parts))


class Shown:
    """The rows a plan shows, each evaluated in full (``step_time`` and ``memory_per_gpu`` on those
    layouts alone, :meth:`prepare` batching them into one call) and read into a
    :class:`~llmpar.results_plan.PlanRow`. ``par``: the candidates that fit, the indices' space."""

    def __init__(self, model, hw, settings, par: Parallel, reserve, evidence=None):
        self.model, self.hw, self.settings, self.par, self.reserve = model, hw, settings, par, reserve
        self.evidence = evidence   # (interval, plausibility base) of the plan's class
        self._at: dict[int, tuple] = {}

    def prepare(self, idx) -> None:
        """Evaluate the layouts ``idx`` not evaluated yet, in one call of each cost function."""
        from llmpar.cost.memory import memory_per_gpu
        from llmpar.cost.step import step_time

        todo = sorted({int(i) for i in np.atleast_1d(idx)} - self._at.keys())
        if not todo:
            return
        sub = SP.subset(self.par, np.asarray(todo, dtype=np.int64))
        out = step_time(self.model, self.hw, sub, self.settings, with_memory=False)
        mem = memory_per_gpu(self.model, self.hw, sub, self.settings, self.reserve)
        for pos, i in enumerate(todo):
            self._at[i] = (sub, out, mem, pos)

    def row(self, rank: int, i: int, group=None) -> PlanRow:
        """Row ``i`` of the candidates, ranked ``rank``; ``group``: its exact ties (itself first)."""
        self.prepare([i])
        sub, out, mem, pos = self._at[i]
        return plan_row(rank, self.model, self.hw, self.settings, sub, out, mem, pos,
                        [self.par.take(int(j)) for j in (group if group is not None else ())[1:]], self.evidence)


def plan_row(rank, model, hw, settings, par, out, mem, i, equivalent=(), evidence=None) -> PlanRow:
    """Row ``i`` of evaluated layouts ``par`` (``out``: their ``step_time``, ``mem``: their
    ``memory_per_gpu``); ``equivalent``: its exact ties; ``evidence``: (interval, plausibility base)
    of the plan's class."""
    f = lambda x: float(np.asarray(x)[i] if np.ndim(x) else x)  # noqa: E731
    max_b = f(mem["max_micro_batch"])
    memory = {k: f(mem[k]) for k in MEMORY_COMPONENTS}
    memory.update({"capacity_bytes": f(mem["capacity_bytes"]), "fits": bool(f(mem["fits"])),
                   "max_micro_batch": None if max_b == float("inf") else int(max_b),
                   "params_per_gpu": num(f(mem["params_per_gpu"])), "stage": int(f(mem["stage"])),
                   "host_bytes": f(mem["host_bytes"]),
                   "verdict": str(verdict_name(int(f(mem["verdict_code"]))))})
    numbers = step_numbers(out, i)
    interval = plaus = None
    if evidence is not None:
        iv, base = evidence
        interval = EV.speed_json(iv, numbers["step_time_s"], numbers["tokens_per_s"], numbers["mfu"],
                                 mfu_cap=hw.gpu.gemm.max_efficiency)
        if base is not None:
            plaus = EV.with_step_at_best(
                {**base, "above_published": bool(numbers["mfu_full_attention"] / base["class_factor"]
                                                 > base["best_published_mfu"])},
                numbers["step_time_s"], numbers["mfu_full_attention"])
    return PlanRow(
        rank=rank, model=model.name, hardware=hw.name, parallel=par.take(i), settings=settings,
        **numbers, interval=interval, plausibility=plaus, memory=memory, equivalent=list(equivalent),
    )
