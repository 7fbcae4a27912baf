"""The result of `llmpar serve` / ``llmpar.serve(...)``: its ``model_dump()`` is ``serve --json``
(docs/json.md, serve)."""

from __future__ import annotations

import math
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict


def _finite(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


class ServeResult(BaseModel):
    model_config = ConfigDict(defer_build=True)

    model: str
    hardware: str
    engine: str
    settings: dict[str, Any]
    fits: bool
    verdict: str
    load: dict[str, Any]
    ttft_s: Optional[float] = None
    tpot_s: Optional[float] = None
    # the median token gap (a benchmark's median ITL; cost/serving_load.py, "Median token gap")
    itl_median_s: Optional[float] = None
    e2e_s: Optional[float] = None
    output_tokens_per_s: Optional[float] = None
    output_tokens_per_s_per_gpu: Optional[float] = None
    output_tokens_per_s_per_user: Optional[float] = None
    requests_per_s: Optional[float] = None
    max_concurrency: int
    memory: dict[str, Any]
    breakdown: dict[str, Any] = {}
    # the breakdown's terms with their formulas, values and sources (cost/serving_explain.py): each
    # phase's add up to its total_s
    terms: list[dict[str, Any]] = []
    interval: dict[str, Any] = {}
    # --isl-range / --osl-range: the requests' p50/p90/p99 in the mean lengths' state (cost/serving_tails.py)
    percentiles: dict[str, Any] = {}
    # --simulate N: the discrete-event run's means and percentiles (cost/serving_sim.py)
    simulation: dict[str, Any] = {}
    notes: list[str] = []

    def to_dict(self) -> dict[str, Any]:
        """The ``serve --json`` object, as every result's ``to_dict()`` is its command's."""
        return self.model_dump()


_FLOATS = ("ttft_s", "tpot_s", "itl_median_s", "e2e_s", "output_tokens_per_s", "output_tokens_per_s_per_gpu",
           "output_tokens_per_s_per_user", "requests_per_s")


def _result(**fields) -> ServeResult:
    """A ServeResult of llmpar's own computed values, typed here rather than validated: validating
    builds pydantic's schema, and with it pydantic imports importlib.metadata to look for plugins,
    ~20-50 ms of a 0.3 s `serve` (issue 25's target; docs/cli.md, start-up time). The figures become
    Python floats (None where not finite: no nan or inf reaches the JSON), the counts ints."""
    for key in _FLOATS:
        if key in fields:
            fields[key] = _finite(fields[key])
    fields["max_concurrency"] = int(fields["max_concurrency"])
    fields["fits"] = bool(fields["fits"])
    return ServeResult.model_construct(**fields)


def _terms(breakdown: dict[str, Any]) -> list[dict[str, Any]]:
    if not {"decode", "prefill"} <= set(breakdown):
        return []
    from llmpar.cost.serving_explain import serving_terms

    return [t.as_dict() for t in serving_terms(breakdown)]


def build(model, hw, engine, out: dict[str, Any], iv: dict[str, Any] | None, disagg=None) -> ServeResult:
    """``disagg``: the prefill GPUs of a disaggregated deployment as given (None: colocated)."""
    d = out["deployment"]
    cap = out["capacity"]
    # every keyword that sets the deployment, so that settings round-trip into serve() (hardware and
    # disagg had been left out: the round trip then priced an H100, or a colocated deployment)
    settings = {"hardware": hw.name, "engine": engine.name, "engine_version": engine.version, "gpus": d.gpus,
                "tp": d.tp, "pp": d.pp,
                "ep": d.ep, "replicas": d.replicas, "weights": d.weights, "kv_dtype": d.kv_dtype, "isl": out["isl"],
                # the engine flags as given (per scheduler: DP attention runs tp of them), so that they
                # round-trip (the replica's totals had come back and doubled; memory_fraction had been
                # the engine's default whatever --memory-fraction said)
                "osl": out["osl"], "max_num_seqs": round(cap["max_num_seqs"] / cap["schedulers"]),
                "max_num_batched_tokens": round(cap["max_num_batched_tokens"] / cap["schedulers"]),
                "memory_fraction": float(cap["memory_fraction"]), "spec_tokens": d.spec_tokens,
                "acceptance": d.acceptance if d.spec_tokens else None, "prefix_hit": d.prefix_hit, "dp_attention": d.dp_attention,
                "disagg": None if disagg is None else int(disagg)}
    for key in ("isl_range", "osl_range"):
        if key in out:
            settings[key] = out[key]
    load = {"kind": out["load"]}
    for key in ("concurrency", "rate", "prompts", "batch"):
        if key in out:
            load[key] = out[key]
    memory = {k: _finite(cap[k]) for k in ("hbm_bytes", "weights_bytes", "activations_bytes", "workspace_bytes",
                                           "kv_pool_bytes", "kv_bytes_per_token", "kv_tokens")}
    if not out["fits"]:
        why = ("the weights, activations and workspace exceed the engine's share of memory"
               if cap["kv_pool_bytes"] <= 0 else
               f"the KV pool holds {int(cap['kv_tokens']):,} tokens, less than one request of "
               f"{out['isl'] + out['osl']:,}")
        return _result(model=model.name, hardware=hw.name, engine=engine.name, settings=settings, fits=False,
                       verdict=f"DOES NOT FIT: {why}", load=load, max_concurrency=0, memory=memory,
                       notes=out["notes"])
    f = out["figures"]
    thr = f["output_tokens_per_s"]
    running = max(float(f["running"]), 1e-12)
    extra: dict[str, Any] = {}
    if "saturated" in f:
        extra = {"capacity_requests_per_s": f["capacity_requests_per_s"], "saturated": bool(f["saturated"])}
    if "duration_s" in f:
        extra["duration_s"] = f["duration_s"]
    if "disagg" in out:
        extra.update(out["disagg"], kv_transfer_s=f["kv_transfer_s"], prefill_utilization=f["prefill_utilization"],
                     prefill_capacity_requests_per_s=f["prefill_capacity_requests_per_s"],
                     decode_capacity_requests_per_s=f["decode_capacity_requests_per_s"])
    load.update(extra, running=running, queue_s=f["queue_s"], iteration_s=f["iteration_s"],
                prefill_iteration_s=f["prefill_iteration_s"], prefill_iterations=f["prefill_iterations"])
    finite_run = out["load"] == "rate" and "prompts" in out
    verdict = "SATURATED" if extra.get("saturated") and not finite_run else "FITS"
    if extra.get("saturated") and finite_run:
        out["notes"].append(f"--rate {out['rate']:g} requests/s is above what the deployment sustains "
                            f"({f['capacity_requests_per_s']:.3g} requests/s): the queue and the batch grow while the "
                            f"{out['prompts']:,} requests arrive, so these figures hold for this run's length only "
                            "(a longer run is slower)")
    tpot = _finite(f["tpot_s"])
    return _result(model=model.name, hardware=hw.name, engine=engine.name, settings=settings, fits=True,
                   verdict=verdict, load=load, ttft_s=f["ttft_s"], tpot_s=tpot,
                   itl_median_s=f.get("itl_median_s", f["tpot_s"]), e2e_s=f["e2e_s"],
                   output_tokens_per_s=thr, output_tokens_per_s_per_gpu=thr / d.gpus,
                   output_tokens_per_s_per_user=(1.0 / tpot if tpot else None),
                   requests_per_s=f["requests_per_s"], max_concurrency=out["max_concurrency"], memory=memory,
                   breakdown=out["breakdown"], terms=_terms(out["breakdown"]), interval=iv or {},
                   percentiles=out.get("percentiles") or {},
                   simulation=out.get("simulation") or {},
                   notes=out["notes"])
