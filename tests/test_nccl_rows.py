"""nccl-tests rows that are not measurements, and lines that are not rows (issue 9, item 5).

Before the fix: an `inf` time was read as a measurement (a 1 GiB row then entered fit and check
at -100 %); a zero-time row was dropped by `usable_rows` without a word; a launcher line inside
the table that starts with a number (`8 more processes have sent help message ...`) aborted the
whole parse as a "garbled row". Now: foreign lines are skipped with a note naming file:line;
rows without a positive finite time are flagged (kept, not used by fit/check) with a note naming
file:line and the reason; nothing is dropped silently.

Inputs: the real published log 09 (16 x A100, 31 rows, ../shared/validation/nccl-logs, read in
place) mutated in memory, and the -J fixture.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SHARED
from llmpar.calibrate.nccl_tests import parse_file, parse_text
from llmpar.errors import UserError

FIX = Path(__file__).parent / "fixtures" / "nccl"
LOG09 = SHARED / "validation" / "nccl-logs" / "09-a100-40gbx16-2node-roce-oke-allreduce-ocihpcoke.txt"
needs_real = pytest.mark.skipif(not LOG09.is_file(), reason="../shared/validation/nccl-logs not present")

# log 09, line 51: the 1 GiB row (out-of-place time 9187.8 us, in-place 9073.4 us)
ROW_1GIB = 51


def _lines():
    return LOG09.read_text().split("\n")


def _parse(lines, name="log09.txt"):
    logs = parse_text("\n".join(lines), name)
    assert len(logs) == 1
    return logs[0]


@needs_real
def test_real_log_as_published():
    log = _parse(_lines())
    assert len(log.rows) == 31 and len(log.usable_rows()) == 31
    assert not any("skipped" in n or "without a usable" in n for n in log.notes)


@needs_real
@pytest.mark.parametrize("foreign", [
    "8 more processes have sent help message help-mtl-ofi.txt / OFI call fail",
    "[1,3]<stderr>:8 more processes have sent help message help-mtl-ofi.txt / OFI call fail",
    "12 NCCL WARN NET/OFI Unable to find a protocol",           # an NCCL line in an unexpected shape
    "NCCL INFO comm 0x55d1 rank 0 nranks 16 - Init COMPLETE",    # no host:pid:tid prefix
    "Set \"orte_base_help_aggregate\" to 0 to see all help / error messages",
    "\ufffd\ufffd\x07 garbage",
])
def test_foreign_line_inside_table_is_skipped_with_a_note(foreign):
    lines = _lines()
    lines.insert(40, foreign)              # after line 40 (the 512 KiB row), before the 1 MiB row
    log = _parse(lines)
    assert len(log.rows) == 31 and len(log.usable_rows()) == 31   # no row lost
    note = next(n for n in log.notes if n.startswith("skipped 1 line"))
    assert "log09.txt:41" in note


@needs_real
def test_many_foreign_lines_are_counted():
    lines = _lines()
    for at in (45, 40, 35, 30):
        lines.insert(at, "8 more processes have sent help message help-mtl-ofi.txt / OFI call fail")
    log = _parse(lines)
    assert len(log.rows) == 31
    note = next(n for n in log.notes if n.startswith("skipped 4 line"))
    # lines shift by one per insertion above: 30 -> 31, 35 -> 37, 40 -> 43, 45 -> 49
    assert "log09.txt:31" in note and "log09.txt:37" in note and "and 1 more" in note


@needs_real
@pytest.mark.parametrize("token, reason", [
    ("inf", "time (infinite) is not a positive finite number"),
    ("1e999", "time (infinite) is not a positive finite number"),   # overflowed the resolution: found by the fuzz test
    ("0.00", "time (0 us) is not a positive finite number"),
    ("0", "time (0 us) is not a positive finite number"),
    ("nan", "time (not a number) is not a positive finite number"),
])
def test_impossible_time_is_flagged_not_used_and_named(token, reason):
    lines = _lines()
    assert lines[ROW_1GIB - 1].split()[5] == "9187.8"
    lines[ROW_1GIB - 1] = lines[ROW_1GIB - 1].replace("9187.8", token.rjust(6), 1)
    log = _parse(lines)
    assert len(log.rows) == 31                       # kept, so the JSON shows it
    row = next(r for r in log.rows if r.size_bytes == 2**30)
    assert row.flagged and row.problem == f"out-of-place {reason}"
    assert len(log.usable_rows()) == 30 and 2**30 not in [s for s, _, _ in log.samples()]
    note = next(n for n in log.notes if "without a usable measurement" in n)
    assert f"log09.txt:{ROW_1GIB}: out-of-place {reason}" in note


@needs_real
def test_infinite_bandwidth_is_flagged():
    lines = _lines()
    lines[ROW_1GIB - 1] = lines[ROW_1GIB - 1].replace("219.12", "   inf", 1)
    row = next(r for r in _parse(lines).rows if r.size_bytes == 2**30)
    assert row.flagged and "not finite" in row.problem


@needs_real
def test_negative_time_is_refused_naming_file_and_line():
    lines = _lines()
    lines[ROW_1GIB - 1] = lines[ROW_1GIB - 1].replace("9187.8", "-918.8", 1)
    with pytest.raises(UserError, match=rf"log09.txt:{ROW_1GIB}: .*negative"):
        _parse(lines)


def test_json_infinity_is_flagged_with_its_index():
    data = json.loads((FIX / "allreduce_8r2n.json").read_text())
    data["results"][2]["out_of_place"]["time"] = float("inf")     # json.dumps writes Infinity
    log = parse_text(json.dumps(data), "run.json")[0]
    row = log.rows[2]
    assert row.flagged and row.problem.startswith("out-of-place time (infinite)")
    assert any("run.json: results[2]: out-of-place time (infinite)" in n for n in log.notes)
    assert row.size_bytes not in [s for s, _, _ in log.samples()]


def test_size_zero_row_is_flagged(tmp_path):
    # nccl-tests -b 0 prints a size-0 row: nothing moved, no bandwidth; kept and flagged
    text = (FIX / "current_allgather_4r2n.txt").read_text().split("\n")
    first = next(i for i, ln in enumerate(text) if ln.strip() and ln.strip()[0].isdigit())
    toks = text[first].split()
    text.insert(first, text[first].replace(toks[0], "0".rjust(len(toks[0])), 1).replace(
        toks[1], "0".rjust(len(toks[1])), 1))
    p = tmp_path / "ag.txt"
    p.write_text("\n".join(text))
    log = parse_file(p)[0]
    zero = next(r for r in log.rows if r.size_bytes == 0)
    assert zero.flagged and zero.problem == "size 0: nothing was moved"
    assert any(f"{p}:{first + 1}: size 0" in n for n in log.notes)
