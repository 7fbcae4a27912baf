"""The stack parameters ``llmpar calibrate runs`` may fit, and setting them on a stack.

:data:`PARAMETERS` holds each fittable parameter's bounds, prior scale and whether it is set per
GPU generation (docs/calibrate-runs.md, "How the fit works"); :func:`stack_with` writes values
into a copy of a stack and :func:`base_values` reads a stack's. Nothing here prints.
"""

from __future__ import annotations

import numpy as np

# parameter path -> (lower, upper, prior scale, per GPU generation?)
PARAMETERS: dict[str, tuple[float, float, float, bool]] = {
    "kernels.gemm_efficiency": (0.2, 1.0, 0.15, True),
    "kernels.attention.forward_efficiency": (0.05, 1.0, 0.2, True),
    "kernels.attention.backward_efficiency": (0.05, 1.0, 0.2, True),
    "kernels.fp8.gemm_efficiency": (0.2, 1.0, 0.2, True),
    "kernels.elementwise_traffic": (0.5, 6.0, 1.0, False),
    "kernels.launch_s_per_layer": (0.0, 2e-3, 2e-4, False),
    "kernels.moe_s_per_layer": (0.0, 0.05, 2e-3, True),
    "kernels.moe_s_per_local_expert": (0.0, 0.005, 2e-4, True),
    "kernels.zero_gather_s_per_tensor_rank": (0.0, 1e-4, 1e-5, False),
    "overlap.tp": (0.0, 1.0, 0.3, False),
    "overlap.dp": (0.0, 1.0, 0.3, False),
    "overlap.pp": (0.0, 1.0, 0.5, False),
    "overlap.zero3_prefetch": (0.0, 1.0, 0.3, False),
    "overlap.param_gather": (0.0, 1.0, 0.3, False),
    "fixed.per_step_s": (0.0, 30.0, 0.5, False),
    "fixed.per_microbatch_s": (0.0, 1.0, 0.02, False),
    "network.scale_out_efficiency": (0.05, 1.0, 0.3, False),
    "network.scale_out_latency": (0.5, 20.0, 3.0, False),
    "memory.activation_factor": (0.3, 6.0, 1.0, False),
    "memory.working_layers": (0.0, 40.0, 5.0, False),
    "memory.allocator_overhead": (0.0, 1.0, 0.2, False),
    "memory.optimizer_step_bytes_per_param": (0.0, 16.0, 2.0, False),
}
SPEED_DEFAULT = ("kernels.gemm_efficiency", "kernels.attention.forward_efficiency", "fixed.per_microbatch_s")
FP8_DEFAULT = ("kernels.fp8.gemm_efficiency",)
MEMORY_DEFAULT = ("memory.activation_factor", "memory.allocator_overhead")


def stack_with(stack, values: dict[str, float], generation: str | None):
    """A copy of ``stack`` with ``values`` (dotted paths) set; a per-generation value is set for
    ``generation`` and keeps the other generations' entries."""
    data = stack.model_dump()
    for path, value in values.items():
        node = data
        parts = path.split(".")
        for p in parts[:-1]:
            node = node[p]
        old = node[parts[-1]]
        if isinstance(old, dict):
            node[parts[-1]] = {**old, (generation or "default"): float(value)}
        else:
            node[parts[-1]] = float(value)
    gens = data["overlap"].get("tp_generations")
    if "overlap.tp" in values and gens is not None and generation is not None and generation not in gens:
        # a TP overlap fitted on runs of this generation is measured there: it applies there too
        # (Settings.tp_overlap_on; docs/stacks.md, TP overlap by GPU generation)
        data["overlap"]["tp_generations"] = [*gens, generation]
    return type(stack).model_validate(data)


def base_values(stack, names, generation):
    return np.array([stack.value(n, generation) for n in names], dtype=float)
