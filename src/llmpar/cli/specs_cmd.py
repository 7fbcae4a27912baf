"""`llmpar models` and `llmpar hardware`: list what ships, show one spec.

Results are built as plain dicts first (the JSON contract), then rendered with rich.
Counts come from :mod:`llmpar.cost.params`; nothing is computed here.
"""

from __future__ import annotations

from typing import Any

import click

from llmpar.cli.common import echo_json
from llmpar.cost import params as P
from llmpar.specs import registry
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec
from llmpar.units import unit_scale

_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
_UNITS = click.option("--units", type=click.Choice(["gb", "gib"]), default="gb", show_default=True,
                      help="Memory display unit: GB = 1e9, GiB = 2^30.")

_FAMILY_ORDER = ("gpt", "gpt_neox", "llama", "mistral", "mixtral", "qwen2", "deepseek")


def _console():
    from llmpar.cli.render import console

    return console(pipe_width=160)


def _aliases(kind: str) -> dict[str, list[str]]:
    """canonical name -> aliases, from the registry's index of shipped files."""
    out: dict[str, list[str]] = {}
    for key, (canon, _path) in registry.spec_index(kind).items():
        if key != canon:
            out.setdefault(canon, []).append(key)
    return out


# ------------------------------------------------------------------------------------ models

def model_summary(m: ModelSpec, aliases: list[str] | None = None) -> dict[str, Any]:
    """One row of `llmpar models` (JSON keys stable, snake_case)."""
    b = P.breakdown(m)
    return {
        "name": m.name,
        "aliases": list(aliases or m.aliases),
        "family": m.family,
        "layers": m.layers,
        "hidden": m.hidden,
        "heads": m.heads,
        "kv_heads": m.n_kv_heads,
        "ffn_hidden": m.ffn_hidden,
        "vocab": m.vocab,
        "max_seq": m.max_seq,
        "moe": m.is_moe,
        "experts": m.moe.experts if m.moe else None,
        "top_k": m.moe.top_k if m.moe else None,
        "mla": m.mla is not None,
        "params_total": b["total"],
        "params_active": b["active"],
    }


def model_detail(m: ModelSpec, typed: str | None = None) -> dict[str, Any]:
    """`llmpar models show NAME`: the spec, per-layer counts and the whole-model breakdown."""
    per_layer = {
        "attention": P.attention_params(m),
        "dense_mlp": P.dense_mlp_params(m),
        "expert": P.expert_params(m),
        "shared_experts": P.shared_expert_params(m),
        "router": P.router_params(m),
        "norms": P.norm_params_per_layer(m),
        "dense_layer": P.dense_layer_params(m),
        "moe_layer": P.moe_layer_params(m) if m.is_moe else None,
    }
    return {
        "model": m.name,
        "alias_typed": typed,
        "spec": m.model_dump(mode="json"),
        "derived": {"kv_heads": m.n_kv_heads, "head_dim": m.d_head, "dense_layers": m.dense_layers,
                    "moe_layers": m.moe_layers},
        "params_per_layer": per_layer,
        "params": P.breakdown(m),
    }


def _fmt_b(n: int) -> str:
    return f"{n / 1e9:,.2f}"


@click.group(name="models", invoke_without_command=True)
@_JSON
@click.pass_context
def models(ctx: click.Context, as_json: bool) -> None:
    """List the shipped models (name, aliases, shape, parameters); `models show NAME` for one."""
    if ctx.invoked_subcommand is not None:
        return
    aliases = _aliases("models")
    specs = [registry.load_model(n) for n in registry.shipped_names("models")]
    rank = {f: i for i, f in enumerate(_FAMILY_ORDER)}
    rows = [model_summary(m, aliases.get(m.name, [])) for m in specs]
    rows.sort(key=lambda r: (rank.get(r["family"], len(rank)), r["params_total"], r["name"]))
    if as_json:
        echo_json(rows)
        return
    from rich.table import Table

    table = Table(title="Shipped models (params in billions, 1e9)")
    for col, just in [("name", "left"), ("aliases", "left"), ("layers", "right"), ("hidden", "right"),
                      ("heads/kv", "right"), ("params (B)", "right"), ("active (B)", "right"), ("MoE", "left")]:
        table.add_column(col, justify=just)
    for r in rows:
        moe = f"{r['experts']} experts, top-{r['top_k']}" if r["moe"] else "-"
        table.add_row(r["name"], ", ".join(r["aliases"]), str(r["layers"]), str(r["hidden"]),
                      f"{r['heads']}/{r['kv_heads']}", _fmt_b(r["params_total"]), _fmt_b(r["params_active"]), moe)
    console = _console()
    console.print(table)
    console.print("`llmpar models show NAME` prints a model's spec and parameter breakdown; "
                  "a Hugging Face config.json path works in place of NAME.")


@models.command("show")
@click.argument("name")
@_JSON
def models_show(name: str, as_json: bool) -> None:
    """Print one model's spec and its parameter breakdown (NAME, alias, YAML or config.json path)."""
    m = registry.load_model(name)
    canon, typed = registry.resolved_name(name, "models")
    result = model_detail(m, typed if canon == m.name else None)
    if as_json:
        echo_json(result)
        return
    from rich.table import Table

    console = _console()
    head = f"{m.name}" + (f"  (alias {typed!r})" if result["alias_typed"] else "")
    spec = Table(title=f"{head} - {m.description}" if m.description else head, show_header=False)
    spec.add_column("field")
    spec.add_column("value")
    for key, value in result["spec"].items():
        if key in ("name", "description") or value in (None, [], ""):
            continue
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items() if v not in (None, []))
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        spec.add_row(key, str(value))
    console.print(spec)

    b, per = result["params"], result["params_per_layer"]
    table = Table(title="Parameters (exact; share of total)")
    table.add_column("component")
    table.add_column("params", justify="right")
    table.add_column("billions", justify="right")
    table.add_column("share", justify="right")
    table.add_column("per layer", justify="right")
    labels = [("embedding", "embedding (+ learned positions)", None),
              ("attention", "attention", "attention"),
              ("mlp", "MLP (dense layers)", "dense_mlp"),
              ("experts", "experts (routed)", "expert"),
              ("shared_experts", "shared experts", "shared_experts"),
              ("router", "router", "router"),
              ("norms", "norms (+ final norm)", "norms"),
              ("head", "LM head" + (" (tied)" if m.tied_embeddings else ""), None)]
    for key, label, per_key in labels:
        if key in ("experts", "shared_experts", "router") and not m.is_moe:
            continue
        per_txt = f"{per[per_key]:,}" if per_key else ""
        if per_key == "expert":
            per_txt += " each"
        table.add_row(label, f"{b[key]:,}", _fmt_b(b[key]), f"{100 * b[key] / b['total']:.1f} %", per_txt)
    table.add_section()
    table.add_row("total", f"{b['total']:,}", _fmt_b(b["total"]), "100.0 %", "")
    table.add_row("active per token", f"{b['active']:,}", _fmt_b(b["active"]),
                  f"{100 * b['active'] / b['total']:.1f} %", "")
    console.print(table)


# ---------------------------------------------------------------------------------- hardware

def hardware_summary(hw: Hardware, aliases: list[str] | None = None) -> dict[str, Any]:
    """One profile as JSON: bytes, FLOP/s in TFLOP/s, bandwidth per GPU per direction in GB/s."""
    return {
        "name": hw.name,
        "aliases": list(aliases or []),
        "description": hw.description,
        "extends": hw.extends,
        "gpu": hw.gpu.name,
        "memory_bytes": hw.gpu.memory,
        "memory_bandwidth_GBps": hw.gpu.memory_bandwidth / 1e9,
        "memory_efficiency": hw.gpu.memory_efficiency,
        "peak_tflops": {k: v / 1e12 for k, v in hw.gpu.peak_flops.items()},
        # the GEMM curve every compute term reads (cost/compute.py; docs/time-model.md): its ceiling
        # (MAMF), the dimension at which it halves, the launch cost's FLOPs (a fit writes all three)
        "gemm": hw.gpu.gemm.model_dump(mode="json"),
        "gpus_per_node": hw.gpus_per_node,
        "job_domain": hw.job_domain,
        "reserve_bytes": hw.reserve,
        "generation": hw.gpu.generation,
        "board_power_w": hw.gpu.board_power,
        "sms": hw.gpu.sms,
        "host_bandwidth_GBps": hw.host_bandwidth / 1e9 if hw.host_bandwidth is not None else None,
        "host_memory_bandwidth_GBps": hw.host_memory_bandwidth / 1e9 if hw.host_memory_bandwidth is not None else None,
        "host_memory_per_gpu_bytes": hw.host_memory_per_gpu,
        "gpus_per_host_link": hw.gpus_per_host_link,
        "node_power_w": hw.node_power,
        "gpu_hour_price": hw.gpu_hour_price,
        "tiers": [
            {
                "name": t.name,
                "kind": t.kind,
                "domain_size": t.domain_size,
                "bandwidth_per_direction_GBps": t.bandwidth / 1e9,
                "latency_s": t.latency,
                "ll128_latency_s": t.ll128_latency,
                "simple_latency_s": t.simple_latency,
                "in_network_reduction": t.in_network_reduction,
                "efficiency": t.efficiency,
                "inr_latency_s": t.inr_latency,
                "inr_efficiency": t.inr_efficiency,
            }
            for t in hw.tiers
        ],
    }


def _tier_text(t: dict[str, Any]) -> str:
    domain = f"{t['domain_size']} GPUs" if t["domain_size"] else "all"
    return f"{t['name']} {t['bandwidth_per_direction_GBps']:g} GB/s/dir ({domain})"


@click.group(name="hardware", invoke_without_command=True)
@_JSON
@_UNITS
@click.pass_context
def hardware(ctx: click.Context, as_json: bool, units: str) -> None:
    """List the shipped hardware profiles; `hardware show NAME` for one profile's tiers."""
    if ctx.invoked_subcommand is not None:
        return
    aliases = _aliases("hardware")
    if as_json:
        from llmpar.cli.common import refuse_moot_outputs

        refuse_moot_outputs({"--units": units != "gb"}, "--json (bytes)")
    rows = [hardware_summary(registry.load_hardware(n), aliases.get(n, [])) for n in registry.shipped_names("hardware")]
    if as_json:
        echo_json(rows)
        return
    from rich.table import Table

    scale, unit = unit_scale(units)
    table = Table(title="Shipped hardware profiles (bandwidth per GPU, per direction)")
    for col, just in [("name", "left"), ("aliases", "left"), ("GPU", "left"), (f"memory ({unit})", "right"),
                      ("bf16 peak (TFLOP/s)", "right"), ("GPUs/node", "right"), ("tiers", "left")]:
        table.add_column(col, justify=just)
    for r in rows:
        bf16 = r["peak_tflops"].get("bf16", r["peak_tflops"].get("fp16"))
        table.add_row(r["name"], ", ".join(r["aliases"]), r["gpu"], f"{r['memory_bytes'] / scale:.1f}",
                      f"{bf16:g}", str(r["gpus_per_node"]), "\n".join(_tier_text(t) for t in r["tiers"]))
    console = _console()
    console.print(table)
    console.print("`llmpar hardware show NAME` prints a profile; `--hardware path.yaml` uses your own "
                  "(it may `extends:` a shipped one).")


@hardware.command("show")
@click.argument("name")
@_JSON
@_UNITS
def hardware_show(name: str, as_json: bool, units: str) -> None:
    """Print one hardware profile: GPU, peaks per dtype and the network tiers (NAME or YAML path)."""
    if as_json:
        from llmpar.cli.common import refuse_moot_outputs

        refuse_moot_outputs({"--units": units != "gb"}, "--json (bytes)")
    hw = registry.load_hardware(name)
    result = hardware_summary(hw, _aliases("hardware").get(hw.name, []))
    if as_json:   # the summary's units, and every field of the profile as validated (calibration included)
        echo_json({**result, "spec": hw.model_dump(mode="json")})
        return
    from rich.table import Table

    scale, unit = unit_scale(units)
    console = _console()
    gpu = Table(title=f"{hw.name} - {hw.description}" if hw.description else hw.name, show_header=False)
    gpu.add_column("field")
    gpu.add_column("value")
    gpu.add_row("GPU", result["gpu"])
    gpu.add_row("memory", f"{result['memory_bytes'] / scale:.1f} {unit}")
    gpu.add_row("memory bandwidth", f"{result['memory_bandwidth_GBps']:g} GB/s")
    for dtype, tf in result["peak_tflops"].items():
        gpu.add_row(f"peak {dtype} (dense)", f"{tf:g} TFLOP/s")
    g = result["gemm"]
    gpu.add_row("GEMM curve", f"at most {g['max_efficiency']:g} of the peak (MAMF), half of it at a smallest dimension "
                              f"of {g['half_dim']:g}, launch cost half at {g['half_flops']:.3g} FLOPs (docs/time-model.md)")
    gpu.add_row("HBM efficiency", f"{result['memory_efficiency']:g} of the datasheet bandwidth")
    gpu.add_row("GPUs per node", str(result["gpus_per_node"]))
    if result["job_domain"] is not None:
        gpu.add_row("job domain", f"{result['job_domain']} GPUs of each scale-up domain per job (rank placement)")
    if result["generation"]:
        gpu.add_row("generation", f"{result['generation']} (selects a stack's per-generation values)")
    if result["board_power_w"] is not None:
        gpu.add_row("board power", f"{result['board_power_w']:g} W per GPU")
    if result["sms"] is not None:
        gpu.add_row("SMs", f"{result['sms']} (what overlapped all-to-alls take from compute: stack overlap.ep_sms)")
    if result["host_bandwidth_GBps"] is not None:
        gpu.add_row("host link", f"{result['host_bandwidth_GBps']:g} GB/s per GPU per direction (--offload-layers)")
    if result["host_memory_per_gpu_bytes"] is not None:
        gpu.add_row("host memory per GPU", f"{result['host_memory_per_gpu_bytes'] / scale:.1f} {unit} "
                                           f"(offload capacity; " + ("each GPU its own host link)" if result["gpus_per_host_link"] == 1
                                                                        else f"{result['gpus_per_host_link']} GPUs share a host link)"))
    if result["host_memory_bandwidth_GBps"] is not None:
        gpu.add_row("host memory", f"{result['host_memory_bandwidth_GBps']:g} GB/s of CPU DRAM per GPU (--optimizer-offload)")
    if result["node_power_w"] is not None:
        gpu.add_row("node power", f"{result['node_power_w']:g} W per node (max; energy in `llmpar sweep`)")
    if result["gpu_hour_price"] is not None:
        gpu.add_row("GPU-hour price", f"{result['gpu_hour_price']:g} (your profile's)")
    if result["reserve_bytes"] is not None:
        gpu.add_row("reserve", f"{result['reserve_bytes'] / scale:.1f} {unit} (legacy; acts as --reserve)")
    if hw.extends:
        gpu.add_row("extends", hw.extends)
    if hw.source:
        gpu.add_row("source", hw.source)
    console.print(gpu)
    tiers = Table(title="Network tiers (bandwidth per GPU, per direction)")
    for col, just in [("tier", "left"), ("kind", "left"), ("domain (GPUs)", "right"), ("GB/s/dir", "right"),
                      ("latency (us)", "right"), ("in-network reduction", "left"), ("efficiency", "right")]:
        tiers.add_column(col, justify=just)
    for t in result["tiers"]:
        tiers.add_row(t["name"], t["kind"], str(t["domain_size"] or "all"), f"{t['bandwidth_per_direction_GBps']:g}",
                      f"{t['latency_s'] * 1e6:g}", "yes" if t["in_network_reduction"] else "no", f"{t['efficiency']:g}")
    console.print(tiers)
