"""The published closed-loop and burst serving runs against llmpar's two readings of them: the fluid
model `serve` prints (closed loops in waves, docs/serving.md "Under load") and the scheduler
simulation (cost/serving_sim.py) run as the same closed loop, which lets the clients stagger.

    python scripts/closed_loop_compare.py            # summary: median |error| and signed median
    python scripts/closed_loop_compare.py --rows     # every row: measured, fluid, simulated
    python scripts/closed_loop_compare.py --bursts   # the bursts' prefill rate per GPU and its share of the peak

The figures docs/serving.md quotes in "Evidence" and "Limits" (the benchmaq grid, NIM and vLLM's
FP8-KV rows) are what this prints. Every row is predicted under the shipped vLLM profile (the rows
of these sources are never fitted: 'other' engine or `fit: false`). Errors are ln(measured /
predicted) for TTFT and TPOT and ln(predicted / measured) for throughput, reported as exp - 1:
positive is llmpar optimistic (too short a latency, too high a throughput), as validate does.
"""

from __future__ import annotations

import argparse
import math
import statistics

SOURCES = ("benchmaq-vllm", "nim-llama-3.3-70b-h100", "vllm-fp8-kvcache-h100")


def _err(values: list[float]) -> str:
    if not values:
        return "-"
    size, signed = median_errors(values)
    return f"{size * 100:.0f} % ({signed * 100:+.0f} %, {len(values)})"


def median_errors(values: list[float]) -> tuple[float, float]:
    """(median |error|, signed median) of log errors, as exp - 1 (validate's measure)."""
    return (math.exp(statistics.median(abs(v) for v in values)) - 1.0, math.exp(statistics.median(values)) - 1.0)


def compare(show: bool = False) -> dict[tuple[str, str, str], list[float]]:
    """{(runs, model, figure): log errors}: runs "closed loop" | "burst", model "fluid" |
    "simulated", figure "ttft" | "tpot" | "throughput"; ``show`` prints every row."""
    from llmpar.cost.serving_sim import simulate
    from llmpar.serving.published import load_kwargs, shipped_rows
    from llmpar.serving.run import serve
    from llmpar.specs.registry import load_engine, load_hardware, load_model

    eng = load_engine("vllm")
    errs: dict[tuple[str, str, str], list[float]] = {}
    for r in (r for r in shipped_rows() if r.source in SOURCES):
        model, hw = load_model(r.model), load_hardware(r.hardware)
        out = serve(model, hw, eng, gpus=r.gpus, tp=r.tp, pp=r.pp, isl=r.isl, osl=r.osl, weights=r.weights,
                    kv_dtype=r.kv_dtype, **load_kwargs(r))
        fig, d, cap = out["figures"], out["deployment"], out["capacity"]
        kind = "burst" if "offline" in r.load else "closed loop"
        got = {"fluid": (fig["ttft_s"], fig["tpot_s"], fig["output_tokens_per_s"])}
        if kind == "closed loop":
            per = max(1, int(r.load["concurrency"]) // d.replicas)
            n = max(per, (r.requests or 10 * per) // d.replicas)
            sim = simulate(model, hw, eng, d.dep(), isl_range=(r.isl, r.isl), osl_range=(r.osl, r.osl),
                           n_requests=min(n, 2000), kv_tokens=float(cap["kv_tokens"]),
                           max_seqs=int(cap["max_num_seqs"]), budget=int(cap["max_num_batched_tokens"]),
                           concurrency=per)
            got["simulated"] = (sim["ttft_s"]["mean"], sim["tpot_s"]["mean"],
                                sim["output_tokens_per_s"] * d.replicas)
        m = r.measured
        for how, (ttft, tpot, thr) in got.items():
            for name, e in (("ttft", math.log(m["ttft_s"] / ttft)),
                            ("tpot", math.log(m["tpot_s"] / tpot) if "tpot_s" in m else None),
                            ("throughput", math.log(thr / m["output_tokens_per_s"])
                             if "output_tokens_per_s" in m else None)):
                if e is not None:
                    errs.setdefault((kind, how, name), []).append(e)
        if show:
            line = "  ".join(f"{how} TTFT {t * 1e3:,.0f} ms TPOT {p * 1e3:.1f} ms {x:,.0f} tok/s"
                             for how, (t, p, x) in got.items())
            print(f"{r.source} | {r.row[:60]} | measured TTFT {m['ttft_s'] * 1e3:,.0f} ms "
                  f"TPOT {m.get('tpot_s', math.nan) * 1e3:.1f} ms {m.get('output_tokens_per_s', math.nan):,.0f} tok/s"
                  f" | {line}")
    return errs


def bursts(show: bool = False) -> list[dict]:
    """The benchmaq bursts read for their prefill (docs/serving.md, Evidence): 100 prompts at once,
    prefilled first come first served, so the p99 TTFT is the whole prefill. Per row: the prefill
    rate per GPU, N x isl / p99 / GPUs, and its share of the dense BF16 peak at the FLOPs per prompt
    token that cost/serving.py iteration_terms counts (linear + causal attention, summed over tp)."""
    from llmpar.cost.serving import iteration_terms
    from llmpar.serving.published import shipped_rows
    from llmpar.specs.registry import load_engine, load_hardware, load_model

    import yaml

    from llmpar.specs.registry import data_dir

    # the p99 TTFT is in the file, not in the rows validate reads (which keep the means)
    raw = yaml.safe_load((data_dir("validation") / "serving" / "benchmaq-vllm.yaml").read_text(encoding="utf-8"))
    p99 = {r["row"]: r["ttft_ms"]["p99"] / 1e3 for r in raw["rows"] if "offline" in r.get("load", {})}
    eng = load_engine("vllm")
    out = []
    for r in (r for r in shipped_rows() if r.row in p99):
        model, hw = load_model(r.model), load_hardware(r.hardware)
        n = int(r.load["offline"])
        t = iteration_terms(model, hw, eng, tp=r.tp, pp=1, ep=1, weights=r.weights, kv_dtype=r.kv_dtype or "bf16",
                            prefill=r.isl)
        flops_per_token = (t["linear_flops"] + t["attention_flops"]) * r.tp / r.isl
        per_gpu = n * r.isl / p99[r.row] / r.gpus
        row = {"hardware": r.hardware, "tp": r.tp, "isl": r.isl, "ttft_mean_s": r.measured["ttft_s"],
               "ttft_p99_s": p99[r.row], "prefill_tokens_per_s_per_gpu": per_gpu,
               "peak_share": per_gpu * flops_per_token / hw.gpu.peak("bf16")}
        out.append(row)
        if show:
            print(f"{row['hardware']:<9} tp {row['tp']}  isl {row['isl']:>6,}  TTFT mean {row['ttft_mean_s']:6.2f} s  "
                  f"p99 {row['ttft_p99_s']:6.2f} s  prefill {per_gpu / 1e3:5.2f}k tokens/s per GPU  "
                  f"{row['peak_share'] * 100:4.1f} % of the dense BF16 peak")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument("--bursts", action="store_true", help="the bursts' prefill rate per GPU instead")
    args = ap.parse_args()
    if args.bursts:
        bursts(show=True)
        return 0
    errs = compare(args.rows)
    print(f"{'runs':<12} {'model':<10} {'TTFT':>18} {'TPOT':>18} {'throughput':>18}")
    for kind in ("closed loop", "burst"):
        for how in ("fluid", "simulated"):
            if (kind, how, "ttft") in errs:
                print(f"{kind:<12} {how:<10} " + " ".join(f"{_err(errs.get((kind, how, k), [])):>18}"
                                                        for k in ("ttft", "tpot", "throughput")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
