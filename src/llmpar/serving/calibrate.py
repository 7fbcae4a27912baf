"""`llmpar calibrate serve`: fit an engine profile to your own serving benchmark outputs.

docs/serving.md, "calibrate serve". The runs come from :mod:`llmpar.calibrate.serve_logs`; the
deployment (model, hardware, TP/PP, precisions) from the options, checked against what a file
states. Measurements are checked against physics before a fit sees them: a TPOT below the
weight-read bound at the datasheet bandwidth, or output tokens/s above the compute roofline, is
refused with file:line (the model, TP degree or precision given is not what ran). The fit is
:func:`llmpar.serving.fit.fit` — the one fitter, as for the shipped engines — and its honest error
is leave-one-file-out (two files or more) or leave-one-run-out (one file of three runs or more).
"""

from __future__ import annotations

import math
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from llmpar.calibrate.serve_logs import read
from llmpar.errors import UserError
from llmpar.serving import fit as F
from llmpar.serving.published import ServingRow

MIN_RUNS = 2
MAX_FIT_RMS = 1.0   # log units: a fit this far off is a wrong deployment, not a profile


_FAMILIES = ("llama", "mixtral", "mistral", "qwen", "deepseek", "gemma", "phi", "gpt-oss", "falcon", "mpt",
             "nemotron", "grok", "kimi", "glm")


def _size_and_family(text: str) -> tuple[str | None, str | None]:
    """(the parameter count token, e.g. '70b' or '8x7b', and the family) a model name or a log's
    model id states; None where it states none."""
    import re

    t = text.lower().rsplit("/", 1)[-1]
    size = re.search(r"(?<![a-z0-9.])(\d+x)?\d+(\.\d+)?b(?![a-z0-9])", t)
    family = next((f for f in _FAMILIES if f in t), None)
    return (size.group(0) if size else None), family


def model_id_conflict(model_id, model) -> str | None:
    """Why a log's model id names another model than ``model`` (a different family or parameter
    count; each compared only where both state one), or None. Aliases count: any of the model's
    names that agrees is enough."""
    if not model_id:
        return None
    size, family = _size_and_family(str(model_id))
    names = [model.name, *getattr(model, "aliases", [])]
    ours = [_size_and_family(n) for n in names]
    if family and all(f is not None and f != family for _, f in ours):
        return f"the log's model {model_id!r} is a {family} model, not {model.name}"
    if size and all(s is not None and s != size for s, _ in ours):
        return f"the log's model {model_id!r} states {size}, not {model.name}'s"
    return None


def _figures(measured: dict) -> dict[str, float]:
    return {k: float(next(iter(v.values())) if isinstance(v, dict) else v) for k, v in measured.items() if v}


def _same_run(a: dict[str, float], b: dict[str, float]) -> bool:
    """Two copies of one run: every figure both give agrees to the 2 decimals a text summary prints
    (vLLM's and SGLang's text and JSON of one run differ only there). A repeat of a benchmark is not
    one: SGLang's two offline runs of 1,500 identical prompts differ by 2.1 tokens/s and 7 s of TTFT."""
    common = set(a) & set(b)
    return bool(common) and all(abs(a[k] - b[k]) <= 0.0051 + 1e-6 * abs(a[k]) for k in common)


def _rows(files, model, hw, engine, *, gpus, tp, pp, weights, kv_dtype, isl, osl) -> list[ServingRow]:
    rows = []
    paths = [Path(f) for f in files]
    seen_paths: dict[Path, str] = {}
    for path in paths:   # the same file twice would count its runs as independent measurements
        key = path.resolve()
        if key in seen_paths:
            raise UserError(f"{path}: given twice (also as {seen_paths[key]}): each run counts once in a fit")
        seen_paths[key] = str(path)
    seen_runs: dict[tuple, list] = {}
    lengths_used = False
    for path in paths:
        for run in read(path, isl, osl):
            lengths_used |= bool(run.get("lengths_from_options"))
            if (why := model_id_conflict(run.get("model_id"), model)) is not None:
                raise UserError(f"{run['where']}: {why}: check --model")
            ident = (round(float(run["isl"])), round(float(run["osl"])), str(sorted(run["load"].items())))
            figs = _figures(run["measured"])
            for where, other in seen_runs.get(ident, []):
                if _same_run(figs, other):
                    raise UserError(f"{run['where']}: the same run as {where} (same lengths, load and figures to the "
                                    "printed digits: one benchmark in two formats?): give it once")
            seen_runs.setdefault(ident, []).append((run["where"], figs))
            st = run.get("stated", {})
            if "tp" in st and int(st["tp"]) != tp:
                raise UserError(f"{run['where']}: the run states TP Size {int(st['tp'])}; --tp {tp} was given")
            kv = str(st.get("kv_dtype", "")).lower()
            if kv in ("fp8", "bf16", "fp16") and kv != kv_dtype:
                raise UserError(f"{run['where']}: the run states KV Cache Dtype {st['kv_dtype']}; --kv-dtype {kv_dtype} "
                                "was given")
            I, O = int(round(run["isl"])), max(1, int(round(run["osl"])))
            if I + O > model.max_seq:
                raise UserError(f"{run['where']}: {I:,} + {O:,} tokens exceed {model.name}'s context of {model.max_seq:,}")
            from llmpar.serving.published import _measured, tpot_stat

            row = ServingRow(source=path.name, row=run["where"], engine=engine.name, model=model.name,
                             hardware=hw.name, gpus=gpus, tp=tp, pp=pp, ep=1, isl=I, osl=O, load=run["load"],
                             weights=weights, kv_dtype=kv_dtype, measured=_measured(run["measured"]),
                             tpot_stat=tpot_stat(run["measured"]), requests=run.get("requests"),
                             specs=(model, hw))   # the specs given, files included (not looked up by name:
                                                  # a model file was "unknown model 'm33'", re-check 2026-12-03)
            if row.measured:
                rows.append(row)
    if (isl is not None or osl is not None) and not lengths_used:   # an option that changes nothing is refused
        raise UserError("--isl/--osl: every file states its own request lengths; these options are for "
                        "trtllm-bench reports that print none")
    return rows


def check_physics(rows, model, hw) -> None:
    """Refuse a measurement no deployment of this model could produce (module docstring)."""
    from llmpar.cost.serving import linear_flops_per_token, weight_bytes_per_gpu

    for r in rows:
        bound = weight_bytes_per_gpu(model, r.tp, 1, r.weights, tokens=1) / hw.gpu.memory_bandwidth
        tpot = r.measured.get("tpot_s")
        if tpot is not None and tpot < bound:
            raise UserError(f"{r.row}: TPOT {tpot * 1e3:.3g} ms is below the {bound * 1e3:.3g} ms it takes to read "
                            f"{model.name}'s {r.weights} weights per GPU at tp {r.tp} once at {hw.name}'s datasheet "
                            "bandwidth: check --model, --tp and --weights")
        out = r.measured.get("output_tokens_per_s")
        if out is not None:
            peak = hw.gpu.peak("fp8" if r.weights == "fp8" and "fp8" in hw.gpu.peak_flops else "bf16") * r.gpus
            if out * (1 + r.isl / r.osl) * linear_flops_per_token(model) > peak:
                raise UserError(f"{r.row}: {out:,.0f} output tokens/s of {r.isl:,}/{r.osl:,}-token requests need more "
                                f"FLOP/s than {r.gpus} x {hw.name} peak: check --model and --gpus")


def _errors(rows, engine) -> list[dict[str, float]]:
    return F.row_residuals(rows, engine)


def _median_abs(res: list[dict[str, float]]) -> dict[str, float]:
    out = {}
    for k in ("throughput", "tpot", "ttft"):
        v = [abs(x[k]) for x in res if k in x]
        if v:
            out[k] = float(math.exp(np.median(v)) - 1.0)
    return out


def calibrate(files, model, hw, engine, *, gpus, tp, pp, weights, kv_dtype, isl=None, osl=None) -> dict[str, Any]:
    rows = _rows(files, model, hw, engine, gpus=gpus, tp=tp, pp=pp, weights=weights, kv_dtype=kv_dtype, isl=isl,
                 osl=osl)
    if len(rows) < MIN_RUNS:
        raise UserError(f"{len(rows)} run(s) with a measurement in {', '.join(map(str, files))}: a fit of "
                        f"{len(F.PARAMS)} parameters needs {MIN_RUNS} or more (runs at several loads)")
    check_physics(rows, model, hw)
    before = _errors(rows, engine)
    fitted = F.fit(rows, engine)
    after_engine = F.with_params(engine, fitted)
    after = _errors(rows, after_engine)
    flat = [v for x in after for v in x.values()]
    rms = math.sqrt(sum(v * v for v in flat) / max(len(flat), 1))
    vals, _gens = F.unpack_fit(fitted)
    pinned = [f"{name} {v:.3g}" for (section, name, lo, hi, _s), v in zip(F.PARAMS, vals)
              if section == "kernels" and v >= hi - 1e-3]
    kernels = [p for p in F.PARAMS if p[0] == "kernels"]
    if len(pinned) == len(kernels):   # bandwidth and GEMM both at the ceiling: faster than this hardware
        raise UserError(f"the fit pins {' and '.join(pinned)} at the hardware's ceiling: the runs are faster than "
                        f"{hw.name} can serve {model.name}; not an engine's constants but a different deployment "
                        "(check --model, --hardware, --tp and --weights)")
    if rms > MAX_FIT_RMS:
        miss = f"{math.exp(rms) - 1:.0%}" if rms < math.log(100.0) else "more than 100x"
        raise UserError(f"the fitted profile still misses the runs by {miss} (rms): not an engine's "
                        "constants but a different deployment; check --model, --hardware, --tp and --weights")
    files_ = sorted({r.source for r in rows})
    if len(files_) >= 2:
        scheme, folds = "leave-one-file-out", [[r for r in rows if r.source == f] for f in files_]
    elif len(rows) >= 3:
        scheme, folds = "leave-one-run-out", [[r] for r in rows]
    else:
        scheme, folds = None, []
    cv: list[dict[str, float]] = []
    for held in folds:
        rest = [r for r in rows if r not in held]
        cv.extend(_errors(held, F.with_params(engine, F.fit(rest, engine))))
    return {"rows": rows, "fitted": fitted, "at_bound": F.at_bounds(fitted), "engine": after_engine,
            "before": _median_abs(before),
            "after": _median_abs(after), "cv_scheme": scheme, "cv": _median_abs(cv) if cv else None,
            "per_row": [{"where": r.row, "isl": r.isl, "osl": r.osl, "load": r.load, "measured": r.measured,
                         "error_before": b, "error_after": a} for r, b, a in zip(rows, before, after)]}


def engine_yaml(base_name: str, result: dict[str, Any], files) -> str:
    """The fitted profile: ``extends:`` the base engine, the fitted values, the calibration record."""
    vals, by_gen = F.unpack_fit(result["fitted"])
    lines = [f"# written by llmpar calibrate serve on {date.today().isoformat()} from {', '.join(map(str, files))}",
             f"name: {result['engine'].name}-calibrated", f"extends: {base_name}", "kernels:"]
    sections: dict[str, list[str]] = {"kernels": [], "overhead": []}
    for (section, name, *_), v in zip(F.PARAMS, vals):
        if name == "decode_bandwidth" and by_gen:
            inner = ", ".join([f"default: {v:.4f}"] + [f"{g}: {x:.4f}" for g, x in by_gen.items()])
            sections[section].append(f"  {name}: {{{inner}}}")
        else:
            sections[section].append(f"  {name}: {v:.6g}")
    lines += sections["kernels"] + ["overhead:"] + sections["overhead"]
    lines += ["calibration:", f"  date: '{date.today().isoformat()}'", "  method: llmpar calibrate serve (serving/fit.py)",
              f"  runs: {len(result['rows'])}",
              *([f"  at_bound: {{{', '.join(f'{k}: {v}' for k, v in result['at_bound'].items())}}}   # a bound, not "
                 "an estimate"] if result.get("at_bound") else []),
              "  in_sample_median_abs_error: {" + ", ".join(f"{k}: {v:.4f}" for k, v in result["after"].items()) + "}"]
    if result["cv"]:
        lines.append(f"  {result['cv_scheme'].replace('-', '_')}_median_abs_error: {{"
                     + ", ".join(f"{k}: {v:.4f}" for k, v in result["cv"].items()) + "}")
    return "\n".join(lines) + "\n"
