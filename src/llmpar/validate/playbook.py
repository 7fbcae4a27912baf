"""Compare llmpar with a real framework's runs: the Hugging Face Ultra-Scale Playbook grid
(nanotron on 1-64 nodes of 8 x H100, seq 4096, global batch 256 sequences, 1B and 3B models).

    python -m llmpar.validate.playbook ../shared/validation/hf_playbook_runs_1b_3b.yaml

The runs are read from the file given (they are not part of llmpar). The model shapes are the
ones the file's header states were inferred from nanotron's scaling-benchmark script: 1B = 16
layers, hidden 2048, 32 heads, FFN 8192; 3B = 28 layers, hidden 3072, 32 heads, FFN 8192; vocab
32768, MHA, tied embeddings. Every run is evaluated at once, as arrays, through cost/step.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import yaml

from llmpar.cost.step import step_time
from llmpar.parallel import Parallel, Settings
from llmpar.specs import load_hardware
from llmpar.specs.model import ModelSpec

SHAPES = {
    "1B": dict(layers=16, hidden=2048),
    "3B": dict(layers=28, hidden=3072),
}


def spec(name: str) -> ModelSpec:
    return ModelSpec(name=f"playbook-{name}", family="llama", heads=32, kv_heads=32, ffn_hidden=8192, ffn_type="swiglu",
                     vocab=32768, tied_embeddings=True, norm="rmsnorm", max_seq=4096, **SHAPES[name])


def compare(path: str | Path, hardware: str = "h100-sxm") -> dict[str, dict]:
    runs = yaml.safe_load(Path(path).read_text())["runs"]
    hw = load_hardware(hardware)
    out = {}
    for name in SHAPES:
        rows = [r for r in runs if r["model"] == name]
        col = lambda k: np.array([r[k] for r in rows])  # noqa: E731
        tp, pp, dp = col("tensor_parallel"), col("pipeline_parallel"), col("data_parallel")
        n = len(rows)
        par = Parallel(tp=tp, pp=pp, dp=dp, cp=1, ep=1, zero=col("zero_stage"), sp=tp > 1, recompute=0,
                       micro_batch=col("micro_batch_size"), microbatches=col("grad_accum"), seq=4096,
                       schedule=np.ones(n, int), virtual_stages=np.ones(n, int))
        # nanotron accumulates gradients in fp32 (the file's header)
        res = step_time(spec(name), hw, par, Settings(grad_dtype="fp32"))
        ok = np.array([r["status"] == "ok" for r in rows])
        meas_tps = np.array([r["tokens_per_s_per_gpu"] or np.nan for r in rows], dtype=float)
        meas_mem = np.array([r["gpu_memory_gb"] or np.nan for r in rows], dtype=float)
        pred_tps = np.asarray(res["tokens_per_s"]) / par.gpus
        pred_mem = np.asarray(res["memory"]["total_bytes"] - res["memory"]["reserved_bytes"]) / 2**30
        inside = ok & (tp <= hw.gpus_per_node)
        single = ok & (par.gpus == hw.gpus_per_node)
        fits = np.asarray(res["memory"]["fits"], dtype=bool)
        out[name] = {
            "runs": n, "ok": int(ok.sum()),
            "throughput_ratio_single_node_median": float(np.nanmedian(pred_tps[single] / meas_tps[single])),
            "throughput_ratio_tp_in_node_median": float(np.nanmedian(pred_tps[inside] / meas_tps[inside])),
            "throughput_ratio_by_gpus": {int(g): float(np.nanmedian(pred_tps[inside & (par.gpus == g)]
                                                                     / meas_tps[inside & (par.gpus == g)]))
                                         for g in sorted(set(par.gpus[inside]))},
            "memory_ratio_median": float(np.nanmedian(pred_mem[ok] / meas_mem[ok])),
            "predicted_oom_among_ok": int((~fits & ok).sum()),
            "predicted_fit_among_crashed": int((fits & ~ok).sum()), "crashed": int((~ok).sum()),
        }
    return out


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.exit("usage: python -m llmpar.validate.playbook PATH/hf_playbook_runs_1b_3b.yaml")
    for name, r in compare(args[0]).items():
        print(f"\n{name}: {r['ok']} ok of {r['runs']} runs")
        print(f"  predicted / measured tokens/s per GPU, median: single node {r['throughput_ratio_single_node_median']:.2f}, "
              f"all runs with TP inside a node {r['throughput_ratio_tp_in_node_median']:.2f}")
        print("  by GPU count: " + ", ".join(f"{g}: {v:.2f}" for g, v in r["throughput_ratio_by_gpus"].items()))
        print(f"  predicted / measured peak memory (without reserve), median: {r['memory_ratio_median']:.2f}")
        print(f"  predicted DOES NOT FIT among runs that ran: {r['predicted_oom_among_ok']}; "
              f"predicted FITS among crashed_or_oom: {r['predicted_fit_among_crashed']} of {r['crashed']}")


if __name__ == "__main__":
    main()
