"""Goodput: how much of a training job's wall time trains, with failures and checkpoints.

docs/sweep.md, "Goodput". Array-polymorphic (GPU counts may be an array). Notation: N GPUs,
λ failures per GPU-hour, M = 3,600 / (λ·N) seconds between failures of the job, S checkpoint
bytes, δ the time a checkpoint stalls training, W the time it takes to reach storage, R the
time from a failure to training again (detection, rescheduling, restart, reload).

* **Failure rate.** Llama 3 405B on 16,384 H100s: 419 unexpected interruptions in a 54-day
  snapshot (Dubey et al. 2024, arXiv:2407.21783, §3.3.4 and Table 5): λ = 419 / (16,384 × 54 ×
  24) = 1.9734e-5 per GPU-hour, M = 3.09 h for the job. The default; ``--failure-rate`` for your
  cluster's.
* **Checkpoint size.** The model states a restart needs: 16-bit weights and the optimizer's
  fp32 master copy and moments, S = Ψ·(2 + 12) bytes for mixed-precision Adam (Rajbhandari et
  al. 2020, ZeRO, arXiv:1910.02054, §3.1: 2Ψ + KΨ with K = 12), as the stack's bytes per
  parameter say (``cost/states.bytes_per_param``).
* **Write time.** W = S / min(nodes × per-node bandwidth, aggregate bandwidth). Per node: the
  node's scale-out bandwidth (its NICs, ``tiers``) unless ``--checkpoint-bandwidth`` gives
  one; aggregate: Meta's Tectonic store, 2 TB/s sustained (Dubey et al. §3.3.1), unless given.
  Synchronous saves stall for δ = W; asynchronous ones (Megatron ``--async-save``, PyTorch DCP
  async) stall only for the copy to host memory, δ = (S / N) / host-link bandwidth per GPU, and
  cannot checkpoint more often than W.
* **Interval.** Young's τ = sqrt(2δM) (Young 1974, CACM 17(9):530), with Daly's first-order
  correction τ = sqrt(2δM) − δ (Daly 2006, FGCS 22(3):303, §4), at least W.
* **Waste.** Each interval τ of training pays δ for its checkpoint; each failure loses half an
  interval (τ + δ)/2 of work plus R (Daly 2006 §3): goodput
  G = τ/(τ + δ) × (1 − ((τ + δ)/2 + R)/M), floored at 0. Effective time = ideal time / G.
"""

from __future__ import annotations

import numpy as np

#: failures per GPU-hour (Llama 3, module docstring)
LLAMA3_FAILURES_PER_GPU_HOUR = 419.0 / (16_384 * 54 * 24)
LLAMA3_SOURCE = ("Dubey et al. 2024 (arXiv:2407.21783) §3.3.4, Table 5: 419 unexpected interruptions in 54 days "
                 "on 16,384 H100 GPUs")
#: aggregate checkpoint bandwidth (Meta Tectonic, Llama 3 §3.3.1: 2 TB/s sustained, 7 TB/s peak)
TECTONIC_BYTES_PER_S = 2e12
#: from a failure to training again: an assumption, stated and overridable (--restart-time)
DEFAULT_RESTART_S = 600.0
MODES = ("sync", "async")


def job_mtbf_s(gpus, failures_per_gpu_hour):
    """Seconds between failures of a job of N GPUs: 3,600 / (λ·N)."""
    return 3600.0 / (failures_per_gpu_hour * np.asarray(gpus, dtype=float))


def checkpoint_write_s(nbytes, nodes, per_node_bytes_per_s, aggregate_bytes_per_s):
    """W = S / min(nodes × per-node bandwidth, aggregate bandwidth)."""
    bw = np.minimum(np.asarray(nodes, dtype=float) * per_node_bytes_per_s, aggregate_bytes_per_s)
    return nbytes / bw


def young_daly_interval_s(stall_s, mtbf_s, floor_s=0.0):
    """τ = sqrt(2δM) − δ (Young 1974; Daly 2006 first order), at least ``floor_s`` and δ."""
    tau = np.sqrt(2.0 * stall_s * mtbf_s) - stall_s
    return np.maximum(np.maximum(tau, floor_s), stall_s)


def goodput(interval_s, stall_s, restart_s, mtbf_s):
    """G = τ/(τ + δ) × (1 − ((τ + δ)/2 + R)/M), in [0, 1]."""
    cycle = interval_s + stall_s
    g = interval_s / cycle * (1.0 - (cycle / 2.0 + restart_s) / mtbf_s)
    return np.clip(g, 0.0, 1.0)


def estimate(*, gpus, gpus_per_node, checkpoint_bytes, per_node_bytes_per_s, host_bytes_per_s_per_gpu,
             failures_per_gpu_hour=LLAMA3_FAILURES_PER_GPU_HOUR, restart_s=DEFAULT_RESTART_S,
             aggregate_bytes_per_s=TECTONIC_BYTES_PER_S, mode="sync"):
    """Every figure of the module docstring for one job (floats or arrays)."""
    n = np.asarray(gpus, dtype=float)
    nodes = np.ceil(n / gpus_per_node)
    M = job_mtbf_s(n, failures_per_gpu_hour)
    W = checkpoint_write_s(checkpoint_bytes, nodes, per_node_bytes_per_s, aggregate_bytes_per_s)
    stall = W if mode == "sync" else (checkpoint_bytes / n) / host_bytes_per_s_per_gpu
    tau = young_daly_interval_s(stall, M, floor_s=(0.0 if mode == "sync" else W))
    G = goodput(tau, stall, restart_s, M)
    return {"failures_per_gpu_hour": failures_per_gpu_hour, "mtbf_s": M, "checkpoint_bytes": checkpoint_bytes,
            "checkpoint_write_s": W, "checkpoint_stall_s": stall, "checkpoint_interval_s": tau,
            "restart_s": restart_s, "mode": mode, "goodput": G,
            "lost_per_failure_s": (tau + stall) / 2.0 + restart_s}
