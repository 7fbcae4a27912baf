"""`llmpar calibrate serve`: the readers on real benchmark outputs (tests/data/serving/, sources in
its SOURCES.md), the physics checks, the fit and the profile it writes (docs/serving.md)."""

from __future__ import annotations

import math

import pytest
from conftest import REPO, assert_one_line_error

from llmpar.calibrate.serve_logs import read

DATA = REPO / "tests" / "data" / "serving"


def test_vllm_json_and_its_text_summary_read_the_same_run():
    """vllm bench serve (v0.15 keys), Llama 3.1 70B on 8 x H100: 1,000 prompts, 1,023,000 input and
    128,000 output tokens -> 1,023 / 128 per request; max concurrency 100; 2,040.01 output tok/s."""
    (j,) = read(DATA / "vllm-bench-serve-llama3.1-70b-8xH100-tp8-isl1024-osl128-c100.json")
    (t,) = read(DATA / "vllm-bench-serve-llama3.1-70b-8xH100-tp8-isl1024-osl128-c100.txt")
    for r in (j, t):
        assert (r["isl"], r["osl"], r["load"]) == (1023, 128, {"concurrency": 100})
        assert r["measured"]["output_tokens_per_s"] == pytest.approx(2040.01, abs=0.01)
        assert r["measured"]["ttft_ms"]["median"] == pytest.approx(1680.33, abs=0.01)
        assert r["measured"]["tpot_ms"]["median"] == pytest.approx(35.93, abs=0.01)


def test_sglang_lines_with_infinity_and_variable_lengths():
    """SGLang 0.4 compact lines: an unlimited rate is the bare Infinity; lengths are the means
    (152,612 input tokens / 300 requests = 508.71)."""
    runs = read(DATA / "sglang-bench-serving-llama3.3-70b-4xH200-tp4-online.jsonl")
    assert runs[0]["isl"] == pytest.approx(152612 / 300)
    assert runs[0]["load"] == {"rate": 1.0}
    off = read(DATA / "sglang-bench-serving-llama3.3-70b-4xH200-tp4-offline.jsonl")
    assert all("offline" in r["load"] for r in off)


def test_trtllm_reports_old_and_new():
    """0.17 prints the lengths and 'Token Throughput'; the DeepSeek-R1 report prints neither
    lengths: it needs --isl/--osl."""
    (old,) = read(DATA / "trtllm-bench-llama3.1-8b-fp8-v0.17-tp1-isl128-osl128.txt")
    assert (old["isl"], old["osl"], old["load"]) == (128, 128, {"offline": 3000})
    assert old["measured"]["output_tokens_per_s"] == pytest.approx(28390.4265)
    assert old["stated"] == {"tp": 1, "pp": 1, "kv_dtype": "FP8"}
    with pytest.raises(Exception, match="--isl and --osl"):
        read(DATA / "trtllm-bench-deepseek-r1-fp8-8xH200-tp8-ep8-isl1k-osl2k-c1024.txt")


def test_rate_and_concurrency_above_the_block_in_old_logs():
    runs = read(DATA / "vllm-benchmark-serving-llama3.2-3b-4xL40S-llmd-log.txt")
    assert [r["load"] for r in runs] == [{"rate": 10.0}, {"rate": 30.0}, {"offline": 900}]


SGLANG_LOGS = (DATA / "sglang-bench-serving-llama3.3-70b-4xH200-tp4-online.jsonl",
               DATA / "sglang-bench-serving-llama3.3-70b-4xH200-tp4-offline.jsonl")


@pytest.fixture(scope="module")
def sglang_fit(tmp_path_factory):
    """(JSON, written profile) of one `calibrate serve` fit by name on the two SGLang logs, shared by
    the tests that need it (each fit is ~2.5 s: the suite's time budget, docs/testing.md)."""
    import contextlib
    import io
    import json

    from llmpar.cli.main import main

    out = tmp_path_factory.mktemp("sglang") / "sg.yaml"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            main(["calibrate", "serve", *map(str, SGLANG_LOGS), "--model", "llama-3.3-70b", "--hardware", "h200",
                  "--tp", "4", "--engine", "sglang", "--out", str(out), "--json"])
        except SystemExit as exc:
            assert not exc.code, exc.code
    return json.loads(buf.getvalue()), out


def test_fit_writes_a_profile_that_loads_and_cross_validates(cli, sglang_fit):
    d, out = sglang_fit
    from test_json_schema import assert_keys_pinned

    assert_keys_pinned(d, "calibrate serve")   # docs/json.md, calibrate serve
    assert d["cv_scheme"] == "leave-one-file-out"
    assert all(math.isfinite(v) for v in d["cv"].values())
    from llmpar.specs.registry import load_engine

    e = load_engine(str(out))
    assert e.extends == "sglang" and e.calibration["runs"] == 14
    # the written profile serves: its figures differ from the base's
    s = cli("serve", "llama-3.3-70b", "--hardware", "h200", "--tp", "4", "--rate", "2", "--isl", "512", "--osl", "512",
            "--engine", out, "--json")
    assert s.code == 0, s.err


def test_a_run_of_another_model_is_refused_not_fitted(cli):
    """Llama 3.2 3B runs (4 x L40S) read as Llama 3 8B on one H100: no set of engine constants
    reaches them; the fit says so instead of writing a profile."""
    assert_one_line_error(cli("calibrate", "serve", DATA / "vllm-benchmark-serving-llama3.2-3b-4xL40S-llmd-results.jsonl",
                              "--model", "llama-3-8b"), "--model")


def test_physics_refuses_an_impossible_tpot(cli, tmp_path):
    """A TPOT of 1 ms for Llama 3 70B on one H100 in bf16: reading its 141 GB of weights once takes
    141e9 / 3.35e12 = 42 ms at the datasheet bandwidth."""
    f = tmp_path / "fast.json"
    f.write_text('{"completed": 10, "total_input_tokens": 1000, "total_output_tokens": 1000, "request_rate": "inf", '
                 '"max_concurrency": 1, "output_throughput": 900.0, "median_tpot_ms": 1.0, "median_ttft_ms": 20.0}')
    g = tmp_path / "fast2.json"   # another run (concurrency 2): the same run twice is refused on its own
    g.write_text(f.read_text().replace('"max_concurrency": 1', '"max_concurrency": 2'))
    assert_one_line_error(cli("calibrate", "serve", f, g, "--model", "llama-3-70b", "--hardware", "h200"),
                          "below the", "weight")


def test_stated_tp_must_match(cli):
    assert_one_line_error(cli("calibrate", "serve", DATA / "trtllm-bench-llama3.1-8b-fp8-v0.17-tp1-isl128-osl128.txt",
                              "--model", "llama-3.1-8b", "--tp", "2", "--kv-dtype", "fp8", "--weights", "fp8"),
                          "TP Size 1")


def test_one_run_is_too_few_and_out_never_overwrites_an_input(cli, tmp_path):
    one = DATA / "vllm-bench-serve-llama3.1-70b-8xH100-tp8-isl1024-osl128-c100.json"
    assert_one_line_error(cli("calibrate", "serve", one, "--model", "llama-3.1-70b", "--tp", "8"), "needs 2")
    assert_one_line_error(cli("calibrate", "serve", one, "--model", "llama-3.1-70b", "--tp", "8", "--out", one),
                          "one of the files")


def test_not_a_benchmark_file(cli, tmp_path):
    f = tmp_path / "x.txt"
    f.write_text("hello\n")
    assert_one_line_error(cli("calibrate", "serve", f, "--model", "llama-3-8b"), "no serving benchmark result")
    assert_one_line_error(cli("calibrate", "serve", tmp_path / "missing.json", "--model", "llama-3-8b"), "not found")


def test_genai_perf_export_and_its_streaming_bug():
    """GenAI-Perf (perf_analyzer#298, Llama 3.1 8B on Triton + TRT-LLM): the non-streaming export has
    200.85 / 567.84 mean tokens at concurrency 100 and 12,277.7 output tokens/s, and no TTFT worth
    reading (it equals the request latency); the streaming one reports 2,566 output tokens for 500
    requested, GenAI-Perf 24.11-24.12's bug: refused with file:line."""
    (r,) = read(DATA / "genai-perf-trtllm-triton-kserve-c100-nonstreaming.json")
    assert (r["isl"], r["osl"], r["load"]) == (200.85, 567.84, {"concurrency": 100})
    assert r["measured"] == {"output_tokens_per_s": pytest.approx(12277.70340876071)}
    with pytest.raises(Exception, match="streaming.json:1: output length 2,566 is 5.1x"):
        read(DATA / "genai-perf-trtllm-triton-kserve-c100-streaming.json")


def test_genai_perf_csv_is_refused_naming_the_json(cli):
    # a real profile_export_genai_perf.csv (tests/data/serving/SOURCES.md): latencies and
    # throughputs but no concurrency or request rate, so nothing can be predicted against it
    csv = REPO / "tests" / "data" / "serving" / "genai-perf-llama3.1-405b-fp8-dynamo-isl3000.csv"
    assert_one_line_error(cli("calibrate", "serve", csv, "--model", "llama-3.1-405b", "--hardware", "h100-sxm"),
                          "GenAI-Perf's CSV export states no load", "profile_export_genai_perf.json")


def test_a_model_and_hardware_given_as_files_fit_as_their_names_do(cli, tmp_path, sglang_fit):
    """`calibrate serve ... --model ./m.yaml --hardware ./h.yaml` read the files, then looked the
    fit's rows up by name and failed ("unknown model 'm33'"; reliability re-check 2026-12-03).
    Files that only rename the shipped specs fit exactly as the shipped names do."""
    (tmp_path / "m33.yaml").write_text("name: m33\nextends: llama-3.3-70b\n")
    (tmp_path / "h2.yaml").write_text("name: h2\nextends: h200\n")
    common = ("--tp", "4", "--engine", "sglang", "--json")
    by_file = cli("calibrate", "serve", *SGLANG_LOGS, "--model", tmp_path / "m33.yaml", "--hardware",
                  tmp_path / "h2.yaml", *common)
    assert by_file.code == 0, by_file.err
    assert by_file.json()["cv"] == sglang_fit[0]["cv"]   # the same fit by the shipped names
    # the rows carry the given specs (ServingRow.specs); the name-keyed cache of the fit is never
    # written with them (it was swapped in and out around the fit: state a second caller could see)
    from llmpar.serving import fit as F

    assert ("m33", "h2") not in F._SPECS


# ----------------------------------------------- measurements refused before a fit (review of 2026-12-03)
R70 = DATA / "vllm-bench-serve-llama3.1-70b-8xH100-tp8-isl1024-osl128-c100.json"


def test_a_log_of_another_model_is_refused(cli):
    """The vLLM result names its model ("/workspace/models/Llama-3.1-70B"): a fit under --model
    llama-3-8b (another size) or mixtral-8x7b (another family) had fitted the engine to the wrong
    model's runs, exit 0."""
    assert_one_line_error(cli("calibrate", "serve", R70, "--model", "llama-3-8b", "--tp", "1"),
                          f"{R70}:1", "states 70b, not llama-3-8b's")
    assert_one_line_error(cli("calibrate", "serve", R70, "--model", "mixtral-8x7b", "--tp", "8"),
                          "is a llama model, not mixtral-8x7b")


def test_one_run_given_twice_is_refused(cli):
    """The same file twice, or one run in its JSON and its text summary (they agree to the text's
    2 decimals), had been fitted as independent runs and cross-validated 'leave-one-file-out'."""
    assert_one_line_error(cli("calibrate", "serve", R70, R70, "--model", "llama-3.1-70b", "--tp", "8"), "given twice")
    txt = R70.with_suffix(".txt")
    assert_one_line_error(cli("calibrate", "serve", R70, txt, "--model", "llama-3.1-70b", "--tp", "8"),
                          "the same run as", "one benchmark in two formats")


@pytest.mark.parametrize("field, value", [("median_tpot_ms", "0"), ("median_ttft_ms", "-5"),
                                          ("output_throughput", "NaN")])
def test_an_impossible_summary_figure_is_refused_not_replaced(cli, tmp_path, field, value):
    """A zero TPOT fell back to the mean's 17 ms, a negative TTFT to another field, a NaN
    throughput was dropped: each is now refused with the file and line."""
    import json

    d = json.loads(R70.read_text())
    text = json.dumps(d).replace(f'"{field}": {json.dumps(d[field])}', f'"{field}": {value}')
    f = tmp_path / "bad.json"
    f.write_text(text)
    assert_one_line_error(cli("calibrate", "serve", R70, f, "--model", "llama-3.1-70b", "--tp", "8"),
                          f"{f}:1", field, "positive number")


def test_isl_osl_for_files_that_state_their_lengths_are_refused(cli):
    """--isl/--osl are for trtllm-bench reports that print no lengths; on a vLLM result they
    changed nothing and exit 0."""
    assert_one_line_error(cli("calibrate", "serve", R70, R70.with_name(
        "sglang-bench-serving-llama3.1-70b-8xH100-tp8-isl1024-osl128-c100.jsonl"), "--model", "llama-3.1-70b",
        "--tp", "8", "--isl", "5000", "--osl", "7"), "--isl/--osl", "states its own request lengths")


def test_a_fitted_value_on_its_bound_is_named():
    """PARAMS' ranges: decode_bandwidth and gemm_efficiency 0.3-1.0, per_step_s 0-50 ms,
    per_request_s 0-0.5 s, per_seq_s 0-1 ms. A fit had printed `gemm_efficiency 1` and
    `per_seq_s 1e-09` as if estimates; on a bound (within 1e-6 of the range) each is named."""
    from llmpar.serving import fit as F

    assert F.at_bounds([0.8, 1.0, 0.002, 0.005, 1e-12]) == {"gemm_efficiency": "upper", "per_seq_s": "lower"}
    assert F.at_bounds({"values": [0.3, 0.9, 0.05, 0.1, 5e-5], "by_gen": {}}) == {"decode_bandwidth": "lower",
                                                                                 "per_step_s": "upper"}
    assert F.at_bounds([0.8, 0.9, 0.002, 0.005, 5e-5]) == {}


# R70: 1,000 requests completed of 1,000 sent in 62.745 s at 100 clients, 1,023,000 prompt and
# 128,000 output tokens, 15.94 requests/s. Each edit below makes one stated figure impossible
@pytest.mark.parametrize("edit, culprit", [
    ({"num_prompts": -5}, "num_prompts = -5"), ({"num_prompts": "inf"}, "num_prompts = 'inf'"),
    ({"num_prompts": "NaN"}, "num_prompts = 'NaN'"), ({"num_prompts": 0.5}, "num_prompts = 0.5"),
    ({"num_prompts": 1e300}, "num_prompts = 1e+300"),
    ({"max_concurrency": 0.5}, "max_concurrency = 0.5"), ({"max_concurrency": 1e-300}, "max_concurrency = 1e-300"),
    ({"completed": 10 ** 400}, "completed = 1000000"),
    # half an output token per request; 0.012 prompt tokens per request; more done than sent
    ({"total_output_tokens": 500}, "a mean output of 0.5 tokens"),
    ({"total_input_tokens": 12}, "a mean prompt of 0.012 tokens"),
    ({"completed": 5000, "total_input_tokens": 5115000, "total_output_tokens": 640000}, "more finished than were sent"),
    # a median token gap longer than the run; a NaN mean beside a good median
    ({"median_itl_ms": 1e300}, "itl of"), ({"mean_tpot_ms": "NaN"}, "mean_tpot_ms = 'NaN'"),
    # 1,000 requests / 62.7 s = 15.9/s: a request throughput of 1e300 or a rate of 1e-300 is not this run
    ({"request_throughput": 1e300}, "request_throughput 1e+300"),
    ({"request_rate": 1e-300}, "request_rate = 1e-300"),
])
def test_every_stated_count_and_figure_is_checked_before_a_fit(cli, tmp_path, edit, culprit):
    """Fuzz review 2026-12-04: these tracebacked (a logarithm of -5, int() of inf or NaN, a fit whose
    first residuals were not finite) or were fitted and the miss blamed on --model. Each is now one
    line naming the file and what is wrong, exit 2."""
    import json

    d = json.loads(R70.read_text())
    d.update(edit)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d))
    assert_one_line_error(cli("calibrate", "serve", R70, f, "--model", "llama-3.1-70b", "--tp", "8"), f"{f}:1", culprit)


@pytest.mark.parametrize("cfg, culprit", [
    ([1, 2], "input_config = [1, 2]"), ("x", "input_config = 'x'"),
    ({"concurrency": "inf"}, "concurrency = 'inf'"), ({"concurrency": 0.3}, "concurrency = 0.3"),
    ({"request_count": "inf"}, "request_count = 'inf'"),
])
def test_a_genai_perf_export_with_impossible_settings_is_refused(cli, tmp_path, cfg, culprit):
    import json

    good = next(DATA.glob("*genai*perf*.json"))
    d = json.loads(good.read_text())
    d["input_config"] = cfg
    f = tmp_path / "gp.json"
    f.write_text(json.dumps(d))
    assert_one_line_error(cli("calibrate", "serve", f, good, "--model", "llama-3.1-8b", "--tp", "1"), str(f), culprit)
