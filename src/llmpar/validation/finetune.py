"""`llmpar validate --finetune`: the published LoRA / QLoRA runs of validation/finetune/ against
llmpar's fine-tuning model (cost/finetune.py; docs/finetune.md, How far from published runs).

Each file is one source: a citation, what was inferred, the stack the rows are priced with, and its
runs (the layout, the method, and one measured figure: a peak in the unit its key names, or tokens/s
per GPU). Nothing in llmpar was fitted on these rows, so every error is out of sample as it stands
(no leave-one-source-out is needed: no source's constant exists to leave out).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from llmpar.errors import UserError

FOLDER = "finetune"
#: measured-figure key -> (llmpar's figure, bytes per unit)
MEMORY_KEYS = {"peak_allocated_gib": ("allocated_bytes", 2.0**30), "peak_allocated_gb": ("allocated_bytes", 1e9),
               "peak_reserved_gib": ("reserved_bytes", 2.0**30), "peak_reserved_gb": ("reserved_bytes", 1e9)}
SPEED_KEY = "tokens_per_s_per_gpu"
LAYOUT_KEYS = ("model", "hardware", "gpus", "zero", "finetune", "lora_rank", "lora_targets", "micro_batch", "seq",
               "recompute")
OPTIONAL = ("row", "note", "microbatches", "optimizer", "grad_dtype")


def folder() -> Path:
    from llmpar.specs.registry import data_dir

    return data_dir("validation") / FOLDER


def read_file(path: Path) -> dict[str, Any]:
    """One source file, checked: every run has the layout keys and exactly one measured figure."""
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"{path}: cannot read the fine-tuning source: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list) or not doc.get("source"):
        raise UserError(f"{path}: a fine-tuning source needs 'source' and a list of 'runs'")
    known = set(LAYOUT_KEYS) | set(OPTIONAL) | set(MEMORY_KEYS) | {SPEED_KEY}
    for i, run in enumerate(doc["runs"], 1):
        where = f"{Path(path).name} run {i}"
        if not isinstance(run, dict):
            raise UserError(f"{where}: a run is a mapping of keys")
        missing = [k for k in LAYOUT_KEYS if k not in run]
        extra = sorted(set(run) - known)
        figures = [k for k in run if k in MEMORY_KEYS or k == SPEED_KEY]
        if missing or extra or len(figures) != 1:
            raise UserError(f"{where}: " + "; ".join(
                ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(extra)}"] if extra else [])
                + ([f"needs exactly one measured figure ({', '.join(list(MEMORY_KEYS) + [SPEED_KEY])})"]
                   if len(figures) != 1 else [])))
        v = run[figures[0]]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise UserError(f"{where}: {figures[0]} must be a positive number, got {v!r}")
    return doc


def _evaluate(run: dict[str, Any], stack: str | None) -> dict[str, Any]:
    """One published row against llmpar, through what `memory` and `step` compute with (the
    settings, the resolved layout, cost/memory.memory_per_gpu and cost/step.step_time), not the API
    above this floor (tests/test_import_graph.py)."""
    from llmpar import inputs
    from llmpar.cost.memory import memory_per_gpu
    from llmpar.cost.step import step_time
    from llmpar.layout import resolve

    kind = SPEED_KEY if SPEED_KEY in run else next(k for k in run if k in MEMORY_KEYS)
    gpus = int(run["gpus"])
    b = int(run["micro_batch"])
    m = int(run.get("microbatches", 1))
    spec, _ = inputs.load_model_spec(run["model"])
    hw = inputs.load_hardware_spec(run["hardware"])
    settings = inputs.make_settings(spec, optimizer=run.get("optimizer", "adam"), grad_dtype=run.get("grad_dtype"),
                                    stack=stack, finetune=run["finetune"], lora_rank=int(run["lora_rank"]),
                                    lora_targets=run["lora_targets"])
    par = resolve(spec, hw, settings=settings, gpus=gpus, dp=gpus, zero=int(run["zero"]), micro_batch=b,
                  seq=int(run["seq"]), global_batch=b * m * gpus, recompute=run["recompute"]).parallel
    if kind == SPEED_KEY:
        predicted = float(step_time(spec, hw, par, settings, with_memory=False)["tokens_per_s"]) / gpus
        published = float(run[SPEED_KEY])
        metric, unit = "tokens/s per GPU", "tokens/s"
    else:
        field, per = MEMORY_KEYS[kind]
        predicted = float(memory_per_gpu(spec, hw, par, settings)[field])
        published = float(run[kind]) * per
        metric, unit = ("peak allocated" if field == "allocated_bytes" else "peak reserved"), "bytes"
    return {"row": run.get("row", ""), "model": run["model"], "method": run["finetune"], "metric": metric,
            "kind": "speed" if kind == SPEED_KEY else "memory", "unit": unit, "published": published,
            "predicted": predicted, "error": predicted / published - 1.0}


def validate_finetune() -> dict[str, Any]:
    """Every shipped fine-tuning source evaluated: {"sources": [...], "rows": [...], "summary": {...}}."""
    sources, rows = [], []
    for path in sorted(folder().glob("*.yaml")):
        doc = read_file(path)
        src = path.stem
        sources.append({"name": src, "citation": doc["source"], "url": doc.get("url"), "stack": doc.get("stack"),
                        "runs": len(doc["runs"]), "left_out": doc.get("left_out")})
        for run in doc["runs"]:
            rows.append({"source": src, **_evaluate(run, doc.get("stack"))})
    summary: dict[str, Any] = {"scheme": "out of sample: nothing in llmpar was fitted on these rows"}
    for kind in ("memory", "speed"):
        errs = np.array([r["error"] for r in rows if r["kind"] == kind], dtype=float)
        if errs.size:
            by_src = {}
            for s in sorted({r["source"] for r in rows if r["kind"] == kind}):
                e = np.array([r["error"] for r in rows if r["kind"] == kind and r["source"] == s], dtype=float)
                by_src[s] = {"rows": int(e.size), "median_abs_error": float(np.median(np.abs(e))),
                             "signed_median": float(np.median(e))}
            summary[kind] = {"rows": int(errs.size), "sources": len(by_src),
                             "median_abs_error": float(np.median(np.abs(errs))), "signed_median": float(np.median(errs)),
                             "max_abs_error": float(np.max(np.abs(errs))),
                             "source_median_abs_error": float(np.median([v["median_abs_error"] for v in by_src.values()])),
                             "per_source": by_src}
    return {"sources": sources, "rows": rows, "summary": summary}
