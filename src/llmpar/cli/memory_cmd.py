"""`llmpar memory`: per-GPU memory for training or inference, and whether it fits.

All numbers come from :func:`llmpar.api.memory` (a thin layer over :mod:`llmpar.cost.memory`);
this module renders the result as a rich table with a verdict line, or as JSON.
"""

from __future__ import annotations

import click

from llmpar.cli.common import common_options, complete_model, echo_json, guard_outputs, plot_option, refuse_moot_outputs
from llmpar.parallel import DTYPES
from llmpar.units import fmt_count

_OUTPUT_KEYS = ("units", "as_json", "explain")


@click.command("memory")
@click.argument("model", required=False, shell_complete=complete_model)
@common_options
@click.option("--params", help="Model states of a bare parameter count, e.g. 7.5B (no MODEL needed).")
@click.option("--hf", "hf", metavar="CONFIG_JSON", help="Read the model from a Hugging Face config.json.")
@click.option("--per-stage", is_flag=True, help="List every pipeline stage, not only the most loaded one.")
@click.option("--inference", is_flag=True, help="Serving memory: weights + KV cache + working activations.")
@click.option("--batch", type=int, help="Sequences served at once (--inference; default 1).")
@click.option("--context", type=int, help="Tokens per sequence in the KV cache (--inference; default: --seq).")
@click.option("--kv-dtype", type=click.Choice(DTYPES), help="KV-cache dtype (--inference; default bf16).")
@plot_option("the per-stage memory as stacked bars against the HBM line (implies --per-stage)")
def memory(model, **kw):
    """Per-GPU memory of MODEL (a shipped name or alias, a YAML file, or a config.json).

    \b
    Examples:
      llmpar memory llama-3-70b --zero 3 --dp 8
      llmpar memory llama-70b --tp 8 --pp 4 --gpus 64 --recompute selective
      llmpar memory --params 7.5B --zero 1 --dp 64
      llmpar memory llama-3-70b --inference --tp 4 --batch 16 --context 8192
    """
    from llmpar import api

    out = {k: kw.pop(k) for k in _OUTPUT_KEYS}
    plot_path = kw.pop("plot_path")
    if out["as_json"] and plot_path is None:
        refuse_moot_outputs({"--units": out["units"] != "gb"}, "--json (bytes)")
    guard_outputs(model, kw, {"--plot": plot_path})
    if plot_path is not None:
        if kw.get("inference") or kw.get("params"):
            from llmpar.errors import UserError

            raise UserError("--plot draws the per-stage training memory: leave out --inference/--params")
        kw["per_stage"] = True
    # --optimizer and --convention left at their defaults reach the API as None (not given), so the
    # API, not the CLI, refuses them with --inference, as it refuses --sp, --recompute and the others
    ctx = click.get_current_context()
    for name in ("optimizer", "convention"):
        if ctx.get_parameter_source(name) in (None, click.core.ParameterSource.DEFAULT):
            kw[name] = None
    result = api.memory(model, explain=out["explain"], **kw)
    if plot_path is not None:
        from llmpar.cli import plots

        plots.save(plots.memory_figure(result, units=out["units"]), plot_path)
    if out["as_json"]:
        echo_json(result.to_dict())
        return
    render(result, units=out["units"], explain=out["explain"])
    if plot_path is not None:
        click.echo(f"plot: {plot_path}")


# ----------------------------------------------------------------------------------- render

_LABELS = {
    "weights_bytes": "weights", "gradients_bytes": "gradients", "optimizer_bytes": "optimizer states",
    "activations_bytes": "activations", "kv_cache_bytes": "KV cache", "buffers_bytes": "buffers",
    "allocated_bytes": "allocated (peak)", "allocator_overhead_bytes": "allocator overhead",
    "runtime_bytes": "runtime (CUDA context + NCCL)",
}


def _notes(r) -> dict[str, str]:
    bpp = r.bytes_per_param
    par = r.parallel
    z = int(par.zero)
    n = int(par.dp) * int(par.cp)
    shard = {0: "", 1: f"optimizer sharded over {n}", 2: f"grads+optimizer sharded over {n}",
             3: f"all states sharded over {n}"}[z]
    notes = {
        "weights_bytes": f"{bpp['weights']:g} B/param" + (" + fp8 cache" if bpp.get("fp8_weight_cache") else ""),
        "gradients_bytes": f"{bpp['gradients']:g} B/param" + (
            " (fp32, accumulated over micro-batches)" if bpp.get("gradients_fp32_accumulated") else ""),
        "optimizer_bytes": f"{bpp['optimizer']:g} B/param ({r.settings.optimizer})",
        "allocator_overhead_bytes": f"allocated x {r.settings.stack.memory.allocator_overhead:g} (caching allocator)",
        "runtime_bytes": (f"{r.communicators} NCCL communicators + CUDA context"
                          if not any(a.startswith("--reserve") for a in r.assumptions) else "--reserve (override)"),
        "buffers_bytes": "DDP / ZeRO reduction buckets",
        "kv_cache_bytes": "",
    }
    off = getattr(r.settings, "optimizer_offload", 0.0)
    if off and r.mode != "inference":
        notes["optimizer_bytes"] = f"{1 - off:g} of {bpp['optimizer']:g} B/param in HBM, {off:g} in host memory"
    ft = getattr(r.settings, "finetune", "full")
    if ft != "full" and r.mode == "training":
        from llmpar.cost.finetune import NF4_BYTES

        notes["weights_bytes"] = ((f"frozen: linears NF4 {NF4_BYTES:.3f} B/param, the rest {bpp['weights']:g}"
                                   if ft == "qlora" else f"frozen {bpp['weights']:g} B/param") + "; adapters "
                                  f"{bpp['weights']:g} B/param")
        notes["gradients_bytes"] = f"{bpp['gradients']:g} B/param, adapters only"
        notes["optimizer_bytes"] = f"{bpp['optimizer']:g} B/param ({r.settings.optimizer}), adapters only"
        if ft == "qlora":
            notes["buffers_bytes"] = "reduction buckets + one dequantised 16-bit linear weight"
    if z >= 3 and r.mode == "training":
        notes["weights_bytes"] += (" + largest-layer buffer" if r.settings.convention == "deepspeed"
                                   else " + 2 gathered layers")
        notes["gradients_bytes"] += " + 1 unsharded layer" if r.settings.convention != "deepspeed" else " + buffer"
        if getattr(r.settings, "param_offload", False):
            notes["weights_bytes"] = "2 gathered layers in HBM; the ZeRO-3 shards in host memory (--param-offload)"
    if shard and r.mode != "inference":
        for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes"):
            if (k == "optimizer_bytes" and z >= 1) or (k == "gradients_bytes" and z >= 2) or (k == "weights_bytes" and z >= 3):
                notes[k] += f", ZeRO-{z} / {n}"
    if r.mode == "training":
        rec = {0: "no recompute", 1: "selective recompute", 2: "full recompute"}[int(par.recompute)]
        if int(par.recompute) == 2 and int(par.recompute_layers):
            rec += f" of {int(par.recompute_layers)} layer(s) per chunk"
        if int(par.offload_layers):
            rec += f", {int(par.offload_layers)} layer(s) offloaded to host"
        notes["activations_bytes"] = f"b={int(par.micro_batch)}, s={int(par.seq)}, {rec}, {r.settings.attention} attention"
    elif r.mode == "inference":
        inf = r.inference
        notes["kv_cache_bytes"] = f"B={inf['batch']}, T={inf['context']}, {inf['kv_dtype']}"
        notes["activations_bytes"] = "one prefill + last-position logits"
    else:
        notes["activations_bytes"] = "not modelled for a bare count"
    return notes


def _verdict_text(r, fmt, unit) -> str:
    total, cap = r.memory["total_bytes"], r.capacity_bytes
    what = "batch" if r.mode == "inference" else "micro-batch"
    u = r.settings.stack.memory.uncertainty
    tag = f"(within ±{u:.0%} of the limit) " if r.verdict == "tight" else ""
    if r.fits or total <= cap:
        head = f"{tag}{fmt(total)} {unit} per GPU of {fmt(cap)} {unit} HBM (margin {fmt(cap - total)} {unit})"
        if not r.fits:
            head += "; what it offloads is more than the host memory holds (the assumption above)"
    else:
        head = f"{tag}{fmt(total)} {unit} per GPU > {fmt(cap)} {unit} HBM (margin −{fmt(total - cap)} {unit})"
    if r.max_micro_batch is None:
        return head
    if r.max_micro_batch == 0:
        tail = f"; no {what} fits"
        if r.mode == "training":
            if r.model_states_bytes >= cap:
                tail += f": the model states alone ({fmt(r.model_states_bytes)} {unit}) exceed the HBM"
            else:
                tail += (f": model states {fmt(r.model_states_bytes)} {unit} + runtime {fmt(r.memory['runtime_bytes'])} "
                         f"{unit} + one {what}'s activations and working set exceed the HBM")
        return head + tail
    return head + f"; largest {what} that fits: {r.max_micro_batch}"


def render(r, units: str = "gb", explain: bool = False) -> None:
    from llmpar.cli import render as R

    con = R.console()
    fmt, unit = R.bytes_formatter(units)
    _print_header(con, r, fmt)
    _print_breakdown(con, r, fmt, unit)
    if r.stages:
        con.print()
        rows = [(s["stage"], s["layers"], fmt_count(s["params_per_gpu"]), fmt(s["weights_bytes"]), fmt(s["gradients_bytes"]),
                 fmt(s["optimizer_bytes"]), fmt(s["activations_bytes"]), f"{s['in_flight']:g}", fmt(s["total_bytes"]))
                for s in r.stages]
        cols = ["stage", "layers", "params", "weights", "grads", "optimizer", "activations", "in flight", f"total {unit}"]
        con.print(R.simple_table(cols, rows, title="Per pipeline stage", right=cols))
    if explain and r.terms:
        con.print()
        con.print(R.terms_table(r.terms, fmt, value_header=unit, title="How each term is computed",
                                formats={"params": lambda v: f"{fmt_count(v)} params"}))
    _print_verdict(con, r, fmt, unit)


def _print_header(con, r, fmt) -> None:
    """The model, hardware, stack and layout; the settings; the parameters; the assumptions."""
    from llmpar.cli import render as R

    par = r.parallel
    name = r.model if not r.model_requested else f"{r.model} (from {r.model_requested})"
    layout = f"tp {int(par.tp)} · pp {int(par.pp)} · dp {int(par.dp)} · cp {int(par.cp)} · ep {int(par.ep)}"
    if int(par.expert_tp) != int(par.tp):
        layout += f" · etp {int(par.expert_tp)}"
    con.print(R.header(name, [("on", r.hardware), ("stack", r.settings.stack.name), ("gpus", f"{r.gpus} ({layout})")]))
    pairs = []
    if r.mode == "inference":
        pairs += [("dtype", r.settings.dtype), ("kv cache", r.settings.kv_dtype)]
    else:
        pairs += [("zero", int(par.zero)), ("dtype", r.settings.dtype), ("optimizer", r.settings.optimizer)]
        if r.settings.convention != "llmpar":
            pairs.append(("convention", r.settings.convention))
        if r.mode == "training":
            pairs += [("sp", "on" if par.sp else "off"), ("seq", int(par.seq)), ("micro-batch", int(par.micro_batch))]
            if int(par.pp) > 1:
                pairs += [("schedule", r.parallel.as_dict()["schedule"]), ("m", int(par.microbatches))]
    con.print(R.header(r.mode.replace("_", " "), pairs))
    params_line = f"parameters: {fmt_count(r.params_total)} total, {fmt_count(r.params_per_gpu)} on this GPU's shard"
    if r.mode == "training":
        params_line += " (TP/PP/EP, before ZeRO)"
        if int(par.pp) > 1:
            params_line += f"; most-loaded stage {r.most_loaded_stage}"
    con.print(params_line, highlight=False)
    R.print_assumptions(con, r.assumptions)


def _print_breakdown(con, r, fmt, unit) -> None:
    """The per-GPU memory table, the allocated / reserved / runtime line and the model states."""
    from llmpar.cli import render as R

    notes = _notes(r)
    tail = ["allocator_overhead_bytes", "runtime_bytes"]
    if r.mode == "inference":
        keys = ["weights_bytes", "kv_cache_bytes", "activations_bytes"] + tail
    elif r.mode == "training":
        keys = ["weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes"]
        keys += ["buffers_bytes"] if r.memory.get("buffers_bytes") else []
        keys += tail
    else:
        keys = ["weights_bytes", "gradients_bytes", "optimizer_bytes"] + tail
    rows = [(_LABELS[k], r.memory[k], notes.get(k, "")) for k in keys]
    con.print()
    con.print(R.breakdown_table(
        rows, title=f"Memory per GPU ({unit} = {'1e9' if unit == 'GB' else '2^30'} bytes)", value_header=unit, fmt=fmt,
        total=r.memory["total_bytes"], total_note=f"of {fmt(r.capacity_bytes)} {unit} HBM",
    ))
    con.print(f"allocated (the framework's peak): {fmt(r.memory['allocated_bytes'])} {unit}; allocator pool "
              f"(reserved): {fmt(r.memory['reserved_bytes'])} {unit}; runtime: {fmt(r.memory['runtime_bytes'])} {unit}",
              highlight=False)
    if r.mode == "model_states":
        tb = f" ({r.model_states_bytes / 1e12:.2f} TB)" if r.model_states_bytes >= 1e12 else ""
        con.print(f"model states: {fmt(r.model_states_bytes)} {unit}{tb} per GPU", highlight=False)
    if r.activation_bytes_per_layer is not None and r.mode == "training":
        con.print(f"[dim]activations per layer per micro-batch: {fmt(r.activation_bytes_per_layer)} {unit}[/dim]")


def _print_verdict(con, r, fmt, unit) -> None:
    """The verdict line, the total's interval and the changes that would fit."""
    from llmpar.cli import render as R

    con.print()
    word = {"fits": "FITS", "tight": "TIGHT", "does_not_fit": "DOES NOT FIT"}[r.verdict]
    con.print(R.verdict(r.fits, _verdict_text(r, fmt, unit), ok_word=word, bad_word=word))
    iv = getattr(r, "interval", None)
    if iv:
        lo, hi = iv["total_bytes"]
        con.print(f"  total {fmt(lo)}-{fmt(hi)} {unit} ({R.interval_text(iv)})"
                  + ("; its top exceeds the HBM" if iv["may_not_fit"] else ""), highlight=False)
    changes = getattr(r, "changes_that_fit", None)
    if changes is not None:
        if not changes:
            con.print("  no single change (nor a pair) of recompute, ZeRO, micro-batch, gradient dtype, GPU count, tp, "
                      "pp or offloading fits: `llmpar plan` searches every combination", highlight=False)
        else:
            con.print("  what would fit (each computed; step time against this layout's):", highlight=False)
            for c in changes[:6]:
                rel = f", step {c['step_time_ratio']:.2f}x" if c.get("step_time_ratio") else ""
                con.print(f"    {c['change']}: {fmt(c['total_bytes'])} {unit}{rel}", highlight=False)
