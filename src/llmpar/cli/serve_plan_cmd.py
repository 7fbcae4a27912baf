"""`llmpar serve-plan`: the cheapest deployment that meets TTFT and TPOT targets (docs/serving.md).

The search is :func:`llmpar.serving.plan_api.serve_plan_api` (``llmpar.serve_plan``); this module
parses, calls it and renders."""

from __future__ import annotations

import math

import click

from llmpar.cli.common import complete_hardware, complete_model, echo_json, plot_option
from llmpar.errors import CheckFailed
from llmpar.specs.registry import DEFAULT_HARDWARE


@click.command("serve-plan")
@click.argument("model", required=False, shell_complete=complete_model)
@click.option("--hf", "hf", metavar="CONFIG_JSON", help="Read the model from a Hugging Face config.json.")
@click.option("--hardware", default=DEFAULT_HARDWARE, show_default=True, shell_complete=complete_hardware)
@click.option("--engine", default=None, help="Engines to compare: names (vllm,trtllm) or all (default vllm).")
@click.option("--gpus", type=int, help="Use N GPUs as well as possible (most output tokens/s within the targets).")
@click.option("--rate", type=float, help="Serve R requests/s with the fewest GPUs.")
@click.option("--isl", type=int, default=1024, show_default=True, help="Prompt tokens per request.")
@click.option("--osl", type=int, default=128, show_default=True, help="Output tokens per request.")
@click.option("--ttft", help="Time-to-first-token target, with a unit (500ms).")
@click.option("--tpot", help="Time-per-output-token target, with a unit (30ms).")
@click.option("--weights", default=None, help="Weight precisions to compare, e.g. bf16,fp8 (default bf16).")
@click.option("--disagg", is_flag=True, help="With --rate: also search disaggregated prefill/decode pools (unvalidated: "
                                           "no comparable published run).")
@click.option("--dp-attention", is_flag=True, help="For an MoE model: also search data-parallel attention with the "
                                                 "experts over the replica (unvalidated: no comparable published run).")
@click.option("--spec-tokens", type=int, help="Also evaluate every deployment with speculative decoding of K draft "
                                             "tokens (with --acceptance; unvalidated: no published run).")
@click.option("--acceptance", type=float, help="The share of draft tokens the target accepts (with --spec-tokens).")
@click.option("--kv-dtype", default=None, help="KV-cache precisions to compare, e.g. bf16,fp8 (default bf16).")
@click.option("--max-num-batched-tokens", default=None,
              help="Per-iteration token budgets (chunk sizes) to compare, e.g. 2048,8192,16384 (default: the engine's).")
@click.option("--gpu-hour-price", type=float, help="Price per GPU-hour: cost per million output tokens.")
@click.option("--top", type=int, default=10, show_default=True, help="Rows shown.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (docs/json.md, serve-plan).")
@plot_option("the frontier of output tokens/s per GPU against tokens/s per user, every candidate's points")
def serve_plan(model, as_json, plot_path, **kw):
    """Search engines, precisions and TP x PP layouts of MODEL for the deployment that meets the targets.

    \b
    Examples:
      llmpar serve-plan llama-3-70b --gpus 8 --ttft 500ms --tpot 30ms
      llmpar serve-plan llama-3-8b --rate 20 --isl 2048 --osl 256 --tpot 20ms --gpu-hour-price 2.5
    """
    from llmpar.errors import UserError
    from llmpar.serving.plan_api import serve_plan_api

    if model is None and kw.get("hf") is None:
        raise UserError("give a MODEL (e.g. llama-3-70b) or --hf config.json")
    r = serve_plan_api(model, **kw)
    if plot_path is not None:
        from llmpar.cli import plots

        plots.save(plots.serve_frontier_figure(r), plot_path)
    if as_json:
        echo_json({k: ([c.as_dict() for c in v] if k in ("candidates", "missed") else v) for k, v in r.items()})
    else:
        _render(r)
    if not r["candidates"]:
        m = r["missed"][0] if r["missed"] else None
        why = (f"; closest: {m.engine} {m.weights} tp {m.tp} pp {m.pp} at one request has {m.binding} "
               f"{(m.ttft_s if m.binding == 'TTFT' else m.tpot_s) * 1e3:.1f} ms") if m else ""
        raise CheckFailed(f"no deployment meets the targets{why}")


def _render(r) -> None:
    from llmpar.cli.render import console, fit_columns, header, simple_table
    from llmpar.units import fmt_seconds

    con = console()
    goal = f"{r['gpus']} GPUs" if r["gpus"] else f"{r['rate']:g} requests/s"
    slo = ", ".join(x for x in ((f"TTFT <= {fmt_seconds(r['ttft_s'])}" if r["ttft_s"] else ""),
                               (f"TPOT <= {fmt_seconds(r['tpot_s'])}" if r["tpot_s"] else "")) if x) or "no targets"
    con.print(header(f"serve-plan {r['model']} on {r['hardware']}",
                     [("goal", goal), ("requests", f"{r['isl']:,} in / {r['osl']:,} out"), ("targets", slo),
                      ("load", "Poisson arrivals (the open loop)" if r["rate"] else
                       "clients in step (a benchmark's closed loop, per replica)"),
                      ("searched", f"{r['evaluated']} deployments of {', '.join(r['engines'])}")]))
    rows = []
    # the chunk size in the layout cell only where --max-num-batched-tokens made it a searched knob
    show_budget = len({c.max_num_batched_tokens for c in r["candidates"]}) > 1
    for i, c in enumerate(r["candidates"], 1):
        d = c.as_dict()
        kv = "" if c.kv_dtype == "bf16" else f"/kv {c.kv_dtype}"
        ep = ((f" ep{c.ep}" if c.ep > 1 else "") + (" dpa" if c.dp_attention else "")
              + (f" spec{c.spec['spec_tokens']}@{c.spec['acceptance']:g}" if c.spec else ""))
        bt = f" tok{c.max_num_batched_tokens}" if show_budget else ""
        pools = (f" {c.disagg['prefill_replicas']}P+{c.disagg['decode_replicas']}D" if c.disagg
                 else f" x{c.replicas}")
        rows.append((i, c.engine, c.weights + kv, f"tp{c.tp} pp{c.pp}{ep}{bt}{pools}", c.gpus, c.concurrency if c.concurrency is not None else "-",
                     _secs(c.ttft_s), _secs(c.tpot_s), f"{c.output_tokens_per_s:,.0f}",
                     f"{d['output_tokens_per_s_per_gpu']:,.0f}",
                     f"{c.cost_per_million_tokens:.3g}" if c.cost_per_million_tokens is not None else "-"))
    if rows:
        names = ["#", "engine", "weights", "layout", "GPUs", "C/replica", "TTFT", "TPOT", "tok/s", "tok/s/GPU", "$/M tok"]
        cells = [[str(x) for x in row] for row in rows]
        # narrow terminals drop the least needed columns whole (render.fit_columns, as plan and sweep
        # do) instead of letting rich elide "trtllm" to "trtl…" and wrap the layout
        # the cost first when there is none to show; with a price it is the answer, kept to the last
        priced = any(c.cost_per_million_tokens is not None for c in r["candidates"])
        order = ("C/replica", "GPUs", "tok/s", "weights", "$/M tok") if priced else \
            ("$/M tok", "C/replica", "GPUs", "tok/s", "weights")
        keep, dropped = fit_columns(names, cells, con.width, order)
        con.print(simple_table([names[i] for i in keep], [[c[i] for i in keep] for c in cells]))
        if dropped:
            con.print(f"left out at this width: {', '.join(dropped)} (--json or a wider terminal has them)",
                      highlight=False)
        for line in _band_lines(r):
            con.print(line, highlight=False)
        if any(c.spec for c in r["candidates"]):
            con.print("  specK@a: speculative decoding of K draft tokens accepted at a (Leviathan et al. 2023 eq. 1); "
                      "no published run with it is in the evidence", highlight=False)
        if any(c.dp_attention for c in r["candidates"]):
            con.print("  dpa: attention data-parallel over the replica's GPUs, the experts over all of them; no "
                      "comparable published run is in the evidence, so such a row rests on the model alone",
                      highlight=False)
        if any(c.disagg for c in r["candidates"]):
            con.print("  nP+mD: disaggregated pools of n prefill and m decode replicas (the KV cache sent between "
                      "them); no comparable published run is in the evidence, so such a row rests on the model "
                      "alone (docs/serving.md, Disaggregated prefill and decode)", highlight=False)
        unfitted = [n for n, ev in r["engine_evidence"].items() if ev == "prior only"]
        if unfitted:
            con.print(f"  [bold]{', '.join(unfitted)}: prior values only, fitted on no published run[/] - a rank "
                      "that rests on them is a guess (docs/serving.md, Engines)", highlight=False)
    else:
        con.print("[bold red]no deployment meets the targets[/]")


def _band_lines(r) -> list[str]:
    """Under the table: #1's 80 % bands (the ones `llmpar serve` prints for the same deployment) and
    which shown rows still meet the targets at the slow end of theirs (TTFT and TPOT at their highs)."""
    from llmpar.cli.render import band as cell
    from llmpar.units import fmt_seconds

    def band(b, fmt):   # inline: one space before the bounds (serve's table cells have two)
        return " " + cell(b, fmt).strip() if b else ""
    c = r["candidates"][0]
    iv = c.interval or {}
    tput = iv.get("output_tokens_per_s")
    tpot = (f", TPOT {fmt_seconds(c.tpot_s)}{band(iv.get('tpot_s'), fmt_seconds)}"
            if c.tpot_s is not None and math.isfinite(c.tpot_s) else "")   # one output token has no gap
    lines = [f"  #1: TTFT {fmt_seconds(c.ttft_s)}{band(iv.get('ttft_s'), fmt_seconds)}{tpot}, "
             f"{c.output_tokens_per_s:,.0f} tok/s"
             f"{band(tput, lambda x: f'{x:,.0f}')}"
             + (f"; {tput['level'] * 100:.0f} % bands from {_evidence(tput)}" if tput else "")
             + " (means of the fluid model; --json: every row's bands)"]
    targets = [(key, t) for key, t in (("ttft_s", r["ttft_s"]), ("tpot_s", r["tpot_s"])) if t]
    if targets:
        def holds(cand):
            bands = cand.interval or {}
            return all((bands.get(key) or {}).get("high", getattr(cand, key)) <= t for key, t in targets
                       if getattr(cand, key) is not None and math.isfinite(getattr(cand, key)))
        ok = [str(i) for i, cand in enumerate(r["candidates"], 1) if holds(cand)]
        if not ok:
            lines.append("  at the slow end of its band no row shown meets the targets: each meets them at its mean "
                         "only, and a real run may miss them")
        else:
            lines.append(f"  at the slow end of {'its band, row' if len(ok) == 1 else 'their bands, rows'} "
                         f"{', '.join(ok)} still meet{'s' if len(ok) == 1 else ''} the targets"
                         + ("" if len(ok) == len(r["candidates"]) else "; the others may miss them"))
    return lines


def _secs(x) -> str:
    """A latency cell; none (TPOT of one-token answers) is '-', never 'nan us'."""
    from llmpar.units import fmt_seconds

    return fmt_seconds(x) if x is not None and math.isfinite(x) else "-"


def _evidence(iv) -> str:
    """Where a band comes from: the published figures of its class, or the stated band's note."""
    if not iv["rows"]:
        return iv.get("note", "no published run")
    return (f"{iv['rows']} published figures of {iv['used_class']}"
            + (" (extrapolated: none of this exact class, widened)" if iv["extrapolated"] else ""))
