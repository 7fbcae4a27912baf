"""The pipeline schedule itself, simulated: which micro-batch each stage runs in each time slot.

What ``llmpar bubble`` draws and ``--trace`` lays out (step_trace.py): a list-scheduling pass over
each schedule's per-stage op order (GPipe, 1F1B, interleaved, ZB-H1 and DualPipe's own order), with
the unit chunk times of :mod:`llmpar.cost.pipeline`. Scalar layouts only; not a formula. Tests
check that its idle time equals the formulas' bubble (docs/pipeline.md, tests/test_pipeline.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmpar.cost.pipeline import (
    DUALPIPE, GPIPE, INTERLEAVED, UNIT_B_INPUT, UNIT_F, UNIT_W, ZB_H1, check_schedule,
)
from llmpar.parallel import SCHEDULES


# ---------------------------------------------------------------------------------------------
# The schedule itself: which micro-batch each stage runs in each time slot (for drawing)
# ---------------------------------------------------------------------------------------------
# Not a formula: a list-scheduling simulation of each schedule's per-stage op order, with the
# unit chunk times of cost/pipeline.py (F = 1, full backward = 2; ZB-H1 splits it into B = 1 and W = 1).
# Tests check that its idle time equals the formulas' bubble.


@dataclass(frozen=True)
class Slot:
    start: float
    end: float
    kind: str        # "F", "B" (full backward, or input gradient for ZB-H1) or "W"
    microbatch: int
    chunk: int = 0   # model chunk (interleaved), 0 otherwise


@dataclass
class Timeline:
    schedule: str
    pp: int
    microbatches: int
    virtual_stages: int
    unit_times: dict
    stages: list = field(default_factory=list)   # stages[i] = list of Slot in time order
    total: float = 0.0

    @property
    def busy(self) -> float:
        return sum(s.end - s.start for row in self.stages for s in row)

    @property
    def idle_fraction(self) -> float:
        """Idle stage-time over all stage-time: equals bubble_fraction_of_step."""
        return 1.0 - self.busy / (self.pp * self.total)


def _order_flush(p, m, i, gpipe):
    if gpipe:  # Huang et al. 2019: all forwards, then all backwards
        return [("F", j, 0) for j in range(m)] + [("B", j, 0) for j in range(m)]
    # 1F1B (Narayanan 2021 §2.2.1): p−i−1 warm-up forwards, then one forward / one backward
    w = min(p - i - 1, m)
    order = [("F", j, 0) for j in range(w)]
    for k in range(m - w):
        order += [("F", w + k, 0), ("B", k, 0)]
    return order + [("B", k, 0) for k in range(m - w, m)]


def _order_interleaved(p, m, v, i):
    # Megatron-LM interleaved 1F1B: forwards walk the micro-batches in groups of p, chunk by
    # chunk; backwards the same with chunks reversed. Warm-up: 2(p−i−1) + (v−1)p forwards.
    n = m * v

    def fwd(k):
        group, r = divmod(k, p * v)
        return group * p + r % p, r // p

    w = min(2 * (p - i - 1) + (v - 1) * p, n)
    order = [("F", *fwd(k)) for k in range(w)]
    for k in range(n - w):
        mb, c = fwd(k)
        order += [("F", *fwd(w + k)), ("B", mb, v - 1 - c)]
    for k in range(n - w, n):
        mb, c = fwd(k)
        order.append(("B", mb, v - 1 - c))
    return order


def _order_zb_h1(p, m, i):
    # ZB-H1 (Qi et al. 2023 §3.1): 1F1B with the backward split into B and W; stage i may hold
    # back up to i weight-gradient passes (peak in-flight stays p, as 1F1B's stage 1), which
    # then fill the cool-down bubble.
    w = min(p - i - 1, m)
    order = [("F", j, 0) for j in range(w)]
    pending: list[int] = []

    def backward(k):
        order.append(("B", k, 0))
        pending.append(k)
        while len(pending) > i:
            order.append(("W", pending.pop(0), 0))

    for k in range(m - w):
        order.append(("F", w + k, 0))
        backward(k)
    for k in range(m - w, m):
        backward(k)
    order += [("W", k, 0) for k in pending]
    return order


def _order_dualpipe(p, m, rank):
    """DualPipe's per-device op order (DeepSeek-V3 §3.2.1; deepseek-ai/DualPipe ``dualpipe.py``
    ``DualPipe.step``, its eight steps). Direction 0 runs micro-batches 0..m/2-1 from device 0 to
    p-1, direction 1 the other half from p-1 to 0; device i holds stage i of direction 0 and stage
    p-1-i of direction 1. The code's phase is the direction on the first half of the devices and
    the other one on the second half (``phase ^= is_in_second_half``). Ops:
    ("F", d) forward, ("Fl", d) a forward whose output is sent only after the next op (step 2 on
    the devices that are not in the middle), ("B", d) full backward, ("Bi", d) input gradient only
    (zero bubble: its weight gradient is queued and run by a later ("W",)), and ("FB", df, db) a
    forward and a full backward overlapped, both inputs received first and both results sent when
    the pair ends (also the middle devices' first main step, run back to back with the sends held)."""
    half, hr = p // 2, min(rank, p - 1 - rank)
    middle = rank in (half - 1, half)
    d = (lambda ph: ph ^ int(rank >= half))
    out: list[tuple] = [("F", d(0))] * ((half - hr - 1) * 2)                 # 1: nF0
    out += [("Fl" if not middle else "F", d(0)), ("F", d(1))] * (hr + 1)    # 2: nF0F1
    out += [("Bi", d(1)), ("W",), ("F", d(1))] * (half - hr - 1)             # 3: nB1W1F1
    for _ in range(m // 2 - p + hr + 1):                                     # 4: nF0B1F1B0 (main)
        out += [("FB", d(0), d(1)), ("FB", d(1), d(0))]
    out += [("B", d(1)), ("FB", d(1), d(0))] * (half - hr - 1)               # 5: nB1F1B0
    zb, n6 = False, hr + 1
    for i in range(n6):                                                      # 6: nB1B0, then zero bubble
        if i == n6 // 2 and hr % 2 == 1:
            zb = True
        out.append(("Bi" if zb else "B", d(1)))
        if i == n6 // 2 and hr % 2 == 0:
            zb = True
        out.append(("Bi" if zb else "B", d(0)))
    out += [("W",), ("Bi", d(0))] * (half - hr - 1)                         # 7: nWB0
    return out + [("W",)] * (hr + 1)                                         # 8: nW


def _timeline_dualpipe(p: int, m: int, t_f: float, t_b: float, t_w: float) -> Timeline:
    """List-schedule :func:`_order_dualpipe` on every device. Per direction, a stage's forward
    waits for the previous stage's, a backward for the next stage's backward (the last stage's for
    its own forward), a weight gradient for its input gradient. Slots: ``microbatch`` numbers
    direction 0's micro-batches 0..m/2-1 and direction 1's m/2..m-1, ``chunk`` is the direction; an
    overlapped F&B pair is drawn as its forward then its backward, back to back, taking F + B."""
    def stage_of(direction, dev):
        return dev if direction == 0 else p - 1 - dev

    dur = {"F": t_f, "B": t_b + t_w, "Bi": t_b, "W": t_w}
    orders = [_order_dualpipe(p, m, i) for i in range(p)]
    nxt = [{("F", 0): 0, ("F", 1): 0, ("B", 0): 0, ("B", 1): 0} for _ in range(p)]
    wq: list[list[tuple]] = [[] for _ in range(p)]
    end: dict = {}
    pos, free = [0] * p, [0.0] * p
    held: list = [None] * p                  # an "Fl" forward's result, sent when the next op ends
    rows: list[list[Slot]] = [[] for _ in range(p)]

    def need(kind, direction, dev, k):
        s = stage_of(direction, dev)
        if kind == "F":
            return [("F", direction, k, s - 1)] if s > 0 else []
        return [("B", direction, k, s + 1)] if s < p - 1 else [("F", direction, k, s)]

    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for i in range(p):
            while pos[i] < len(orders[i]):
                op = orders[i][pos[i]]
                if op[0] == "W":
                    parts = [("W",) + wq[i][0]]
                elif op[0] == "FB":
                    parts = [("F", op[1], nxt[i][("F", op[1])]), ("B", op[2], nxt[i][("B", op[2])])]
                else:
                    kd = "F" if op[0] == "Fl" else op[0]
                    parts = [(kd, op[1], nxt[i][("F" if kd == "F" else "B", op[1])])]
                deps = [x for kd, dr, k in parts if kd != "W" for x in need("F" if kd == "F" else "B", dr, i, k)]
                deps += [("Bi", dr, k, stage_of(dr, i)) for kd, dr, k in parts if kd == "W"]
                if any(x not in end for x in deps):
                    break
                t = max([free[i]] + [end[x] for x in deps])
                done = []
                for kd, dr, k in parts:
                    rows[i].append(Slot(t, t + dur[kd], "B" if kd == "Bi" else kd, k if dr == 0 else m // 2 + k, dr))
                    t += dur[kd]
                    done.append((kd, dr, k, t))
                    if kd == "W":
                        wq[i].pop(0)
                    else:
                        nxt[i][("F" if kd == "F" else "B", dr)] += 1
                        if kd == "Bi":
                            wq[i].append((dr, k))
                # when each result is sent: an overlapped pair's both at its end, an "Fl" forward's
                # at the end of the op after it, any other at its own end
                if held[i] is not None:
                    end[held[i]], held[i] = t, None
                for kd, dr, k, t_end in done:
                    key = ("F" if kd == "F" else "B", dr, k, stage_of(dr, i))
                    if kd == "W":
                        continue
                    if op[0] == "Fl":
                        held[i] = key
                    else:
                        end[key] = t if op[0] == "FB" else t_end
                    if kd == "Bi":
                        end[("Bi", dr, k, stage_of(dr, i))] = t_end
                free[i] = t
                pos[i] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - DualPipe's order is deadlock-free for valid (p, m)
            raise RuntimeError(f"dualpipe schedule deadlocked (p={p}, m={m})")
    return Timeline(schedule="dualpipe", pp=p, microbatches=m, virtual_stages=1,
                    unit_times={k: float(x) for k, x in dur.items()}, stages=rows, total=max(free))


def timeline(schedule, pp: int, m: int, v: int = 1, t_f: float = UNIT_F, t_b: float = UNIT_B_INPUT,
             t_w: float = UNIT_W) -> Timeline:
    """Simulate one flush of the schedule (scalar layout), by default with the unit chunk times
    (F = 1, B = 1, W = 1; backward = B + W = 2 where it is not split). Times are per chunk.

    DualPipe: both directions on every device, ``Slot.chunk`` = direction; an overlapped F&B pair
    is drawn as its forward then its backward, back to back (:func:`_timeline_dualpipe`).
    """
    s = int(schedule)
    check_schedule(s, pp, m, v)
    if s == DUALPIPE:
        return _timeline_dualpipe(pp, m, t_f, t_b, t_w)
    V = pp * v if s == INTERLEAVED else pp
    if s == ZB_H1:
        dur = {"F": t_f, "B": t_b, "W": t_w}
        orders = [_order_zb_h1(pp, m, i) for i in range(pp)]
    elif s == INTERLEAVED:
        dur = {"F": t_f, "B": t_b + t_w}
        orders = [_order_interleaved(pp, m, v, i) for i in range(pp)]
    else:
        dur = {"F": t_f, "B": t_b + t_w}
        orders = [_order_flush(pp, m, i, s == GPIPE) for i in range(pp)]

    end: dict = {}
    pos = [0] * pp
    free = [0.0] * pp
    rows: list[list[Slot]] = [[] for _ in range(pp)]
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for i in range(pp):
            while pos[i] < len(orders[i]):
                kind, mb, c = orders[i][pos[i]]
                vs = c * pp + i                      # virtual stage: chunk c of stage i
                if kind == "F":
                    dep = ("F", mb, vs - 1) if vs > 0 else None
                elif kind == "B":
                    dep = ("B", mb, vs + 1) if vs < V - 1 else ("F", mb, vs)
                else:
                    dep = ("B", mb, vs)
                if dep is not None and dep not in end:
                    break
                t0 = max(free[i], end[dep] if dep else 0.0)
                t1 = t0 + dur[kind]
                end[(kind, mb, vs)] = t1
                free[i] = t1
                rows[i].append(Slot(t0, t1, kind, mb, c))
                pos[i] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - the orders above are deadlock-free
            raise RuntimeError(f"{SCHEDULES[s]} schedule deadlocked (p={pp}, m={m}, v={v})")
    return Timeline(
        schedule=SCHEDULES[s], pp=pp, microbatches=m, virtual_stages=v,
        unit_times={k: float(t) for k, t in dur.items()}, stages=rows, total=max(free),
    )
