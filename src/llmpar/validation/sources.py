"""The shipped validation sources as files: their names, the path of one, its descriptive header
and its runs, each parsed once per process while the file is unchanged (``llmpar validate``).

Split out of validation/core.py, which evaluates them. The files are ``validation/*.yaml``, shipped
as ``llmpar/data/validation`` (validation/README.md gives the format); the runs reader is
:func:`llmpar.calibrate.runs_io.read_runs`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmpar.errors import UserError, suggest
from llmpar.validation.common import validation_dir


def source_names() -> list[str]:
    """The shipped sources (file stems of ``validation/*.yaml``)."""
    return sorted(p.stem for p in validation_dir().glob("*.yaml"))


def resolve_source(name: str) -> Path:
    """The path of the shipped source ``name`` (a file stem, .yaml optional); one line if unknown."""
    names = source_names()
    key = name.strip().removesuffix(".yaml").removesuffix(".yml")
    if key not in names:
        raise UserError(f"unknown validation source {name!r}{suggest(key, names)}; one of: {', '.join(names)}")
    return validation_dir() / f"{key}.yaml"


_HEADER_CACHE: dict[tuple[str, int, int], dict[str, Any]] = {}


def header_text(path: Path) -> dict[str, Any]:
    """The file's descriptive header (about, left_out), which the runs reader does not keep: the
    YAML above the top-level ``runs:`` key (the whole file if there is none); parsed once per
    process while the file is unchanged (a copy goes out)."""
    st = Path(path).stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _HEADER_CACHE:
        _HEADER_CACHE[key] = _parse_header(Path(path))
    return dict(_HEADER_CACHE[key])


def _parse_header(path: Path) -> dict[str, Any]:
    import yaml

    text = path.read_text(encoding="utf-8")
    cut = text.find("\nruns:")
    try:
        data = yaml.safe_load(text[:cut] if cut >= 0 else text)
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


_READ_CACHE: dict[tuple[str, int, int], Any] = {}


def read_source(path):
    """read_runs([path]), parsed once per process while the file is unchanged: validate reads a
    fitted source once as shipped and again per cross-validation fold (the playbook's 1,127-run
    YAML takes about a second to parse). Each caller gets its own lists and layout dicts (the
    other fields of a MeasuredRun are immutable values), so no caller's change reaches another."""
    import dataclasses

    from llmpar.calibrate.runs_io import RunsRead, read_runs

    st = Path(path).stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _READ_CACHE:
        if len(_READ_CACHE) > 64:
            _READ_CACHE.clear()
        _READ_CACHE[key] = read_runs([path])
    r = _READ_CACHE[key]
    return RunsRead(runs=[dataclasses.replace(m, layout=dict(m.layout)) for m in r.runs], notes=list(r.notes),
                    models=dict(r.models), files=[dict(f) for f in r.files])


def memo_key(source, limit, cross_validate, level) -> tuple | None:
    """The key under which a process keeps a validation of the shipped stacks (validation/core.py:
    `validate` takes seconds, and the README, docs/validation.md and the trust tests ask for the
    same one): (source names, limit, cross_validate, level, the state of every shipped
    validation, stack, hardware, model and engine file, specs.reading.shipped_files_state); None
    where it cannot be formed (an unknown source: the run itself says so)."""
    from llmpar.specs.reading import shipped_files_state

    try:
        names = tuple(source_names() if source is None else dict.fromkeys(
            resolve_source(s).stem for s in ([source] if isinstance(source, str) else source)))
        return names, limit, bool(cross_validate), float(level), shipped_files_state()
    except Exception:       # noqa: BLE001 - a key that cannot be formed is a miss, never an error
        return None
