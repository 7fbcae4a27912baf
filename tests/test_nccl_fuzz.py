"""Fuzz the nccl-tests reader on mutated real logs (issue 9, fuzzing).

Real published logs (../shared/validation/nccl-logs, read in place) and the hand-written fixtures
are mutated: lines deleted, duplicated, swapped; the file truncated; launcher / NCCL lines and
random bytes (non-UTF-8 included) injected; a token of a row replaced. Whatever comes out, the
reader either returns tables or raises llmpar.errors.UserError naming ``file:line`` - no other
exception escapes. Bounded (60 examples, no deadline; derandomized in CI by conftest).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHARED
from llmpar.calibrate.nccl_tests import parse_file
from llmpar.errors import UserError

FIX = Path(__file__).parent / "fixtures" / "nccl"
REAL = SHARED / "validation" / "nccl-logs"
BASES = sorted(REAL.glob("*.txt")) + sorted(p for p in FIX.iterdir() if p.suffix in (".txt", ".json")
                                            and p.stat().st_size > 0)
CONTENTS = {p.name: p.read_bytes() for p in BASES}

FOREIGN = [
    b"8 more processes have sent help message help-mtl-ofi.txt / OFI call fail",
    b"Set MCA parameter \"orte_base_help_aggregate\" to 0 to see all help / error messages",
    b"[1,5]<stderr>:8 more processes have sent help message help-mpi-btl-openib.txt / no active ports found",
    b"node-3:1234:1300 [5] NCCL INFO Channel 00/0 : 5[5] -> 6[6] via P2P/IPC/read",
    b"node-3:1234:1300 [5] NCCL WARN NET/IB : Got async event : port error",
    b"12 NCCL WARN Call to ibv_create_qp failed",
    b"NCCL INFO comm 0x55d1 rank 0 nranks 16 - Init COMPLETE",
    b"0: srun: error: node-7: task 3: Exited with exit code 1",
    b"  1024  256  float  sum  -1",
]


@st.composite
def mutated(draw):
    name = draw(st.sampled_from(sorted(CONTENTS)))
    lines = CONTENTS[name].split(b"\n")
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "truncate", "foreign", "bytes", "token"]))
        n = len(lines)
        i = draw(st.integers(0, max(n - 1, 0)))
        if op == "delete" and n > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, max(n - 1, 0)))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "truncate":
            blob = b"\n".join(lines)
            lines = blob[: draw(st.integers(0, len(blob)))].split(b"\n")
        elif op == "foreign":
            lines.insert(i, draw(st.sampled_from(FOREIGN)))
        elif op == "bytes":
            junk = draw(st.binary(min_size=1, max_size=12))   # non-UTF-8 included (\xff, \xc3\x28 ...)
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + junk + lines[i][at:]
        elif op == "token":
            toks = lines[i].split()
            if toks:
                k = draw(st.integers(0, len(toks) - 1))
                new = draw(st.sampled_from([b"inf", b"nan", b"-1", b"0", b"N/A", b"1e999", b"25O.00", b"", b"x"]))
                toks[k] = new
                lines[i] = b"  ".join(toks)
    return name, b"\n".join(lines)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/validation/nccl-logs not present")
@settings(max_examples=60, deadline=None)
@given(mutated())
def test_mutated_logs_raise_only_user_errors_naming_file_and_line(workdir, case):
    name, data = case
    path = workdir / name
    path.write_bytes(data)
    try:
        logs = parse_file(path)
    except UserError as exc:
        assert re.search(re.escape(str(path)) + r":\s?(\d+|results\[\d+\])", str(exc)), str(exc)
        return
    for log in logs:
        assert log.rows
        for note in log.notes:
            if note.startswith("skipped") or "without a usable measurement" in note:
                assert str(path) in note
        log.to_dict()                                  # the JSON view never raises either
        for size, t, _ in log.samples():
            assert size > 0 and 0 < t < float("inf")   # fit and check only ever see real measurements
