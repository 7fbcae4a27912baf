"""nccl-tests / rccl-tests text output -> :class:`Section` objects (split from ``nccl_tests``).

Every layout the module docstring of :mod:`llmpar.calibrate.nccl_tests` lists. Lines that are
neither a row, a header, a comment nor a known NCCL/launcher line are skipped with a note naming
file and line (an MPI launcher interleaves its own messages with the table).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, NamedTuple

from llmpar.calibrate.nccl_records import Columns, Device, Measurement, Row, Section, printable
from llmpar.errors import UserError


_MPI_PREFIX = re.compile(r"^\[\d+,(\d+)\]<(?:stdout|stderr)>:\s?")
_SRUN_PREFIX = re.compile(r"^\s*(\d+):\s")
_INT = re.compile(r"^-?\d+$")
_NUM = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^[-+]?(?:nan|inf)$", re.IGNORECASE)
_OLD_ERR = re.compile(r"^\d(?:\.\d*)?e[-+]\d+$")
_DATE = re.compile(r"^\d{4}-\d\d-\d\d$")
_CLOCK = re.compile(r"^\d\d:\d\d:\d\d$")
_DEVICE = re.compile(
    r"^Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?(?:Pid\s+(\d+)\s+)?on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_NCCL_LINE = re.compile(r"^(\S+?):(\d+):(\d+)\s+\[(\d+)\]\s+NCCL\s+(INFO|WARN|TRACE)\b\s*(.*)$")
_RANK_NRANKS = re.compile(r"\brank\s+(\d+)\s+nranks\s+(\d+)")
_TIME_NAMES = ("time", "cputime")
_PER_ITER = {"i_min": "min_us", "i_max": "max_us", "i_p99": "p99_us", "i_cv%": "cv_pct"}


class _RowError(ValueError):
    pass


def _strip_prefix(raw: str) -> tuple[str | None, str]:
    m = _MPI_PREFIX.match(raw)
    if m:
        return m.group(1), raw[m.end():]
    m = _SRUN_PREFIX.match(raw)
    if m:
        return m.group(1), raw[m.end():]
    return None, raw


def _resolution(tok: str) -> float:
    """Half a unit of the last printed digit: '12.25' -> 0.005, '18289' -> 0.5, '1.2e+03' -> 50."""
    t = tok.lower()
    mant, _, exp = t.partition("e")
    dec = len(mant.split(".")[1]) if "." in mant else 0
    e = int(exp) - dec if exp else -dec
    return 0.5 * 10.0 ** max(min(e, 300), -300)   # '1e999' (inf when read) must not overflow here


def _number(tok: str, what: str) -> float:
    if not _NUM.match(tok):
        raise _RowError(f"cannot read {what} {tok!r}")
    v = float(tok)
    if v < 0:
        raise _RowError(f"{what} {tok!r} is negative")
    return v   # nan / inf are read as printed; nccl_infer flags the row (never used, never silent)


def _parse_header(content: str, lineno: int) -> Columns | None:
    body = content.lstrip()[1:]
    toks = body.split()
    if len(toks) < 4 or toks[0] != "size" or toks[1] != "count":
        return None
    names = toks[3:] if toks[2] == "type" else toks[2:]
    timestamp = bool(names) and names[-1] == "timestamp"
    if timestamp:
        names = names[:-1]
    starts = [i for i, n in enumerate(names) if n in _TIME_NAMES]
    if not starts:
        return None
    lead = names[: starts[0]]
    blocks = [names[a:b] for a, b in zip(starts, starts[1:] + [len(names)])]
    time_ends = [m.end() for m in re.finditer(r"\S+", content) if m.group() in _TIME_NAMES]
    return Columns(lead=lead, blocks=blocks, time_ends=time_ends, timestamp=timestamp, line=lineno)


def _parse_block(toks: list[str], names: list[str], time_scale: float) -> Measurement:
    vals: dict[str, Any] = {}
    res = [0.0, 0.0, 0.0]
    m = Measurement(0.0, 0.0, 0.0)
    per_iter: dict[str, float] = {}
    for name, tok in zip(names, toks):
        if name in _TIME_NAMES:
            m.time_us = _number(tok, "time") * time_scale
            m.cputime = name == "cputime"
            res[0] = _resolution(tok) * time_scale
        elif name == "algbw":
            m.algbw_GBps = _number(tok, "algbw")
            res[1] = _resolution(tok)
        elif name == "busbw":
            m.busbw_GBps = _number(tok, "busbw")
            res[2] = _resolution(tok)
        elif name in ("#wrong", "wrong", "error"):
            if tok.upper() == "N/A":
                continue
            v = _number(tok.rstrip("*"), name)
            if name == "error" or (name != "#wrong" and _OLD_ERR.match(tok)):
                m.max_error = v
            else:
                m.wrong = v
        elif name in _PER_ITER:
            per_iter[_PER_ITER[name]] = _number(tok, name) * (1.0 if name == "i_cv%" else time_scale)
        else:
            vals[name] = tok
    m.per_iter = per_iter or None
    m.resolution = tuple(res)  # type: ignore[assignment]
    return m


_DEFAULT_BLOCK = ["time", "algbw", "busbw", "#wrong"]
_DEFAULT_BLOCK_I = _DEFAULT_BLOCK + list(_PER_ITER)


class _Split(NamedTuple):
    """A row's columns after size, count and type: its redop and root, and the value columns."""

    redop: str | None
    root: int | None
    body: list[str]
    body_spans: list[tuple[str, int, int]]
    block_names: list[list[str]]
    want: int


def _parse_row(content: str, sec: Section, lineno: int, label: str | None) -> Row:
    """One result row of a table: by the header's columns, or by the row's shape where there is none."""
    spans = [(m.group(), m.start(), m.end()) for m in re.finditer(r"\S+", content)]
    toks = [s[0] for s in spans]
    timestamp = None
    if len(toks) >= 2 and _DATE.match(toks[-2]) and _CLOCK.match(toks[-1]):
        timestamp = f"{toks[-2]} {toks[-1]}"
        toks, spans = toks[:-2], spans[:-2]
    if len(toks) < 3:
        raise _RowError(f"truncated row: {len(toks)} column(s)")
    if not (_INT.match(toks[0]) and _INT.match(toks[1])):
        raise _RowError("size and count must be integers")
    size, count = int(toks[0]), int(toks[1])
    dtype = toks[2]
    if _NUM.match(dtype):
        raise _RowError(f"expected a data type in column 3, found {dtype!r}")
    rest, rest_spans = toks[3:], spans[3:]
    if sec.columns is not None:
        split = _split_by_header(sec.columns, rest, rest_spans)
    else:
        split = _split_by_shape(rest, rest_spans)
    oop, inp = _measurements(split, sec, spans, toks)
    return Row(size_bytes=size, count=count, type=dtype, redop=split.redop, root=split.root,
               out_of_place=oop, in_place=inp, line=lineno, timestamp=timestamp, label=label)


def _split_by_header(cols: Columns, rest: list[str], rest_spans: list) -> _Split:
    """The columns as the table's header names them: redop/root, then the blocks."""
    redop: str | None = None
    root: int | None = None
    lead = cols.lead
    body = rest[len(lead):]
    body_spans = rest_spans[len(lead):]
    for name, tok in zip(lead, rest[: len(lead)]):
        if name == "redop":
            redop = tok
        elif name == "root":
            if not _INT.match(tok):
                raise _RowError(f"root {tok!r} is not an integer")
            root = int(tok)
    block_names = cols.blocks
    want = sum(len(b) for b in block_names)
    return _Split(redop, root, body, body_spans, block_names, want)


def _split_by_shape(rest: list[str], rest_spans: list) -> _Split:
    """A headerless row: redop where a word stands, root and the blocks from the column count."""
    redop: str | None = None
    root: int | None = None
    if rest and not _NUM.match(rest[0]):
        redop = rest[0]
        rest, rest_spans = rest[1:], rest_spans[1:]
    n = len(rest)
    block_names = None
    has_root = False
    for width, names in ((4, _DEFAULT_BLOCK), (8, _DEFAULT_BLOCK_I)):
        for nblocks in (2, 1):
            if n in (nblocks * width, nblocks * width + 1):
                block_names = [names] * nblocks
                has_root = n == nblocks * width + 1
                break
        if block_names:
            break
    if block_names is None:
        raise _RowError(f"cannot split {n} value columns into out-of-place/in-place blocks")
    if has_root:
        if not _INT.match(rest[0]):
            raise _RowError(f"root {rest[0]!r} is not an integer")
        root = int(rest[0])
        rest, rest_spans = rest[1:], rest_spans[1:]
    body, body_spans = rest, rest_spans
    want = sum(len(b) for b in block_names)
    if len(block_names) == 1:
        want = len(body)  # one block present: decided below
    return _Split(redop, root, body, body_spans, block_names, want)


def _measurements(split: _Split, sec: Section, spans: list,
                  toks: list[str]) -> tuple[Measurement | None, Measurement | None]:
    """The out-of-place and in-place measurements of a row (either may be blank)."""
    body, body_spans, block_names, want = split.body, split.body_spans, split.block_names, split.want
    cols = sec.columns
    oop = inp = None
    if len(body) == want and len(block_names) == 2:
        w0 = len(block_names[0])
        oop = _parse_block(body[:w0], block_names[0], sec.time_scale)
        inp = _parse_block(body[w0:], block_names[1], sec.time_scale)
    elif len(block_names) == 1 and len(body) == len(block_names[0]) and cols is not None:
        oop = _parse_block(body, block_names[0], sec.time_scale)
    elif len(body) in (len(block_names[-1]), len(block_names[0])) and body_spans:
        # one block blank (nccl-tests prints blanks for an out-of-place block it did not run):
        # which one is told by where the time column ends, against the header (or a wide gap)
        names = block_names[0]
        end = body_spans[0][2]
        if cols is not None and len(cols.time_ends) >= 2:
            in_place_only = abs(end - cols.time_ends[1]) < abs(end - cols.time_ends[0])
        else:
            prev_end = spans[len(spans) - len(body) - 1][2]
            in_place_only = body_spans[0][1] - prev_end > 24
        m = _parse_block(body, names, sec.time_scale)
        if in_place_only:
            inp = m
        else:
            oop = m
    else:
        ncols = 3 + (len(cols.lead) if cols else 0) + sum(len(b) for b in block_names)
        raise _RowError(f"expected {ncols} columns, found {len(toks)} (truncated or garbled row)")
    return oop, inp


def _comment(body: str, sec: Section, content: str, lineno: int, new_section) -> Section:
    m = re.match(r"Collective test starting:\s*(\S+)", body)
    if m:
        sec = new_section(force=bool(sec.rows) or sec.stated is not None)
        sec.stated, sec.stated_line = printable(m.group(1)), lineno
        return sec
    m = re.match(r"Collective test concluded:\s*(\S+)", body)
    if m:
        if sec.stated is None:
            sec.stated, sec.stated_line = printable(m.group(1)), lineno
        sec.concluded = True
        return sec
    m = re.match(r"nThread\s+(\d+)\s+nGpus\s+(\d+)", body)
    if m:
        sec = new_section(force=bool(sec.rows))
        sec.nthread, sec.ngpus = int(m.group(1)), int(m.group(2))
        return sec
    if body.startswith("Using devices"):
        return new_section(force=bool(sec.rows))
    m = _DEVICE.match(body)
    if m:
        sec = new_section(force=bool(sec.rows))
        rank, group, pid, host, dev, bus, name = m.groups()
        sec.devices.append(Device(rank=int(rank), host=host, device=int(dev), name=name,
                                  group=int(group or 0), pid=int(pid) if pid else None, bus=bus))
        return sec
    cols = _parse_header(content, lineno)
    if cols is not None:
        sec = new_section(force=bool(sec.rows))
        sec.columns = cols
        return sec
    if body.startswith("(B)"):
        toks = body.split()
        if "(ms)" in toks:
            sec.time_scale = 1e3
        return sec
    m = re.match(r"Out of bounds values\s*:\s*(\d+)\s*(\w*)", body)
    if m:
        sec.oob = (int(m.group(1)), m.group(2))
        return sec
    m = re.match(r"Avg bus bandwidth\s*:\s*(\S+)", body)
    if m:
        try:
            sec.avg_busbw = float(m.group(1))
        except ValueError:
            pass
        sec.footer = True
        return sec
    m = re.match(r"nccl-tests version\s+(\S+)", body)
    if m:
        sec.library.setdefault("tests", f"nccl-tests {m.group(1)}")
    return sec


_WORD = re.compile(r"^[A-Za-z]")
_NOT_WORDS = {"n/a", "nan", "inf", "-nan", "+inf", "-inf"}


def _row_shaped(toks: list[str]) -> bool:
    """Could this line be an nccl-tests row (then a defect in it is an error), or is it someone
    else's line (``8 more processes have sent help message help-mtl-ofi.txt / OFI call fail``,
    an NCCL INFO/WARN line in an unexpected shape)? A row starts with two integers (size, count)
    and has at most two words (type, redop); everything else is numbers, N/A or a timestamp."""
    if not toks or not _INT.match(toks[0]) or "NCCL" in toks:
        return False
    if len(toks) >= 2 and not _INT.match(toks[1]):
        return False
    words = [t for t in toks[2:] if _WORD.match(t) and t.lower() not in _NOT_WORDS]
    return len(words) <= 2


def scan_text(text: str, file: str) -> list[tuple[Section, dict[str, Any]]]:
    """Lines -> sections (one per table). Line numbers count ``\n`` only, as editors and
    ``grep -n`` do (``str.splitlines`` would also split at form feeds and other separators)."""
    sections: list[Section] = [Section()]
    labels: list[Counter] = [Counter()]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()

    def new_section(force: bool) -> Section:
        if force:
            sections.append(Section())
            labels.append(Counter())
        return sections[-1]

    sec = sections[0]
    for lineno, raw in enumerate(lines, 1):
        label, content = _strip_prefix(raw.rstrip("\r\n"))
        s = content.strip()
        if not s:
            continue
        if s.startswith("#"):
            sec = _comment(s[1:].strip(), sec, content, lineno, new_section)
            continue
        m = _NCCL_LINE.match(s)
        if m:
            host, _pid, _tid, dev, kind, msg = m.groups()
            sec.info_hosts.setdefault(host, set()).add(int(dev))
            rn = _RANK_NRANKS.search(msg)
            if rn:
                sec.info_rank_host[int(rn.group(1))] = host
                sec.info_nranks.add(int(rn.group(2)))
            v = re.match(r"NCCL version\s+(\S+)", msg)
            if v:
                sec.library.setdefault("nccl", v.group(1))
            if kind == "WARN":
                sec.warns.append(msg)
            continue
        m = re.match(r"NCCL version\s+(\S+)", s)
        if m:
            sec.library.setdefault("nccl", m.group(1))
            continue
        m = re.match(r"RCCL version\s*:\s*(\S+)", s)
        if m:
            sec.library["rccl"] = m.group(1)
            continue
        m = re.match(r"rccl-tests:\s*Version\s+(\S+)", s)
        if m:
            sec.library["tests"] = f"rccl-tests {m.group(1)}"
            continue
        toks = s.split()
        if not _row_shaped(toks):
            if sec.in_table():   # launcher / library output interleaved with the table: say so
                sec.skipped.append((lineno, s if len(s) <= 80 else s[:77] + "..."))
            continue             # before a table: launcher / application noise
        strict = sec.in_table() or (
            len(toks) >= 3 and not _NUM.match(toks[2]) and re.match(r"^[A-Za-z][\w]*$", toks[2]) is not None)
        if not strict:
            continue
        if sec.footer or sec.concluded:
            sec = new_section(force=True)
        try:
            row = _parse_row(content, sec, lineno, label)
        except _RowError as exc:
            what = "truncated" if lineno == len(lines) and not text.endswith("\n") else "garbled"
            raise UserError(f"{file}:{lineno}: {what} nccl-tests row: {exc}") from None
        sec.rows.append(row)
        labels[-1 if sec is sections[-1] else sections.index(sec)][label] += 1
    return [(s, {"labels": lab, "nlines": len(lines)}) for s, lab in zip(sections, labels)]
