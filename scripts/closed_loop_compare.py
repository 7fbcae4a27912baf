"""The published closed-loop and burst serving runs against llmpar's two readings of them: the fluid
model `serve` prints (closed loops in waves, docs/serving.md "Under load") and the scheduler
simulation (cost/serving_sim.py) run as the same closed loop, which lets the clients stagger.

    python scripts/closed_loop_compare.py            # summary: median |error| and signed median
    python scripts/closed_loop_compare.py --rows     # every row: measured, fluid, simulated

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="print every row")
    errs = compare(ap.parse_args().rows)
    print(f"{'runs':<12} {'model':<10} {'TTFT':>18} {'TPOT':>18} {'throughput':>18}")
    for kind in ("closed loop", "burst"):
        for how in ("fluid", "simulated"):
            if (kind, how, "ttft") in errs:
                print(f"{kind:<12} {how:<10} " + " ".join(f"{_err(errs.get((kind, how, k), [])):>18}"
                                                        for k in ("ttft", "tpot", "throughput")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
