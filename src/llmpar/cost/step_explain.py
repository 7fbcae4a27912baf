"""``step --explain`` and ``step --json``'s ``terms``: every step-time component with its formula, the
values put into it and its source, beside the formulas it explains (cost/step.py; docs/time-model.md).

The per-layer parts (one layer's GEMMs, attention core, element-wise traffic) are shown for their
formulas and not added up (``counted=False``). Each component's counted term is computed here from
those parts by the formula it prints, so ``tests/test_step_terms.py`` checks that the counted terms
equal the breakdown and the text cannot drift from the code. ``bubble``, ``dp`` and ``optimizer``
carry the breakdown's own values: their windows and schedules are cost/pipeline.py's and
cost/step.py ``_data_parallel``'s, quoted in the formula.
"""

from __future__ import annotations

from llmpar.cost import pipeline
from llmpar.cost.pipeline import fp8_bf16_layers
from llmpar.cost.terms import Term
from llmpar.specs.stack import per_gen
from llmpar.units import fmt_bytes, fmt_seconds


def _compute_terms(r, p, m: int, n: int) -> list[Term]:
    f, st, gen = fmt_seconds, r.settings.stack, r.detail.get("generation")
    att = st.kernels.attention
    e_att, hw_gemm_max = r.detail["attention_efficiency"], r.detail["gemm_max_efficiency"]
    fp8 = r.settings.dtype == "fp8"
    ends = (p["has_head"] * (p["head_forward_s"] + p["head_backward_s"] + p["mtp_forward_s"] + p["mtp_backward_s"])
            + p["has_embedding"] * 3.0 * p["embedding_s"])
    out = [
        Term("compute", "linear GEMMs, one layer fwd", p["linear_forward_s"], "sum 2mnk / (peak x eff(m,n,k) x g)",
             f"peak {r.detail['peak_flops'] / 1e12:.0f} TFLOP/s ({r.settings.dtype}), stack {st.name}: "
             f"g = kernels.gemm_efficiency {per_gen(st.kernels.gemm_efficiency, gen):g}"
             + (f", FP8 GEMMs {'/'.join(st.kernels.fp8.gemms)} x fp8.gemm_efficiency "
                f"{per_gen(st.kernels.fp8.gemm_efficiency, gen):g}" if fp8 else ""),
             "cost/flops.layer_gemms; cost/compute.linear_gemms_time", "s", False),
        Term("compute", "attention core, one layer fwd / bwd", p["attention_core_forward_s"],
             "F / (peak_bf16 x e_fwd); bwd 2.5 F / (peak x e_bwd)" if att.kernel != "eager" else "batched GEMMs on the curve",
             f"{att.kernel} kernel, causal skip {'on' if att.causal_skip else 'off'}, bwd {f(p['attention_core_backward_s'])}"
             + (f", e_fwd {e_att[0]:g}, e_bwd {e_att[1]:g} (the stack's kernels.attention values, at most the "
                f"GPU's MAMF {hw_gemm_max:g})" if att.kernel != "eager" else ""),
             "cost/compute.attention_core_time; Dao 2023 §3; Shah 2024", "s", False),
        Term("compute", "element-wise, one layer fwd", p["elementwise_forward_s"], "bytes / (HBM x eff)",
             fmt_bytes(p["elementwise_forward_bytes"]), "cost/compute.layer_elementwise_bytes (Korthikanti 2022 §4.1 ops)",
             "s", False),
    ]
    if any(fp8_bf16_layers(r.settings)):
        out.append(Term("compute", "FP8 recipe's BF16 layers, critical stage", p["bf16_layers_extra_s"],
                        "per micro-batch: n_bf16 x (GEMMs at bf16 - at fp8 - casts), fwd + 2 x bwd (and recompute)",
                        f"first {st.kernels.fp8.bf16_layers_at_start} / last {st.kernels.fp8.bf16_layers_at_end} layers "
                        "in BF16 (kernels.fp8.bf16_layers_at_start/_end)",
                        "cost/step._bf16_layer_extra, cost/pipeline.bf16_boundary_layers", "s", False))
    # the BF16 layers' extra holds their recompute too (cost/step.py): under recompute with such
    # layers the breakdown's own value, else the formula
    bf = p["bf16_layers_extra_s"]
    total = (r.breakdown_s["compute"] if bf and int(r.parallel.recompute)
             else m * (n * (p["layer_forward_s"] + p["layer_backward_s"]) + ends + bf))
    out.append(Term("compute", "critical stage", total,
                    "m x (L_stage x (fwd + bwd) + head + MTP + 3 x embedding + BF16 layers)",
                    f"m={m}, L_stage={n}, fwd={f(p['layer_forward_s'])}, bwd={f(p['layer_backward_s'])}, "
                    f"ends {f(ends)}", "Narayanan 2021 App. (backward = 2 x forward)", "s"))
    return out


def step_terms(r) -> list[Term]:
    """The terms of one step result (:class:`llmpar.results.StepResult`: ``breakdown_s``,
    ``detail``, ``parallel``, ``settings``), in the breakdown's order."""
    p, par, b = r.detail["parts"], r.parallel, r.breakdown_s
    m, n = int(par.microbatches), r.detail["critical_stage_layers"]
    f, st = fmt_seconds, r.settings.stack
    ov = st.overlap
    ov_pp = float(pipeline.p2p_overlap(ov.pp, ov.pp_schedules, int(par.schedule)))
    pp_total = (m * 2.0 * int(par.virtual_stages) * p["p2p_per_transfer_s"] * (1.0 - ov_pp)
                if int(par.pp) > 1 else 0.0)
    return _compute_terms(r, p, m, n) + [
        Term("recompute", "re-run forward", m * n * p["layer_recompute_s"] if not p["bf16_layers_extra_s"] else
             b["recompute"], "m x L_stage x recompute",
             f"{par.as_dict()['recompute']}: {f(p['layer_recompute_s'])} per layer", "Korthikanti 2022 §5", "s"),
        Term("tp", "TP collectives", m * n * (p["tp_forward_s"] + p["tp_backward_s"]), "m x L_stage x (fwd + bwd)",
             f"fwd {f(p['tp_forward_s'])}, bwd {f(p['tp_backward_s'])} per layer, tp={int(par.tp)}, "
             f"{'AG+RS (SP)' if par.sp else 'all-reduce'}", "Shoeybi 2019 §3; Korthikanti 2022 §4.2.2", "s"),
        Term("pp", "p2p sends", pp_total, "m x 2 x v x t_p2p x (1 - overlap.pp)",
             f"t_p2p={f(p['p2p_per_transfer_s'])}, v={int(par.virtual_stages)}, overlap.pp {ov_pp:g}"
             + (f" (the stack overlaps p2p under {', '.join(ov.pp_schedules)} only)"
                if ov.pp_schedules is not None and ov_pp != ov.pp else ""),
             "Narayanan 2021 §2.2, §4.1", "s"),
        Term("bubble", "pipeline bubble", b["bubble"], "(p-1)(t_f + t_b), / v if interleaved",
             f"p={int(par.pp)}, t_f={f(r.detail['stage_forward_s'])}, t_b={f(r.detail['stage_backward_s'])}",
             "Narayanan 2021 §2.2; Qi 2023; DeepSeek-V3 Table 2 (cost/pipeline.pipeline_time)", "s"),
        Term("dp", "data-parallel sync", b["dp"],
             "max(t_dp - f x min(t_dp, window), t_dp / L_stage) + dp_sms/SMs x hidden",
             f"t_dp={f(p['dp_total_s'])}, dp_overlap={r.settings.dp_overlap:g}, zero={int(par.zero)}, "
             f"overlap.dp_sms {ov.dp_sms}", "Rajbhandari 2019 §7; Lee et al. 2025 (cost/step._data_parallel)", "s"),
        Term("cp", "context-parallel K/V", m * n * p["cp_exposed_s"], "m x L_stage x max(0, t_cp - t_attention)",
             f"{f(p['cp_exposed_s'])} per layer", "Megatron-Core CP; Liu 2023 (ring attention)", "s"),
        Term("ep", "expert all-to-all", m * n * p["ep_exposed_s"],
             "m x L_stage x MoE share x (exposed + ep_sms/SMs x hidden), 2 fwd + 2 bwd",
             f"{f(p['ep_exposed_s'])} per layer, dispatcher {r.settings.ep_dispatcher}"
             + (", FP8 dispatch" if r.settings.dtype == "fp8" and st.kernels.fp8.dispatch_fp8 else "")
             + (f", {ov.ep_sms} SMs held while hidden" if ov.ep_sms else ""),
             "Lepikhin 2020; DeepSeek-V3 §3.2.2; cost/comm.ep_moe_layer", "s"),
        Term("offload", "host copies (activations, parameters)", m * p["offload_exposed_s"] + p["param_offload_s"],
             "m x (max(0, N A / B_host - L t_fwd) + max(0, N A / B_host - L t_bwd)) + parameter fetches",
             f"N={int(par.offload_layers)} layers, {fmt_bytes(p['offload_bytes_per_microbatch'] / 2)} each way per "
             f"micro-batch; parameter fetches {f(p['param_offload_s'])}",
             "cost/step._offload (Megatron-Core cpu_offloading), cost/step._param_fetches (ZeRO-Infinity §5)", "s"),
        Term("optimizer", "optimizer step", b["optimizer"], "params x bytes / (HBM x eff) (+ CPU share)",
             f"{p['optimizer_params'] / 1e9:.2f}B params on this GPU", "cost/step._OPT_TRAFFIC (Megatron optimizer)", "s"),
        Term("fixed", "stack fixed costs", st.fixed.per_step_s + m * st.fixed.per_microbatch_s,
             "per_step_s + m x per_microbatch_s",
             f"stack {st.name}: {f(st.fixed.per_step_s)} + {m} x {f(st.fixed.per_microbatch_s)}; "
             f"launch {f(st.kernels.launch_s_per_layer)} per layer and micro-batch (in compute)",
             "docs/stacks.md (fixed costs)", "s"),
    ]
