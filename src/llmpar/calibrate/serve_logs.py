"""Read the serving benchmark outputs users already have (docs/serving.md, calibrate serve).

One run per result, each a :class:`llmpar.serving.published.ServingRow` (the deployment comes from
the command line: the outputs do not say which GPU, TP degree or precision served them):

* ``vllm bench serve`` / ``benchmarks/benchmark_serving.py --save-result`` JSON (one object), and
  JSON lines of the same (the llm-d and nightly scripts append one object per run);
* ``python -m sglang.bench_serving --output-file`` JSON lines (0.4 compact lines and 0.5's full
  dicts; the bare ``Infinity`` of an unlimited rate is read);
* the "Serving Benchmark Result" summary both print (text logs);
* NVIDIA GenAI-Perf's ``profile_export_genai_perf.json`` (its CSV export states no load: not read);
* ``trtllm-bench throughput`` "PERFORMANCE OVERVIEW" text (request and output throughput only;
  ``--isl``/``--osl`` give the lengths it does not print).

Lengths are the run's means: total input (output) tokens / completed requests; vLLM's random
dataset gives exactly the lengths asked, SGLang's 0.4 random dataset draws them uniformly up to
them (the means are what the engine served). Latencies are medians where printed, else means.
The metric definitions these readers rely on (vLLM's TPOT = (e2e − TTFT)/(O − 1) per request,
ITL per streamed chunk, SGLang's the same TPOT) are in tests/data/serving/SOURCES.md with the
lines of the benchmark scripts they come from.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from llmpar.errors import UserError
from llmpar.specs.reading import JSONReadError, loads_json

MAX_BYTES = 64 * 2**20
MAX_COUNT = 1e9   # requests or clients a benchmark states: no published run comes near a billion


def _num(x) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        try:
            return float(x)
        except OverflowError:   # a JSON integer beyond a float (10**400): infinite, refused where read
            return math.inf
    t = str(x).strip().lower()
    if t in ("inf", "infinity"):
        return math.inf
    try:
        return float(t)
    except ValueError:
        return None


def _count(d: dict[str, Any], key: str, where: str) -> int | None:
    """A count a run states (completed, num_prompts, max_concurrency, GenAI-Perf's concurrency and
    request_count): None when absent or null; anything but a whole number of at least 1 (0.5, -5,
    NaN, inf, 10**400, "abc") is refused with its place. Such values had reached a logarithm, an
    int() of infinity or a fit whose first residuals were not finite, each a traceback."""
    raw = d.get(key)
    if raw is None or str(raw).strip().lower() in ("none", "null", ""):   # text logs print None
        return None
    v = _num(raw)
    if v is None or not math.isfinite(v) or v < 1 or v != int(v) or v > MAX_COUNT:
        raise UserError(f"{where}: {key} = {raw!r}: a count of the run must be a whole number from 1 to {MAX_COUNT:.0e}")
    return int(v)


def _lengths(isl: float, osl: float, where: str) -> None:
    """Mean prompt and output lengths of at least one token each: an output total below the
    completed requests (half a token each) or a prompt total of 12 tokens over 1,000 requests is a
    corrupted file, not a run (they had been fitted, and the miss blamed on --model)."""
    for name, v in (("prompt", isl), ("output", osl)):
        if not math.isfinite(v) or v < 1.0:
            raise UserError(f"{where}: a mean {name} of {v:.6g} tokens per request: the run's token totals and its "
                            "completed requests disagree (a corrupted or edited result)")


def _from_genai_perf(d: dict[str, Any], where: str) -> dict[str, Any] | None:
    """One run from NVIDIA GenAI-Perf's ``profile_export_genai_perf.json``: each metric a
    {unit, avg, p50, ...} object; the load in ``input_config`` (concurrency or request_rate). Its
    ``inter_token_latency`` is per request (e2e − TTFT)/(O − 1), i.e. vLLM's TPOT
    (tests/data/serving/SOURCES.md); without ``--streaming`` TTFT is the whole request, so it is
    not read. A streamed output length far above the one requested is GenAI-Perf 24.11-24.12's
    counting bug (perf_analyzer#298): refused."""
    def stat(key, *names):
        m = d.get(key)
        if isinstance(m, dict):
            for n in names:
                if isinstance(m.get(n), (int, float)) and not isinstance(m.get(n), bool):
                    v = _num(m[n])
                    if not math.isfinite(v) or v <= 0:
                        raise UserError(f"{where}: {key}.{n} = {m[n]!r}: a measured figure must be a positive number")
                    return v
        return None

    cfg = d.get("input_config") or {}
    if not isinstance(cfg, dict):
        raise UserError(f"{where}: input_config = {cfg!r}: GenAI-Perf writes an object of the run's settings there")
    isl, osl = stat("input_sequence_length", "avg"), stat("output_sequence_length", "avg")
    if not isl or not osl:
        return None
    _lengths(isl, osl, where)
    asked = _num(cfg.get("output_tokens_mean"))
    if asked and asked > 0 and osl > 2.0 * asked:
        raise UserError(f"{where}: output length {osl:,.0f} is {osl / asked:.1f}x the {asked:,.0f} requested: GenAI-Perf "
                        "24.11-24.12 miscounts streamed output tokens (perf_analyzer#298); rerun with a fixed version")
    conc, rate = _count(cfg, "concurrency", where), _load_field(cfg, "request_rate", where)
    if conc:
        load = {"concurrency": conc}
    elif rate is not None and math.isfinite(rate):
        load = {"rate": rate}
    else:
        load = {"offline": _count(cfg, "request_count", where) or 1000}
    m: dict[str, Any] = {}
    thr = stat("output_token_throughput", "avg")
    if thr:
        m["output_tokens_per_s"] = thr
    itl = stat("inter_token_latency", "p50", "avg")
    if itl:
        m["tpot_ms"] = {"median": itl}
    if cfg.get("streaming"):
        ttft = stat("time_to_first_token", "p50", "avg")
        if ttft:
            m["ttft_ms"] = {"median": ttft}
    return {"isl": isl, "osl": osl, "load": load, "measured": m, "where": where, "model_id": cfg.get("model")}


def _measure(d: dict[str, Any], key: str, where: str) -> float | None:
    """A measured figure of a result object: None when the key is absent or null; a value that is
    not a positive finite number (a zero TPOT, a negative TTFT, NaN throughput) is refused with the
    place, never passed over for another field (it had been: a zero median TPOT fell back to the mean)."""
    if d.get(key) is None:
        return None
    v = _num(d.get(key))
    if v is None or not math.isfinite(v) or v <= 0:
        raise UserError(f"{where}: {key} = {d.get(key)!r}: a measured figure must be a positive number")
    return v


def _load_field(d: dict[str, Any], key: str, where: str) -> float | None:
    """The load a run states (``request_rate``: requests/s or "inf"; ``max_concurrency``): None when
    absent or null; a value that is not a positive number (0, -5, "fast") is refused with the place
    (a rate of 0 had reached a logarithm and raised; a concurrency of 0 had been read as offline
    and the fit blamed --model)."""
    if d.get(key) is None or str(d.get(key)).strip().lower() in ("none", "null", ""):   # text logs print None
        return None
    v = _num(d.get(key))
    if v is None or math.isnan(v) or v <= 0:
        raise UserError(f"{where}: {key} = {d.get(key)!r}: the run's load must be a positive number"
                        + (" or inf" if key == "request_rate" else ""))
    return v


def _consistent(d: dict[str, Any], m: dict[str, Any], done: float, tout: float, where: str) -> None:
    """A run's figures checked against its own counts before a fit uses them (issue 24: measurements
    against physics): with the run's ``duration`` (s), its output throughput is total output tokens /
    duration (the benchmarks print exactly that; 10 % allowed for rounding and warm-up accounting),
    and no request's first token or token gaps take longer than the run. A file edited or corrupted
    (an output throughput of 1e-300 tokens/s beside 128,000 tokens in 63 s, a TTFT of 1e300 ms) is
    refused with its place; it had been fitted and blamed on --model."""
    if d.get("duration") is None:
        return
    dur = _measure(d, "duration", where)   # stated, it must be a positive time: it checks the rest
    out = m.get("output_tokens_per_s")
    if out is not None and not 0.9 <= out * dur / tout <= 1.1:
        raise UserError(f"{where}: output_throughput {out:.6g} tokens/s disagrees with the run's own "
                        f"{tout:,.0f} output tokens in {dur:,.1f} s ({tout / dur:,.1f}/s): a corrupted or edited result")
    req = _measure(d, "request_throughput", where)   # not fitted on (output tokens/s is), but checked
    if req is not None and not 0.9 <= req * dur / done <= 1.1:
        raise UserError(f"{where}: request_throughput {req:.6g} requests/s disagrees with the run's own "
                        f"{done:,.0f} requests in {dur:,.1f} s ({done / dur:,.3g}/s): a corrupted or edited result")
    rate = _load_field(d, "request_rate", where)
    # requests cannot finish faster than they are sent: beyond Poisson noise (x1.5 over the run and
    # the clients' first requests), a stated rate below what the run completed is not the run's
    if rate is not None and math.isfinite(rate) and done / dur > 1.5 * rate + (_count(d, "max_concurrency", where) or 0) / dur:
        raise UserError(f"{where}: request_rate = {d.get('request_rate')!r} requests/s, but the run completed "
                        f"{done / dur:,.3g}/s ({done:,.0f} in {dur:,.1f} s): a corrupted or edited result")
    osl = tout / done
    for key, steps in (("ttft_ms", 1.0), ("tpot_ms", max(osl - 1.0, 1.0)), ("itl_ms", max(osl - 1.0, 1.0)),
                       ("e2e_ms", 1.0)):
        if key in m:
            v = next(iter(m[key].values()))
            if v * steps / 1e3 > 1.01 * dur:
                raise UserError(f"{where}: {key.replace('_ms', '')} of {v:,.6g} ms is longer than the whole run "
                                f"({dur:,.1f} s): a corrupted or edited result")


def _from_result(d: dict[str, Any], where: str) -> dict[str, Any] | None:
    """One run from a vLLM or SGLang result object (their key sets, all versions we know)."""
    if isinstance(d.get("request_throughput"), dict):
        return _from_genai_perf(d, where)
    if d.get("completed") is None or d.get("total_input_tokens") is None or d.get("total_output_tokens") is None:
        return None
    done = _count(d, "completed", where)
    tin, tout = (_measure(d, key, where) for key in ("total_input_tokens", "total_output_tokens"))
    _lengths(tin / done, tout / done, where)
    rate, conc = _load_field(d, "request_rate", where), _count(d, "max_concurrency", where)
    sent = _count(d, "num_prompts", where)
    if sent is not None and done > sent:
        raise UserError(f"{where}: completed = {done:,} requests of num_prompts = {sent:,} sent: more finished than "
                        "were sent (a corrupted or edited result)")
    prompts = sent or done
    if conc is not None and conc >= prompts:   # as many clients as prompts: every prompt sent at once
        load = {"offline": prompts}
    elif conc is not None:
        load = {"concurrency": conc}
    elif rate is None or math.isinf(rate):
        load = {"offline": prompts}
    else:
        load = {"rate": rate}
    m: dict[str, Any] = {}
    one_token = tout / done <= 1.0   # every answer one token: no gap between tokens to measure
    out = _measure(d, "output_throughput", where)
    if out is not None:
        m["output_tokens_per_s"] = out
    for key, names in (("ttft_ms", ("median_ttft_ms", "mean_ttft_ms")),
                       ("tpot_ms", ("median_tpot_ms", "mean_tpot_ms")),
                       ("itl_ms", ("median_itl_ms", "mean_itl_ms")),
                       ("e2e_ms", ("median_e2el_ms", "median_e2e_latency_ms", "mean_e2el_ms", "mean_e2e_latency_ms"))):
        if one_token and key in ("tpot_ms", "itl_ms"):
            continue
        # every stated statistic is checked (a NaN mean beside a good median had been passed over);
        # the first one stated is used: the median where printed
        for n in names:
            v = _measure(d, n, where)
            if v is not None and key not in m:
                m[key] = {"median" if n.startswith("median") else "mean": v}
    _consistent(d, m, done, tout, where)
    if d.get("model_id") is not None and not isinstance(d.get("model_id"), str):
        # model_id 5 had skipped the check of the run's model against --model
        raise UserError(f"{where}: model_id = {d.get('model_id')!r}: the served model's name is text")
    # the run's request count: a rate run is predicted as that many requests (serving_finite.finite_rate)
    return {"isl": tin / done, "osl": tout / done, "load": load, "measured": m, "where": where,
            "model_id": d.get("model_id"), "requests": prompts}


_TEXT_KEYS = {
    "successful requests": "completed", "maximum request concurrency": "max_concurrency",
    "max request concurrency": "max_concurrency", "max reqeuest concurrency": "max_concurrency",
    "traffic request rate": "request_rate", "request rate configured (rps)": "request_rate",
    "total input tokens": "total_input_tokens",
    "total generated tokens": "total_output_tokens", "output token throughput (tok/s)": "output_throughput",
    "median ttft (ms)": "median_ttft_ms", "mean ttft (ms)": "mean_ttft_ms", "median tpot (ms)": "median_tpot_ms",
    "mean tpot (ms)": "mean_tpot_ms", "median itl (ms)": "median_itl_ms", "mean itl (ms)": "mean_itl_ms",
    "median e2el (ms)": "median_e2el_ms", "median e2e latency (ms)": "median_e2e_latency_ms",
}


def _from_text(text: str, path: Path) -> list[dict[str, Any]]:
    runs = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "Serving Benchmark Result" not in line:
            continue
        d: dict[str, Any] = {}
        # the rate and concurrency lines print just above the block in older vLLM scripts
        for ln in lines[max(0, i - 8):i]:
            m = re.match(r"\s*([^:]+):\s*([^\s]+)", ln)
            if m and _TEXT_KEYS.get(m.group(1).strip().lower()) in ("request_rate", "max_concurrency"):
                d[_TEXT_KEYS[m.group(1).strip().lower()]] = m.group(2)
        for ln in lines[i + 1:i + 60]:
            if ln.startswith("=====") and len(d) > 2:
                break
            m = re.match(r"\s*([^:]+):\s*([^\s]+)", ln)
            if m and m.group(1).strip().lower() in _TEXT_KEYS:
                d[_TEXT_KEYS[m.group(1).strip().lower()]] = m.group(2)
        run = _from_result(d, f"{path}:{i + 1}")
        if run:
            runs.append(run)
    return runs


def _field(text: str, label: str) -> str | None:
    m = re.search(re.escape(label) + r":\s*([^\s]+)", text)
    return m.group(1) if m else None


def _trtllm(text: str, path: Path, isl, osl) -> list[dict[str, Any]]:
    """trtllm-bench throughput's report: 0.17 prints "Token Throughput (tokens/sec)" (output tokens /
    total latency, tests/data/serving/SOURCES.md) and the lengths; later versions "Total Output
    Throughput" and no lengths. The engine details it states (TP size, KV-cache dtype) come along."""
    if "PERFORMANCE OVERVIEW" not in text:
        return []
    m = (re.search(r"Total Output Throughput \(tokens/sec\):\s*([\d.]+)", text)
         or re.search(r"Token Throughput \(tokens/sec\):\s*([\d.]+)", text))
    if not m:
        return []
    a_in, a_out = _num(_field(text, "Average Input Length (tokens)")), _num(_field(text, "Average Output Length (tokens)"))
    from_options = not (a_in and a_out)
    isl = a_in if a_in else isl
    osl = a_out if a_out else osl
    if isl is None or osl is None:
        raise UserError(f"{path}: this trtllm-bench report does not print the request lengths: give --isl and --osl")
    meas = {"output_tokens_per_s": float(m.group(1))}
    n = re.search(r"Request Throughput \(req/sec\):\s*([\d.]+)", text)
    if n:
        meas["requests_per_s"] = float(n.group(1))
    reqs = _num(_field(text, "Number of requests"))
    stated = {k: v for k, v in (("tp", _num(_field(text, "TP Size"))), ("pp", _num(_field(text, "PP Size"))),
                                ("kv_dtype", _field(text, "KV Cache Dtype"))) if v is not None}
    line = text[:m.start()].count("\n") + 1
    return [{"isl": float(isl), "osl": float(osl), "load": {"offline": int(reqs) if reqs else 1000}, "measured": meas,
             "where": f"{path}:{line}", "model_id": _field(text, "Model"), "stated": stated,
             "lengths_from_options": from_options}]


def read(path: Path, isl=None, osl=None) -> list[dict[str, Any]]:
    """Every run in one benchmark output file (module docstring); none found is an error naming it."""
    if not path.is_file():
        raise UserError(f"benchmark output not found: {path}")
    if path.stat().st_size > MAX_BYTES:
        raise UserError(f"{path}: larger than {MAX_BYTES // 2**20} MiB; not a benchmark summary")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    runs: list[dict[str, Any]] = []
    stripped = text.lstrip()
    if stripped.startswith("{"):
        for i, line in enumerate(text.splitlines() if "\n{" in stripped else [text]):
            if not line.strip():
                continue
            try:
                obj = loads_json(line, str(path), "JSON (a benchmark result)", line=i + 1)
            except JSONReadError as exc:
                # a whole-file result must read; in a JSON-lines file a line of other output is passed
                # over, except a key given twice or absurd nesting (a malformed result, not other text)
                if (i == 0 and "\n{" not in stripped) or "malformed" not in str(exc):
                    raise
                continue
            if isinstance(obj, dict):
                run = _from_result(obj, f"{path}:{i + 1}")
                if run:
                    runs.append(run)
    else:
        runs = _from_text(text, path) or _trtllm(text, path, isl, osl)
    if not runs and stripped.startswith("Metric,") and "Time To First Token" in text:
        # GenAI-Perf's profile_export_genai_perf.csv: latencies and throughputs, but not the load
        # (concurrency or request rate) that produced them, so no prediction can be set against it
        raise UserError(f"{path}: GenAI-Perf's CSV export states no load (concurrency or request rate); give its "
                        "profile_export_genai_perf.json, which records them in input_config")
    if not runs:
        raise UserError(f"{path}: no serving benchmark result found (vllm bench serve / sglang.bench_serving JSON "
                        f"or summary, trtllm-bench report, GenAI-Perf JSON export)")
    return runs
