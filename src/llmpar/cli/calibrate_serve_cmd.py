"""`llmpar calibrate serve FILE...`: fit a serving engine profile to your benchmark outputs
(docs/serving.md, "calibrate serve"). The work is :func:`llmpar.serving.calibrate.calibrate`."""

from __future__ import annotations

from pathlib import Path

import click

from llmpar.cli.common import complete_hardware, complete_model, echo_json
from llmpar.cost.serving import KV_DTYPES, WEIGHT_DTYPES
from llmpar.specs.registry import DEFAULT_HARDWARE


@click.command("serve")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--model", "model", required=True, shell_complete=complete_model, help="The model the runs served.")
@click.option("--hardware", default=DEFAULT_HARDWARE, show_default=True, shell_complete=complete_hardware)
@click.option("--engine", default="vllm", show_default=True, help="The engine profile to start from (name or YAML).")
@click.option("--gpus", type=int, help="GPUs serving (default tp x pp).")
@click.option("--tp", type=int, default=1, show_default=True)
@click.option("--pp", type=int, default=1, show_default=True)
@click.option("--weights", type=click.Choice(WEIGHT_DTYPES), default="bf16", show_default=True)
@click.option("--kv-dtype", type=click.Choice(KV_DTYPES), default="bf16", show_default=True)
@click.option("--isl", type=int, help="Prompt tokens, for reports that do not print them (trtllm-bench).")
@click.option("--osl", type=int, help="Output tokens, for reports that do not print them.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the fitted engine profile here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def serve_cmd(files, model, hardware, engine, gpus, tp, pp, weights, kv_dtype, isl, osl, out, as_json):
    """Fit ENGINE's decode bandwidth, prefill GEMM fraction and fixed costs to serving benchmark outputs:
    `vllm bench serve` / `benchmark_serving.py` JSON or summaries, `sglang.bench_serving` JSON lines or
    summaries, `trtllm-bench` reports.

    \b
    Examples:
      llmpar calibrate serve results/*.json --model llama-3-70b --tp 4 --out my-vllm.yaml
      llmpar calibrate serve bench.txt --model llama-3.1-8b --engine trtllm --weights fp8 --kv-dtype fp8
    """
    from llmpar.errors import UserError
    from llmpar.inputs import load_hardware_spec, load_model_spec
    from llmpar.outputs import check_out, write_spec
    from llmpar.serving.calibrate import calibrate, engine_yaml
    from llmpar.serving.deployment import deployment
    from llmpar.specs.registry import load_engine

    spec = load_model_spec(model)[0]
    hw = load_hardware_spec(hardware)
    check_out(out, inputs=files, spec_kind="engines", spec=engine)
    base = load_engine(engine)
    d = deployment(spec, hw, gpus=gpus, tp=tp, pp=pp, weights=weights, kv_dtype=kv_dtype)
    for name, v in (("isl", isl), ("osl", osl)):
        if v is not None and v < 1:
            raise UserError(f"--{name} must be a positive number of tokens, got {v}")
    r = calibrate(files, spec, hw, base, gpus=d.gpus, tp=d.tp, pp=d.pp, weights=weights, kv_dtype=kv_dtype,
                  isl=isl, osl=osl)
    if out is not None:
        write_spec(out, engine_yaml(engine, r, files), "engines")
    if as_json:
        echo_json({k: v for k, v in r.items() if k not in ("rows", "engine")} | {"out": str(out) if out else None})
        return
    _render(r, base.name, out)


def _render(r, base: str, out) -> None:
    from llmpar.cli.render import console, simple_table
    from llmpar.serving import fit as F

    con = console()
    con.print(f"{len(r['rows'])} runs against engine {base}", highlight=False)

    def pct(x):
        return "-" if x is None else f"{(2.718281828459045 ** x - 1) * 100:+.0f} %"

    rows = [(p["where"].split("/")[-1], f"{p['isl']}/{p['osl']}", " ".join(f"{k} {v}" for k, v in p["load"].items()),
             *(f"{pct(p['error_before'].get(k))} -> {pct(p['error_after'].get(k))}" for k in ("throughput", "tpot", "ttft")))
            for p in r["per_row"][:40]]
    con.print(simple_table(("run", "in/out", "load", "throughput", "TPOT", "TTFT"), rows,
                           title="error before -> after (throughput: predicted/measured - 1; times: measured/predicted - 1)"))

    def summary(d):
        return ", ".join(f"{k} {v * 100:.1f} %" for k, v in d.items()) if d else "-"

    # the summary's errors are symmetric in the ratio (validate --serving's): e^median|ln r| - 1, so a
    # row at -37 % in the table above (r = 0.63) is a 59 % miss here, as one at +59 % is
    con.print(f"median |error| (e^median|ln ratio| - 1: -37 % above and +59 % are one miss) before: "
              f"{summary(r['before'])}; after (in-sample): {summary(r['after'])}", highlight=False)
    if r["cv"]:
        con.print(f"{r['cv_scheme']}: {summary(r['cv'])} (the honest figure)", highlight=False)
    else:
        con.print("no cross-validation: two runs are too few to hold one out", highlight=False)
    vals, by_gen = F.unpack_fit(r["fitted"])
    bound = r.get("at_bound") or {}
    con.print("fitted: " + ", ".join(f"{n} {v:.4g}" + (f" (at its {bound[n]} bound)" if n in bound else "")
                                     for (_, n, *_), v in zip(F.PARAMS, vals))
              + "".join(f", decode_bandwidth[{g}] {v:.4g}" for g, v in by_gen.items()), highlight=False)
    if any(v == "upper" for v in bound.values()):
        con.print("  a value on its upper bound is a bound, not an estimate: the runs ask for more than any engine "
                  "achieves (a term the model lacks, or a deployment other than the one given: check --tp, "
                  "--weights, --kv-dtype)", highlight=False)
    if any(v == "lower" for v in bound.values()):
        con.print("  a value on its lower bound: the runs would take less than none of it (the other terms already "
                  "account for their time)", highlight=False)
    if out is not None:
        con.print(f"wrote {out} (extends {base}); use it with --engine {out}", highlight=False)
