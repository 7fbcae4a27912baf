"""What a GPU holds beyond the tensors a framework allocates: the runtime (CUDA context, NCCL
buffers), the caching allocator's overhead, and the verdict against the HBM capacity
(docs/memory.md, "Runtime, allocator and verdict"). Array-polymorphic.
"""

from __future__ import annotations

from llmpar.specs.hardware import Hardware

SRC_RESERVE = "hardware profile 'reserve' (CUDA context, NCCL buffers, allocator fragmentation) or --reserve"


def _capacity(hw: Hardware, reserve):
    return float(hw.gpu.memory), float(hw.reserve if reserve is None else reserve)
