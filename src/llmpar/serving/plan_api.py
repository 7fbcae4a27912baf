"""``llmpar.serve_plan(...)`` and `llmpar serve-plan`'s face (split from :mod:`llmpar.serving.plan`):
the keywords read and checked (latency targets with their units, the engine, weight and KV lists,
the chunk sizes, the flags), then :func:`llmpar.serving.plan.plan` and each row's bands.
docs/serving.md, serve-plan; docs/api.md, serve_plan."""

from __future__ import annotations

import numpy as np

from llmpar.errors import UserError
from llmpar.serving.deployment import DEFAULT_ISL, DEFAULT_OSL
from llmpar.serving.plan import _bands, _spec, plan
from llmpar.specs.registry import DEFAULT_HARDWARE


def _slo(text, name: str) -> float | None:
    """A latency target with its unit ('500ms', '0.5 s'); a bare number is refused (500 what?)."""
    if text is None:
        return None
    from llmpar.units import parse_seconds

    if isinstance(text, (bool, np.bool_)):
        raise UserError(f"{name} must be a latency target ('500ms', or seconds as a number), got {text!r}")
    if isinstance(text, (int, float, np.integer, np.floating)):
        # the API's number is seconds (docs/api.md, serve_plan): ttft=0.5 had been refused "give a unit"
        v = parse_seconds(float(text), name, allow_zero=False)
    else:
        t = str(text).strip()
        if t.replace(".", "", 1).isdigit():   # the CLI's bare number: 500 what? (0 is refused as not positive)
            if float(t) == 0:
                raise UserError(f"--{name} {t}: a latency target must be positive")
            raise UserError(f"--{name} {t}: give a unit, e.g. {t}ms or {t}s")
        v = parse_seconds(t, f"--{name}", allow_zero=False)   # one wording for 0 and below: "must be positive"
    if v > MAX_SLO_S:   # an hour to the first token, or per token, is no serving target (--ttft 1e308)
        raise UserError(f"--{name} {text}: a serving latency target of at most an hour")
    return v


MAX_SLO_S = 3600.0


def _engine_evidence(e) -> str:
    """What an engine's constants rest on: "calibrated" (a `calibrate serve` fit on the user's own
    runs, its calibration record), "fitted" (published runs, its fitted_on) or "prior only". A
    calibrated profile had been called "prior values only, fitted on no published run"."""
    if (e.calibration or {}).get("runs"):
        return "calibrated"
    return "fitted" if any(x.startswith("FITTED") for x in e.fitted_on) else "prior only"


def _names(value, what: str) -> list[str] | None:
    """A list argument of serve_plan() (``engine``, ``weights``, ``kv_dtype``): a comma-separated
    string or a list of strings (None stays None); anything else is a UserError, not a TypeError."""
    if value is None:
        return None
    if isinstance(value, str):
        names = [v.strip() for v in value.split(",")]
        if not all(names):
            raise UserError(f"{what} {value!r}: an empty name (a comma too many?)")
        return names
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise UserError(f"{what} must be a name, a comma-separated list of names or a list of them, got {value!r}")


def _engines(engine, hw) -> list:
    """The engine profiles: a name, a list, "all" (every shipped engine that runs on the GPU) or
    None (vllm, as `serve`)."""
    from llmpar.serving.run import check_engine_runs_on, runs_on
    from llmpar.specs.registry import load_engine, shipped_names

    if engine == "all":   # every shipped engine that runs on the GPU (TensorRT-LLM: NVIDIA's only)
        names = [n for n in shipped_names("engines") if runs_on(load_engine(n), hw)]
    else:
        names = _names(engine, "engine") or ["vllm"]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise UserError(f"--engine {dup!r} is given twice: name each engine once")
    engines = [load_engine(n) for n in names]
    seen = [e.name for e in engines]   # resolved: VLLM, vllm and engines/vllm.yaml are one engine
    if len(set(seen)) != len(seen):
        dup = next(n for n in seen if seen.count(n) > 1)
        raise UserError(f"--engine names {dup} twice (as {', '.join(repr(n) for n, e in zip(names, seen) if e == dup)}): "
                        "name each engine once")
    for e in engines:
        check_engine_runs_on(e, hw)
    return engines


def serve_plan_api(model=None, *, hardware=DEFAULT_HARDWARE, engine=None, hf=None, gpus=None, rate=None, isl=DEFAULT_ISL,
                   osl=DEFAULT_OSL, ttft=None, tpot=None, weights=None, kv_dtype=None, max_num_batched_tokens=None,
                   disagg=False, dp_attention=False, spec_tokens=None, acceptance=None, gpu_hour_price=None,
                   top=10, **unknown):
    """``llmpar.serve_plan(...)``: ranked deployments meeting the targets (docs/serving.md, serve-plan).
    ``engine``: a name, a list of names, "all" for every shipped engine, or None (vllm, as `serve`)."""
    from llmpar.errors import refuse_unknown
    from llmpar.inputs import load_hardware_spec, load_model_spec
    from llmpar.parallel import flag
    from llmpar.serving.deployment import BUDGET_RANGE, _int, refuse_speculation_without_decode

    refuse_unknown("serve_plan", unknown, [k for k in locals() if k != "unknown"])
    disagg = flag(disagg, "disagg", default_none=False)
    dp_attention = flag(dp_attention, "dp_attention", default_none=False)
    spec = load_model_spec(model, hf)[0]
    hw = load_hardware_spec(hardware)
    engines = _engines(engine, hw)
    isl = _int(DEFAULT_ISL if isl is None else isl, "isl", 1, spec.max_seq, f"{spec.name}'s context, max_seq")
    osl = _int(DEFAULT_OSL if osl is None else osl, "osl", 1, spec.max_seq, f"{spec.name}'s context, max_seq")
    gpus = _int(gpus, "gpus", 1, 1_048_576)
    top = _int(top, "top", 1, 1000)
    if rate is not None:   # serve's rule (serving/deployment._rate); a target load is finite
        from llmpar.serving.deployment import _rate

        rate = _rate(rate, allow_inf=False)
    ws, kvs = _names(weights, "weights"), _names(kv_dtype, "kv_dtype")
    budgets = None
    if max_num_batched_tokens is not None:   # the engines' chunk size, searched only where asked
        texts = (max_num_batched_tokens.split(",") if isinstance(max_num_batched_tokens, str)
                 else list(max_num_batched_tokens) if isinstance(max_num_batched_tokens, (list, tuple))
                 else [max_num_batched_tokens])
        budgets = []
        for t in texts:
            try:
                v = t if isinstance(t, (int, float, np.integer, np.floating)) else int(str(t).strip())
            except ValueError:
                raise UserError(f"--max-num-batched-tokens {t!r}: expected whole numbers of tokens, e.g. 2048,8192") \
                    from None
            budgets.append(_int(v, "max-num-batched-tokens", *BUDGET_RANGE))
        if len(set(budgets)) != len(budgets):
            raise UserError("--max-num-batched-tokens: a value is given twice")
    price = gpu_hour_price if gpu_hour_price is not None else hw.gpu_hour_price
    if price is not None:   # the training commands' rule: positive, at most a million (cost/training.py)
        from llmpar.cost.training import parse_price

        price = parse_price(price, price)
    t_ttft, t_tpot = _slo(ttft, "ttft"), _slo(tpot, "tpot")
    if dp_attention and spec.moe is None:   # an option that changes nothing is refused
        raise UserError(f"--dp-attention spreads the experts over a replica's GPUs: {spec.name} is dense")
    if disagg and rate is None:   # the disaggregated pools are modelled under Poisson arrivals only
        raise UserError("--disagg searches disaggregated pools for a request rate: give --rate R (their model is "
                        "Poisson arrivals; --gpus N ranks closed loops)")
    refuse_speculation_without_decode(spec_tokens, osl)
    if t_tpot is not None and osl == 1:   # an option that changes nothing is refused, not ignored
        raise UserError("--tpot with --osl 1: a one-token answer has no gap between tokens to bound (give "
                        "--ttft, or --osl of 2 or more)")
    out = plan(spec, hw, engines, isl=isl, osl=osl, ttft=t_ttft, tpot=t_tpot, gpus=gpus, rate=rate, weights=ws,
               price=price, kv_dtypes=kvs, budgets=budgets, disagg=bool(disagg), dp_attention=bool(dp_attention),
               spec=_spec(spec_tokens, acceptance))
    out["candidates"] = out["candidates"][:top]
    for c in out["candidates"]:
        c.interval = _bands(spec, hw, c)
    # how much each engine's constants rest on: the sources its fit used (docs/serving.md, Engines)
    evidence = {e.name: _engine_evidence(e) for e in engines}
    out.update(model=spec.name, hardware=hw.name, engines=[e.name for e in engines], isl=isl, osl=osl, ttft_s=t_ttft, tpot_s=t_tpot,
               gpus=gpus, rate=rate, gpu_hour_price=price, engine_evidence=evidence)
    return out
