"""What would make a layout fit: the changes a user can make, each computed (docs/memory.md, When
it does not fit).

For a training layout that does not fit, each single change below is applied to it and costed
with the same functions as ``llmpar memory`` and ``llmpar step`` (``cost.memory.memory_per_gpu``,
``cost.step.step_time``): its memory per GPU, whether it fits, and its step time against the
original's. When no single change fits, the pairs of the three that save the most memory are
tried. A change the layout rules refuse (a TP degree that does not divide the heads, a schedule
that no longer holds) is left out, not reported.

Changes: recompute (selective, full), ZeRO 1 and 3, micro-batch 1, bf16 gradients, twice the GPUs
(more data parallelism), twice the TP or PP degree on the same GPUs, and offloading half the
layers' activations to host memory (where the stack offloads and the layout allows it), and the
optimizer states to host memory (ZeRO >= 1, where the profile states its host memory and DRAM).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

from llmpar.errors import UserError


def _variants(spec, settings, par, layout: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(label, layout changes, settings changes) for the changes that differ from the layout."""
    from llmpar.parallel import RECOMPUTE

    rec = RECOMPUTE[int(par.recompute)]
    gpus = int(par.gpus)
    out = []
    if rec == "none":
        out.append(("recompute selective", {"recompute": "selective"}, {}))
    if rec != "full":
        out.append(("recompute full", {"recompute": "full", "recompute_layers": None, "offload_layers": None}, {}))
    if int(par.zero) < 1 and int(par.dp) * int(par.cp) > 1:
        out.append(("ZeRO 1", {"zero": 1}, {}))
    if int(par.zero) < 3 and int(par.dp) * int(par.cp) > 1:
        out.append(("ZeRO 3", {"zero": 3}, {}))
    if int(par.micro_batch) > 1:
        out.append(("micro-batch 1", {"micro_batch": 1}, {}))
    if settings.grad_dtype == "fp32":
        out.append(("bf16 gradients", {}, {"grad_dtype": "bf16"}))
    out.append((f"{2 * gpus:,} GPUs (data parallel x2)", {"gpus": 2 * gpus, "dp": None}, {}))
    out.append((f"tp {2 * int(par.tp)} on the same GPUs", {"tp": 2 * int(par.tp), "gpus": gpus, "dp": None}, {}))
    if int(par.pp) * 2 <= spec.layers:
        out.append((f"pp {2 * int(par.pp)} on the same GPUs", {"pp": 2 * int(par.pp), "gpus": gpus, "dp": None}, {}))
    if (settings.stack.activation_offloading and int(par.pp) == 1 and rec == "none" and not int(par.offload_layers)):
        out.append((f"offload {spec.layers // 2} layers' activations", {"offload_layers": spec.layers // 2}, {}))
    if int(par.zero) >= 1 and settings.optimizer_offload < 1.0:
        # (a profile without host memory or DRAM bandwidth refuses it in resolve: left out)
        out.append(("optimizer states to host memory (--optimizer-offload 1)", {}, {"optimizer_offload": 1.0}))
    if int(par.zero) >= 3 and not settings.param_offload and settings.stack.param_offloading is True \
            and settings.finetune == "full":
        out.append(("parameters to host memory (--param-offload)", {}, {"param_offload": True}))
    return out


def _cost(spec, hw, settings, layout, res_bytes):
    """(total bytes, fits, step time) of one layout, or None where a rule refuses it."""
    from llmpar.cost.memory import memory_per_gpu
    from llmpar.cost.pipeline import check_schedule
    from llmpar.cost.step import step_time
    from llmpar.layout import check_layout, resolve

    try:
        par = resolve(spec, hw, settings=settings, **layout).parallel
        check_layout(spec, par)
        check_schedule(int(par.schedule), int(par.pp), int(par.microbatches), int(par.virtual_stages))
        mem = memory_per_gpu(spec, hw, par, settings, res_bytes)
        fits = bool(mem["fits"]) and bool(mem["host_fits"])
        t = float(step_time(spec, hw, par, settings, with_memory=False)["step_time_s"]) if fits else None
    except UserError:
        return None
    return float(mem["total_bytes"]), fits, t, par


def fit_changes(spec, hw, settings, par, layout: dict[str, Any], res_bytes, base_step_s: float | None = None
                ) -> list[dict[str, Any]]:
    """The changes that make the layout fit, fastest first (module docstring)."""
    from llmpar.cost.step import step_time

    if base_step_s is None:
        try:
            base_step_s = float(step_time(spec, hw, par, settings, with_memory=False)["step_time_s"])
        except UserError:
            base_step_s = None
    singles = []
    for label, lay, st in _variants(spec, settings, par, layout):
        s2 = settings.changed(**st) if st else settings
        got = _cost(spec, hw, s2, {**layout, **lay}, res_bytes)
        if got is not None:
            singles.append((label, lay, st, got))
    tried = list(singles)
    if not any(g[1] for *_, g in singles):
        best = sorted(singles, key=lambda x: x[3][0])[:3]
        for (la, ya, sa, _), (lb, yb, sb, _) in combinations(best, 2):
            s2 = settings.changed(**{**sa, **sb}) if (sa or sb) else settings
            got = _cost(spec, hw, s2, {**layout, **ya, **yb}, res_bytes)
            if got is not None:
                tried.append((f"{la} and {lb}", {**ya, **yb}, {**sa, **sb}, got))
    out = []
    for label, _lay, _st, (total, fits, t, _par) in tried:
        if fits:
            out.append({"change": label, "total_bytes": total, "fits": True, "step_time_s": t,
                        "step_time_ratio": (t / base_step_s) if (t and base_step_s) else None})
    return sorted(out, key=lambda d: (d["step_time_s"] is None, d["step_time_s"] or 0.0))
