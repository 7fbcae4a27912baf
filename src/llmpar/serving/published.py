"""Published serving measurements (``validation/serving/*.yaml``): read, predict, compare.

The format is validation/serving/README.md's. One residual per published figure:
ln(measured / predicted) for TTFT and TPOT (ITL where no TPOT is published: its mean equals
TPOT's mean), ln(predicted / measured) for throughput — positive where llmpar was optimistic,
as for training (docs/validation.md). Throughput is compared in the unit published (output,
total = input + output, or requests per second; all are the same X times a constant).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmpar.errors import UserError

FOLDER = "serving"
ENGINES = ("vllm", "sglang", "trtllm")
STAT_ORDER = ("median", "mean", "p50")
LOADS = ("concurrency", "rate", "offline", "batch")


@dataclass
class ServingRow:
    source: str               # the file's stem
    row: str
    engine: str
    model: str
    hardware: str
    gpus: int
    tp: int
    pp: int
    ep: int
    isl: int
    osl: int
    load: dict[str, Any]
    weights: str
    kv_dtype: str
    measured: dict[str, float] = field(default_factory=dict)   # output_tokens_per_s, ttft_s, tpot_s, ...
    requests: int | None = None   # the benchmark's request count (num_requests), where published
    tpot_stat: str = "mean"       # "median": the row publishes a median token gap (median ITL)
    fitted: bool = True           # False: the file says `fit: false` (evidence only; README.md, Format)
    # the (model, hardware) specs themselves where the row was made from specs given to it (calibrate
    # serve: a model or hardware file that no registry name reaches); None: looked up by name
    specs: tuple[Any, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def replicas(self) -> int:
        return max(1, self.gpus // (self.tp * self.pp))


def _stat(v) -> float | None:
    """A latency as published: a number (ms) or {median|mean|p50: ms} (median first)."""
    return _stat_and_kind(v)[0]


def _stat_and_kind(v) -> tuple[float | None, str]:
    """(seconds, "mean" | "median") of a published latency: a bare number is the page's mean."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v) / 1e3, "mean"
    if isinstance(v, dict):
        for k in STAT_ORDER:
            if isinstance(v.get(k), (int, float)):
                return float(v[k]) / 1e3, ("mean" if k == "mean" else "median")
    return None, "mean"


def tpot_stat(r: dict[str, Any]) -> str:
    """Which statistic a row's TPOT figure is: "median" for a median (p50) inter-token latency (the
    median of all token gaps: vLLM's and SGLang's median_itl_ms), else "mean". A TPOT figure (a
    request's (e2e − TTFT)/(O − 1), mean or median over requests) is a per-request mean gap."""
    if _stat(r.get("tpot_ms")) is not None:
        return "mean"
    return _stat_and_kind(r.get("itl_ms"))[1]


def _measured(r: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key in ("output_tokens_per_s", "total_tokens_per_s", "requests_per_s"):
        v = r.get(key)
        if isinstance(v, (int, float)) and v > 0:
            out[key] = float(v)
    ttft = _stat(r.get("ttft_ms"))
    tpot = _stat(r.get("tpot_ms"))
    if tpot is None:
        tpot = _stat(r.get("itl_ms"))
    if ttft is not None and ttft > 0:
        out["ttft_s"] = ttft
    if tpot is not None and tpot > 0:
        out["tpot_s"] = tpot
    e2e = _stat(r.get("e2e_ms"))
    if e2e is not None and e2e > 0:
        out["e2e_s"] = e2e
    return out


def read_file(path: Path) -> list[ServingRow]:
    from llmpar.specs.registry import read_yaml

    data = read_yaml(path)
    engine = str(data.get("engine", "other"))
    fitted = data.get("fit", True)
    if not isinstance(fitted, bool):
        raise UserError(f"{path}: fit must be true or false, got {fitted!r}")
    common = dict(data.get("common") or {})
    rows = []
    for i, raw in enumerate(data.get("rows") or []):
        r = {**common, **raw}
        steps = r.get("scheduler_steps", 1)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise UserError(f"{path}: row {i + 1}: scheduler_steps must be a whole number of 1 or more, got {steps!r}")
        if ("model" not in r or r.get("read_from_chart") or "isl" not in r or "osl" not in r
                or r.get("spec_decode") or r.get("phase") or r.get("attention_dp")
                or r.get("weights") == "unknown" or steps > 1):
            # not modelled yet (docs/serving.md, Limits): a model llmpar does not ship (model_hf only),
            # a chart reading, variable or unpublished lengths, speculative decoding, a prefill- or
            # decode-only pool, data-parallel attention, an unstated precision, multi-step scheduling
            continue
        load = {k: v for k, v in (r.get("load") or {}).items() if k in LOADS}
        count = r.get("num_requests", (r.get("load") or {}).get("num_requests"))
        if len(load) != 1:
            raise UserError(f"{path}: row {i + 1}: load must be one of {', '.join(LOADS)}")
        try:
            tp = int(r.get("tp", 1))
            pp = int(r.get("pp", 1))
            gpus = int(r.get("gpus", tp * pp))
            isl, osl = int(r["isl"]), int(r["osl"])
        except (TypeError, ValueError):
            continue   # a degree or length the source does not state ("unknown")
        rows.append(ServingRow(source=path.stem, row=str(r.get("row", i + 1)), engine=engine, model=str(r["model"]),
                               hardware=str(r["hardware"]), gpus=gpus, tp=tp, pp=pp,
                               ep=int(r.get("ep", 1)), isl=isl, osl=osl, load=dict(load),
                               weights=str(r.get("weights", "bf16")), kv_dtype=str(r.get("kv_dtype", "bf16")),
                               measured=_measured(r), tpot_stat=tpot_stat(r),
                               requests=int(count) if isinstance(count, (int, float)) and count >= 1 else None,
                               fitted=fitted))
    return [r for r in rows if r.measured]


def shipped_rows() -> list[ServingRow]:
    from llmpar.specs.registry import data_dir

    folder = data_dir("validation") / FOLDER
    out: list[ServingRow] = []
    for path in sorted(folder.glob("*.yaml")):
        out.extend(read_file(path))
    return out


def engine_of(row: ServingRow) -> str:
    """The shipped engine profile a row is predicted with (an 'other' engine: vllm's, labelled so)."""
    return row.engine if row.engine in ENGINES else "vllm"


def load_kwargs(row: ServingRow) -> dict[str, Any]:
    (kind, value), = row.load.items()
    if kind == "concurrency":
        return {"concurrency": int(value)}
    if kind == "rate":
        if str(value).lower() == "inf":
            return {"rate": math.inf}
        # a finite benchmark of N requests at the rate (serving_finite.finite_rate) where N is published
        return {"rate": float(value), **({"prompts": row.requests} if row.requests else {})}
    if kind == "offline":
        return {"rate": math.inf, "prompts": int(value)}
    if kind == "batch":
        return {"batch": int(value)}
    raise UserError(f"{row.source} row {row.row}: unknown load {kind!r}")


def predict(row: ServingRow, engine, specs=None) -> dict[str, float] | None:
    """llmpar's figures for a row (None where the deployment does not fit as published)."""
    from llmpar.serving.run import serve
    from llmpar.specs.registry import load_hardware, load_model

    model = load_model(row.model) if specs is None else specs[0]
    hw = load_hardware(row.hardware) if specs is None else specs[1]
    kw = load_kwargs(row)
    out = serve(model, hw, engine, gpus=row.gpus, tp=row.tp, pp=row.pp, ep=row.ep if row.ep > 1 else None,
                isl=row.isl, osl=row.osl, weights=row.weights, kv_dtype=row.kv_dtype, **kw)
    if not out["fits"]:
        return None
    f = out["figures"]
    X = f["requests_per_s"]
    return {"output_tokens_per_s": f["output_tokens_per_s"], "total_tokens_per_s": X * (row.isl + row.osl),
            "requests_per_s": X, "ttft_s": f["ttft_s"], "tpot_s": f["tpot_s"], "e2e_s": f["e2e_s"],
            "itl_median_s": f.get("itl_median_s", f["tpot_s"])}


def residuals(row: ServingRow, pred: dict[str, float] | None) -> dict[str, float]:
    """{throughput|ttft|tpot: log residual} for the figures the row publishes (throughput: the first
    of output, total, requests per second that it has)."""
    if pred is None:
        return {}
    out: dict[str, float] = {}
    for key in ("output_tokens_per_s", "total_tokens_per_s", "requests_per_s", "e2e_s"):
        if key in row.measured:   # e2e of a static batch: B·O / e2e is its throughput, the same residual
            out["throughput"] = math.log((row.measured[key] / pred[key]) if key == "e2e_s"
                                         else (pred[key] / row.measured[key]))
            break
    for key, name in (("ttft_s", "ttft"), ("tpot_s", "tpot")):
        # a published median token gap is compared with the model's median gap, a mean with its mean
        # (TPOT): with chunked prefill most gaps are decode-only iterations (cost/serving_load.py)
        want = "itl_median_s" if key == "tpot_s" and row.tpot_stat == "median" else key
        if key in row.measured and pred.get(want) and math.isfinite(pred[want]):
            out[name] = math.log(row.measured[key] / pred[want])
    return out
