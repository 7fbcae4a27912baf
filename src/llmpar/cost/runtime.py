"""What a GPU holds beyond the tensors a framework allocates, and the verdict against the HBM
capacity (docs/memory.md, "Runtime, allocator and verdict"). Array-polymorphic.

    allocated = model states + activations + buffers (the stack's saved set, buckets, ...)
    reserved  = allocated · (1 + allocator_overhead)          (the caching allocator's pool)
    runtime   = cuda_context + nccl_per_communicator · communicators   (or --reserve, if given)
    total     = reserved + runtime
    verdict   = FITS if total·(1 + u) < capacity; DOES NOT FIT if total·(1 − u) > capacity;
                TIGHT otherwise (|capacity − total| ≤ u·total), u = the stack's memory.uncertainty

Sources:
* PyTorch CUDA caching allocator: docs "CUDA semantics, Memory management" (memory_reserved vs
  memory_allocated; fragmentation; expandable_segments).
* CUDA context: CUDA C++ Programming Guide, "Lazy Loading" (CUDA_MODULE_LOADING=LAZY, default
  since CUDA 12.2 / PyTorch 2.x); cuBLAS workspace: cuBLAS docs, cublasSetWorkspace.
* NCCL buffers: NCCL docs, Environment Variables (NCCL_BUFFSIZE, default 4 MiB per channel and
  peer for the Simple protocol; NCCL_MIN/MAX_NCHANNELS); one set per communicator.
* Process groups: Megatron-LM megatron/core/parallel_state.py, PyTorch torch.distributed new_group
  (one NCCL communicator per group a rank uses).
"""

from __future__ import annotations

import numpy as np

from llmpar.cost.arrays import scalar_out as _out
from llmpar.specs.hardware import Hardware

SRC_RESERVE = "--reserve (explicit override of the runtime: CUDA context, NCCL buffers)"
SRC_ALLOC = "PyTorch docs, CUDA semantics / memory management: memory_reserved ≥ memory_allocated (caching allocator)"
SRC_CONTEXT = "CUDA C++ Programming Guide, Lazy Loading; cuBLAS cublasSetWorkspace (per GPU, once)"
SRC_NCCL = "NCCL docs, Environment Variables: NCCL_BUFFSIZE (4 MiB) x channels x peers, per communicator"
SRC_GROUPS = "Megatron-LM parallel_state.py: tp, pp, dp, cp, ep groups + world + embedding group (pp > 1)"

VERDICTS = ("fits", "tight", "does_not_fit")


def _capacity(hw: Hardware, reserve):
    """(HBM capacity, explicit runtime override or None). The hardware profile's legacy
    ``reserve`` counts as an explicit override when a user profile still sets it."""
    if reserve is None:
        reserve = getattr(hw, "reserve", None)
    return float(hw.gpu.memory), (None if reserve is None else float(reserve))


def communicators(tp, pp, dp, cp, ep, embedding=None):
    """NCCL communicators a rank belongs to: one per process group of size > 1 among tp, pp, dp,
    cp, ep and the world group, plus the embedding group (first and last stage, pp > 1; pass
    ``embedding`` as a mask of the ranks that hold it, default: all when pp > 1)."""
    t, p, d, c, e = (np.asarray(x) for x in (tp, pp, dp, cp, ep))
    world = t * p * d * c
    emb = (p > 1) if embedding is None else ((p > 1) & np.asarray(embedding, dtype=bool))
    n = (t > 1).astype(int) + (p > 1) + (d > 1) + (c > 1) + (e > 1) + (world > 1) + emb
    return _out(n)


def runtime_bytes(context_bytes, nccl_bytes, n_communicators, override=None):
    """CUDA context + NCCL buffers: context + nccl · communicators, or ``override`` (--reserve)."""
    rt = context_bytes + nccl_bytes * np.asarray(n_communicators, dtype=float)
    if override is not None:
        rt = np.zeros_like(rt) + float(override)
    return _out(rt)


def reserved_bytes(allocated, overhead):
    """The caching allocator's pool at the peak: allocated · (1 + overhead)."""
    return _out(np.asarray(allocated, dtype=float) * (1.0 + overhead))


def verdict_code(total, capacity, uncertainty):
    """0 FITS (total·(1+u) < capacity), 2 DOES NOT FIT (total·(1−u) > capacity), 1 TIGHT otherwise:
    the capacity lies within ±u·total of the predicted total."""
    t = np.asarray(total, dtype=float)
    cap = np.asarray(capacity, dtype=float)
    code = np.where(t * (1.0 + uncertainty) < cap, 0, np.where(t * (1.0 - uncertainty) > cap, 2, 1))
    return _out(code)


def verdict_name(code):
    """'fits' | 'tight' | 'does_not_fit' for a code (array of codes -> array of names)."""
    code = np.asarray(code)
    if code.ndim == 0:
        return VERDICTS[int(code)]
    return np.array(VERDICTS, dtype=object)[code]


def fits_with_margin(total, capacity, margin=0.0):
    """The planner's rule (``--margin``): total · (1 + margin) ≤ capacity. margin = 0 is ``fits``;
    margin = the stack's uncertainty keeps FITS only (drops every TIGHT candidate)."""
    return _out(np.asarray(total, dtype=float) * (1.0 + margin) <= np.asarray(capacity, dtype=float))


__all__ = ["VERDICTS", "communicators", "fits_with_margin", "reserved_bytes", "runtime_bytes", "verdict_code",
           "verdict_name"]
