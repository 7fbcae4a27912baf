"""Read (and write) nccl-tests / rccl-tests output.

Formats read (all checked against the printing code of github:NVIDIA/nccl-tests, src/common.cu and
src/util.cu, and github:ROCm/rccl-tests; the parser is written from those formats, not copied):

- current text layout: ``size count type redop root`` then an out-of-place and an in-place block of
  ``time algbw busbw #wrong`` (``#wrong`` is ``%6g`` of the wrong-element count, or ``N/A`` when
  the data check is off, and for all-to-all in place);
- older layouts (before NCCL 2.13, 2022): a per-collective subset of ``redop``/``root`` columns and
  an ``error`` column printed like ``0e+00`` (the maximum deviation, not a count);
- ``-C 1`` (the time column is ``cputime``), ``-I 1`` (four per-iteration columns after each block:
  ``i_min i_max i_p99 i_cv%``), ``-S 1`` (a ``YYYY-MM-DD HH:MM:SS`` timestamp at the end of a row),
  trace-replay rows whose out-of-place block is blank;
- launcher noise: ``mpirun --tag-output`` prefixes (``[1,0]<stdout>:``), ``srun --label`` prefixes
  (`` 0: ``), NCCL INFO/WARN lines, rccl version blocks, any other line that is not a row;
- the JSON written by ``-J FILE`` (nccl-tests >= 2.17, ``version`` 3: ``config.devices``,
  ``results[].{size,count,type,redop,root,out_of_place,in_place}``).

What a log states is taken as stated (``# Collective test starting/concluded: NAME_perf``, the
``#  Rank N Group G Pid P on HOST device D [BUS] NAME`` device list, NCCL INFO ``rank r nranks N``
lines); what it lacks is inferred from the rows and the inference is reported in ``inferred``
(field -> how) and ``notes``. Sizes follow nccl-tests: ``size`` is max(send, receive) bytes per rank,
so for all-gather/reduce-scatter/all-to-all/gather/scatter ``size = count x typesize x ranks``.

algbw = size / time and busbw = algbw x factor are the nccl-tests definitions (doc/PERFORMANCE.md;
``*GetBw`` in src/*.cu); :func:`busbw_factor` states the factor once.

The code is split by concern; this module is the public entry point and re-exports the names
other modules import from it:

- :mod:`.nccl_records`: result objects (Measurement, Row, Device, ParsedLog), names, type sizes;
- :mod:`.nccl_text`: the text layouts; :mod:`.nccl_json`: the ``-J`` JSON;
- :mod:`.nccl_infer`: what the log lacks, inferred and reported (:mod:`.nccl_from_rows`: what the rows alone say);
- :mod:`.nccl_write`: the nccl-tests text layout, written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from llmpar.calibrate.nccl_infer import finish
from llmpar.calibrate.nccl_json import scan_json
from llmpar.calibrate.nccl_records import (
    GATHERED, PROGRAMS, TYPE_BYTES, Device, Measurement, ParsedLog, Row, busbw_factor, normalize_collective,
)
from llmpar.calibrate.nccl_text import scan_text
from llmpar.calibrate.nccl_write import format_block, format_row, header_lines, to_text
from llmpar.cost.collectives import COLLECTIVES
from llmpar.errors import UserError

__all__ = [
    "COLLECTIVES", "GATHERED", "PROGRAMS", "TYPE_BYTES", "Device", "Measurement", "ParsedLog", "Row", "busbw_factor",
    "format_block", "format_row", "header_lines", "normalize_collective", "parse_file", "parse_files", "parse_text",
    "to_text",
]


# ----------------------------------------------------------------------------- public API

def _check_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in overrides.items() if v is not None}
    if "collective" in out:
        out["collective"] = normalize_collective(out["collective"])
    if "gpu" in out and not str(out["gpu"]).strip():
        raise UserError("--gpu is empty: give the GPU's name (e.g. H100), or leave the option out")
    for key in ("ranks", "nodes"):
        if key in out and (not isinstance(out[key], int) or out[key] < 1):
            raise UserError(f"--{key} must be a positive integer, got {out[key]!r}")
    if "ranks" in out and "nodes" in out and out["ranks"] % out["nodes"]:
        raise UserError(f"--ranks {out['ranks']} is not a multiple of --nodes {out['nodes']}")
    return out


def parse_text(text: str, file: str = "<text>", *, collective: str | None = None, ranks: int | None = None,
               nodes: int | None = None, gpu: str | None = None) -> list[ParsedLog]:
    """Parse one log (text or -J JSON). Returns one :class:`ParsedLog` per table in it.

    Bad input (empty, truncated, garbled) raises :class:`UserError` naming ``file:line``.
    """
    overrides = _check_overrides({"collective": collective, "ranks": ranks, "nodes": nodes, "gpu": gpu})
    if not text.strip():
        raise UserError(f"{file}:1: empty log")
    if text.lstrip().startswith("{"):
        scanned = scan_json(text, file)
    else:
        scanned = scan_text(text, file)
    out = []
    for sec, meta in scanned:
        if not sec.rows:
            if sec.columns is not None:
                raise UserError(f"{file}:{sec.columns.line}: table header but no result rows after it (truncated log?)")
            continue
        out.append(finish(sec, meta, file, len(out), overrides))
    if not out:
        n = scanned[0][1]["nlines"] if scanned else 0
        raise UserError(f"{file}:{n}: no nccl-tests result rows in {n} lines (not an nccl-tests log?)")
    return out


def parse_file(path: str | Path, **overrides) -> list[ParsedLog]:
    p = Path(path)
    try:
        data = p.read_bytes()
    except IsADirectoryError:
        raise UserError(f"{p}: is a directory, expected an nccl-tests log") from None
    except OSError as exc:
        raise UserError(f"cannot read {p}: {exc.strerror or exc}") from None
    if b"\x00" in data[:4096]:
        raise UserError(f"{p}:1: binary file, not an nccl-tests log")
    text = data.decode("utf-8", errors="replace")
    return parse_text(text, str(p), **overrides)


def parse_files(paths: Iterable[str | Path], **overrides) -> list[ParsedLog]:
    out: list[ParsedLog] = []
    for p in paths:
        out.extend(parse_file(p, **overrides))
    return out
