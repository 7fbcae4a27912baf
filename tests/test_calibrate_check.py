"""`llmpar calibrate check`: per-row errors and summary against hand-derived numbers, the exit
code contract, charts, the shipped A100 profile against the published Azure sweep, and
fit -> check on synthetic and on the real logs in ../shared/validation/nccl-logs (skipped when
absent; never copied into the project)."""

from __future__ import annotations

import functools
import math
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import yaml
from _synthetic_nccl import SWEEP, TRUTH_YAML, write_log
from conftest import SHARED, assert_one_line_error

from llmpar.calibrate import check as C
from llmpar.calibrate import fit as F
from llmpar.calibrate import fit_search as FS
from llmpar.calibrate.nccl_tests import parse_files
from llmpar.calibrate.placement import error_summary
from llmpar.cost.collectives import collective_time
from llmpar.specs import load_hardware

ROW_KEYS = {"file", "collective", "size_bytes", "measured_time_s", "predicted_time_s", "measured_busbw_GBps",
            "predicted_busbw_GBps", "error"}
SUMMARY_KEYS = {"median_abs_error_ge_1MB", "max_abs_error_ge_1MB", "median_abs_error_ge_64MB", "max_abs_error_ge_64MB"}
LOGS = SHARED / "validation" / "nccl-logs"
PUBLIC = SHARED / "validation" / "public.yaml"


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    """The truth profile and a single-node all_reduce log measured 25 % slower than it predicts."""
    d = tmp_path_factory.mktemp("check")
    (d / "truth.yaml").write_text(TRUTH_YAML)
    truth = load_hardware(str(d / "truth.yaml"))
    S = np.array(SWEEP)
    t = collective_time(truth, "all_reduce", S, 8, 8)
    slow = write_log(d / "slow.txt", "all_reduce", 8, 1, S, 1.25 * t)
    # one row (1 GiB) twice as slow, the rest exact
    bad = t.copy()
    bad[S == 1 << 30] *= 2.0
    one_bad = write_log(d / "one-bad.txt", "all_reduce", 8, 1, S, bad)
    small = write_log(d / "small.txt", "all_reduce", 8, 1, S[S < 1 << 20], t[S < 1 << 20])
    return {"dir": d, "truth": d / "truth.yaml", "slow": slow, "one_bad": one_bad, "small": small, "t": t, "S": S}


# ----------------------------------------------------------------------------- numbers by hand

def test_rows_and_summary_hand_derived(cli, syn):
    # measured = 1.25 x predicted on every row, so error = predicted/measured - 1 = 1/1.25 - 1 = -0.2
    # (up to the log's 0.01 us rounding of time), |error| median = max = 0.2 in both size bands.
    # busbw of an 8-rank all_reduce = size/time x 2(8-1)/8 = 1.75 size/time.
    res = cli("calibrate", "check", syn["slow"], "--hardware", syn["truth"], "--tolerance", "25%", "--json")
    assert res.code == 0, res.err
    d = res.json()
    assert set(d["summary"]) == SUMMARY_KEYS
    for v in d["summary"].values():
        assert v == pytest.approx(0.2, abs=1e-4)
    assert len(d["rows"]) == 31   # SWEEP: 8 B .. 8 GiB by 2 = 2^3 .. 2^33, 31 sizes
    for r, t in zip(d["rows"], syn["t"]):
        assert ROW_KEYS <= set(r)
        assert r["file"] == str(syn["slow"]) and r["collective"] == "all_reduce"
        assert r["error"] == pytest.approx(-0.2, abs=1e-3)
        assert r["predicted_time_s"] == pytest.approx(t, rel=1e-12)
        assert r["measured_time_s"] == pytest.approx(1.25 * t, rel=1e-3)
        assert r["measured_busbw_GBps"] == pytest.approx(r["size_bytes"] / r["measured_time_s"] * 1.75 / 1e9, rel=1e-12)
        assert r["predicted_busbw_GBps"] == pytest.approx(r["size_bytes"] / t * 1.75 / 1e9, rel=1e-9)
    assert d["check"] == {"statistic": "median_abs_error_ge_1MB", "tolerance": 0.25,
                          "value": d["summary"]["median_abs_error_ge_1MB"], "passed": True}


def test_beyond_tolerance_exits_1(cli, syn):
    # the same 20 % error against a 10 % tolerance: exit 1, one line naming the statistic
    res = cli("calibrate", "check", syn["slow"], "--hardware", syn["truth"], "--tolerance", "10%", "--json")
    assert res.code == 1
    assert res.json()["check"]["passed"] is False          # the JSON still comes out
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "median_abs_error_ge_1MB = 20.0% > tolerance 10.0%" in lines[0]


def test_statistic_choice(cli, syn):
    # one row of 31 (1 GiB) measured 2x slow: its error is 1/2 - 1 = -0.5. The median at >= 64 MB
    # (8 rows, 64 MiB .. 8 GiB) stays ~0 and passes 10 %; the maximum at >= 64 MB is 0.5 and fails.
    ok = cli("calibrate", "check", syn["one_bad"], "--hardware", syn["truth"], "--json")
    assert ok.code == 0
    s = ok.json()["summary"]
    assert s["max_abs_error_ge_64MB"] == pytest.approx(0.5, abs=1e-4)
    assert s["median_abs_error_ge_64MB"] < 1e-4
    bad = cli("calibrate", "check", syn["one_bad"], "--hardware", syn["truth"], "--statistic", "max_abs_error_ge_64MB")
    assert bad.code == 1 and "max_abs_error_ge_64MB = 50.0%" in bad.err


def test_summary_function_bands():
    # 1 MiB and 64 MiB are the band edges (nccl-tests sizes are powers of two)
    s = error_summary([1 << 19, 1 << 20, 1 << 25, 1 << 26], [0.9, -0.1, 0.3, -0.05])
    assert s == {"median_abs_error_ge_1MB": pytest.approx(0.1), "max_abs_error_ge_1MB": pytest.approx(0.3),
                 "median_abs_error_ge_64MB": pytest.approx(0.05), "max_abs_error_ge_64MB": pytest.approx(0.05)}
    assert error_summary([8, 16], [0.1, 0.2])["median_abs_error_ge_1MB"] is None


@pytest.mark.parametrize("text,value", [("10%", 0.10), ("0.1", 0.10), ("5 %", 0.05), ("2.5%", 0.025), ("1e-1", 0.1)])
def test_tolerance_forms(text, value):
    assert C.parse_tolerance(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["abc", "-5%", "0%", "0", "", "10", "nan", "5%%"])
def test_tolerance_garbage(cli, syn, text):
    assert_one_line_error(cli("calibrate", "check", syn["slow"], "--hardware", syn["truth"], "--tolerance", text),
                          "--tolerance")


# ----------------------------------------------------------------------------- output

def test_terminal_table_and_chart(cli, syn):
    res = cli("calibrate", "check", syn["slow"], "--hardware", syn["truth"], "--tolerance", "25%")
    assert res.code == 0, res.err
    assert "-20.0%" in res.out and "PASS" in res.out
    bar = re.compile(r"^\s+\d+(\.\d+)? [KMG]?i?B \|([ #oO]{41})\|")
    chart = [m.group(2) for m in map(bar.match, res.out.splitlines()) if m]
    assert len(chart) == 31
    # at 8 GiB the measured bar is 1/1.25 of the predicted marker's position (40 columns wide)
    assert chart[-1].count("#") == round(40 / 1.25) and chart[-1].index("o") == 40
    quiet = cli("calibrate", "check", syn["slow"], "--hardware", syn["truth"], "--tolerance", "25%", "--no-chart")
    assert not [ln for ln in quiet.out.splitlines() if bar.match(ln)] and "-20.0%" in quiet.out


def test_plot_without_matplotlib_is_one_line(cli, syn, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # import matplotlib -> ImportError
    res = cli("calibrate", "check", syn["slow"], "--hardware", syn["truth"], "--plot", tmp_path / "x.png")
    assert_one_line_error(res, "matplotlib")
    assert not (tmp_path / "x.png").exists()


def test_plot_draws_measured_and_predicted(cli, syn, tmp_path, monkeypatch):
    # a stand-in matplotlib records what is drawn (the real one is an optional extra)
    calls = []

    class Ax:
        def plot(self, x, y, fmt, **kw):
            calls.append((fmt, np.asarray(x), np.asarray(y)))
            return [types.SimpleNamespace(get_color=lambda: "C0")]   # a list of Line2D, as matplotlib

        def __getattr__(self, name):
            return lambda *a, **k: None

    class Fig:
        def savefig(self, path, **kw):
            open(path, "wb").write(b"\x89PNG fake")

    mpl = types.ModuleType("matplotlib")
    mpl.use = lambda *a, **k: None
    plt = types.ModuleType("matplotlib.pyplot")
    plt.subplots = lambda **kw: (Fig(), Ax())
    plt.close = lambda fig: None
    mpl.pyplot = plt
    monkeypatch.setitem(sys.modules, "matplotlib", mpl)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", plt)
    out = tmp_path / "check.png"
    res = cli("calibrate", "check", syn["slow"], "--hardware", syn["truth"], "--tolerance", "25%", "--plot", out, "--json")
    assert res.code == 0, res.err
    assert out.read_bytes().startswith(b"\x89PNG") and res.json()["plot"] == str(out)
    (mfmt, ms, mb), (pfmt, ps, pb) = calls
    assert mfmt == "o" and pfmt == "-" and np.array_equal(ms, syn["S"])
    assert np.allclose(mb / pb, 1 / 1.25, rtol=1e-3)           # measured busbw = predicted / 1.25


def test_plot_with_real_matplotlib(cli, syn, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "real.png"
    assert cli("calibrate", "check", syn["slow"], "--hardware", syn["truth"], "--tolerance", "25%", "--plot", out).code == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


# ----------------------------------------------------------------------------- bad input

def test_check_no_logs(cli):
    assert_one_line_error(cli("calibrate", "check", "--hardware", "a100-80gb"), "LOGS")


def test_check_unknown_hardware(cli, syn):
    assert_one_line_error(cli("calibrate", "check", syn["slow"], "--hardware", "h900"), "h900")


def test_check_unmatched_collective(cli, tmp_path):
    path = tmp_path / "unmatched.txt"
    path.write_text("\n".join(f"{s:12d}  {s // 4:12d}     float    none      -1    {10.0 + i:5.2f}    0.00    0.00      0"
                              for i, s in enumerate((1 << 20, 1 << 21))) + "\n")
    assert_one_line_error(cli("calibrate", "check", path, "--hardware", "a100-80gb"), "--collective")
    # told which collective it is, the same log checks
    assert cli("calibrate", "check", path, "--hardware", "a100-80gb", "--collective", "broadcast",
               "--ranks", "8", "--nodes", "1", "--tolerance", "99%", "--json").code in (0, 1)


def test_check_no_rows_in_band(cli, syn):
    assert_one_line_error(cli("calibrate", "check", syn["small"], "--hardware", syn["truth"]), ">= 1 MB")


# ----------------------------------------------------------------------------- fit -> check

def test_fit_then_check_synthetic(cli, syn, tmp_path):
    # logs of the truth with +-3 % multiplicative noise (deterministic), one node and 2 x 8 GPUs:
    # after `fit` on them, `check` of the same logs is within 5 % (median, >= 1 MB)
    truth = load_hardware(str(syn["truth"]))
    S = np.array(SWEEP)
    rng = np.random.default_rng(5)
    logs = []
    for ranks, nodes in ((8, 1), (16, 2)):
        t = collective_time(truth, "all_reduce", S, ranks, ranks // nodes) * (1 + rng.uniform(-0.03, 0.03, S.size))
        logs.append(write_log(tmp_path / f"ar-{nodes}.txt", "all_reduce", ranks, nodes, S, t))
    out = tmp_path / "fitted.yaml"
    # the logs name A100s: the fit starts from the shipped A100 profile (a fit onto another GPU's
    # profile is refused: test_fit_refuses_a_log_of_another_gpu)
    assert cli("calibrate", "fit", *logs, "--hardware", "a100-80gb", "--out", out).code == 0
    before = cli("calibrate", "check", *logs, "--hardware", "h100-sxm", "--tolerance", "5%", "--json")
    after = cli("calibrate", "check", *logs, "--hardware", out, "--tolerance", "5%", "--json")
    assert before.code == 1                     # the H100 profile is not this (A100-like) cluster
    assert after.code == 0, after.err
    assert after.json()["summary"]["median_abs_error_ge_1MB"] < 0.03


def _size_label(label: str) -> int:
    # Azure prints '65K', '132K', '1G': rounded decimal renderings of powers of two
    num, unit = float(label[:-1]), label[-1]
    return 1 << round(math.log2(num * {"K": 1e3, "M": 1e6, "G": 1e9}[unit]))


@pytest.mark.skipif(not PUBLIC.is_file(), reason="../shared/validation/public.yaml not present")
def test_shipped_a100_matches_azure_sweep(cli, tmp_path):
    # Azure ND A100 v4, 8 GPUs, all_reduce busbw per size (in place). time = size / algbw and
    # algbw = busbw / (2(8-1)/8) = busbw / 1.75. Written as an nccl-tests log, checked at 15 %.
    data = yaml.safe_load(PUBLIC.read_text())["nccl_allreduce_single_node_azure"]
    run = next(r for r in data["runs"] if r["gpu"].startswith("A100") and r["num_gpus"] == 8)
    S = np.array([_size_label(x["message_size_label"]) for x in run["sweep"]], dtype=float)
    assert S[0] == 1024 and S[6] == 65536 and S[-1] == 8 * (1 << 30)
    T = S / (np.array([x["busbw_GBps"] for x in run["sweep"]]) * 1e9 / 1.75)
    log = write_log(tmp_path / "azure-a100.txt", "all_reduce", 8, 1, S, T, gpu="NVIDIA A100-SXM4-80GB")
    res = cli("calibrate", "check", log, "--hardware", "a100-80gb", "--statistic", "median_abs_error_ge_64MB",
              "--tolerance", "15%", "--json")
    assert res.code == 0, res.err
    assert res.json()["summary"]["median_abs_error_ge_64MB"] <= 0.15


# The shipped profile each real log is fitted from (the MI300X logs: hardware/mi300x.yaml; until it
# shipped, 2026-12-01, a stand-in fixture).
BASE_FOR_GPU = {"A100": "a100-80gb", "H100": "h100-sxm", "H200": "h200", "GB200": "gb200-nvl72", "MI300X": "mi300x"}


def _real_logs():
    index = LOGS / "index.yaml"
    if not index.is_file():
        return [pytest.param(None, None, marks=pytest.mark.skip(reason="../shared/validation/nccl-logs not present"))]
    out = []
    for e in yaml.safe_load(index.read_text())["logs"]:
        gpu = next(k for k in ("GB200", "A100", "H100", "H200", "MI300X") if k in e["gpu_model"])
        out.append(pytest.param(e["file"], BASE_FOR_GPU[gpu], id=e["file"][:2]))
    return out


@functools.lru_cache(maxsize=None)
def _real_fit(name: str, base: str):
    """(logs, fit result) of a shipped real log as shipped: computed once per process, since the
    robustness test below compares against the same fit of log 11 (each fit takes 1-3 s)."""
    logs = parse_files([LOGS / name])
    return logs, F.fit(logs, base)


@pytest.mark.parametrize("name,base", _real_logs())
def test_fit_then_check_real_log(name, base, tmp_path):
    path = LOGS / name
    if not path.is_file():
        pytest.skip(f"{name} not present")
    logs, res = _real_fit(name, base)
    out = F.write_profile(res, tmp_path / "cluster.yaml")
    after = C.check(logs, str(out), tolerance=0.05)
    assert after.passed, after.verdict()
    # with margin: the largest median any of these logs reached over six seeds of the global search
    # is 3.5 % (log 09; benchmarks/calibration_table.py prints the seed-independent figures of the doc)
    assert after.summary["median_abs_error_ge_1MB"] < 0.04
    # what fit reported as "after" is what check measures on the written profile
    assert res.files[0]["after"]["median_abs_error_ge_1MB"] == pytest.approx(after.summary["median_abs_error_ge_1MB"],
                                                                             abs=1e-4)


LOG_11 = "11-mi300x16-2node-roce-rccl-allreduce-oldstyle-devlines-hisohara.txt"


@pytest.fixture(scope="module")
def log11():
    if not (LOGS / LOG_11).is_file():
        pytest.skip(f"{LOG_11} not present")
    logs, res = _real_fit(LOG_11, "mi300x")
    return logs, "mi300x", res.files[0]["after"]["median_abs_error_ge_1MB"]


@pytest.mark.parametrize("change", ["data", "seed+1", "seed+3", "seed+22"])
def test_real_log_fit_is_robust(log11, change, monkeypatch):
    # Issue 9: log 11 fitted to 2.3 % on one machine and 5.6 % on another - two basins of the
    # objective, and the old search found one or the other depending on the last bits of the data.
    # Moving every measured time by 1e-9 (relative), or seeding the global search differently (a
    # far larger change than another machine's rounding), must land within 0.5 percentage point of
    # the same answer and well inside 5 %. From the shipped mi300x profile, 32 seeds all gave
    # 2.35 % (2.35-2.36); with 300 generations seeds +3 and +22 (among 5 of 32) fell into a second
    # basin at 2.92 %, which is why they are among the seeds tried here.
    logs, base, ref = log11
    assert ref < 0.03
    if change == "data":
        place = F.place

        def moved(log, hw, algorithm=None, **kw):
            pl = place(log, hw, algorithm, **kw)
            pl.times = pl.times * (1 + 1e-9 * np.random.default_rng(3).standard_normal(pl.times.size))
            return pl

        monkeypatch.setattr(F, "place", moved)
    else:
        monkeypatch.setattr(FS, "RANDOM_SEED", FS.RANDOM_SEED + int(change.split("+")[1]))
    got = F.fit(logs, base).files[0]["after"]["median_abs_error_ge_1MB"]
    assert got == pytest.approx(ref, abs=0.005)


def test_fit_refuses_a_log_of_another_gpu(cli, tmp_path):
    """Newcomer review §4: an H100 log fitted onto --hardware mi300x proceeded with a trailing
    note. A fit writes the log's network into the profile: refused, one line; a check still runs
    and notes it."""
    S = np.array(SWEEP)
    truth = load_hardware("h100-sxm")
    log = write_log(tmp_path / "h100.txt", "all_reduce", 8, 1, S, collective_time(truth, "all_reduce", S, 8, 8),
                    gpu="NVIDIA H100 80GB HBM3")
    res = cli("calibrate", "fit", log, "--hardware", "mi300x", "--out", tmp_path / "x.yaml")
    assert_one_line_error(res, "NVIDIA H100 80GB HBM3", "mi300x")
    assert not (tmp_path / "x.yaml").exists()
    chk = cli("calibrate", "check", log, "--hardware", "mi300x", "--tolerance", "1000%")
    assert chk.code == 0, chk.err              # an H100 log against the MI300X profile: off, but within 1000 %
    assert "is not the profile's" in chk.out + chk.err
