"""`llmpar step --trace FILE.json`: the modelled step as a Chrome / Perfetto trace (docs/time-model.md,
Trace).

The trace is the Trace Event Format's JSON object form ({"traceEvents": [...]}, complete events
"ph": "X" with "ts"/"dur" in microseconds; Google, "Trace Event Format", the document Perfetto and
chrome://tracing read). One track per pipeline stage (pid 0, tid = stage):

* every forward and backward chunk of every micro-batch, where the schedule puts it: the same
  simulation `llmpar bubble` draws (:func:`llmpar.cost.pipeline_sim.timeline`), with the step's own
  per-stage chunk times (``detail.stage_forward_s``/``stage_backward_s`` ÷ virtual stages, plus
  the activation offload copies where there are any); its length is the closed form the step uses
  (``cost.pipeline.pipeline_time``, equal to the simulation: tests/test_invariants.py);
* then, on every stage, the exposed data-parallel reduce, the optimizer step and the stack's fixed
  costs per step and per micro-batch;

so the last event ends at ``step_time_s`` (tests/test_step_trace.py). Each chunk's args carry its
share of the breakdown (compute, recompute, TP, PP, CP, EP per micro-batch) so a reader sees what
a span is made of. ZB-H1 and DualPipe (whose backward splits into input and weight passes the
step prices in closed form) are not drawn.
"""

from __future__ import annotations

from typing import Any

from llmpar.errors import UserError

US = 1e6


def chrome_trace(result) -> dict[str, Any]:
    """The trace of a :class:`llmpar.results.StepResult` (its ``model_dump()`` or the object)."""
    from llmpar.cost.pipeline_sim import timeline
    from llmpar.parallel import SCHEDULES

    d = result if isinstance(result, dict) else result.model_dump()
    par, det, br = d["parallel"], d["detail"], d["breakdown_s"]
    sched = par["schedule"]
    if sched in ("zb-h1", "dualpipe"):
        raise UserError(f"--trace draws 1F1B, interleaved and GPipe steps; {sched} splits its backward into input and "
                        "weight passes that the step prices in closed form only (`llmpar bubble` draws its schedule)")
    pp, m, v = int(par["pp"]), int(par["microbatches"]), int(par["virtual_stages"])
    off = br.get("offload", 0.0) / m if m else 0.0     # pp = 1 with offloading: per micro-batch, forward + back
    t_f = det["stage_forward_s"] + off / 2.0
    t_b = det["stage_backward_s"] + off / 2.0
    tl = timeline(SCHEDULES.index(sched), pp, m, v, t_f=t_f / v, t_b=t_b / v, t_w=0.0)
    per_mb = {k: br[k] / m for k in ("compute", "recompute", "tp", "pp", "cp", "ep", "offload") if m and br.get(k)}
    events: list[dict[str, Any]] = []
    for i in range(pp):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": f"stage {i}"}})
    for i, row in enumerate(tl.stages):
        for slot in row:
            kind = "forward" if slot.kind == "F" else "backward"
            events.append({"name": f"{kind} mb{slot.microbatch}" + (f" chunk {slot.chunk}" if v > 1 else ""),
                           "cat": kind, "ph": "X", "pid": 0, "tid": i, "ts": slot.start * US,
                           "dur": (slot.end - slot.start) * US,
                           "args": {"microbatch": slot.microbatch, "chunk": slot.chunk,
                                    "step_share_per_microbatch_s": per_mb}})
    t = tl.total
    tail = [("dp reduce (exposed)", br.get("dp", 0.0)), ("optimizer", br.get("optimizer", 0.0)),
            ("fixed (per step and per micro-batch)", br.get("fixed", 0.0))]
    for name, dur in tail:
        if dur > 0:
            for i in range(pp):
                events.append({"name": name, "cat": "step", "ph": "X", "pid": 0, "tid": i, "ts": t * US,
                               "dur": dur * US})
            t += dur
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"model": d["model"], "hardware": d["hardware"], "step_time_s": d["step_time_s"],
                          "pipeline_s": tl.total, "schedule": sched, "source": "llmpar step --trace (docs/time-model.md)"}}
