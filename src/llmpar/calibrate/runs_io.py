"""Measured training runs in, one record type out: the input side of ``llmpar calibrate runs``.

:func:`read_runs` reads runs tables (CSV, JSONL, YAML) and training logs (Megatron-LM, NeMo,
torchtitan; see :mod:`llmpar.calibrate.train_logs`) into :class:`MeasuredRun` records. Nothing here
prints or fits. Every line or column that is not used is reported in a note naming ``file:line``;
bad input (missing layout, degrees that do not multiply, non-integer degrees, negative or non-finite
measurements, a log with no iteration line) raises :class:`~llmpar.errors.UserError` naming file and
line. The format, the aliases and the units are documented in ``docs/runs-format.md``.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llmpar.calibrate.train_logs import MAX_MEMORY_BYTES, read_log
from llmpar.errors import UserError, suggest
from llmpar.parallel import (DTYPES, EP_DISPATCHERS, GRAD_DTYPES, MAX_BATCH, MAX_GPUS, MAX_SEQ, OPTIMIZERS, RECOMPUTE,
                             SCHEDULES)
from llmpar.specs.reading import DuplicateKeyError as _DuplicateKey   # the one JSON rule
from llmpar.specs.reading import unique_json_pairs as _unique_pairs
from llmpar.units import parse_bytes, parse_seconds

STATUSES = ("ok", "oom", "crashed")
CONVENTIONS = ("full", "causal", "hardware")   # how a run's tflops_per_gpu / mfu count FLOPs (docs/runs-format.md)
DEGREES = ("tp", "pp", "dp", "cp", "ep", "etp")
LAYOUT_KEYS = ("gpus", "tp", "pp", "dp", "cp", "ep", "etp", "zero", "sp", "recompute", "micro_batch", "global_batch",
               "microbatches", "seq", "schedule", "virtual_stages", "recompute_layers", "offload_layers", "dtype",
               "recompute_modules", "optimizer", "grad_dtype", "tp_overlap", "dp_overlap", "ep_overlap",
               "ep_dispatcher")
#: the layout keys that are settings a run states (the CLI's --optimizer, --tp-overlap ...): runs are
#: evaluated in groups that share them (calibrate/runs.py prepare)
SETTING_KEYS = ("optimizer", "grad_dtype", "tp_overlap", "dp_overlap", "ep_overlap", "ep_dispatcher")
#: whose peak memory a run measured: the largest over the ranks, or world rank 0's (pipeline stage 0)
MEMORY_STAGES = ("max", "first")
MEASURED_KEYS = ("step_time_s", "tokens_per_s_per_gpu", "mfu", "tflops_per_gpu", "peak_allocated_bytes",
                 "peak_reserved_bytes")


@dataclass(frozen=True)
class MeasuredRun:
    """One measured training run. Units: seconds, tokens/s per GPU, MFU as a fraction, TFLOP/s per GPU
    (as the framework counted it), bytes. A measurement the input did not give is None."""

    source: str                                  # 'file:line' of the row, or of the log's first iteration
    model: str | None
    hardware: str | None
    layout: dict[str, Any]                       # CLI option names only (LAYOUT_KEYS)
    status: str = "ok"                           # 'ok' | 'oom' | 'crashed' (did not run)
    step_time_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    mfu: float | None = None
    tflops_per_gpu: float | None = None
    peak_allocated_bytes: float | None = None
    peak_reserved_bytes: float | None = None
    notes: tuple[str, ...] = ()
    convention: str = "full"     # how tflops_per_gpu / mfu count FLOPs: full | causal | hardware
    mfu_peak_dtype: str = "bf16"  # the dense peak an MFU figure is relative to
    # whose peak memory was measured: "max" (the largest over the ranks: the most-loaded pipeline
    # stage) or "first" (world rank 0, i.e. pipeline stage 0, as nanotron's benchmark CSV writes it)
    memory_stage: str = "max"
    row: str | None = None       # where in a published source (validation/*.yaml 'row:')
    stack: str | None = None     # the framework the run used, when the table says (top-level 'stack:')
    metric: str | None = None    # the headline measurement to compare (top-level 'metric:'), when several are given

    @property
    def has_speed(self) -> bool:
        """The run ran and gives a speed figure (step time, tokens/s, TFLOP/s or MFU)."""
        return self.status == "ok" and any(
            v is not None for v in (self.step_time_s, self.tokens_per_s_per_gpu, self.tflops_per_gpu, self.mfu))

    @property
    def has_memory(self) -> bool:
        """The run gives a memory figure: its peak, or the lower bound an OOM implies."""
        return (self.status == "ok" and (self.peak_allocated_bytes or self.peak_reserved_bytes) is not None) \
            or self.status == "oom"


@dataclass
class RunsRead:
    runs: list[MeasuredRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # every skipped line or column, as 'file:line: ...'
    models: dict[str, Any] = field(default_factory=dict)   # inline 'models:' specs (name -> ModelSpec)
    files: list[dict[str, Any]] = field(default_factory=list)  # per file: path, source, url, stack, metric, ...


# ----------------------------------------------------------------------------- column names

def _key(name: Any) -> str:
    return re.sub(r"[\s\-]+", "_", str(name).strip().lower())


#: accepted spellings -> CLI option name (docs/runs-format.md, "Columns")
ALIASES: dict[str, str] = {
    **{k: k for k in LAYOUT_KEYS},
    "tensor_parallel": "tp", "tensor_parallel_size": "tp", "tensor_model_parallel_size": "tp",
    "pipeline_parallel": "pp", "pipeline_parallel_size": "pp", "pipeline_model_parallel_size": "pp",
    "data_parallel": "dp", "data_parallel_size": "dp",
    "context_parallel": "cp", "context_parallel_size": "cp",
    "expert_parallel": "ep", "expert_parallel_size": "ep", "expert_model_parallel_size": "ep",
    "expert_tensor_parallel": "etp", "expert_tensor_parallel_size": "etp",
    "zero_stage": "zero", "sequence_parallel": "sp", "recompute_granularity": "recompute",
    "micro_batch_size": "micro_batch", "mbs": "micro_batch",
    "global_batch_size": "global_batch", "gbs": "global_batch",
    "grad_accum": "microbatches", "gradient_accumulation_steps": "microbatches", "num_microbatches": "microbatches",
    "seq_len": "seq", "seq_length": "seq", "sequence_length": "seq",
    "num_gpus": "gpus", "n_gpus": "gpus", "world_size": "gpus",
    "virtual_pipeline_model_parallel_size": "virtual_stages", "vpp": "virtual_stages",
    "recompute_num_layers": "recompute_layers",
    "cpu_offloading_num_layers": "offload_layers",
    "model": "model", "model_name": "model", "hardware": "hardware", "gpu": "hardware",
    "status": "status", "log": "log",
    "step_time_s": "step_time_s", "iteration_time_s": "step_time_s",
    "tokens_per_s_per_gpu": "tokens_per_s_per_gpu", "tokens_per_sec_per_gpu": "tokens_per_s_per_gpu",
    "tps": "tokens_per_s_per_gpu", "tgs": "tokens_per_s_per_gpu",
    "tokens_per_s": "tokens_per_s", "tokens_per_sec": "tokens_per_s",
    "mfu": "mfu", "tflops_per_gpu": "tflops_per_gpu", "tflops": "tflops_per_gpu",
}
#: time columns: name -> seconds per unit (None: the value must carry its unit, '1.2 s', '850 ms')
_TIME_COLUMNS = {"step_time_s": 1.0, "iteration_time_s": 1.0, "step_time_ms": 1e-3, "iteration_time_ms": 1e-3,
                 "elapsed_time_per_iteration_ms": 1e-3, "step_time": None, "iteration_time": None}
_PERCENT_COLUMNS = ("mfu_pct", "mfu_percent")
_MEM_UNITS = {"bytes": 1.0, "b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
              "kib": 2.0**10, "mib": 2.0**20, "gib": 2.0**30, "tib": 2.0**40}
_MEM_RE = re.compile(r"^(?:peak_|max_)?(?:gpu_)?(?:memory_)?(allocated|reserved|memory)(?:_([a-z]+))?$")

#: per-source readings of columns whose name does not say enough (matched against a YAML's ``source:``)
KNOWN_SOURCES: dict[str, dict[str, tuple[str, float, str]]] = {
    # The Ultra-Scale Playbook's figure data label memory "GB", but nanotron logs memory with
    # torch.cuda.max_memory_allocated()/max_memory_reserved() divided by 1024**2 (MiB), so the figures'
    # "GB" are GiB. Which peak is plotted is not stated; the largest successful run is 76.9 on an H100
    # (79.1 GiB usable) and none lies in 77-79 GiB, which fits the allocated peak (the reserved one
    # includes the caching allocator's slack and would reach the capacity). docs/runs-format.md.
    "hf_ultrascale_playbook": {
        "gpu_memory_gb": ("peak_allocated_bytes", 2.0**30,
                          "Ultra-Scale Playbook gpu_memory_gb read as peak allocated GiB (nanotron logs MiB)"),
    },
}


def _memory_column(key: str) -> tuple[str, float | None] | None:
    """'peak_reserved_gib' -> ('peak_reserved_bytes', 2**30); 'gpu_memory' -> ('peak_allocated_bytes', None)."""
    m = _MEM_RE.match(key)
    if not m:
        return None
    kind = "peak_reserved_bytes" if m.group(1) == "reserved" else "peak_allocated_bytes"
    unit = m.group(2)
    if unit is None:
        return kind, None
    return (kind, _MEM_UNITS[unit]) if unit in _MEM_UNITS else None


# ----------------------------------------------------------------------------- values

def _fail(where: str, msg: str) -> UserError:
    return UserError(f"{where}: {msg}")


def _int(value: Any, where: str, col: str, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise _fail(where, f"{col} must be an integer, got {value!r}")
    try:
        f = float(str(value).replace(",", "").strip()) if not isinstance(value, (int, float)) else float(value)
    except ValueError:
        raise _fail(where, f"{col} must be an integer, got {value!r}") from None
    if not math.isfinite(f) or f != int(f):
        raise _fail(where, f"{col} must be an integer, got {value!r}")
    if int(f) < minimum:
        raise _fail(where, f"{col} must be >= {minimum}, got {value!r}")
    return int(f)


def _float(value: Any, where: str, col: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _fail(where, f"{col} must be a number, got {value!r}")
    try:
        f = float(value.replace(",", "").strip()) if isinstance(value, str) else float(value)
    except ValueError:
        raise _fail(where, f"{col} must be a number, got {value!r}") from None
    if not math.isfinite(f) or f < 0:
        raise _fail(where, f"{col} must be a finite number >= 0, got {value!r}")
    return f


def _bool(value: Any, where: str, col: str) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("true", "yes", "on", "1"):
        return True
    if s in ("false", "no", "off", "0"):
        return False
    raise _fail(where, f"{col} must be true or false, got {value!r}")


def _choice(value: Any, names: tuple[str, ...], where: str, col: str) -> str:
    s = str(value).strip().lower()
    if col == "recompute" and s in ("", "null", "off", "false", "no"):
        s = "none"
    if col == "schedule" and s in ("pipedream_flush", "one_f_one_b", "1f1b_interleaved"):
        s = "1f1b" if s != "1f1b_interleaved" else "interleaved"
    if s not in names:
        raise _fail(where, f"{col} {value!r} is not one of: {', '.join(names)}")
    return s


def _status(value: Any, where: str) -> str:
    s = _key(value)
    if s in ("ok", "success", "succeeded", "completed", "done", "ran"):
        return "ok"
    if s in ("oom", "out_of_memory", "cuda_oom", "outofmemory", "oom_error"):
        return "oom"
    if s in ("crashed", "crash", "failed", "fail", "error", "crashed_or_oom", "oom_or_crashed", "did_not_run"):
        return "crashed"
    raise _fail(where, f"status {value!r} is not one of: ok, oom, crashed")


def _is_number(text: str) -> bool:
    """'1e30', '61.2', 'nan' read as numbers (float()); '61 GiB' does not."""
    try:
        float(text.replace(",", "").strip())
    except ValueError:
        return False
    return True


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and value.strip() == "")


# ----------------------------------------------------------------------------- one row -> run

@dataclass
class _Ctx:
    file: str
    base_dir: Path
    source: str | None = None                 # YAML 'source:'
    header: dict[str, Any] = field(default_factory=dict)   # YAML top-level keys other than runs/common
    unknown: dict[str, str] = field(default_factory=dict)  # column -> first 'file:line'


def _read_row(row: dict[str, Any], where: str, ctx: _Ctx) -> tuple[dict, dict, dict, list[str]]:
    """(layout, measured, meta, notes) from one table row; values typed and checked."""
    layout: dict[str, Any] = {}
    measured: dict[str, float] = {}
    meta: dict[str, Any] = {}
    notes: list[str] = []
    total_tps = None
    special = next((v for k, v in KNOWN_SOURCES.items() if ctx.source and str(ctx.source).startswith(k)), {})
    for raw_key, value in row.items():
        key = _key(raw_key)
        if not _present(value):
            continue
        if key in special:
            kind, scale, why = special[key]
            measured[kind] = _float(value, where, key) * scale
            if f"{where}: {why}" not in notes:
                notes.append(f"{where}: {why}")
            continue
        name = ALIASES.get(key)
        if name in LAYOUT_KEYS:
            if name in layout:
                raise _fail(where, f"{name} given twice (as {raw_key!r} and another spelling)")
            if name in DEGREES or name in ("gpus", "micro_batch", "global_batch", "microbatches", "seq",
                                           "virtual_stages", "recompute_layers"):
                layout[name] = _int(value, where, key)
            elif name == "offload_layers":
                layout[name] = _int(value, where, key, minimum=0)
            elif name == "recompute_modules":
                from llmpar.parallel import RECOMPUTE_MODULES

                items = value.split(",") if isinstance(value, str) else value
                if not isinstance(items, list) or not items:
                    raise _fail(where, f"recompute_modules must be a list of {', '.join(RECOMPUTE_MODULES)}, "
                                       f"got {value!r}")
                layout[name] = tuple(_choice(str(m).strip(), RECOMPUTE_MODULES, where, name) for m in items)
            elif name == "zero":
                layout[name] = _int(value, where, key, minimum=0)
                if layout[name] > 3:
                    raise _fail(where, f"zero must be 0, 1, 2 or 3, got {value!r}")
            elif name == "sp":
                layout[name] = _bool(value, where, key)
            elif name in ("tp_overlap", "dp_overlap", "ep_overlap"):
                layout[name] = _float(value, where, key)
                if layout[name] > 1:
                    raise _fail(where, f"{name} must be a fraction between 0 and 1, got {value!r}")
            else:
                names = {"recompute": RECOMPUTE, "schedule": SCHEDULES, "dtype": DTYPES, "optimizer": OPTIMIZERS,
                         "grad_dtype": GRAD_DTYPES, "ep_dispatcher": EP_DISPATCHERS}[name]
                layout[name] = _choice(value, names, where, name)
        elif key in ("row", "note", "citation"):
            meta[key] = str(value)
        elif key == "convention":
            meta["convention"] = _choice(str(value).strip(), CONVENTIONS, where, key)
        elif key == "mfu_peak_dtype":
            meta["mfu_peak_dtype"] = _choice(str(value).strip(), DTYPES, where, key)
        elif key == "memory_stage":
            meta["memory_stage"] = _choice(str(value).strip(), MEMORY_STAGES, where, key)
        elif name in ("model", "hardware", "log"):
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise _fail(where, f"{key} must be a string, got {value!r}")
            meta[name] = str(value).strip()
        elif name == "status":
            meta["status"] = _status(value, where)
        elif name == "tokens_per_s":
            total_tps = _float(value, where, key)
        elif name == "mfu":
            if isinstance(value, str) and value.strip().endswith("%"):
                measured["mfu"] = _float(value.strip()[:-1], where, key) / 100
            else:
                measured["mfu"] = _float(value, where, key)
                if measured["mfu"] > 1:
                    raise _fail(where, f"mfu {value!r} is above 1: give a fraction, or use an mfu_pct column")
        elif name in ("tokens_per_s_per_gpu", "tflops_per_gpu"):
            measured[name] = _float(value, where, key)
        elif key in _PERCENT_COLUMNS:
            measured["mfu"] = _float(value, where, key) / 100
            if measured["mfu"] > 1:
                raise _fail(where, f"{key} {value!r} is above 100 %")
        elif key in _TIME_COLUMNS:
            scale = _TIME_COLUMNS[key]
            if scale is None:
                if isinstance(value, (int, float)) or re.fullmatch(r"[\d.eE+-]+", str(value).strip()):
                    raise _fail(where, f"{key} {value!r} has no unit: name the column step_time_s / "
                                       f"step_time_ms or write e.g. '1.2 s'")
                try:
                    t = parse_seconds(str(value), key)
                except UserError as exc:
                    raise _fail(where, str(exc)) from None
            else:
                t = _float(value, where, key) * scale
            if t <= 0:
                raise _fail(where, f"{key} must be > 0, got {value!r}")
            measured["step_time_s"] = t
        elif (mem := _memory_column(key)) is not None:
            kind, scale = mem
            is_text = isinstance(value, str) and re.search(r"[A-Za-z]", value) and not _is_number(value)
            if is_text and scale is not None:
                raise _fail(where, f"{key} {value!r}: the column name already gives the unit")
            if is_text:
                try:
                    measured[kind] = parse_bytes(value, key, allow_zero=True)
                except UserError as exc:
                    raise _fail(where, str(exc)) from None
            elif scale is None:
                raise _fail(where, f"memory column {key!r} has no unit: name it e.g. {key}_gib / {key}_gb / "
                                   f"{key}_bytes, or write values like '61.2 GiB'")
            else:
                measured[kind] = _float(value, where, key) * scale
            if key.startswith(("gpu_memory", "memory", "peak_memory", "max_memory")) and not re.search(
                    r"allocated|reserved", key):
                notes.append(f"{where}: column {key!r} says neither allocated nor reserved: read as peak allocated")
        else:
            ctx.unknown.setdefault(str(raw_key), where)
    if total_tps is not None:
        gpus = layout.get("gpus")
        if gpus is None and all(k in layout for k in ("dp",)):
            gpus = layout["dp"] * layout.get("tp", 1) * layout.get("pp", 1) * layout.get("cp", 1)
        if "tokens_per_s_per_gpu" not in measured and gpus:
            measured["tokens_per_s_per_gpu"] = total_tps / gpus
        elif "tokens_per_s_per_gpu" in measured and gpus:
            per = total_tps / gpus
            if abs(per - measured["tokens_per_s_per_gpu"]) > 0.01 * max(per, 1e-9):
                notes.append(f"{where}: tokens_per_s / gpus = {per:.6g} differs from tokens_per_s_per_gpu "
                             f"{measured['tokens_per_s_per_gpu']:.6g}; kept the latter")
    _check_rates(measured, where, notes, meta.get("status", "ok") == "ok")
    return layout, measured, meta, notes


def _check_rates(measured: dict[str, float], where: str, notes: list[str], ran: bool = True) -> None:
    """MFU is a fraction of the peak, at most 1 (100 %), whichever column or log line gave it.
    A zero rate is no measurement (the step time it implies is infinite): published tables print
    a tiny MFU rounded to 0.0 % beside a real tokens/s (the playbook's TP-across-nodes runs), so a
    zero rate is dropped with a note when the row has another measurement, and refused when not
    (unless the run did not run: ``ran`` False, an OOM or crash row, needs no measurement)."""
    if measured.get("mfu", 0.0) > 1:
        raise _fail(where, f"mfu {measured['mfu']:.4g} is above 1 (100 % of the peak)")
    zero = [k for k in ("tokens_per_s_per_gpu", "tflops_per_gpu", "mfu") if measured.get(k) == 0]
    for key in zero:
        del measured[key]
    left = any(measured.get(k) for k in ("step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu"))
    if zero and ran and not left:
        raise _fail(where, f"{zero[0]} must be > 0, got 0 (a zero rate is no measurement)")
    if zero:
        notes.append(f"{where}: {', '.join(zero)} = 0 (rounded to zero?) is no measurement: not used")


def _check_layout(layout: dict[str, Any], where: str, notes: list[str]) -> dict[str, Any]:
    """Fill tp/pp/cp/dp/gpus and check they multiply (docs/architecture.md, CLI conventions)."""
    if not any(k in layout for k in ("gpus", "tp", "pp", "dp", "cp")):
        raise _fail(where, "no layout: give at least one of gpus, tp, pp, dp, cp (columns, or defaults)")
    out = dict(layout)
    for key, hi in (("gpus", MAX_GPUS), ("seq", MAX_SEQ), ("global_batch", MAX_BATCH), ("micro_batch", MAX_BATCH)):
        if out.get(key) is not None and out[key] > hi:    # the same bounds as the CLI's options
            raise _fail(where, f"{key}={out[key]:,} is beyond what llmpar models (at most {hi:,})")
    tp, pp, cp = out.setdefault("tp", 1), out.setdefault("pp", 1), out.setdefault("cp", 1)
    model_par = tp * pp * cp
    gpus, dp = out.get("gpus"), out.get("dp")
    if gpus is not None and dp is None:
        if gpus % model_par:
            raise _fail(where, f"gpus={gpus} is not divisible by tp*cp*pp = {tp}*{cp}*{pp} = {model_par}")
        out["dp"] = gpus // model_par
    elif gpus is None:
        out["dp"] = dp = dp or 1
        out["gpus"] = model_par * dp
    elif gpus != model_par * dp:
        raise _fail(where, f"gpus={gpus} disagrees with tp*cp*pp*dp = {tp}*{cp}*{pp}*{dp} = {model_par * dp}")
    dp = out["dp"]
    # the degree rules (ep, etp, virtual stages at pp 1, ...) are layout.layout_violations', applied
    # to every run with its file:line (calibrate/runs.py), in the words memory and step use
    v = out.get("virtual_stages")
    if v is not None and v > 1:
        if out.setdefault("schedule", "interleaved") != "interleaved":
            raise _fail(where, f"virtual_stages={v} needs schedule interleaved, got {out['schedule']}")
    b, gb, m = out.get("micro_batch"), out.get("global_batch"), out.get("microbatches")
    if gb is not None and b is not None:
        if gb % (b * dp):
            raise _fail(where, f"global_batch={gb} is not divisible by micro_batch*dp = {b}*{dp} = {b * dp}")
        if m is not None and m != gb // (b * dp):
            notes.append(f"{where}: microbatches={m} disagrees with global_batch/(micro_batch*dp) = {gb}/({b}*{dp}) = "
                         f"{gb // (b * dp)}; kept global_batch, dropped microbatches")
            del out["microbatches"]
    return out


def _check_log_shape(meta: dict, source: str) -> None:
    """A training log whose arguments block states another model's shape than ``--model`` is
    refused (reliability review, item 7: an 80-layer run was fitted as llama-3-8b's 32 layers)."""
    shape, name = meta.get("log_shape"), meta.get("model")
    if not shape or not name:
        return
    from llmpar.specs import load_model

    try:
        spec = load_model(str(name))
    except UserError:
        return                       # an unknown model is reported where runs are resolved
    have = {"layers": spec.layers, "hidden": spec.hidden, "heads": spec.heads}
    for key, (value, where) in shape.items():
        if have.get(key) != value:
            raise UserError(f"{where}: the log's model has {key} {value}, but the run's model {name} has "
                            f"{have[key]}: give the model the log trained (--model)")


def _make_run(source: str, layout: dict, measured: dict, meta: dict, notes: list[str],
              defaults: dict, defaults_layout: dict) -> MeasuredRun:
    merged = dict(defaults_layout)
    for k, v in layout.items():
        if k in defaults_layout and defaults_layout[k] != v:
            notes.append(f"{source}: the input says {k}={v}; the default {k}={defaults_layout[k]} not used")
        merged[k] = v
    for k, v in defaults.items():
        meta.setdefault(k, v)
    checked = _check_layout(merged, source, notes)
    _check_log_shape(meta, source)
    for k, v in measured.items():  # logs too: a log can print nonsense
        if not math.isfinite(v) or v < 0 or (k == "step_time_s" and v == 0):
            raise _fail(source, f"{k} = {v!r} is not a usable measurement")
        if k in ("peak_allocated_bytes", "peak_reserved_bytes") and v > MAX_MEMORY_BYTES:
            raise _fail(source, f"{k} = {v:.3g} bytes is an implausible size, more than any GPU holds (llmpar "
                                f"reads at most {MAX_MEMORY_BYTES / 1e12:g} TB): check the unit")
    extra = {k: meta[k] for k in ("convention", "mfu_peak_dtype", "memory_stage", "row", "stack", "metric") if k in meta}
    return MeasuredRun(
        source=source, model=meta.get("model"), hardware=meta.get("hardware"),
        layout={k: checked[k] for k in LAYOUT_KEYS if k in checked}, status=meta.get("status", "ok"),
        notes=tuple(notes), **{k: measured.get(k) for k in MEASURED_KEYS}, **extra,
    )


# ----------------------------------------------------------------------------- files

def _display(path: Path) -> str:
    return str(path)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a runs table or a training log") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None


def _decode_strict(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(f"{name}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def _table_rows_csv(text: str, name: str) -> list[tuple[str, dict]]:
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise UserError(f"{name}:{line}: NUL byte in a CSV file")
    # '#' comment lines are allowed above and between rows; rows keep the file's line numbers
    numbered = [(i, ln) for i, ln in enumerate(text.split("\n"), start=1) if not ln.lstrip().startswith("#")]
    first = next(((i, ln) for i, ln in numbered if ln.strip()), None)
    if first is not None and "," not in first[1]:
        for sep, what in (("\t", "tabs"), (";", "semicolons")):
            if sep in first[1]:
                # reliability review, item 26: the header read as one column, named in no message
                raise UserError(f"{name}:{first[0]}: the header is separated by {what}; llmpar reads comma-separated "
                                "CSV (or a YAML runs table): replace the separators with commas")
    reader = csv.reader(ln for _, ln in numbered)
    header: list[str] | None = None
    out = []
    consumed = 0
    try:
        for row in reader:
            lineno = numbered[consumed][0]
            consumed = reader.line_num
            if not any(c.strip() for c in row):
                continue
            if header is None:
                header = [c.strip() for c in row]
                dup = sorted({h for h in header if header.count(h) > 1 and h})
                if dup or "" in header:
                    what = f"column {dup[0]!r} appears twice" if dup else "an empty column name"
                    raise UserError(f"{name}:{lineno}: {what} in the header")
                continue
            if len(row) != len(header):
                raise UserError(f"{name}:{lineno}: {len(row)} fields, the header has {len(header)}")
            out.append((f"{name}:{lineno}", dict(zip(header, row))))
    except csv.Error as exc:
        raise UserError(f"{name}:{numbered[min(consumed, len(numbered) - 1)][0]}: CSV: {exc}") from None
    if header is None:
        raise UserError(f"{name}:1: empty runs table (no header row)")
    return out


def _table_rows_jsonl(text: str, name: str) -> list[tuple[str, dict]]:
    out = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            obj = json.loads(s, object_pairs_hook=_unique_pairs)
        except _DuplicateKey as exc:
            raise UserError(f"{name}:{lineno}: JSON: {exc}") from None
        except (json.JSONDecodeError, RecursionError) as exc:
            raise UserError(f"{name}:{lineno}: not a JSON object: {getattr(exc, 'msg', exc)}") from None
        if not isinstance(obj, dict):
            raise UserError(f"{name}:{lineno}: expected a JSON object per line, got {type(obj).__name__}")
        out.append((f"{name}:{lineno}", obj))
    return out


def _json_error(text: str, name: str) -> UserError | None:
    """A ``.json`` table that YAML could not read: JSON's own error, with its line (None: valid JSON)."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return UserError(f"{name}:{exc.lineno}: JSON: {exc.msg}")
    except (RecursionError, ValueError) as exc:
        return UserError(f"{name}: JSON: {exc}")
    return None


def _table_rows_yaml(text: str, name: str, ctx: _Ctx, notes: list[str],
                     fmt: str = "YAML") -> tuple[list[tuple[str, dict]], dict]:
    # the spec files' loader: a key given twice in a mapping is refused, with its line (PyYAML
    # would keep the last one silently)
    from llmpar.specs.reading import MAX_YAML_VALUES, _expands_beyond, _UniqueKeyLoader

    try:
        loader = _UniqueKeyLoader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        if fmt == "JSON" and (err := _json_error(text, name)) is not None:
            raise err from None
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark else 1
        what = "YAML" if fmt == "YAML" else "JSON/YAML"   # a .json file is read as YAML (JSON is YAML)
        raise UserError(f"{name}:{line}: {what}: {getattr(exc, 'problem', None) or exc}") from None
    except (RecursionError, ValueError, TypeError) as exc:
        raise UserError(f"{name}: {'YAML' if fmt == 'YAML' else 'JSON/YAML'}: {exc}") from None
    if _expands_beyond(data, MAX_YAML_VALUES):      # the spec reader's bound (specs/registry.py read_yaml)
        raise UserError(f"{name}: its YAML aliases expand to more than {MAX_YAML_VALUES:,} values (an alias bomb?): "
                        "refused")
    common: dict = {}
    if isinstance(data, list):
        runs, runs_node = data, node
    elif isinstance(data, dict):
        runs = data.get("runs")
        runs_node = next((v for k, v in node.value if getattr(k, "value", None) == "runs"), None)
        for key in ("common", "defaults"):
            if key in data and data[key] is not None:
                if not isinstance(data[key], dict):
                    raise UserError(f"{name}: '{key}:' must be a mapping")
                common.update(data[key])
        ctx.source = data.get("source") if isinstance(data.get("source"), str) else None
        for key in data:
            if key in _HEADER_KEYS:
                ctx.header[key] = data[key]
            elif key not in ("runs", "common", "defaults", "source", "about", "description", "notes", "left_out"):
                notes.append(f"{name}: top-level key {key!r} not used")
    else:
        raise UserError(f"{name}:1: expected a mapping with a 'runs:' list")
    if not isinstance(runs, list) or not isinstance(runs_node, yaml.SequenceNode):
        raise UserError(f"{name}:1: no 'runs:' list")
    out = []
    for item, item_node in zip(runs, runs_node.value):
        where = f"{name}:{item_node.start_mark.line + 1}"
        if not isinstance(item, dict):
            raise UserError(f"{where}: a run must be a mapping, got {type(item).__name__}")
        out.append((where, item))
    return out, common


# top-level keys of a runs YAML (validation/README.md): defaults for every row, and a record of the source
_HEADER_KEYS = ("hardware", "stack", "metric", "convention", "flops_convention", "url", "models", "mfu_peak_dtype",
                "memory_stage")


def _inline_models(models: Any, name: str) -> dict[str, Any]:
    """A runs file's 'models:' mapping -> validated ModelSpec objects (same rules as models/*.yaml)."""
    from llmpar.specs.model import ModelSpec
    from llmpar.specs.reading import validate

    if not isinstance(models, dict):
        raise UserError(f"{name}: 'models:' must map model names to their shapes")
    from llmpar.specs.registry import _lookup

    out = {}
    for mname, spec in models.items():
        if not isinstance(spec, dict):
            raise UserError(f"{name}: models.{mname} must be a mapping of ModelSpec fields")
        if _lookup("models", str(mname).lower()) is not None:
            # reliability review, item 8: every row then said the shipped name of another model
            raise UserError(f"{name}: models.{mname} has the name of a shipped model (or alias): name the inline model "
                            "otherwise, or drop it to use the shipped one")
        out[str(mname)] = validate(ModelSpec, {"name": str(mname), **spec}, f"{name} (models.{mname})")
    return out


def _common_known(common: dict, name: str, notes: list[str]) -> dict:
    """Keys of ``common:`` that are known columns; the rest (descriptions) are noted."""
    known = {}
    for k, v in common.items():
        key = _key(k)
        if key in ALIASES or key in _PERCENT_COLUMNS or key in _TIME_COLUMNS or _memory_column(key) or key == "memory_stage":
            known[k] = v
        else:
            notes.append(f"{name}: common key {k!r} is not a column; not applied")
    return known


_LOG_SNIFF = re.compile(r"elapsed time per iteration|train_step_timing|step:\s*\d+\s+loss:")


def _kind(path: Path, data: bytes) -> str:
    ext = path.suffix.lower()
    if ext == ".csv":
        return "csv"
    if ext in (".jsonl", ".ndjson"):
        return "jsonl"
    if ext in (".yaml", ".yml", ".json"):
        return "yaml"
    head = data[:4096].lstrip()
    if head.startswith(b"{") and not _LOG_SNIFF.search(data[:65536].decode("utf-8", "replace")):
        return "jsonl"
    return "log"


def _read_log_file(path: Path, data: bytes, name: str) -> tuple[dict, dict, dict, list[str], str]:
    if b"\x00" in data[:8192]:
        raise UserError(f"{name}:1: binary file, not a training log")
    text = data.decode("utf-8", errors="replace")
    log = read_log(text, name)
    if log.iterations == 0 and log.status != "oom":
        raise UserError(f"{name}: no iteration lines (not a Megatron-LM, NeMo or torchtitan training log, "
                        f"or the run never reached its first logged iteration)")
    source = f"{name}:{log.line}"
    # the layout a log states goes through the same typing and checks as a table row's
    layout, _, _, more = _read_row(log.layout, source, _Ctx(file=name, base_dir=path.parent))
    _check_rates(log.measured, source, more, log.status == "ok")
    # the framework a log comes from names the stack its run used (calibrate runs' default base)
    stack = {"megatron": "megatron-core", "nemo": "megatron-core", "torchtitan": "torchtitan"}.get(log.kind)
    meta = {"status": log.status, **({"stack": stack} if stack else {}),
            **({"memory_stage": log.memory_stage} if log.memory_stage else {}),
            **({"log_shape": dict(log.shape)} if log.shape else {})}
    return layout, log.measured, meta, log.notes + more, source


def _norm_defaults(defaults: dict | None) -> tuple[dict, dict]:
    """defaults -> (layout, meta); same names, aliases and checks as a table row."""
    if not defaults:
        return {}, {}
    ctx = _Ctx(file="defaults", base_dir=Path("."))
    layout, measured, meta, _ = _read_row(dict(defaults), "defaults", ctx)
    bad = sorted(ctx.unknown) or sorted(measured) or sorted(k for k in meta if k not in ("model", "hardware"))
    if bad:
        raise UserError(f"defaults: {bad[0]!r} is not a layout option, model or hardware"
                        f"{suggest(_key(bad[0]), LAYOUT_KEYS)}")
    return layout, meta


def read_runs(paths: Iterable[str | Path], *, defaults: dict | None = None) -> RunsRead:
    """Read runs tables and training logs into :class:`MeasuredRun` records (module docstring).

    ``defaults`` (CLI option names or any accepted alias, plus ``model``/``hardware``) fill what a row
    or a log does not state; what the input states wins.
    """
    d_layout, d_meta = _norm_defaults(defaults)
    result = RunsRead()
    for p in paths:
        path = Path(p)
        name = _display(path)
        data = _read_bytes(path)
        kind = _kind(path, data)
        if kind == "log":
            layout, measured, meta, notes, source = _read_log_file(path, data, name)
            run = _make_run(source, layout, measured, meta, notes, d_meta, d_layout)
            result.runs.append(run)
            result.notes.extend(run.notes)
            continue
        text = _decode_strict(data, name)
        ctx = _Ctx(file=name, base_dir=path.parent)
        file_notes: list[str] = []
        common: dict = {}
        if kind == "csv":
            rows = _table_rows_csv(text, name)
        elif kind == "jsonl":
            rows = _table_rows_jsonl(text, name)
        else:
            rows, common = _table_rows_yaml(text, name, ctx, file_notes,
                                            "JSON" if path.suffix.lower() == ".json" else "YAML")
            common = _common_known(common, name, file_notes)
        if not rows:
            raise UserError(f"{name}: no runs in the table")
        head = ctx.header
        if "models" in head:
            result.models.update(_inline_models(head["models"], name))
        # top-level 'convention' is the source's own words (a record); 'flops_convention' is the
        # machine-readable default of the rows' 'convention' (full | causal | hardware)
        file_defaults = {k: head[k] for k in ("hardware", "mfu_peak_dtype", "memory_stage") if k in head}
        if "flops_convention" in head:
            file_defaults["convention"] = head["flops_convention"]
        # a bad file-wide default is the header's fault: say so there, not at the first row
        for key, names in (("memory_stage", MEMORY_STAGES), ("mfu_peak_dtype", DTYPES),
                           ("convention", CONVENTIONS)):
            if key in file_defaults:
                _choice(str(file_defaults[key]).strip(), names, f"{name}: top level",
                        "flops_convention" if key == "convention" else key)
        result.files.append({"path": name, "source": ctx.source, **{k: head[k] for k in head if k != "models"}})
        for where, row in rows:
            merged = {**file_defaults, **common, **row}
            layout, measured, meta, notes = _read_row(merged, where, ctx)
            if head.get("stack") is not None:
                meta["stack"] = str(head["stack"])
            if head.get("metric") is not None:
                meta["metric"] = str(head["metric"])
            if "log" in meta:
                layout, measured = _merge_log(ctx, meta.pop("log"), where, layout, measured, meta, notes)
            run = _make_run(where, layout, measured, meta, notes, d_meta, d_layout)
            result.runs.append(run)
            result.notes.extend(run.notes)
        for col, where in ctx.unknown.items():
            file_notes.append(f"{where}: column {col!r} is not a known column; ignored "
                              f"(first seen here){suggest(_key(col), ALIASES)}")
        result.notes.extend(file_notes)
    return result


def _merge_log(ctx: _Ctx, rel: str, where: str, layout: dict, measured: dict, meta: dict,
               notes: list[str]) -> tuple[dict, dict]:
    """A row's ``log:`` column: the log's measurements fill the row's; its layout must agree."""
    path = Path(rel) if Path(rel).is_absolute() else ctx.base_dir / rel
    if not path.is_file():
        raise _fail(where, f"log {rel!r} not found (paths are relative to the table file)")
    llayout, lmeasured, lmeta, lnotes, lsource = _read_log_file(path, _read_bytes(path), _display(path))
    out_layout = dict(layout)
    for k, v in llayout.items():
        if k in layout and layout[k] != v:
            raise _fail(where, f"{k}={layout[k]} but its log {lsource} says {k}={v}")
        out_layout.setdefault(k, v)
    out_measured = dict(measured)
    for k, v in lmeasured.items():
        if k in measured:
            notes.append(f"{where}: {k} given in the row; the log's {v:.6g} ({lsource}) not used")
        else:
            out_measured[k] = v
    if lmeta.get("status") == "oom" and "status" not in meta:
        meta["status"] = "oom"
    if "memory_stage" in lmeta and "memory_stage" not in meta:   # whose peak the log's memory is
        meta["memory_stage"] = lmeta["memory_stage"]
    notes.extend(lnotes)
    return out_layout, out_measured
