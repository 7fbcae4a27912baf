"""The planner's refusals when no candidate is left: no layout passes the divisibility/batch/schedule
rules (:class:`NoLayout`), none fits in HBM (the smallest memory needed, at which layout, and the
offload settings under which some would: docs/planner.md, docs/memory.md), or every one that fits
in HBM offloads more than the host memory holds. Each is a check that failed (exit 1), one line.
"""

from __future__ import annotations

import numpy as np

from llmpar.errors import CheckFailed, UserError
from llmpar.parallel import Parallel
from llmpar.planner import knobs as K
from llmpar.planner import space as SP
from llmpar.planner.evaluate import memory_in_chunks
from llmpar.planner.reasons import RULE_KNOBS


class NoLayout(CheckFailed):
    """No layout of this GPU count passes the divisibility/batch/schedule rules: a valid request
    with nothing feasible (exit 1 in `plan`; a row that says why in `sweep`). ``rejected``:
    candidates per reason (None for a fixed degree that cannot divide the GPUs)."""

    def __init__(self, message: str, rejected: dict[str, int] | None = None):
        super().__init__(message)
        self.rejected = rejected


def layout_text(par: Parallel) -> str:
    """One layout as the refusals name it (``zero=1, recompute=full, tp=8, ...``)."""
    d = par.as_dict()
    sched = d["schedule"] + (f" v={d['virtual_stages']}" if d["virtual_stages"] > 1 else "")
    return (f"zero={d['zero']}, recompute={d['recompute']}, tp={d['tp']}, pp={d['pp']}, dp={d['dp']}, cp={d['cp']}, "
            f"ep={d['ep']}" + (f", etp={d['etp']}" if d["etp"] != d["tp"] else "")
            + f", sp={'on' if d['sp'] else 'off'}, micro_batch={d['micro_batch']}, schedule={sched}"
            + (f", offload_layers={d['offload_layers']}" if d.get("offload_layers") else ""))


def nothing_valid(cand: SP.Candidates, spec: SP.SpaceSpec, model) -> CheckFailed | UserError:
    """A valid request with no runnable layout is a check that failed (exit 1, like "nothing fits"),
    not bad input (issue 9, item 6): one line, the rules that rejected the layouts, most first.
    Unless one rule rejects every candidate on its own (``cand.universal``) and reads a knob the user
    held (planner/reasons.RULE_KNOBS): then the options contradict each other, a FixConflict (exit
    2), as `step` refuses the same layout."""
    hits = {k: v for k, v in cand.rejected.items() if v}
    if not cand.total:
        return NoLayout(f"no layout of {spec.gpus:,} GPUs is left by --fix/--allow/--max-tp (nothing to search)", hits)
    why = "; ".join(f"{SP.REASONS[k]}: {v:,}" for k, v in sorted(hits.items(), key=lambda kv: -kv[1]))
    for rule in cand.universal:
        held = [k for k in RULE_KNOBS.get(rule, ()) if k in spec.allowed]
        if held:
            # one rule breaks every candidate on its own and reads a knob the user held: the options
            # contradict each other (planner/reasons.RULE_KNOBS), bad input as in `step`
            from llmpar.planner.arguments import FixConflict
            shown = ", ".join(f"{k}={K.show_values(k, spec.allowed[k])}" for k in held)
            exc = FixConflict(f"--fix/--allow {shown}: {SP.REASONS[rule]}")
            exc.rejected = hits
            return exc
    return NoLayout(f"no layout of {spec.gpus:,} GPUs can run {model.name} with global batch {spec.global_batch:,} "
                    f"and seq {spec.seq:,}: every one of the {cand.total:,} candidates breaks a rule - {why}", hits)


def host_memory_exceeded(hw, host_bytes, hbm) -> CheckFailed:
    """Every layout that fits in HBM offloads more activations than the host memory holds."""
    h = float(np.min(np.asarray(host_bytes, dtype=float)[hbm]))
    return CheckFailed(f"every layout that fits in HBM offloads more activations than {hw.name}'s host memory "
                       f"holds: at least {h / 1e9:,.1f} GB per GPU against host_memory_per_gpu "
                       + (f"{hw.host_memory_per_gpu / 1e9:,.1f} GB" if hw.host_memory_per_gpu else "(not stated)"))


def nothing_fits(model, mem, par: Parallel, units: str, margin: float = 0.0) -> CheckFailed:
    """No layout fits in HBM: the smallest memory needed, of which the runtime, at which layout."""
    from llmpar.units import unit_scale

    scale, unit = unit_scale(units)
    tot = np.asarray(mem["total_bytes"], dtype=float)
    # the smallest total; among equal ones (e.g. ZeRO stages at dp = 1) name the most sharded
    # every key at the candidates' shape: a knob fixed to one value is a scalar in par (--fix
    # recompute=none had raised "all keys need to be the same shape" instead of this refusal)
    keys = [np.broadcast_to(np.asarray(k), tot.shape) for k in (-np.asarray(par.recompute), -np.asarray(par.zero), tot)]
    i = int(np.lexsort(keys)[0])
    cap = float(np.broadcast_to(np.asarray(mem["capacity_bytes"]), tot.shape)[i])
    run = float(np.broadcast_to(np.asarray(mem["runtime_bytes"]), tot.shape)[i])
    # the runtime (CUDA context + NCCL buffers) is part of the total; "reserved" is the allocator's
    # pool, not a reserve held back from the HBM (main printed it as "the reserve", larger than the HBM)
    rule = f" with --margin {margin:g} (total x {1 + margin:g} must be within the HBM)" if margin else ""
    # with a margin the inequality is total x (1 + margin) > HBM: show the product, not only the
    # total (newcomer review: "85.1 GB > 85.9 GB" read as a false inequality)
    with_margin = f" x {1 + margin:g} = {tot[i] * (1 + margin) / scale:.1f} {unit}" if margin else ""
    return CheckFailed(
        f"no layout fits{rule}: smallest memory needed {tot[i] / scale:.1f} {unit} (of which runtime, CUDA context + "
        f"NCCL buffers, {run / scale:.1f} {unit}){with_margin} > {cap / scale:.1f} {unit} of HBM per GPU at "
        f"{layout_text(par.take(i))}"
    )


def offload_would_fit(model, hw, cand, settings, reserve, margin: float) -> str:
    """When nothing fits: the offload settings (not searched: they are settings, docs/planner.md)
    under which some of the same candidates would, each evaluated by the same memory function,
    as a clause to add to the refusal ('' when none would, or the stack and hardware allow none)."""
    from llmpar.layout_settings import check_optimizer_offload, optimizer_offload_violations, param_offload_violations

    tries = []
    if settings.optimizer_offload < 1.0:
        tries.append(("--optimizer-offload 1", {"optimizer_offload": 1.0}))
    if settings.stack.param_offloading is True and settings.finetune == "full" and not settings.param_offload:
        tries.append(("--param-offload", {"param_offload": True}))
        tries.append(("--param-offload --optimizer-offload 1", {"param_offload": True, "optimizer_offload": 1.0}))
    out = []
    for flag_text, change in tries:
        try:
            s2 = settings.changed(**change)
            check_optimizer_offload(hw, s2)       # the hardware states the host fields it needs
        except UserError:
            continue
        zero = np.asarray(cand.par.zero)
        ok = ~np.asarray(optimizer_offload_violations(s2, zero) | param_offload_violations(s2, zero), dtype=bool)
        if not ok.any():
            continue
        _, hbm, host = memory_in_chunks(model, hw, cand.par, s2, reserve, margin, cand.size)
        n = int(np.count_nonzero(hbm & host & ok))
        if n:
            out.append(f"with {flag_text}, {n:,} of these layouts fit")
            break                                 # the first (the least) change that does
    return ("; " + "; ".join(out) + ": plan with it (docs/memory.md, Optimizer and Parameter offload)") if out else ""
