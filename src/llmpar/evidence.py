"""How far off a prediction may be: evidence classes, the residuals of published runs, intervals.

A prediction's interval comes from how llmpar did on published runs *like it* that it was not
fitted on (docs/validation.md, "Intervals"):

* **Residuals.** ``llmpar validate`` predicts every published row with stack constants refitted
  without the row's source (leave-one-source-out; :mod:`llmpar.validation.fit_plans`). For a speed
  row the residual is ``ln(t_measured / t_predicted)`` (positive: llmpar was optimistic, the run
  was slower); for a memory row ``ln(measured peak / predicted peak)``. They are recorded in
  ``validation/residuals.json`` (``python scripts/write_residuals.py``; a test checks it is today's).
* **Evidence class** of a query or a row: stack x GPU generation x dense/MoE x dtype recipe x
  scale band (GPUs) x sequence band (:data:`DIMENSIONS`).
* **Interval** at level p (default 0.8): the empirical (1-p)/2 and (1+p)/2 quantiles ``lo``,
  ``hi`` of the residuals of the nearest class with at least :data:`MIN_ROWS` rows, each source
  weighing the same (a 1,127-run grid from one cluster is one source, not 1,127), widened to
  contain 0 (the point prediction is always inside its interval), then ``t x [e^lo, e^hi]``.
  "Nearest" drops dimensions from the most specific (sequence band) to the least (stack) until a
  class has enough rows. The quantiles are spread about their median by sqrt(1 + 1/k) for a pool
  of k sources (:func:`few_sources_factor`: a new cluster is a new source). **Rule for a thin
  class**: each dimension dropped widens both ends by
  :data:`MARGIN_PER_DIMENSION` (in log units, about 2.5 %), and the result says
  ``extrapolated: no published run of this class`` with the class it fell back to.

Quantiles are weighted midpoint quantiles (:func:`weighted_quantile`). Throughput and MFU
intervals are the step-time interval inverted (tokens/s = tokens / t). Nothing here prints; the
formulas are plain arithmetic on floats or numpy arrays.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: the class dimensions, most general first; a thin class drops them from the end
DIMENSIONS = ("stack", "generation", "moe", "dtype", "scale", "seq")
#: a class with fewer residuals than this falls back to its parent (drops its last dimension)
MIN_ROWS = 8
#: log-units each dropped dimension adds to both ends of the interval (ln 1.025: about 2.5 %). The
#: one constant of the rule chosen on data: the middle of the margins at which 80 % intervals built
#: from the *other* sources cover 75-90 % of the rows of every figure (training speed, serving
#: throughput, TPOT, TTFT; each source weighing the same) under leave-one-source-out, with the
#: few-source widening of :func:`interval_from`: 2 % gives 76.5 / 77.6 / 89.2 / 76.0 %, 2.5 %
#: 80.2 / 80.0 / 89.7 / 76.1 %, 3 % 83.5 / 81.3 / 90.0 / 76.7 % (TPOT's above 90 from there on).
#: Before that widening it was ln 1.05, where training read 84 % but serving TTFT 73 %
#: (docs/validation.md, Intervals)
MARGIN_PER_DIMENSION = math.log(1.025)
DEFAULT_LEVEL = 0.8
RESIDUALS_FILE = "residuals.json"

SCALE_BANDS = ((8, "1-8 GPUs"), (64, "9-64 GPUs"), (512, "65-512 GPUs"), (4096, "513-4096 GPUs"),
               (math.inf, ">4096 GPUs"))
SEQ_BANDS = ((4096, "seq <=4K"), (16384, "seq 4K-16K"), (math.inf, "seq >16K"))


def scale_band(gpus: float) -> str:
    return next(name for top, name in SCALE_BANDS if gpus <= top)


def seq_band(seq: float) -> str:
    return next(name for top, name in SEQ_BANDS if seq <= top)


def dtype_recipe(dtype: str | None) -> str:
    """fp8 recipes and 16-bit types (bf16, fp16) are the two classes the data can tell apart."""
    d = str(dtype or "bf16")
    return "fp8" if d.startswith("fp8") else ("fp4" if "fp4" in d else "16-bit")


def evidence_class(stack: str, generation: str | None, moe: bool, dtype: str | None, gpus: float,
                   seq: float) -> tuple[str, ...]:
    """The class key of one query or row (values in :data:`DIMENSIONS` order)."""
    return (str(stack), str(generation or "unknown generation"), "moe" if moe else "dense", dtype_recipe(dtype),
            scale_band(gpus), seq_band(seq))


def class_label(key: tuple[str, ...]) -> str:
    return " · ".join(key) if key else "all published runs"


@dataclass(frozen=True)
class Residual:
    source: str
    kind: str                 # "speed" or "memory"
    key: tuple[str, ...]
    value: float              # ln(measured / predicted)
    measured_mfu: float | None = None            # speed rows: the run's MFU as `llmpar step` states one
    tokens_per_gpu_per_step: float | None = None


@dataclass(frozen=True)
class Interval:
    """A ratio interval [lo, hi] around a prediction (multiply the prediction by it), and its evidence."""

    level: float
    lo: float                 # ratio, <= 1
    hi: float                 # ratio, >= 1
    key: tuple[str, ...]      # the query's class
    used: tuple[str, ...]     # the class the residuals came from (a prefix of key)
    rows: int
    sources: int

    @property
    def extrapolated(self) -> bool:
        return len(self.used) < len(self.key)

    def evidence(self) -> dict[str, Any]:
        return {"class": class_label(self.key), "used_class": class_label(self.used), "rows": self.rows,
                "sources": self.sources, "extrapolated": self.extrapolated}



def weighted_quantile(values, weights, q):
    """Quantiles ``q`` of ``values`` where each value counts ``weights``: the weighted form of
    numpy's "linear" method on the midpoints of the cumulative weights (Hyndman and Fan 1996,
    definition 5); equal weights give the plain midpoint quantile."""
    v = np.asarray(values, dtype=float)
    w = np.asarray(weights, dtype=float)
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cum = (np.cumsum(w) - 0.5 * w) / np.sum(w)
    return np.interp(q, cum, v)


def source_weights(sources) -> np.ndarray:
    """1 / (rows of the same source): every source weighs 1, however many rows it has."""
    src = list(sources)
    counts: dict[str, int] = {}
    for s in src:
        counts[s] = counts.get(s, 0) + 1
    return np.array([1.0 / counts[s] for s in src])


def few_sources_factor(sources: float) -> float:
    """How much wider than the pool's own spread a *new* source's residual may fall: the pool's
    centre is itself estimated from k sources (the source is the unit: one cluster's runs share its
    bias), so a new one's prediction interval is the spread x sqrt(1 + 1/k), the prediction interval
    of a normal sample of k, mean +- t s sqrt(1 + 1/k) (Hahn and Meeker 1991, Statistical Intervals, ch. 4). One source:
    x1.41; four: x1.12; twenty: x1.02."""
    return math.sqrt(1.0 + 1.0 / max(float(sources), 1.0))


def interval_from(values, level: float, dropped: int, weights=None) -> tuple[float, float]:
    """Ratio bounds from log residuals: the central ``level`` quantiles (each source weighing
    the same when ``weights`` are its :func:`source_weights`, which sum to the number of sources),
    spread about their median by :func:`few_sources_factor`, widened to contain 0 and by
    MARGIN_PER_DIMENSION per dropped dimension."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"interval level {level} is not between 0 and 1")
    w = np.ones(len(values)) if weights is None else np.asarray(weights, dtype=float)
    q_lo, q_hi, mid = weighted_quantile(values, w, [(1 - level) / 2, (1 + level) / 2, 0.5])
    f = few_sources_factor(float(np.sum(w)) if weights is not None else len(values))
    q_lo, q_hi = mid + f * (q_lo - mid), mid + f * (q_hi - mid)
    lo = min(float(q_lo), 0.0) - dropped * MARGIN_PER_DIMENSION
    hi = max(float(q_hi), 0.0) + dropped * MARGIN_PER_DIMENSION
    return math.exp(lo), math.exp(hi)


def interval(residuals, kind: str, key: tuple[str, ...], level: float = DEFAULT_LEVEL,
             exclude_source: str | None = None) -> Interval:
    """The interval of a query of class ``key`` from ``residuals`` of ``kind``, each source of a
    class weighing the same (``exclude_source``: leave that source out, as the coverage check
    does). A class with fewer than MIN_ROWS residuals falls back to its parent; with none at all
    (no published run of the kind) the band is a stated x0.5 .. x2."""
    pool = [r for r in residuals if r.kind == kind and r.source != exclude_source]
    for depth in range(len(key), -1, -1):
        prefix = key[:depth]
        vals = [r for r in pool if r.key[:depth] == prefix]
        if len(vals) >= MIN_ROWS or depth == 0:
            if not vals:
                return Interval(level, 0.5, 2.0, key, (), 0, 0)
            lo, hi = interval_from([r.value for r in vals], level, len(key) - depth,
                                   source_weights(r.source for r in vals))
            return Interval(level, lo, hi, key, prefix, len(vals), len({r.source for r in vals}))
    raise AssertionError("unreachable")


@functools.lru_cache(maxsize=4)
def read_residuals(filename: str = RESIDUALS_FILE) -> tuple[Residual, ...]:
    """The residuals recorded in ``validation/<filename>`` (empty if the file is absent or
    unreadable): training's residuals.json, serving's serving-residuals.json."""
    from llmpar.specs.registry import data_dir

    try:
        data = json.loads((data_dir("validation") / filename).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ()
    return tuple(Residual(r["source"], r["kind"], tuple(r["class"]), float(r["residual"]), r.get("measured_mfu"),
                          r.get("tokens_per_gpu_per_step"))
                 for r in data.get("residuals", []))


def shipped_residuals() -> tuple[Residual, ...]:
    """The training residuals recorded in validation/residuals.json."""
    return read_residuals(RESIDUALS_FILE)


def for_query(kind: str, stack: str, generation: str | None, moe: bool, dtype: str | None, gpus: float,
              seq: float, level: float = DEFAULT_LEVEL) -> Interval:
    """The interval of one query from the shipped residuals."""
    return interval(list(shipped_residuals()), kind, evidence_class(stack, generation, moe, dtype, gpus, seq), level)


def speed_json(iv: Interval, step_time_s: float, tokens_per_s: float, mfu: float,
               training: dict[str, Any] | None = None, mfu_cap: float | None = None) -> dict[str, Any]:
    """The ``interval`` key of a step, plan row or sweep row: step time x [lo, hi]; throughput and
    MFU divided by it; with a token budget, days, GPU-hours, energy and cost scale as the time.

    ``mfu_cap`` (the GPU's best measured GEMM fraction, ``gpu.gemm.max_efficiency``): no run does
    its model FLOPs faster than the GPU's best GEMM, so the interval's fast end is cut where the MFU
    would pass it (step time >= t x mfu / cap): a wide extrapolated band cannot promise 114 % MFU."""
    lo = iv.lo
    if mfu_cap is not None and mfu > 0:
        lo = min(max(lo, mfu / mfu_cap), 1.0)
    out: dict[str, Any] = {"level": iv.level,
                           "step_time_s": [step_time_s * lo, step_time_s * iv.hi],
                           "tokens_per_s": [tokens_per_s / iv.hi, tokens_per_s / lo],
                           "mfu": [mfu / iv.hi, mfu / lo],
                           "evidence": iv.evidence()}
    if training:
        for k in ("days", "gpu_hours", "energy_mwh", "cost"):
            v = training.get(k)
            if v is not None:
                out[k] = [float(v) * lo, float(v) * iv.hi]
    return out


def memory_json(iv: Interval, total_bytes: float, capacity_bytes: float) -> dict[str, Any]:
    """The memory ``interval``: predicted bytes x [lo, hi], and whether its top reaches the HBM."""
    return {"level": iv.level, "total_bytes": [total_bytes * iv.lo, total_bytes * iv.hi],
            "may_not_fit": bool(total_bytes * iv.hi > capacity_bytes), "evidence": iv.evidence()}


def query(kind: str, settings, hw, model, parallel, level: float = DEFAULT_LEVEL) -> Interval:
    """The interval of a query from its resolved settings, hardware, model and (scalar) layout."""
    return for_query(kind, stack_class(settings), hw.gpu.generation, model.is_moe, settings.dtype,
                     float(parallel.gpus), float(parallel.seq), level)


def stack_class(settings) -> str:
    """The stack dimension of a query's class: its stack, with the fine-tuning method when it is not
    full training, "optimizer-offload" when the optimizer runs (partly) on the CPU and
    "param-offload" when ZeRO-3's parameters live in host memory ("megatron-core+qlora"). No
    published run in validation/ is a LoRA/QLoRA run or offloads its optimizer or parameters, so
    such a query matches none and falls back to all published runs, widened and "extrapolated"."""
    name = settings.stack.name
    ft = getattr(settings, "finetune", "full")
    if ft != "full":
        name += f"+{ft}"
    if getattr(settings, "optimizer_offload", 0.0):
        name += "+optimizer-offload"
    if getattr(settings, "param_offload", False):
        name += "+param-offload"
    return name


def level_value(level) -> float:
    """--interval-level / interval_level: 0.8, '80%' or 80 -> 0.8; a bad value raises UserError."""
    from llmpar.errors import UserError

    if level is None:
        return DEFAULT_LEVEL
    text = str(level).strip()
    try:
        v = float(text.rstrip("%").strip())
    except ValueError:
        raise UserError(f"--interval-level {level!r}: expected a level such as 80% or 0.8") from None
    if text.endswith("%") or v > 1:
        v /= 100.0
    if not math.isfinite(v) or not 0.05 <= v <= 0.99:
        raise UserError(f"--interval-level {level!r}: must lie between 5 % and 99 %")
    return v


#: the class dimensions a plausibility check compares within: the silicon, the work and the scale,
#: not the software (the best any framework published on that GPU generation for that kind of
#: model at that many GPUs)


def plausibility(mfu, iv: Interval, generation: str | None, moe: bool, dtype: str | None,
                 residuals=None, gpus: float | None = None) -> dict[str, Any] | None:
    """The best measured MFU among published runs of the same GPU generation x dense/MoE x dtype
    recipe x GPU band (falling back to the class without the band, never further: an FP8 run's MFU
    is counted against the FP8 peak and an MoE run's is lower by its routing, so neither bounds a
    dense 16-bit prediction; until 2026-12-03 the fallback went on to the generation, and a BF16
    Llama-3 70B on 256 B200s was compared with Blackwell FP8 runs), and
    whether ``mfu`` lies above it by more than the class's interval: ``above_published`` when
    mfu / hi > best, where hi is the upper step-time factor of the ``iv.level`` interval of that
    class's own residuals (how far llmpar's predictions of those very runs fell short of the
    measured time: a prediction that beats the record by more than that is not one llmpar's errors
    on the record's class explain). With fewer than MIN_ROWS runs in the class, the query's
    interval ``iv`` stands in. The query's interval is not used where the class has rows: an
    extrapolated query's interval is widened by MARGIN_PER_DIMENSION per missing dimension, and a
    wider band would flag less exactly where llmpar knows least (GPT-3 175B on 1,024 A100s under
    megatron-core, never measured on A100: x1.54, so 62 % MFU / 1.54 = 41 % did not beat the
    class's 47.6 %). ``mfu`` may be an array (the planner's candidates); then ``above_published``
    is an array. None: no run of that generation x dense/MoE x dtype recipe was published."""
    pool = [r for r in (shipped_residuals() if residuals is None else residuals)
            if r.kind == "speed" and r.measured_mfu is not None]
    key = (str(generation or "unknown generation"), "moe" if moe else "dense", dtype_recipe(dtype),
           scale_band(gpus) if gpus is not None else None)
    pos = (1, 2, 3, 4)                     # where each dimension sits in an evidence class key
    for depth in ((4, 3) if gpus is not None else (3,)):
        vals = [r for r in pool if all(r.key[pos[j]] == key[j] for j in range(depth))]
        if vals:
            best = max(vals, key=lambda r: r.measured_mfu)
            hi = iv.hi
            if len(vals) >= MIN_ROWS:
                hi = interval_from([r.value for r in vals], iv.level, 0, source_weights(r.source for r in vals))[1]
            above = np.asarray(mfu, dtype=float) / hi > best.measured_mfu
            return {"best_published_mfu": float(best.measured_mfu), "best_source": best.source,
                    "class": " · ".join(key[:depth]), "rows": len(vals), "class_factor": float(hi),
                    "above_published": bool(above) if above.ndim == 0 else above}
    return None


def with_step_at_best(p: dict[str, Any] | None, step_time_s: float, mfu_full: float) -> dict[str, Any] | None:
    """``p`` (:func:`plausibility` of one prediction) with ``step_time_at_best_s``: the step time
    at the class's best measured MFU, the same FLOPs at that rate (step x MFU / best); None stays
    None."""
    if p is None:
        return None
    best = p["best_published_mfu"]
    return {**p, "step_time_at_best_s": float(step_time_s * mfu_full / best) if best > 0 else None}


def implausible_note(mfu_full: float, p: dict[str, Any] | None, who: str = "MFU",
                     step_time_s: float | None = None) -> str | None:
    """The line `step` and `plan` print when a prediction is above every published run of its
    class (:func:`plausibility`); None when it is not. With ``step_time_s``, the line also gives the
    step time at the class's best measured MFU (the same FLOPs at that rate: step x MFU / best), the
    figure a planner can budget on when the prediction is beyond every measurement."""
    if not p or not p.get("above_published"):
        return None
    at_best = ""
    if step_time_s is not None and (t := with_step_at_best(p, step_time_s, mfu_full)["step_time_at_best_s"]):
        at_best = f"; at that run's {p['best_published_mfu'] * 100:.1f} % the step would take {t:.4g} s"
    return (f"implausible: {who} {mfu_full * 100:.1f} % (attention in full) is above the best published run of its "
            f"class ({p['class']}: {p['best_published_mfu'] * 100:.1f} %, {p['best_source']}) by more than llmpar's "
            f"errors on that class's {p['rows']} runs reach (x{p['class_factor']:.2f}): treat the time as optimistic"
            + at_best)


def min_published_tokens_per_gpu(residuals=None) -> float | None:
    """The fewest tokens per GPU per step any published run used (a batch below it is outside the
    evidence: every interval was measured at more tokens per GPU)."""
    vals = [r.tokens_per_gpu_per_step for r in (shipped_residuals() if residuals is None else residuals)
            if r.kind == "speed" and r.tokens_per_gpu_per_step]
    return min(vals) if vals else None
