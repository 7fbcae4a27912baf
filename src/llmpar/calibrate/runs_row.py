"""One runs-table row (or a log's parsed lines) into one checked :class:`MeasuredRun`.

Every value is typed and checked where it is read (integers, fractions, choices, step times and
peak memory with their units; docs/runs-format.md, "Columns"), the layout's degrees must multiply,
and a bad value raises :class:`~llmpar.errors.UserError` naming ``file:line``. Used by
:mod:`llmpar.calibrate.runs_io`; nothing here reads a file or prints.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmpar.calibrate.runs_record import (ALIASES, CONVENTIONS, DEGREES, KNOWN_SOURCES, LAYOUT_KEYS, MEASURED_KEYS,
                                          MEMORY_STAGES, PERCENT_COLUMNS, TIME_COLUMNS, MeasuredRun, column_key,
                                          memory_column)
from llmpar.calibrate.train_logs import MAX_MEMORY_BYTES
from llmpar.errors import UserError
from llmpar.parallel import (DTYPES, EP_DISPATCHERS, GRAD_DTYPES, MAX_BATCH, MAX_GPUS, MAX_SEQ, OPTIMIZERS, RECOMPUTE,
                             SCHEDULES)
from llmpar.units import parse_bytes, parse_seconds, text_float


# ----------------------------------------------------------------------------- values

def _fail(where: str, msg: str) -> UserError:
    return UserError(f"{where}: {msg}")


def _int(value: Any, where: str, col: str, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise _fail(where, f"{col} must be an integer, got {value!r}")
    try:
        f = text_float(str(value).replace(",", "").strip()) if not isinstance(value, (int, float)) else float(value)
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
        f = text_float(value.replace(",", "").strip()) if isinstance(value, str) else float(value)
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


def choice_of(value: Any, names: tuple[str, ...], where: str, col: str) -> str:
    """One of ``names``, case-insensitively (and the spellings of none and 1F1B that frameworks print)."""
    s = str(value).strip().lower()
    if col == "recompute" and s in ("", "null", "off", "false", "no"):
        s = "none"
    if col == "schedule" and s in ("pipedream_flush", "one_f_one_b", "1f1b_interleaved"):
        s = "1f1b" if s != "1f1b_interleaved" else "interleaved"
    if s not in names:
        raise _fail(where, f"{col} {value!r} is not one of: {', '.join(names)}")
    return s


def _status(value: Any, where: str) -> str:
    s = column_key(value)
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
class RowContext:
    """Where a row comes from: its file and folder, the YAML's source and header, unknown columns seen."""

    file: str
    base_dir: Path
    source: str | None = None                 # YAML 'source:'
    header: dict[str, Any] = field(default_factory=dict)   # YAML top-level keys other than runs/common
    unknown: dict[str, str] = field(default_factory=dict)  # column -> first 'file:line'



class _Once(dict):
    """A row's measurements and record fields while its columns are read: each set once, so two
    columns for one figure (`step_time_s` and `step_time_ms`, `mfu` and `mfu_pct`, `model` and
    `Model`) are refused with the row's place, as a layout knob given twice is; the last one had won
    silently (a fuzz sweep, 2026-12-04)."""

    def __init__(self, where: str):
        super().__init__()
        self.where = where

    def __setitem__(self, key, value):
        if key in self:
            raise _fail(self.where, f"{key} given twice (two columns name it): keep one")
        super().__setitem__(key, value)


def read_row(row: dict[str, Any], where: str, ctx: RowContext) -> tuple[dict, dict, dict, list[str]]:
    """(layout, measured, meta, notes) from one table row; values typed and checked."""
    layout: dict[str, Any] = {}
    measured: dict[str, float] = _Once(where)
    meta: dict[str, Any] = _Once(where)
    notes: list[str] = []
    total_tps = None
    special = next((v for k, v in KNOWN_SOURCES.items() if ctx.source and str(ctx.source).startswith(k)), {})
    for raw_key, value in row.items():
        key = column_key(raw_key)
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
            layout[name] = _layout_value(name, key, value, where)
        elif _read_meta(key, name, value, where, meta):
            pass
        elif name == "tokens_per_s":
            total_tps = _float(value, where, key)
        elif not _read_measured(key, name, value, where, measured, notes):
            ctx.unknown.setdefault(str(raw_key), where)
    measured, meta = dict(measured), dict(meta)
    if total_tps is not None:
        _per_gpu_rate(total_tps, layout, measured, where, notes)
    check_rates(measured, where, notes, meta.get("status", "ok") == "ok")
    return layout, measured, meta, notes


def _layout_value(name: str, key: str, value: Any, where: str) -> Any:
    """One layout column's value (``name``: its CLI option name), typed and checked."""
    if name in DEGREES or name in ("gpus", "micro_batch", "global_batch", "microbatches", "seq",
                                   "virtual_stages", "recompute_layers"):
        return _int(value, where, key)
    if name == "offload_layers":
        return _int(value, where, key, minimum=0)
    if name == "recompute_modules":
        from llmpar.parallel import RECOMPUTE_MODULES

        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list) or not items:
            raise _fail(where, f"recompute_modules must be a list of {', '.join(RECOMPUTE_MODULES)}, "
                               f"got {value!r}")
        return tuple(choice_of(str(m).strip(), RECOMPUTE_MODULES, where, name) for m in items)
    if name == "zero":
        zero = _int(value, where, key, minimum=0)
        if zero > 3:
            raise _fail(where, f"zero must be 0, 1, 2 or 3, got {value!r}")
        return zero
    if name == "sp":
        return _bool(value, where, key)
    if name in ("tp_overlap", "dp_overlap", "ep_overlap"):
        fraction = _float(value, where, key)
        if fraction > 1:
            raise _fail(where, f"{name} must be a fraction between 0 and 1, got {value!r}")
        return fraction
    names = {"recompute": RECOMPUTE, "schedule": SCHEDULES, "dtype": DTYPES, "optimizer": OPTIMIZERS,
             "grad_dtype": GRAD_DTYPES, "ep_dispatcher": EP_DISPATCHERS}[name]
    return choice_of(value, names, where, name)


def _read_meta(key: str, name: str | None, value: Any, where: str, meta: dict[str, Any]) -> bool:
    """A row's record columns (row, convention, model, hardware, log, status ...) into ``meta``;
    False when the column is none of them."""
    if key in ("row", "note", "citation"):
        meta[key] = str(value)
    elif key == "convention":
        meta["convention"] = choice_of(str(value).strip(), CONVENTIONS, where, key)
    elif key == "mfu_peak_dtype":
        meta["mfu_peak_dtype"] = choice_of(str(value).strip(), DTYPES, where, key)
    elif key == "memory_stage":
        meta["memory_stage"] = choice_of(str(value).strip(), MEMORY_STAGES, where, key)
    elif name in ("model", "hardware", "log"):
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise _fail(where, f"{key} must be a string, got {value!r}")
        meta[name] = str(value).strip()
    elif name == "status":
        meta["status"] = _status(value, where)
    else:
        return False
    return True


def _read_measured(key: str, name: str | None, value: Any, where: str, measured: dict[str, float],
                   notes: list[str]) -> bool:
    """A row's measurement columns (MFU, rates, step time, peak memory) into ``measured``; False
    when the column is none of them."""
    if name == "mfu":
        if isinstance(value, str) and value.strip().endswith("%"):
            measured["mfu"] = _float(value.strip()[:-1], where, key) / 100
        else:
            measured["mfu"] = _float(value, where, key)
            if measured["mfu"] > 1:
                raise _fail(where, f"mfu {value!r} is above 1: give a fraction, or use an mfu_pct column")
    elif name in ("tokens_per_s_per_gpu", "tflops_per_gpu"):
        measured[name] = _float(value, where, key)
    elif key in PERCENT_COLUMNS:
        measured["mfu"] = _float(value, where, key) / 100
        if measured["mfu"] > 1:
            raise _fail(where, f"{key} {value!r} is above 100 %")
    elif key in TIME_COLUMNS:
        measured["step_time_s"] = _step_time(key, value, where)
    elif (mem := memory_column(key)) is not None:
        _read_memory(key, value, mem, where, measured, notes)
    else:
        return False
    return True


def _step_time(key: str, value: Any, where: str) -> float:
    """A time column's value in seconds: by the column's unit, or the unit the value carries."""
    scale = TIME_COLUMNS[key]
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
    return t


def _read_memory(key: str, value: Any, mem: tuple[str, float | None], where: str, measured: dict[str, float],
                 notes: list[str]) -> None:
    """A peak-memory column's value in bytes: by the column's unit, or the unit the value carries."""
    kind, scale = mem
    is_text = isinstance(value, str) and re.search(r"[A-Za-z]", value) and not _is_number(value)
    if is_text and scale is not None:
        raise _fail(where, f"{key} {value!r}: the column name already gives the unit")
    if is_text:
        try:
            size = parse_bytes(value, key, allow_zero=True)
        except UserError as exc:
            raise _fail(where, str(exc)) from None
        measured[kind] = size
    elif scale is None:
        raise _fail(where, f"memory column {key!r} has no unit: name it e.g. {key}_gib / {key}_gb / "
                           f"{key}_bytes, or write values like '61.2 GiB'")
    else:
        measured[kind] = _float(value, where, key) * scale
    if key.startswith(("gpu_memory", "memory", "peak_memory", "max_memory")) and not re.search(
            r"allocated|reserved", key):
        notes.append(f"{where}: column {key!r} says neither allocated nor reserved: read as peak allocated")


def _per_gpu_rate(total_tps: float, layout: dict[str, Any], measured: dict[str, float], where: str,
                  notes: list[str]) -> None:
    """A row's total tokens/s as tokens/s per GPU (or, beside a per-GPU figure, checked against it)."""
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


def check_rates(measured: dict[str, float], where: str, notes: list[str], ran: bool = True) -> None:
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


def make_run(source: str, layout: dict, measured: dict, meta: dict, notes: list[str],
             defaults: dict, defaults_layout: dict) -> MeasuredRun:
    """One checked :class:`MeasuredRun` from a row's (or log's) parts, the defaults filling what it leaves out."""
    merged = dict(defaults_layout)
    for k, v in layout.items():
        if k in defaults_layout and defaults_layout[k] != v:
            notes.append(f"{source}: the input says {k}={v}; the default {k}={defaults_layout[k]} not used")
        merged[k] = v
    for k, v in defaults.items():
        meta.setdefault(k, v)
    checked = _check_layout(merged, source, notes)
    _check_log_shape(meta, source)
    for k, v in list(measured.items()):  # logs too: a log can print nonsense
        if not math.isfinite(v) or v < 0 or (k == "step_time_s" and v == 0):
            raise _fail(source, f"{k} = {v!r} is not a usable measurement")
        if k in ("peak_allocated_bytes", "peak_reserved_bytes") and v > MAX_MEMORY_BYTES:
            raise _fail(source, f"{k} = {v:.3g} bytes is an implausible size, more than any GPU holds (llmpar "
                                f"reads at most {MAX_MEMORY_BYTES / 1e12:g} TB): check the unit")
        if k in ("peak_allocated_bytes", "peak_reserved_bytes") and v == 0:   # had been dropped unsaid
            del measured[k]
            notes.append(f"{source}: {k} = 0 is no measurement (no run fits in no memory): not used")
    status = meta.get("status", "ok")
    if status != "ok" and measured:   # an OOM/crash row's figures had become '-' unsaid
        notes.append(f"{source}: status {status} beside measured {', '.join(sorted(measured))}: a run that did not "
                     "complete is compared by its verdict only; those figures are not used")
    extra = {k: meta[k] for k in ("convention", "mfu_peak_dtype", "memory_stage", "row", "stack", "metric") if k in meta}
    return MeasuredRun(
        source=source, model=meta.get("model"), hardware=meta.get("hardware"),
        layout={k: checked[k] for k in LAYOUT_KEYS if k in checked}, status=meta.get("status", "ok"),
        notes=tuple(notes), **{k: measured.get(k) for k in MEASURED_KEYS}, **extra,
    )

