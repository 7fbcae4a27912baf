"""`llmpar calibrate parse`: nccl-tests / rccl-tests logs in every layout (fixtures written by hand
from the printing code of NVIDIA/nccl-tests src/common.cu + src/util.cu and ROCm/rccl-tests), and the
real published logs in ../shared/validation/nccl-logs (read in place, never copied)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from conftest import SHARED, assert_one_line_error
from llmpar.calibrate.nccl_tests import (
    busbw_factor,
    normalize_collective,
    parse_file,
    parse_text,
    to_text,
)
from llmpar.errors import UserError

FIX = Path(__file__).parent / "fixtures" / "nccl"
REAL = SHARED / "validation" / "nccl-logs"


def one(name, **kw):
    logs = parse_file(FIX / name, **kw)
    assert len(logs) == 1
    return logs[0]


def test_busbw_factors_and_names():
    # nccl-tests doc/PERFORMANCE.md: AR 2(n-1)/n, AG/RS/A2A (n-1)/n, broadcast/reduce/sendrecv 1
    assert busbw_factor("all_reduce", 8) == 2 * 7 / 8 == 1.75
    assert busbw_factor("all_gather", 4) == 0.75
    assert busbw_factor("send_recv", 16) == 1.0
    for spelling in ("all-reduce", "allreduce", "all_reduce_perf", "AllReduce", "./build/all_reduce_perf"):
        assert normalize_collective(spelling) == "all_reduce"
    assert normalize_collective("alltoall_perf") == "all_to_all"
    assert normalize_collective("sendrecv") == "send_recv"
    with pytest.raises(UserError, match="unknown collective"):
        normalize_collective("allreduse-ish")


def test_current_layout_all_gather_with_wrong_row():
    log = one("current_allgather_4r2n.txt")
    # stated: "# Collective test starting: all_gather_perf"; 4 device lines on node-a, node-b
    assert (log.collective, log.ranks, log.nodes, log.gpus_per_node) == ("all_gather", 4, 2, 2)
    assert log.gpu == "NVIDIA H100 80GB HBM3"
    assert log.inferred == {}  # everything was stated
    assert log.library == {"tests": "nccl-tests 2.17.6", "nccl": "2.27.3+cuda12.9"}
    assert len(log.rows) == 4
    big = log.rows[-1]
    # 1 GiB all-gather of float over 4 ranks: count = 2^30 / (4 B x 4) = 67108864
    assert (big.size_bytes, big.count, big.type, big.redop, big.root) == (1073741824, 67108864, "float", "none", -1)
    # printed 10000.0 us; algbw = 2^30 B / 10 ms = 107.37 GB/s; busbw = x 3/4 = 80.53
    assert big.out_of_place.time_us == 10000.0 and big.out_of_place.algbw_GBps == 107.37
    assert big.out_of_place.busbw_GBps == 80.53 and big.in_place.time_us == 9990.0
    # the 1 MiB row has #wrong = 3 out of place: flagged, and left out of the usable rows
    flagged = [r.size_bytes for r in log.rows if r.flagged]
    assert flagged == [1048576]
    assert [r.size_bytes for r in log.usable_rows()] == [1024, 16777216, 1073741824]
    assert any("wrong results" in n for n in log.notes)
    assert any("Out of bounds values : 1 FAILED" in n for n in log.notes)
    # samples() feeds fit/check: (size, seconds, busbw) of the out-of-place block
    assert log.samples()[-1] == (1073741824, pytest.approx(0.01), 80.53)


def test_old_layout_error_column():
    log = one("old_allreduce_error_v100.txt")
    # no collective line: size = count x 4 B, redop sum, no root column -> all_reduce; 8 device lines, 1 host
    assert (log.collective, log.ranks, log.nodes, log.gpu) == ("all_reduce", 8, 1, "Tesla V100-SXM2-32GB")
    assert "collective" in log.inferred and "error" in log.format
    r = log.rows[1]
    assert r.root is None and r.out_of_place.wrong is None and r.out_of_place.max_error == 1e-7
    # old nccl-tests counts a row out of bounds above DeltaMaxValue(float) x (n-1) = 1e-5 x 7 = 7e-5:
    # 1e-07 is fine, 2e-02 (the 32 MiB row) is not
    assert [x.size_bytes for x in log.rows if x.flagged] == [33554432]


def test_mpirun_prefix_and_interleaved_info_reduce_scatter():
    log = one("mpirun_prefix_reducescatter.txt")
    # [1,0]<stdout>: prefixes stripped; NCCL INFO lines from ranks 2, 3 ignored as rows.
    # size 8388608 = count 1048576 x 2 B (bfloat16) x 4 -> gathered family, redop sum, root -1 -> reduce_scatter
    assert (log.collective, log.ranks, log.nodes, log.gpu) == ("reduce_scatter", 4, 1, "NVIDIA A100-SXM4-80GB")
    assert "x 4" in log.inferred["collective"]
    assert [r.size_bytes for r in log.rows] == [4096, 8388608, 268435456]


def test_srun_label_all_to_all_inferred_and_overrides(cli):
    log = one("srun_label_alltoall.txt")
    # ' 0: ' labels stripped; no device list: size 4194304 = 131072 x 4 B x 8 -> 8 ranks; in-place #wrong
    # N/A while out-of-place is checked -> all_to_all (nccl-tests cannot check it in place)
    assert (log.collective, log.ranks, log.nodes, log.gpu) == ("all_to_all", 8, None, None)
    assert set(log.inferred) == {"collective", "ranks"}
    assert any("--nodes" in n for n in log.notes) and any("--gpu" in n for n in log.notes)
    # the ' 3: ' launcher line between rows is noise, not a row
    assert len(log.rows) == 3
    log = one("srun_label_alltoall.txt", nodes=2, gpu="NVIDIA H100 80GB HBM3")
    assert (log.nodes, log.gpus_per_node, log.gpu) == (2, 4, "NVIDIA H100 80GB HBM3")
    res = cli("calibrate", "parse", FIX / "srun_label_alltoall.txt", "--nodes", "2", "--json")
    assert res.code == 0
    f = res.json()["files"][0]
    assert (f["collective"], f["ranks"], f["nodes"]) == ("all_to_all", 8, 2)
    assert f["rows"][0]["in_place"]["wrong"] is None and f["rows"][0]["out_of_place"]["wrong"] == 0


def test_cputime_and_per_iteration_columns():
    log = one("cputime_periter_broadcast.txt")
    assert (log.collective, log.ranks, log.nodes) == ("broadcast", 2, 1)
    r = log.rows[1]
    # -C 1: header says cputime; -I 1: i_min i_max i_p99 i_cv% after each block
    assert (r.root, r.redop, r.type) == (0, "none", "half")
    assert r.out_of_place.cputime and r.out_of_place.time_us == 50.0
    assert r.out_of_place.per_iter == {"min_us": 45.0, "max_us": 65.0, "p99_us": 60.0, "cv_pct": 4.25}
    assert r.in_place.busbw_GBps == 21.40  # 1 MiB / 49 us = 21.40 GB/s, broadcast factor 1
    assert any("CPU time" in n for n in log.notes)


def test_timestamps_and_na_send_recv():
    log = one("timestamps_sendrecv.txt")
    assert (log.collective, log.ranks, log.nodes, log.gpus_per_node) == ("send_recv", 2, 2, 1)
    r = log.rows[1]
    assert r.timestamp == "2025-03-04 10:11:13"
    assert r.out_of_place.wrong is None and r.in_place.wrong is None and not r.flagged
    # 64 MiB / 1400 us = 47.93 GB/s
    assert r.out_of_place.algbw_GBps == 47.93
    assert any("-c 0" in n for n in log.notes)


def test_headerless_with_nccl_info_lines():
    log = one("headerless_ncclinfo_allreduce.txt")
    # no header, no device list: ranks from 'rank r nranks 4', hosts nodeA/nodeB from the INFO prefixes
    assert (log.collective, log.ranks, log.nodes, log.gpu) == ("all_reduce", 4, 2, None)
    assert {"collective", "ranks", "nodes"} <= set(log.inferred)
    assert "headerless" in log.format
    assert log.rows[2].out_of_place.busbw_GBps == 89.48


def test_rccl_tests_layout():
    log = one("rccl_allreduce_mi250x.txt")
    assert (log.collective, log.ranks, log.nodes, log.gpu) == ("all_reduce", 4, 1, "AMD Instinct MI250X")
    assert log.library == {"tests": "rccl-tests develop:1a2b3c4", "rccl": "2.20.5-HEAD:abcdef0"}
    # 'Hostname : mi-node' in the RCCL block is not a row and not a second node
    assert len(log.rows) == 2


def test_json_from_dash_J():
    log = one("allreduce_8r2n.json")
    # args[0] = .../all_reduce_perf; 8 device entries on b200-a, b200-b; nccl_version 22803 = 2.28.3
    assert (log.collective, log.ranks, log.nodes, log.gpus_per_node) == ("all_reduce", 8, 2, 4)
    assert log.gpu == "NVIDIA B200" and log.library == {"nccl": "2.28.3"}
    r = log.rows[2]
    # root is the string "    -1" in the JSON; 1 GiB / 5000 us = 214.748365 GB/s; x 2*7/8 = 375.809638
    assert r.root == -1 and r.out_of_place.algbw_GBps == pytest.approx(214.748365)
    assert r.out_of_place.busbw_GBps == pytest.approx(214.748365 * 1.75, rel=1e-8)
    assert [x.size_bytes for x in log.rows if x.flagged] == [1048576]  # nwrong 12


def test_rank_count_from_busbw_ratio_only():
    # an all_reduce table with no device list and no INFO lines: n from busbw/algbw = 2(n-1)/n.
    # 8 GiB in 67689 us: algbw 126.90, busbw 237.94 -> ratio 1.87502 -> n = 2/(2-1.875) = 16
    text = (
        "  8589934592    2147483648     float     sum      -1    67689  126.90  237.94      0    67811  126.68  237.52      0\n"
        "  4294967296    1073741824     float     sum      -1    34176  125.67  235.63      0    34417  124.79  233.98      0\n"
    )
    log = parse_text(text, "x.txt")[0]
    assert (log.collective, log.ranks) == ("all_reduce", 16)
    assert "busbw/algbw" in log.inferred["ranks"]


def test_several_tables_in_one_file():
    a = (FIX / "timestamps_sendrecv.txt").read_text()
    b = (FIX / "rccl_allreduce_mi250x.txt").read_text()
    logs = parse_text(a + b, "both.txt")
    assert [(x.collective, x.section) for x in logs] == [("send_recv", 0), ("all_reduce", 1)]


def test_written_layout_round_trips():
    log = one("current_allgather_4r2n.txt")
    again = parse_text(to_text(log), "again.txt")[0]
    assert (again.collective, again.ranks, again.nodes, again.gpu) == (log.collective, 4, 2, log.gpu)
    assert [r.size_bytes for r in again.rows] == [r.size_bytes for r in log.rows]
    assert again.rows[-1].out_of_place.busbw_GBps == 80.53   # the fixture's last row, 1 GiB out of place
    # a blank out-of-place block (what nccl-tests prints for a block it did not run) stays blank
    log.rows[0].out_of_place = None
    again = parse_text(to_text(log), "again.txt")[0]
    assert again.rows[0].out_of_place is None and again.rows[0].in_place.time_us == 12.10


def test_cli_table_and_json(cli):
    res = cli("calibrate", "parse", FIX / "current_allgather_4r2n.txt", FIX / "allreduce_8r2n.json")
    assert res.code == 0, res.err
    assert "all_gather" in res.out and "FLAGGED" in res.out and "NVIDIA B200" in res.out
    res = cli("calibrate", "parse", FIX / "current_allgather_4r2n.txt", FIX / "allreduce_8r2n.json", "--json")
    files = res.json()["files"]
    assert [f["collective"] for f in files] == ["all_gather", "all_reduce"]
    row = files[0]["rows"][3]
    assert set(row) >= {"size_bytes", "count", "type", "redop", "root", "out_of_place", "in_place"}
    assert set(row["out_of_place"]) >= {"time_us", "algbw_GBps", "busbw_GBps", "wrong"}
    assert set(files[0]) >= {"file", "collective", "ranks", "nodes", "gpu", "rows", "notes", "inferred"}


@pytest.mark.parametrize("name, needles", [
    ("empty.txt", ["empty.txt:1", "empty"]),
    ("truncated.txt", ["truncated.txt:18", "truncated"]),
    ("garbled.txt", ["garbled.txt:17", "25O.00"]),
    ("header_only.txt", ["header_only.txt:4", "no result rows"]),
    ("truncated.json", ["truncated.json:1", "truncated JSON"]),
])
def test_bad_logs_one_line(cli, name, needles):
    assert_one_line_error(cli("calibrate", "parse", FIX / name), *needles)


def test_bad_options_and_paths(cli, tmp_path):
    assert_one_line_error(cli("calibrate", "parse", FIX / "empty.txt", "--collective", "allreduse"), "unknown collective")
    assert_one_line_error(cli("calibrate", "parse", FIX / "srun_label_alltoall.txt", "--ranks", "0"), "--ranks")
    assert_one_line_error(cli("calibrate", "parse", FIX / "srun_label_alltoall.txt", "--ranks", "8", "--nodes", "3"),
                          "not a multiple")
    assert_one_line_error(cli("calibrate", "parse", tmp_path / "nope.txt"), "nope.txt")
    noise = tmp_path / "noise.txt"
    noise.write_text("hello\nthis is not a log\n")
    assert_one_line_error(cli("calibrate", "parse", noise), "noise.txt:2", "no nccl-tests result rows")


def _real_logs():
    index = REAL / "index.yaml"
    if not index.is_file():
        return []
    return yaml.safe_load(index.read_text())["logs"]


@pytest.mark.skipif(not (REAL / "index.yaml").is_file(), reason="../shared/validation/nccl-logs not present")
@pytest.mark.parametrize("entry", _real_logs(), ids=lambda e: e["file"][:2])
def test_real_published_logs(entry):
    logs = parse_file(REAL / entry["file"])
    assert len(logs) == 1
    log = logs[0]
    assert log.collective == entry["collective"]
    assert len(log.rows) == entry["data_rows"]
    assert log.rows[0].size_bytes == entry["min_bytes"] and log.rows[-1].size_bytes == entry["max_bytes"]
    assert (log.ranks, log.nodes, log.gpus_per_node) == (entry["num_gpus"], entry["num_nodes"], entry["gpus_per_node"])
    if "not printed" in entry["gpu_model"]:
        assert log.gpu is None
    else:
        assert log.gpu == entry["gpu_model"]
    assert log.avg_busbw_GBps == pytest.approx(entry["footer_avg_busbw"])
    assert not log.flagged_rows
    # every row's busbw / algbw agrees with nccl-tests' factor for the rank count we inferred
    f = busbw_factor(log.collective, log.ranks)
    big = [m for r in log.rows for m in r.blocks() if m.algbw_GBps > 10]
    assert big and all(math.isclose(m.busbw_GBps / m.algbw_GBps, f, rel_tol=2e-3) for m in big)


ESC_LOG = '# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703\n# Collective test starting: all_reduce_perf\n# nThread 1 nGpus 1 minBytes 1048576 maxBytes 268435456 step: 16(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0\n#\n# Using devices\n#  Rank  0 Group  0 Pid  20101 on     node-a device  0 [0000:18:00] NVIDIA ^[[31mH100\n#  Rank  1 Group  0 Pid  20102 on     node-a device  1 [0000:2a:00] NVIDIA ^[[31mH100\n#  Rank  2 Group  0 Pid  20103 on     node-a device  2 [0000:3a:00] NVIDIA ^[[31mH100\n#  Rank  3 Group  0 Pid  20104 on     node-a device  3 [0000:5d:00] NVIDIA ^[[31mH100\nNCCL version 2.27.3+cuda12.9\n#\n#                                                              out-of-place                       in-place\n#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)\n     1048576        262144     float     sum      -1    50.00   20.97   31.46        0    50.00   20.97   31.46        0\n    16777216       4194304     float     sum      -1   200.00   83.89  125.80        0   200.00   83.89  125.80        0\n   268435456      67108864     float     sum      -1  2500.00  107.37  161.06        0  2500.00  107.37  161.06        0\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 100\n#\n# Collective test concluded: all_reduce_perf\n#\n'


def test_control_characters_in_a_log_never_reach_the_terminal(cli, tmp_path):
    """A device line whose GPU name holds an ANSI escape (ESC[31m) was printed as it is and
    recoloured the terminal (reliability review, item 35, for logs): every control character read
    from a log (device names, hosts, bus ids, the stated program) becomes '?' (nccl_records.printable)."""
    f = tmp_path / "esc.txt"
    f.write_text(ESC_LOG.replace("^[", "\x1b").replace("Collective test starting: all_reduce_perf",
                                                           "Collective test starting: all_reduce\x1b[0m_perf"))
    res = cli("calibrate", "parse", f)
    assert res.code == 0, res.err
    assert "\x1b" not in res.out and "NVIDIA ?[31mH100" in res.out
    res = cli("calibrate", "parse", f, "--json")
    assert res.code == 0, res.err             # an empty stdout would pass the check below
    assert "\x1b" not in res.out and "\\u001b" not in res.out
