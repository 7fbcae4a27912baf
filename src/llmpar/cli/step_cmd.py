"""`llmpar step`: step time, tokens/s, MFU/HFU and where the time goes, for one layout.

Numbers come from :func:`llmpar.api.step` (a thin layer over :mod:`llmpar.cost.step`); this module
renders them as a rich breakdown with a memory verdict, or as JSON.
"""

from __future__ import annotations

from pathlib import Path

from dataclasses import dataclass

import click

from llmpar.cli.common import common_options, complete_model, echo_json, overlap_options
from llmpar.cli.training import print_training, training_options
from llmpar.units import fmt_bytes, fmt_seconds

_OUTPUT_KEYS = ("units", "as_json", "explain")

_NOTES = {
    "compute": "matmuls + memory-bound ops, forward + backward",
    "recompute": "forward re-run during backward",
    "tp": "tensor-parallel collectives, exposed part",
    "pp": "stage-boundary sends",
    "dp": "gradient sync / ZeRO gathers, exposed part",
    "cp": "K/V exchange beyond the attention it hides behind",
    "ep": "all-to-all dispatch + combine",
    "offload": "activation copies to / from host memory, exposed part",
    "bubble": "pipeline fill and drain",
    "optimizer": "optimizer step (memory-bound)",
    "fixed": "the stack's fixed costs per step and per micro-batch",
}


@click.command("step")
@click.argument("model", required=False, shell_complete=complete_model)
@common_options
@click.option("--hf", "hf", metavar="CONFIG_JSON", help="Read the model from a Hugging Face config.json.")
@overlap_options
@training_options
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="FILE.json", help="Also write the modelled step as a Chrome/Perfetto trace (docs/time-model.md).")
def step(model, **kw):
    """Step time of MODEL on a layout: tokens/s, MFU, HFU and the time breakdown.

    \b
    Examples:
      llmpar step llama-3-70b --gpus 64 --tp 8 --pp 2 --zero 1 --global-batch 128
      llmpar step gpt3-175b --hardware a100-80gb --gpus 1024 --tp 8 --pp 16 --global-batch 1536 --recompute full
      llmpar step llama-3.1-405b --gpus 16384 --tp 8 --pp 16 --virtual-stages 4 --zero 1 --global-batch 2048
      llmpar step llama-3-70b --gpus 1024 --tp 8 --pp 4 --zero 1 --tokens 15T --pue 1.2 --gpu-hour-price 2.5
    """
    from llmpar import api

    out = {k: kw.pop(k) for k in _OUTPUT_KEYS}
    trace_path = kw.pop("trace_path")
    if trace_path is not None:
        from llmpar.outputs import check_out

        check_out(trace_path)
    result = api.step(model, **kw)
    if trace_path is not None:
        import json

        from llmpar.outputs import write_text
        from llmpar.step_trace import chrome_trace

        write_text(trace_path, json.dumps(chrome_trace(result)) + "\n")
    if out["as_json"]:
        echo_json(result.to_dict())
        return
    render(result, units=out["units"], explain=out["explain"])
    if trace_path is not None:
        click.echo(f"trace: {trace_path} (open it in https://ui.perfetto.dev or chrome://tracing)")


@dataclass
class _Term:
    component: str
    name: str
    value: float
    formula: str
    values: str
    source: str


def explain_terms(r) -> list[_Term]:
    """Each breakdown term's formula, the values put into it, and its source (docs/time-model.md)."""
    p = r.detail["parts"]
    par = r.parallel
    m, n = int(par.microbatches), r.detail["critical_stage_layers"]
    f = fmt_seconds
    b = r.breakdown_s
    head = "+ head" if p["has_head"] else ""
    st = r.settings.stack
    gen = r.detail.get("generation")
    from llmpar.cost.pipeline import fp8_bf16_layers
    from llmpar.specs.stack import per_gen

    att = st.kernels.attention
    e_att, hw_gemm_max = r.detail["attention_efficiency"], r.detail["gemm_max_efficiency"]
    fp8 = r.settings.dtype == "fp8"
    return [
        _Term("compute", "linear GEMMs, one layer fwd", p["linear_forward_s"], "sum 2mnk / (peak x eff(m,n,k) x g)",
              f"peak {r.detail['peak_flops'] / 1e12:.0f} TFLOP/s ({r.settings.dtype}), stack {st.name}: "
              f"g = kernels.gemm_efficiency {per_gen(st.kernels.gemm_efficiency, gen):g}"
              + (f", FP8 GEMMs {'/'.join(st.kernels.fp8.gemms)} x fp8.gemm_efficiency "
                 f"{per_gen(st.kernels.fp8.gemm_efficiency, gen):g}" if fp8 else ""),
              "cost/flops.layer_gemms; cost/compute.linear_gemms_time"),
        _Term("compute", "attention core, one layer fwd / bwd", p["attention_core_forward_s"],
              "F / (peak_bf16 x e_fwd); bwd 2.5 F / (peak x e_bwd)" if att.kernel != "eager" else "batched GEMMs on the curve",
              f"{att.kernel} kernel, causal skip {'on' if att.causal_skip else 'off'}, bwd {f(p['attention_core_backward_s'])}"
              + (f", e_fwd {e_att[0]:g}, e_bwd {e_att[1]:g} (the stack's kernels.attention values, at most the "
                 f"GPU's MAMF {hw_gemm_max:g})" if att.kernel != "eager" else ""),
              "cost/compute.attention_core_time; Dao 2023 §3; Shah 2024"),
        *([_Term("compute", "FP8 recipe's BF16 layers, critical stage", p["bf16_layers_extra_s"],
                 "per micro-batch: n_bf16 x (GEMMs at bf16 - at fp8 - casts), fwd + 2 x bwd",
                 f"first {st.kernels.fp8.bf16_layers_at_start} / last {st.kernels.fp8.bf16_layers_at_end} layers in "
                 f"BF16 (kernels.fp8.bf16_layers_at_start/_end)", "cost/step._bf16_layer_extra, cost/pipeline.bf16_boundary_layers")]
          if any(fp8_bf16_layers(r.settings)) else []),
        _Term("compute", "element-wise, one layer fwd", p["elementwise_forward_s"], "bytes / (HBM x eff)",
              fmt_bytes(p["elementwise_forward_bytes"]), "cost/compute.layer_elementwise_bytes (Korthikanti 2022 §4.1 ops)"),
        _Term("compute", "critical stage", b["compute"], f"m x (L_stage x (fwd + 2 fwd) {head})",
              f"m={m}, L_stage={n}, fwd={f(p['layer_forward_s'])}, bwd={f(p['layer_backward_s'])}",
              "Narayanan 2021 App. (backward = 2 x forward)"),
        _Term("recompute", "re-run forward", b["recompute"], "m x L_stage x recompute",
              f"{par.as_dict()['recompute']}: {f(p['layer_recompute_s'])} per layer", "Korthikanti 2022 §5"),
        _Term("tp", "TP collectives", b["tp"], "m x L_stage x (fwd + bwd)",
              f"fwd {f(p['tp_forward_s'])}, bwd {f(p['tp_backward_s'])} per layer, tp={int(par.tp)}, "
              f"{'AG+RS (SP)' if par.sp else 'all-reduce'}", "Shoeybi 2019 §3; Korthikanti 2022 §4.2.2"),
        _Term("pp", "p2p sends", b["pp"], "m x 2 x v x t_p2p",
              f"t_p2p={f(p['p2p_per_transfer_s'])}, v={int(par.virtual_stages)}", "Narayanan 2021 §2.2, §4.1"),
        _Term("bubble", "pipeline bubble", b["bubble"], "(p-1)(t_f + t_b), / v if interleaved",
              f"p={int(par.pp)}, t_f={f(r.detail['stage_forward_s'])}, t_b={f(r.detail['stage_backward_s'])}",
              "Narayanan 2021 §2.2; Qi 2023; DeepSeek-V3 Table 2"),
        _Term("dp", "data-parallel sync", b["dp"], "max(t_dp - f x min(t_dp, window), t_dp / L_stage)",
              f"t_dp={f(p['dp_total_s'])}, dp_overlap={r.settings.dp_overlap:g}, zero={int(par.zero)}",
              "Rajbhandari 2019 §7"),
        _Term("cp", "context-parallel K/V", b["cp"], "m x L_stage x max(0, t_cp - t_attention)",
              f"{f(p['cp_exposed_s'])} per layer", "Megatron-Core CP; Liu 2023 (ring attention)"),
        _Term("ep", "expert all-to-all", b["ep"],
              "m x L_stage x MoE share x (exposed + ep_sms/SMs x hidden), 2 fwd + 2 bwd",
              f"{f(p['ep_exposed_s'])} per layer, dispatcher {r.settings.ep_dispatcher}"
              + (", FP8 dispatch" if fp8 and st.kernels.fp8.dispatch_fp8 else "")
              + (f", {st.overlap.ep_sms} SMs held while hidden" if st.overlap.ep_sms else ""),
              "Lepikhin 2020; DeepSeek-V3 §3.2.2; cost/comm.ep_moe_layer"),
        _Term("offload", "activation offload copies", b["offload"],
              "m x (max(0, N A / B_host - L t_fwd) + max(0, N A / B_host - L t_bwd))",
              f"N={int(par.offload_layers)} layers, {fmt_bytes(p['offload_bytes_per_microbatch'] / 2)} each way "
              f"per micro-batch", "cost/step._offload (Megatron-Core cpu_offloading; TE offload handler)"),
        _Term("optimizer", "optimizer step", b["optimizer"], "params x bytes / (HBM x eff)",
              f"{p['optimizer_params'] / 1e9:.2f}B params on this GPU", "cost/step._OPT_TRAFFIC (Megatron optimizer)"),
        _Term("fixed", "stack fixed costs", b["fixed"], "per_step_s + m x per_microbatch_s",
              f"stack {st.name}: {f(st.fixed.per_step_s)} + {m} x {f(st.fixed.per_microbatch_s)}; "
              f"launch {f(st.kernels.launch_s_per_layer)} per layer and micro-batch (in compute)",
              "docs/stacks.md (fixed costs)"),
    ]


def render(r, units: str = "gb", explain: bool = False) -> None:
    from llmpar.cli import render as R

    con = R.console()
    par = r.parallel
    name = r.model if not r.model_requested else f"{r.model} (from {r.model_requested})"
    layout = f"tp {int(par.tp)} · pp {int(par.pp)} · dp {int(par.dp)} · cp {int(par.cp)} · ep {int(par.ep)}"
    if int(par.expert_tp) != int(par.tp):
        layout += f" · etp {int(par.expert_tp)}"
    con.print(R.header(name, [("on", r.hardware), ("stack", r.settings.stack.name), ("gpus", f"{r.gpus} ({layout})")]))
    d = par.as_dict()
    con.print(R.header("training step", [
        ("zero", d["zero"]), ("sp", "on" if d["sp"] else "off"), ("recompute", R.recompute_label(d)),
        ("seq", d["seq"]), ("micro-batch", d["micro_batch"]), ("global batch", d["global_batch"]),
        ("m", d["microbatches"]), ("schedule", d["schedule"] + (f" v={d['virtual_stages']}" if d["virtual_stages"] > 1 else "")),
    ]))
    R.print_assumptions(con, r.assumptions)
    con.print()
    con.print(
        f"[bold]{fmt_seconds(r.step_time_s)}[/bold] per step  ·  {r.tokens_per_s:,.0f} tokens/s  ·  "
        f"{r.samples_per_s:,.2f} samples/s  ·  {r.model_tflops_per_gpu:.0f} model TFLOP/s per GPU  ·  "
        f"MFU [bold]{r.mfu * 100:.1f} %[/bold] ({r.mfu_convention} attention FLOPs)  ·  HFU {r.hfu * 100:.1f} %",
        highlight=False,
    )
    if r.interval:
        con.print(R.interval_line(r.interval, r.step_time_s), highlight=False)
    rows = []
    for key, value in r.breakdown_s.items():
        note = _NOTES[key]
        sent = r.comm_bytes_per_gpu.get(key)
        if sent:
            note += f"; {fmt_bytes(sent, units)} sent per GPU"
        rows.append((key, value, note))
    con.print()
    con.print(R.breakdown_table(rows, title="Where the step goes (seconds; terms add up to the step time)",
                                value_header="seconds", fmt=lambda v: f"{v:.4f}", total=r.step_time_s,
                                total_label="step"))
    if explain:
        con.print()
        con.print(R.terms_table(explain_terms(r), fmt_seconds, value_header="time",
                                title="How each term is computed (docs/time-model.md)"))
    mem = r.memory
    fmt, unit = R.bytes_formatter(units)
    con.print()
    text = (f"{fmt(mem.memory['total_bytes'])} {unit} per GPU (most-loaded stage) of {fmt(mem.capacity_bytes)} {unit} HBM"
            + ("; no micro-batch fits" if mem.max_micro_batch == 0 else
               f"; largest micro-batch that fits: {mem.max_micro_batch}" if mem.max_micro_batch is not None else ""))
    con.print(R.verdict(mem.fits, text))
    print_training(con, r.training)
