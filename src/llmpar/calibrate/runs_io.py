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
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llmpar.calibrate.runs_record import (ALIASES, CONVENTIONS, LAYOUT_KEYS, MEMORY_STAGES, PERCENT_COLUMNS,
                                          TIME_COLUMNS, MeasuredRun, column_key, memory_column)
from llmpar.calibrate.runs_row import RowContext, check_rates, choice_of, make_run, read_row
from llmpar.calibrate.train_logs import read_log
from llmpar.errors import UserError, suggest
from llmpar.parallel import DTYPES
from llmpar.specs.reading import loads_json   # the one JSON reader


@dataclass
class RunsRead:
    runs: list[MeasuredRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # every skipped line or column, as 'file:line: ...'
    models: dict[str, Any] = field(default_factory=dict)   # inline 'models:' specs (name -> ModelSpec)
    files: list[dict[str, Any]] = field(default_factory=list)  # per file: path, source, url, stack, metric, ...


# ----------------------------------------------------------------------------- files

def _display(path: Path) -> str:
    return str(path)


def _read_bytes(path: Path) -> bytes:
    from llmpar.specs.reading import note_read

    try:
        data = path.read_bytes()
        note_read(path)      # a writer then refuses it, as every file this process read (llmpar.outputs)
        return data
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
    if first is not None and first[1].lstrip().startswith("|"):
        # a Markdown table pasted from a page or an issue: its '|' cells read as one column each line
        raise UserError(f"{name}:{first[0]}: a Markdown table ('| a | b |'); llmpar reads comma-separated CSV (or a YAML "
                        "runs table): write the cells separated by commas, without the '|' borders and the '---' line")
    # tab-separated (a spreadsheet's "copy", a .tsv) is unambiguous: read as such
    delimiter = "\t" if first is not None and "," not in first[1] and "\t" in first[1] else ","
    if first is not None and "," not in first[1] and delimiter == ",":
        # a semicolon file may write decimal commas (8,05): refused rather than guessed
        for sep, what in ((";", "semicolons"), ("|", "'|' bars")):
            if sep in first[1]:
                # reliability review, item 26: the header read as one column, named in no message
                raise UserError(f"{name}:{first[0]}: the header is separated by {what}; llmpar reads comma-separated "
                                "CSV (or a YAML runs table): replace the separators with commas")
    reader = csv.reader((ln for _, ln in numbered), delimiter=delimiter)
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
        obj = loads_json(s, name, "JSON (a runs table line)", line=lineno)
        if not isinstance(obj, dict):
            raise UserError(f"{name}:{lineno}: expected a JSON object per line, got {type(obj).__name__}")
        out.append((f"{name}:{lineno}", obj))
    return out


def _json_error(text: str, name: str) -> UserError | None:
    """A ``.json`` table that YAML could not read: JSON's own error, with its line (None: valid JSON)."""
    try:
        loads_json(text, name, "JSON (a runs table)")
    except UserError as exc:
        return exc
    return None


def _table_rows_yaml(text: str, name: str, ctx: RowContext, notes: list[str],
                     fmt: str = "YAML") -> tuple[list[tuple[str, dict]], dict]:
    # the spec files' loader: a key given twice in a mapping is refused, with its line (PyYAML
    # would keep the last one silently)
    from llmpar.specs.reading import MAX_YAML_VALUES, expands_beyond, UniqueKeyLoader

    try:
        loader = UniqueKeyLoader(text)
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
    if expands_beyond(data, MAX_YAML_VALUES):      # the spec reader's bound (specs/registry.py read_yaml)
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
    from llmpar.specs.registry import spec_lookup

    out = {}
    for mname, spec in models.items():
        if not isinstance(spec, dict):
            raise UserError(f"{name}: models.{mname} must be a mapping of ModelSpec fields")
        if spec_lookup("models", str(mname).lower()) is not None:
            # reliability review, item 8: every row then said the shipped name of another model
            raise UserError(f"{name}: models.{mname} has the name of a shipped model (or alias): name the inline model "
                            "otherwise, or drop it to use the shipped one")
        out[str(mname)] = validate(ModelSpec, {"name": str(mname), **spec}, f"{name} (models.{mname})")
    return out


def _common_known(common: dict, name: str, notes: list[str]) -> dict:
    """Keys of ``common:`` that are known columns; the rest (descriptions) are noted."""
    known = {}
    for k, v in common.items():
        key = column_key(k)
        if key in ALIASES or key in PERCENT_COLUMNS or key in TIME_COLUMNS or memory_column(key) or key == "memory_stage":
            known[k] = v
        else:
            notes.append(f"{name}: common key {k!r} is not a column; not applied")
    return known


_LOG_SNIFF = re.compile(r"elapsed time per iteration|train_step_timing|step:\s*\d+\s+loss:")


def _kind(path: Path, data: bytes) -> str:
    ext = path.suffix.lower()
    if ext in (".csv", ".tsv"):
        return "csv"     # a .tsv is a table too (tab-separated headers are read as such)
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
    layout, _, _, more = read_row(log.layout, source, RowContext(file=name, base_dir=path.parent))
    check_rates(log.measured, source, more, log.status == "ok")
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
    # the CLI's defaults come from --layout, --model and --hardware: errors name them as typed
    where = "--layout/--model/--hardware"
    ctx = RowContext(file=where, base_dir=Path("."))
    layout, measured, meta, _ = read_row(dict(defaults), where, ctx)
    bad = sorted(ctx.unknown) or sorted(measured) or sorted(k for k in meta if k not in ("model", "hardware"))
    if bad:
        raise UserError(f"--layout: {bad[0]!r} is not a layout option, model or hardware"
                        f"{suggest(column_key(bad[0]), LAYOUT_KEYS)}")
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
            run = make_run(source, layout, measured, meta, notes, d_meta, d_layout)
            result.runs.append(run)
            result.notes.extend(run.notes)
            continue
        text = _decode_strict(data, name)
        ctx = RowContext(file=name, base_dir=path.parent)
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
                choice_of(str(file_defaults[key]).strip(), names, f"{name}: top level",
                        "flops_convention" if key == "convention" else key)
        if head.get("stack") is not None:   # the table's stack, named where it is written ('stack: 5' had not been)
            _check_stack(head["stack"], f"{name}: top level")
        result.files.append({"path": name, "source": ctx.source, **{k: head[k] for k in head if k != "models"}})
        for where, row in rows:
            merged = {**file_defaults, **common, **row}
            layout, measured, meta, notes = read_row(merged, where, ctx)
            if head.get("stack") is not None:
                meta["stack"] = str(head["stack"])
            if head.get("metric") is not None:
                meta["metric"] = str(head["metric"])
            if "log" in meta:
                layout, measured = _merge_log(ctx, meta.pop("log"), where, layout, measured, meta, notes)
            run = make_run(where, layout, measured, meta, notes, d_meta, d_layout)
            result.runs.append(run)
            result.notes.extend(run.notes)
        for col, where in ctx.unknown.items():
            file_notes.append(f"{where}: column {col!r} is not a known column; ignored "
                              f"(first seen here){suggest(column_key(col), ALIASES)}")
        result.notes.extend(file_notes)
    result.notes.extend(_conflicting_repeats(result.runs))
    return result


def _check_stack(value, where: str) -> None:
    """A table's ``stack:``: the name (or path) of a stack llmpar loads, refused with its place."""
    from llmpar.specs.registry import load_stack

    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: stack must be a stack name (`llmpar stacks`) or a stack YAML path, got {value!r}")
    try:
        load_stack(value)
    except UserError as exc:
        raise UserError(f"{where}: stack {value!r}: {exc}") from None


REPEAT_SPREAD = 1.25   # repeats of one run within 25 % are run-to-run noise; beyond it, a slip or two setups


def _conflicting_repeats(runs) -> list[str]:
    """Rows that describe the same run (model, hardware, stack and every layout key) but measured it
    more than 1.25x apart: both are fitted (repeats are evidence), and the note names them, since
    6.5 s beside 13 s is a slip or two setups the table does not tell apart (fuzz review)."""
    groups: dict[tuple, list] = {}
    for r in runs:
        speed = r.step_time_s or (1.0 / r.tokens_per_s_per_gpu if r.tokens_per_s_per_gpu else None)
        if r.status == "ok" and speed:
            key = (r.model, r.hardware, r.stack, tuple(sorted((k, str(v)) for k, v in r.layout.items())))
            groups.setdefault(key, []).append((speed, r.source))
    out = []
    for rows in groups.values():
        lo, hi = min(rows), max(rows)
        if len(rows) > 1 and hi[0] > REPEAT_SPREAD * lo[0]:
            out.append(f"{lo[1]} and {hi[1]}: the same run measured {hi[0] / lo[0]:.2f}x apart (step time or "
                       "1/tokens per second); both are fitted: if one is a slip, fix or drop it")
    return out


def _merge_log(ctx: RowContext, rel: str, where: str, layout: dict, measured: dict, meta: dict,
               notes: list[str]) -> tuple[dict, dict]:
    """A row's ``log:`` column: the log's measurements fill the row's; its layout must agree."""
    path = Path(rel) if Path(rel).is_absolute() else ctx.base_dir / rel
    if not path.is_file():
        raise UserError(f"{where}: log {rel!r} not found (paths are relative to the table file)")
    llayout, lmeasured, lmeta, lnotes, lsource = _read_log_file(path, _read_bytes(path), _display(path))
    out_layout = dict(layout)
    for k, v in llayout.items():
        if k in layout and layout[k] != v:
            raise UserError(f"{where}: {k}={layout[k]} but its log {lsource} says {k}={v}")
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
