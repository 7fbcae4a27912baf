"""`llmpar serve`: one serving deployment under one load — TTFT, TPOT, throughput, KV capacity.

The numbers come from :func:`llmpar.serving.run.serve_api` (``llmpar.serve``); this module
parses, calls it and renders (docs/serving.md).
"""

from __future__ import annotations

import math

import click

from llmpar.cli.common import complete_hardware, complete_model, echo_json
from llmpar.cost.serving import KV_DTYPES, WEIGHT_DTYPES
from llmpar.errors import CheckFailed
from llmpar.specs.registry import DEFAULT_HARDWARE


@click.command("serve")
@click.argument("model", required=False, shell_complete=complete_model)
@click.option("--hf", "hf", metavar="CONFIG_JSON", help="Read the model from a Hugging Face config.json.")
@click.option("--hardware", default=DEFAULT_HARDWARE, show_default=True, shell_complete=complete_hardware,
              help="Shipped profile name (see `llmpar hardware`) or a YAML path.")
@click.option("--engine", default=None, help="Serving engine: vllm (default), sglang, trtllm, or a YAML path.")
@click.option("--gpus", type=int, help="GPUs in the deployment: replicas x tp x pp (default tp x pp).")
@click.option("--tp", type=int, help="Tensor-parallel degree of one replica (default: the largest that divides the heads and --gpus / pp, at most a node; the rest are replicas).")
@click.option("--pp", type=int, help="Pipeline-parallel degree of one replica (default 1).")
@click.option("--ep", type=int, help="Expert parallelism over the TP ranks (MoE; vLLM --enable-expert-parallel).")
@click.option("--isl", type=int, default=1024, show_default=True, help="Prompt (input) tokens per request.")
@click.option("--osl", type=int, default=128, show_default=True, help="Output tokens per request.")
@click.option("--isl-range", metavar="LO-HI", help="Prompt lengths uniform on LO-HI instead of --isl: TTFT and "
                                                   "end-to-end p50/p90/p99 over the spread (with --concurrency or --rate).")
@click.option("--osl-range", metavar="LO-HI", help="Output lengths uniform on LO-HI instead of --osl.")
@click.option("--simulate", type=int, metavar="N", help="Also run N requests (per replica, at most 10,000) through a "
                                                      "discrete-event model of the scheduler: TTFT, TPOT and "
                                                      "end-to-end p50/p90/p99 with the queue's own tail.")
@click.option("--seed", type=int, help="Seed of --simulate's arrivals and lengths (default 0; only with --simulate).")
@click.option("--concurrency", type=int, help="Closed loop: C clients, each sending its next request when one ends.")
@click.option("--rate", default=None, help="Open loop: Poisson arrivals, requests/s; inf = all --prompts at once "
                                           "(the default, as vllm bench serve).")
@click.option("--prompts", type=int, help="Requests of the run: with --rate inf all at once (default 1000); "
                                           "with a finite --rate, a benchmark of N requests at that rate "
                                           "(figures of the run in time, finite above capacity).")
@click.option("--batch", type=int, help="Static batching: B requests prefilled and decoded together.")
@click.option("--weights", type=click.Choice(WEIGHT_DTYPES), default="bf16", show_default=True,
              help="Weight precision of the linear layers (int4: AWQ/GPTQ group 128).")
@click.option("--kv-dtype", type=click.Choice(KV_DTYPES), help="KV-cache dtype (default bf16).")
@click.option("--max-num-seqs", type=int, help="Sequences per iteration (default: the engine's).")
@click.option("--max-num-batched-tokens", type=int, help="Tokens per iteration (default: the engine's).")
@click.option("--memory-fraction", type=float, help="Share of GPU memory the engine takes (vLLM "
                                                    "--gpu-memory-utilization; default: the engine's).")
@click.option("--dp-attention", is_flag=True, help="MoE: attention data-parallel over the TP GPUs, experts over all "
                                                 "of them (SGLang --enable-dp-attention, TRT-LLM enable_attention_dp).")
@click.option("--disagg", type=int, metavar="P", help="Disaggregated serving: P of the GPUs prefill, the rest decode "
                                                     "(with --rate; DistServe/Splitwise).")
@click.option("--spec-tokens", type=int, help="Speculative decoding: draft tokens per step (EAGLE/MTP; with --acceptance).")
@click.option("--acceptance", type=float, help="Share of draft tokens the target accepts (0-1).")
@click.option("--prefix-hit", type=float, help="Share of each prompt served from the prefix cache (0-1).")
@click.option("--interval-level", default=None, help="Level of the error bands (default 80%).")
@click.option("--explain", is_flag=True, help="Show the decode and prefill iteration term by term.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (docs/json.md, serve).")
def serve(model, as_json, explain, **kw):
    """Serve MODEL on paper: latency and throughput of one deployment under one load.

    \b
    Examples:
      llmpar serve llama-3-8b --concurrency 64
      llmpar serve llama-3-70b --tp 4 --isl 2048 --osl 256 --rate 4
      llmpar serve mixtral-8x7b --hardware h200 --tp 2 --rate inf --prompts 1000
      llmpar serve llama-3-70b --gpus 8 --tp 8 --weights fp8 --batch 32 --explain
    """
    # the serving room's own entry, not the llmpar.api facade (which loads the training results)
    from llmpar.serving.run import serve_api

    if model is None and kw.get("hf") is None:
        from llmpar.errors import UserError

        raise UserError("give a MODEL (e.g. llama-3-8b) or --hf config.json")
    ctx = click.get_current_context()
    for name in ("isl", "osl"):
        if kw.get(f"{name}_range") is not None and ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE:
            from llmpar.errors import UserError

            raise UserError(f"--{name} and --{name}-range both give the {'prompt' if name == 'isl' else 'output'} "
                            f"length: give one (the range's mean is the --{name})")
    if as_json:
        from llmpar.cli.common import refuse_moot_outputs

        refuse_moot_outputs({"--explain": explain}, "--json (its `terms` are the explanation)")
    r = serve_api(model, **kw)
    if as_json:
        echo_json(r.model_dump())
    else:
        _render(r, explain)
    if not r.fits:
        raise CheckFailed(r.verdict)
    if r.verdict == "SATURATED":
        raise CheckFailed(f"--rate {r.load['rate']:g} requests/s exceeds what the deployment sustains "
                          f"({r.load['capacity_requests_per_s']:.3g} requests/s): the queue grows without bound")


def _band(r, key, fmt):
    from llmpar.cli.render import band

    return band(r.interval.get(key), fmt)


def _render(r, explain: bool) -> None:
    from llmpar.cli.render import console, print_assumptions, simple_table, verdict

    con = console()
    s = r.settings
    _print_header(con, r)
    if not r.fits:
        con.print(verdict(False, r.verdict.removeprefix("DOES NOT FIT: ")))
        print_assumptions(con, r.notes)
        return
    con.print(f"  max concurrency at {s['isl'] + s['osl']:,} tokens per request: {r.max_concurrency:,}")
    con.print(simple_table(("figure", "value"), _figure_rows(r)))
    if r.simulation:
        _print_simulation(con, r.simulation)
    _print_bands(con, r)
    if explain:
        _explain(con, r)
    print_assumptions(con, r.notes + ["fluid model of continuous batching: means, not tails (docs/serving.md)"])


def _per_s(x):
    """A rate per second: whole above 100, three significant figures below."""
    return f"{x:,.0f}/s" if x >= 100 else f"{x:.3g}/s"


def _secs(x):
    """A latency; a saturated queue has no finite latency: said, never printed as a number."""
    from llmpar.units import fmt_seconds

    return "unbounded (saturated)" if x is None else fmt_seconds(x)


def _print_header(con, r) -> None:
    """The header (deployment, precision, requests and load) and the memory line."""
    from llmpar.cli.render import header
    from llmpar.units import fmt_bytes

    s = r.settings
    load = r.load
    what = {"concurrency": f"{load.get('concurrency')} concurrent clients (closed loop)",
            "rate": (f"{load.get('rate'):g} requests/s (Poisson)" if "rate" in load else "")
            + (f", {load['prompts']:,} requests" if "rate" in load and load.get("prompts") else ""),
            "offline": f"{load.get('prompts')} prompts at once (offline)",
            "batch": f"static batch of {load.get('batch')}"}[load["kind"]]
    con.print(header(f"serve {r.model} on {r.hardware} with {r.engine}",
           [("deployment", f"{s['replicas']} x (tp {s['tp']} x pp {s['pp']}"
                           + (f", ep {s['ep']}" if s["ep"] > 1 else "") + f") = {s['gpus']} GPUs"),
            ("precision", f"weights {s['weights']}, KV cache {s['kv_dtype']}"),
            ("requests", (f"{s['isl_range'][0]:,}-{s['isl_range'][1]:,}" if "isl_range" in s else f"{s['isl']:,}")
             + " in / " + (f"{s['osl_range'][0]:,}-{s['osl_range'][1]:,}" if "osl_range" in s else f"{s['osl']:,}")
             + f" out tokens; {what}")]))
    m = r.memory
    con.print(f"  memory per GPU: weights {fmt_bytes(m['weights_bytes'])}, activations {fmt_bytes(m['activations_bytes'])}, "
              f"workspace {fmt_bytes(m['workspace_bytes'])}, KV pool {fmt_bytes(m['kv_pool_bytes'])} = "
              f"{m['kv_tokens']:,.0f} tokens")


def _figure_rows(r) -> list[tuple[str, str]]:
    """The figures table's rows: latencies with their bands, throughput, the queue, the pools, the capacity."""
    from llmpar.units import fmt_seconds

    s = r.settings
    load = r.load
    rows = [("TTFT", _secs(r.ttft_s) + (_band(r, "ttft_s", fmt_seconds) if r.ttft_s is not None else ""))]
    if r.tpot_s is not None:
        rows.append(("TPOT (per output token)", fmt_seconds(r.tpot_s) + _band(r, "tpot_s", fmt_seconds)))
        if r.itl_median_s is not None and r.itl_median_s != r.tpot_s:
            rows.append(("median token gap (ITL)", fmt_seconds(r.itl_median_s) + _band(r, "itl_median_s", fmt_seconds)))
    if r.percentiles:
        p = r.percentiles
        rows.append(("TTFT p50 / p90 / p99", " / ".join(fmt_seconds(p["ttft_s"][k]) for k in ("p50", "p90", "p99"))
                     + "  (length spread only)"))
        rows.append(("end-to-end p50 / p90 / p99", " / ".join(fmt_seconds(p["e2e_s"][k]) for k in ("p50", "p90", "p99"))
                     + "  (length spread only)"))
    rows += [("end-to-end latency", _secs(r.e2e_s)),
             ("output tokens/s", _per_s(r.output_tokens_per_s) + _band(r, "output_tokens_per_s", _per_s)),
             ("output tokens/s per GPU", _per_s(r.output_tokens_per_s_per_gpu)),
             ("requests/s", _per_s(r.requests_per_s)),
             # disaggregated: only the decode pool's replicas hold running requests
             (("running per decode replica", f"{load['running'] / load['decode_replicas']:,.1f}")
              if load.get("decode_replicas") else ("running per replica", f"{load['running'] / s['replicas']:,.1f}"))]
    if load.get("queue_s"):
        q = load["queue_s"]
        rows.append(("waiting in queue", fmt_seconds(q) if math.isfinite(q) else "unbounded (saturated)"))
    if "prefill_gpus" in load:
        rows += [("pools", f"{load['prefill_gpus']} prefill + {load['decode_gpus']} decode GPUs"),
                 ("KV transfer per request", fmt_seconds(load["kv_transfer_s"])),
                 ("prefill utilisation", f"{load['prefill_utilization'] * 100:.0f} %" if load["prefill_utilization"] < 1
                  else "above 100 % (saturated: requests arrive faster than the pool prefills them)"),
                 ("prefill / decode capacity (requests)", f"{_per_s(load['prefill_capacity_requests_per_s'])} / "
                                                          f"{_per_s(load['decode_capacity_requests_per_s'])}")]
    if "capacity_requests_per_s" in load:
        rows.append(("capacity (requests)", _per_s(load["capacity_requests_per_s"])
                     + _band(r, "capacity_requests_per_s", _per_s)))
    return rows


def _print_simulation(con, sim) -> None:
    """--simulate's line and its table of means and percentiles."""
    from llmpar.cli.render import simple_table
    from llmpar.units import fmt_seconds

    srows = []
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "end-to-end")):
        st = sim.get(key)
        if st:
            srows.append((label, fmt_seconds(st["mean"]), *(fmt_seconds(st[k]) for k in ("p50", "p90", "p99"))))
    con.print(f"  simulated: {sim['measured_requests']:,} of {sim['requests']:,} requests per replica (seed "
              f"{sim['seed']}), {_per_s(sim['output_tokens_per_s'] or 0.0)} output tokens", highlight=False)
    con.print(simple_table(("simulated", "mean", "p50", "p90", "p99"), srows))


def _print_bands(con, r) -> None:
    """Where the error bands come from: the published figures of the class, or the stated band's note."""
    iv = r.interval.get("output_tokens_per_s") or r.interval.get("capacity_requests_per_s")
    if iv:
        if iv["rows"]:
            ev = (f"{iv['rows']} published figures from {iv['sources']} source(s) of {iv['used_class']}"
                  + (" (extrapolated: none of this exact class, widened)" if iv["extrapolated"] else ""))
        else:
            ev = iv.get("note", "")
        con.print(f"  bands: {iv['level'] * 100:.0f} % intervals from {ev}")


def _explain(con, r) -> None:
    from llmpar.cli.render import simple_table
    from llmpar.units import fmt_bytes, fmt_seconds

    b = r.breakdown
    for title, phase in (("decode iteration at the modelled batch", "decode"),
                         ("prefill of one prompt, alone", "prefill")):
        terms = [t for t in r.terms if t["component"] == phase]   # cost/serving_explain.py
        rows = [(t["name"], fmt_seconds(t["seconds"]), t["formula"]) for t in terms]
        rows.append(("total", fmt_seconds(b[phase]["total_s"]), ""))
        con.print(simple_table(("term", "time", "formula"), rows, title=title))
    d = b["decode"]
    con.print(f"  decode batch per micro-batch {b['decode_batch']:.1f}: reads {fmt_bytes(d['weight_bytes'])} of weights and "
              f"{fmt_bytes(d['kv_read_bytes'])} of KV cache per GPU at {d['bandwidth_bytes_per_s'] / 1e12:.2f} TB/s; the weight-read "
              f"bound at the datasheet bandwidth is {fmt_seconds(b['bandwidth_bound_s'])}")
