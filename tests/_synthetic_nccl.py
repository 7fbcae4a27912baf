"""Synthetic nccl-tests logs for the calibrate fit/check tests, written from the documented layout.

Layout (NVIDIA/nccl-tests ``src/common.cu`` and ``doc/PERFORMANCE.md``): a ``# nThread ...`` line,
``# Collective test starting: <program>``, the ``# Using devices`` list (``#  Rank r Group 0 Pid p on
HOST device d [BUS] NAME``), three header lines, one row per size (``size count type redop root``
then ``time algbw busbw #wrong`` out of place and in place; time in us printed in 7 characters
with 2, 1 or 0 decimals, bandwidths in GB/s with 2 decimals), and the footer. algbw = size/time,
busbw = algbw x factor (all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall (n-1)/n; others 1).
Written here rather than with llmpar's own writer, so a shared mistake cannot hide.
"""

from __future__ import annotations

from pathlib import Path

PROGRAM = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf", "reduce_scatter": "reduce_scatter_perf",
           "all_to_all": "alltoall_perf", "broadcast": "broadcast_perf", "send_recv": "sendrecv_perf"}
GATHERED = {"all_gather", "reduce_scatter", "all_to_all"}


def factor(collective: str, n: int) -> float:
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in GATHERED:
        return (n - 1) / n
    return 1.0


def _num(x: float, width: int) -> str:
    for fmt in (".2f", ".1f", ".0f"):
        s = f"{x:{width}{fmt}}"
        if len(s) <= width:
            return s
    return f"{x:{width}.1e}"


def log_text(collective: str, ranks: int, nodes: int, sizes, times_s, gpu: str = "NVIDIA A100-SXM4-80GB",
             devices: bool = True) -> str:
    prog = PROGRAM[collective]
    gpn = ranks // nodes
    out = [f"# nThread 1 nGpus 1 minBytes {int(min(sizes))} maxBytes {int(max(sizes))} step: 2(factor) warmup iters: 5 "
           "iters: 20 agg iters: 1 validation: 1 graph: 0",
           "#", f"# Collective test starting: {prog}", "#"]
    if devices:
        out.append("# Using devices")
        for r in range(ranks):
            out.append(f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on {'node' + str(r // gpn):>10s} device {r % gpn:2d} "
                       f"[0x{16 + r % gpn:02x}] {gpu}")
        out.append("#")
    out += ["#                                                              out-of-place                       in-place",
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]
    redop = "sum" if collective in ("all_reduce", "reduce_scatter") else "none"
    root = 0 if collective == "broadcast" else -1
    f = factor(collective, ranks)
    bus_all = []
    for s, t in zip(sizes, times_s):
        count = int(s) // 4 // (ranks if collective in GATHERED else 1)
        t_us = t * 1e6
        algbw = s / t / 1e9
        bus_all.append(algbw * f)
        block = f"  {_num(t_us, 7)}  {algbw:6.2f}  {algbw * f:6.2f}  {0:6d}"
        out.append(f"{int(s):12d}  {count:12d}  {'float':>8s}  {redop:>6s}  {root:6d}{block}{block}")
    out += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {sum(bus_all) / len(bus_all):g} ", "#",
            f"# Collective test concluded: {prog}", "#"]
    return "\n".join(out) + "\n"


def write_log(path: Path, collective: str, ranks: int, nodes: int, sizes, times_s, **kw) -> Path:
    path = Path(path)
    path.write_text(log_text(collective, ranks, nodes, sizes, times_s, **kw))
    return path


SWEEP = [float(1 << i) for i in range(3, 34)]   # 8 B .. 8 GiB by 2, as `all_reduce_perf -b 8 -e 8G -f 2`

# A test-local profile: the shipped a100-80gb with every collective-model field stated, so the
# expected numbers below do not move when the shipped profile is retuned.
TRUTH_YAML = """\
name: synthetic-truth
extends: a100-80gb
tiers:
  - name: nvlink
    latency: 1.5 us
    ll128_latency: 5 us
    simple_latency: 12 us
    efficiency: 0.7
    ll_efficiency: 0.5
    ll128_efficiency: 0.92
  - name: infiniband
    latency: 4 us
    ll128_latency: 7 us
    simple_latency: 30 us
    efficiency: 0.8
    ll_efficiency: 0.5
    ll128_efficiency: 0.92
"""
