"""The one rule for every file llmpar writes (``--out``, ``--markdown --out``): never over an input.

* :func:`check_out` refuses, before any work is done, an output path that is one of the command's
  inputs: a log or runs file it reads, or any file of the ``extends:`` chain of the spec it
  extends (``calibrate fit --hardware my.yaml --out my.yaml`` used to overwrite ``my.yaml`` with a
  file that extends itself; reliability review, item 1).
* :func:`write_spec` writes a spec atomically and only once it is valid: to a temporary file in
  the output's folder (so a relative ``extends:`` resolves as it will), loaded back as every
  command will load it, then renamed over the output (``os.replace``: a reader sees the old file
  or the new one, never half of one); a spec that does not load leaves the output untouched.
* :func:`write_text` is the atomic write alone, for files that are not specs.
* Both refuse, at the moment of writing, a path this process has read as a spec, a model config or
  a runs table (:data:`llmpar.specs.reading.READ_FILES`): an input that no option named — the base
  of a ``--hardware`` file's ``extends:`` chain, a profile a runs table's column names, the model
  file of ``calibrate gemm --model`` — is as safe as one that was (reliability review, item 1, closed
  as a class: ``calibrate runs runs.csv --out base.yaml`` overwrote the hardware profile the table's
  rows extend).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from llmpar.errors import UserError


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b) or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def check_out(out: Path | str | None, *, inputs: Iterable[Path | str] = (), spec_kind: str | None = None,
              spec: str | None = None, option: str = "--out") -> None:
    """UserError when ``out`` is one of ``inputs`` or a file of ``spec``'s extends chain."""
    if out is None:
        return
    if not str(out).strip():   # Path("") is "." and had reached the writer: "PosixPath('.') has an empty name"
        raise UserError(f"{option}: an empty path: name the file to write")
    out = Path(out)
    if out.is_dir():
        raise UserError(f"{option} {out} is a folder: name the file to write in it")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():      # every --out writes into an existing folder: said before any work
        raise UserError(f"cannot write {out}: no folder {parent} (llmpar creates none)")
    try:   # the folder takes a file (the writer's own temp-and-rename needs it): said before any work
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".llmpar-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:   # validate --html /proc/v.html ran the whole validation first
        raise UserError(f"cannot write {out}: {parent} takes no new file ({exc.strerror})") from None
    for p in inputs:
        if _same(out, Path(p)):
            raise UserError(f"{option} {out} is one of the files this command reads: write the result to another file")
    refuse_read(out, option)   # and the files read so far (a runs table's profiles, a chain's bases)
    if spec_kind is not None and spec is not None and not hasattr(spec, "model_dump"):
        from llmpar.specs.registry import spec_chain

        for p in spec_chain(spec_kind, str(spec)):
            if _same(out, p):
                what = {"hardware": "hardware profile", "stacks": "stack", "engines": "engine"}.get(spec_kind, spec_kind)
                raise UserError(f"{option} {out} is the {what} it extends ({p}), or in its extends: chain: writing "
                                "it would overwrite the base with a file that extends itself; write to another file")


def refuse_same_outputs(outputs: dict[str, Path | str | None]) -> None:
    """Two output options of one command naming one file (``--out x.svg --plot x.svg``): refused,
    since the second write would silently replace the first (fuzz review: calibrate runs reported
    writing both). ``outputs``: option -> path or None."""
    given = [(o, Path(p)) for o, p in outputs.items() if p is not None and str(p).strip()]
    for i, (a, pa) in enumerate(given):
        for b, pb in given[i + 1:]:
            if _same(pa, pb):
                raise UserError(f"{a} and {b} both name {pa}: give each output its own file")


def spec_inputs(*specs) -> list[Path]:
    """The files the specs ``(kind, name or path)`` are read from, each with its ``extends:`` chain
    (kind None: a plain file such as an HF config), for :func:`check_out`'s ``inputs``."""
    from llmpar.specs.registry import spec_chain

    out: list[Path] = []
    for kind, v in specs:
        if not isinstance(v, (str, Path)) or not str(v):
            continue
        if kind is None:
            out += [Path(v)] if Path(v).is_file() else []
        else:
            out += spec_chain(kind, str(v))
    return out


def check_out_folder(out: Path | str, option: str = "--out") -> None:
    """UserError, before any work, when the folder ``out`` (created by the writer if absent, as
    ``calibrate bench --out`` does) cannot take new files: it is a file, or it or its nearest
    existing parent refuses a new entry (reliability review item 24: ``--out /proc/x`` surfaced as
    torchrun's banner)."""
    if not str(out).strip():
        raise UserError(f"{option}: an empty path: name the folder to write into")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{option} {out} is a file, not a folder")
    probe_in = out
    while not probe_in.exists():
        probe_in = probe_in.parent if str(probe_in.parent) not in ("", str(probe_in)) else Path(".")
        if probe_in == Path("."):
            break
    try:
        d = tempfile.mkdtemp(dir=probe_in, prefix=".llmpar-probe-")
        os.rmdir(d)
    except OSError as exc:
        raise UserError(f"cannot write into {out}: {probe_in} takes no new folder or file ({exc.strerror})") from None


def refuse_read(out: Path | str, option: str = "--out") -> None:
    """UserError when this process has read ``out`` as an input (module docstring)."""
    from llmpar.specs.reading import READ_FILES

    if os.path.realpath(out) in READ_FILES:
        raise UserError(f"{option} {out} is a file this command read (a spec, model config or runs table, or a "
                        "file in the extends: chain of one): write the result to another file")


def write_text(out: Path | str, text: str, option: str = "--out") -> Path:
    """``text`` to ``out`` through a temporary file in the same folder and a rename."""
    out = Path(out)
    if not out.name or out.is_dir():   # "" (click reads it as "."), a folder: no file name to write
        raise UserError(f"{option} {out} is a folder: name the file to write in it")
    refuse_read(out, option)
    tmp = out.with_name(f".{out.name}.llmpar-{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None
    return out


def write_spec(out: Path | str, text: str, kind: str) -> Path:
    """A spec YAML (``kind`` "hardware", "stacks" or "engines") to ``out``, only once it loads."""
    from llmpar.specs import load_hardware, load_stack
    from llmpar.specs.registry import load_engine

    out = Path(out)
    refuse_read(out)
    tmp = out.with_name(f".{out.stem}.llmpar-{os.getpid()}.tmp.yaml")
    try:
        tmp.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None
    try:
        {"hardware": load_hardware, "engines": load_engine}.get(kind, load_stack)(str(tmp))
        os.replace(tmp, out)
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return out
