"""Predicted vs measured peak memory of the Ultra-Scale Playbook's nanotron runs (H100).

    python -m llmpar.validate.playbook_memory ../shared/validation/hf_playbook_runs_1b_3b.yaml

Memory only, through cost.memory.memory_per_gpu (not cost.step). The measured "GPU memory" is a
torch allocator figure (max_memory_allocated or _reserved; the file does not say which), so it is
compared with the predicted allocator pool (reserved_bytes, = allocated when the stack has no
overhead); the FITS/OOM agreement uses the full total (pool + runtime) against 80 GiB.
Split: 1-2 nodes (in-sample: the only runs a constant may be fitted on) and 4-64 nodes (held out).
This is the script the nanotron stack's memory constants were fitted with (docs/stacks.md);
``llmpar validate --source playbook-nanotron-h100`` is the published comparison.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import yaml

from llmpar.cost.memory import memory_per_gpu
from llmpar.parallel import Parallel, Settings
from llmpar.specs import load_hardware
from llmpar.specs.model import ModelSpec

# the shapes validation/playbook-nanotron-h100.yaml states were inferred from nanotron's
# scaling-benchmark script (its `models:` block); `llmpar validate --source playbook-nanotron-h100`
# reads them from there
SHAPES = {
    "1B": dict(layers=16, hidden=2048),
    "3B": dict(layers=28, hidden=3072),
}


def spec(name: str) -> ModelSpec:
    return ModelSpec(name=f"playbook-{name}", family="llama", heads=32, kv_heads=32, ffn_hidden=8192, ffn_type="swiglu",
                     vocab=32768, tied_embeddings=True, norm="rmsnorm", max_seq=4096, **SHAPES[name])


def evaluate(path, stack="nanotron", hardware="h100-sxm", **settings_kw) -> dict:
    runs = yaml.safe_load(Path(path).read_text())["runs"]
    hw = load_hardware(hardware)
    out = {"pred": [], "meas": [], "ok": [], "fits": [], "nodes": [], "verdict": []}
    for name in SHAPES:
        rows = [r for r in runs if r["model"] == name]
        col = lambda k: np.array([r[k] for r in rows])  # noqa: E731
        tp, pp, dp = col("tensor_parallel"), col("pipeline_parallel"), col("data_parallel")
        n = len(rows)
        par = Parallel(tp=tp, pp=pp, dp=dp, cp=1, ep=1, zero=col("zero_stage"), sp=tp > 1, recompute=0,
                       micro_batch=col("micro_batch_size"), microbatches=col("grad_accum"), seq=4096,
                       schedule=np.ones(n, int), virtual_stages=np.ones(n, int))
        mem = memory_per_gpu(spec(name), hw, par, Settings(stack=stack, **settings_kw))
        out["pred"].append(np.asarray(mem["reserved_bytes"]) / 2**30)
        out["meas"].append(np.array([r["gpu_memory_gb"] or np.nan for r in rows], dtype=float))
        out["ok"].append(np.array([r["status"] == "ok" for r in rows]))
        out["fits"].append(np.asarray(mem["fits"], dtype=bool))
        out["verdict"].append(np.asarray(mem["verdict_code"]))
        out["nodes"].append(col("nodes"))
    return {k: np.concatenate(v) for k, v in out.items()}


def summary(e: dict, mask) -> dict:
    ok = e["ok"] & mask & np.isfinite(e["meas"])
    rel = (e["pred"][ok] - e["meas"][ok]) / e["meas"][ok]
    m = mask
    agree = (e["fits"][m] == e["ok"][m])
    return {"runs": int(m.sum()), "ok": int(ok.sum()), "median_rel_error": float(np.median(rel)),
            "median_abs_rel_error": float(np.median(np.abs(rel))),
            "fits_oom_agreement": float(agree.mean()) if m.any() else float("nan"),
            "predicted_oom_among_ok": int((~e["fits"] & e["ok"] & m).sum()),
            "predicted_fit_among_crashed": int((e["fits"] & ~e["ok"] & m).sum()), "crashed": int((~e["ok"] & m).sum()),
            "tight": int((e["verdict"][m] == 1).sum())}


def main(argv=None) -> None:
    args = sys.argv[1:] if argv is None else argv
    e = evaluate(args[0], *(args[1:2]))
    for label, mask in (("1-2 nodes", e["nodes"] <= 2), ("4-64 nodes", e["nodes"] >= 4)):
        print(label, summary(e, mask))


if __name__ == "__main__":
    main()
