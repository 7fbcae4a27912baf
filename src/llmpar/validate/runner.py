"""Superseded by ``llmpar validate`` (:mod:`llmpar.validate.core`, which reads the shipped
validation/*.yaml and evaluates through :mod:`llmpar.calibrate.runs`). Kept only because
tests/test_step.py::test_published_a100_rows still calls :func:`evaluate_all`; delete it once that
test runs ``llmpar.validate.core.validate(["korthikanti2022-table5", "narayanan2021-table1"])``.

Run the time model on the published rows and report per-row error.

Where a row leaves out the micro-batch size or the chunks per stage, every value that divides the
batch (and fits in memory) is evaluated — as arrays, through the same ``llmpar.cost.step`` code the
CLI uses — and the fastest is compared: the published runs were tuned (DESIGN.md, FLOPs and MFU).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmpar.cost.flops import narayanan_eq3_flops
from llmpar.cost.pipeline import stage_layers
from llmpar.cost.step import step_time
from llmpar.parallel import RECOMPUTE, SCHEDULES, Parallel, Settings
from llmpar.specs import load_hardware, load_model
from llmpar.validate.published import KORTHIKANTI_TABLE5, NARAYANAN_TABLE1, PublishedRun

MICRO_BATCHES = (1, 2, 4, 8, 16)


@dataclass
class RowResult:
    run: PublishedRun
    micro_batch: int
    virtual_stages: int
    predicted_time_s: float
    predicted_tflops_per_gpu: float | None
    error: float            # predicted / published - 1 (time for Table 5, TFLOP/s for Table 1)
    mfu: float


def _candidates(run: PublishedRun, layers: int) -> tuple[np.ndarray, np.ndarray]:
    bs = [run.micro_batch] if run.micro_batch else list(MICRO_BATCHES)
    per_stage = stage_layers(layers, run.pp)
    if run.virtual_stages:
        vs = [run.virtual_stages]
    elif run.pp == 1:
        vs = [1]
    else:
        vs = [v for v in range(1, per_stage + 1) if per_stage % v == 0]
    out_b, out_v = [], []
    for b in bs:
        if run.global_batch % (b * run.dp):
            continue
        m = run.global_batch // (b * run.dp)
        for v in vs:
            if v > 1 and m % run.pp:
                continue  # Megatron's interleaved schedule needs m to be a multiple of p
            out_b.append(b)
            out_v.append(v)
    return np.array(out_b), np.array(out_v)


def evaluate(run: PublishedRun, hardware: str = "a100-80gb") -> RowResult:
    model = load_model(run.model)
    hw = load_hardware(hardware)
    b, v = _candidates(run, model.layers)
    # the Megatron-LM of the papers (stacks/megatron-2022.yaml): no overlap, standard attention
    settings = Settings(dtype="fp16", stack="megatron-2022")
    par = Parallel(
        tp=run.tp, pp=run.pp, dp=run.dp, cp=1, ep=1, zero=0, sp=run.sp,
        recompute=RECOMPUTE.index(run.recompute), micro_batch=b,
        microbatches=run.global_batch // (b * run.dp), seq=run.seq,
        schedule=np.where(v > 1, SCHEDULES.index("interleaved"), SCHEDULES.index("1f1b")), virtual_stages=v,
    )
    out = step_time(model, hw, par, settings)
    t = np.asarray(out["step_time_s"], dtype=float)
    fits = np.asarray(out["memory"]["fits"], dtype=bool)
    t_pick = np.where(fits, t, np.inf) if fits.any() else t
    i = int(np.argmin(t_pick))
    pred_t = float(t[i])
    mfu = float(np.asarray(out["mfu"])[i])
    if run.iteration_time_s is not None:
        return RowResult(run, int(b[i]), int(v[i]), pred_t, None, pred_t / run.iteration_time_s - 1.0, mfu)
    flops = narayanan_eq3_flops(run.global_batch, run.seq, model.layers, model.hidden, model.vocab)
    tflops = flops / pred_t / run.gpus / 1e12
    return RowResult(run, int(b[i]), int(v[i]), pred_t, tflops, tflops / run.tflops_per_gpu - 1.0, mfu)


def evaluate_all(hardware: str = "a100-80gb") -> dict[str, list[RowResult]]:
    return {
        "korthikanti2022_table5": [evaluate(r, hardware) for r in KORTHIKANTI_TABLE5],
        "narayanan2021_table1": [evaluate(r, hardware) for r in NARAYANAN_TABLE1],
    }


def summary(rows: list[RowResult]) -> tuple[float, float]:
    errs = [abs(r.error) for r in rows]
    return float(np.mean(errs)), float(np.max(errs))
