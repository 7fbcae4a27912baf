"""The explained terms of one serving iteration (``serve --explain`` and ``serve --json``'s
``terms``): each term of :func:`llmpar.cost.serving.iteration_terms` with its formula, the values
put into it and its source, beside the formula (docs/architecture.md, explanations beside their
formulas; docs/serving.md, One iteration). The terms of an iteration add up to its ``total_s``."""

from __future__ import annotations

from llmpar.cost.terms import Term
from llmpar.units import fmt_bytes

_SOURCE = "docs/serving.md, One iteration (cost/serving.py iteration_terms)"


def _rate(x: float, unit: str) -> str:
    return f"{x / 1e12:.3g} T{unit}"


def iteration_explained(part: dict, phase: str) -> list[Term]:
    """The terms of one iteration's ``part`` (a ServeResult breakdown's ``decode`` or ``prefill``
    dict); ``phase``: the component name ("decode" or "prefill")."""
    bw, peak = part["bandwidth_bytes_per_s"], part["peak_linear_flops_per_s"]
    rows = [
        ("linear_s", "weight GEMMs", "max(weight bytes / bandwidth, linear FLOPs / peak)",
         f"{fmt_bytes(part['weight_bytes'])} / {_rate(bw, 'B/s')}, {part['linear_flops']:.4g} FLOP / "
         f"{_rate(peak, 'FLOP/s')}", "the roofline (Williams et al. 2009) of the per-GPU weight shard"),
        ("attention_s", "attention", "max(KV bytes / bandwidth, score FLOPs / peak); prefill: causal FLOPs",
         f"{fmt_bytes(part['kv_read_bytes'])} KV read, {part['attention_flops']:.4g} FLOP",
         "FlashAttention-2 (Dao 2023) FLOP count; the KV cache per token of cost/serving.py"),
        ("tp_s", "TP all-reduces", "2 per layer of tokens x hidden x 2 B (alpha-beta model)", "",
         "Shoeybi et al. 2019 §3; cost/collectives.py"),
        ("ep_s", "EP all-to-alls", "dispatch + combine of tokens x top_k x hidden x 2 B", "",
         "DeepSeek-V3 §3.4; cost/collectives.py"),
        ("pp_s", "PP hand-offs", "(pp - 1) sends of tokens x hidden x 2 B / tp", "", "cost/collectives.py"),
        ("overhead_s", "engine overhead", "per iteration + per sequence + per layer", "", "the engine profile"),
    ]
    return [Term(phase, name, float(part[key]), formula, values, f"{source}; {_SOURCE}", unit="s")
            for key, name, formula, values, source in rows]


def serving_terms(breakdown: dict) -> list[Term]:
    """Every term of the decode iteration at the modelled batch and of one prompt's prefill alone."""
    return iteration_explained(breakdown["decode"], "decode") + iteration_explained(breakdown["prefill"], "prefill")
