"""What a fuzz sweep of ~900 CLI invocations found on 2026-12-04, each fixed and pinned here under
the rule it broke (docs/architecture.md, exit codes): a traceback, a nan in the output, a search
that did not end, an option a mode ignored, or an error that blamed an option never given."""

from __future__ import annotations

import json
import math

import pytest

from conftest import REPO, assert_one_line_error

VLLM_C100 = REPO / "tests" / "data" / "serving" / "vllm-bench-serve-llama3.1-70b-8xH100-tp8-isl1024-osl128-c100.json"


# ---------------------------------------------------------------- tracebacks and nan

def test_a_plan_whose_layouts_share_one_micro_batch_count_and_none_offloads_prints(cli):
    """--global-batch 1: every layout runs one micro-batch and none offloads, so the offload term was
    one number beside per-layout arrays and reading row i of it raised IndexError (cost/step.py now
    broadcasts every term; results.step_numbers reads a 0-d term as every row's)."""
    r = cli("plan", "llama-3-8b", "--gpus", "8", "--global-batch", "1", "--top", "1", "--json")
    assert r.code == 0, r.err
    assert r.json()["plans"][0]["breakdown_s"]["offload"] == 0.0
    assert cli("sweep", "llama-3-8b", "--gpus", "8,16", "--global-batch", "1").code == 0


@pytest.mark.parametrize("field,value,culprit", [
    ("request_rate", 0, "request_rate = 0"), ("request_rate", "fast", "request_rate = 'fast'"),
    ("max_concurrency", -5, "max_concurrency = -5"), ("max_concurrency", 0, "max_concurrency = 0"),
    ("total_input_tokens", 0, "total_input_tokens = 0"),
    ("output_throughput", 1e-300, "disagrees with the run's own 128,000 output tokens"),
    ("mean_ttft_ms", 1e300, None),
])
def test_a_benchmark_file_with_an_impossible_figure_is_refused_with_its_place(cli, tmp_path, field, value, culprit):
    """A rate of 0 had reached a logarithm (ValueError: math domain error); a concurrency of 0 or a
    corrupted throughput had been fitted and the fit's miss blamed on --model. The run's own counts
    check its figures: output tokens / duration is its throughput (2,040/s here: 128,000 in 62.7 s),
    and no mean TTFT exceeds the run."""
    d = json.loads(VLLM_C100.read_text())
    d[field] = value
    if field == "mean_ttft_ms":
        d["median_ttft_ms"] = value   # the reader takes the median first
        culprit = "longer than the whole run"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    r = cli("calibrate", "serve", str(bad), "--model", "llama-3.1-70b", "--tp", "8")
    assert_one_line_error(r, "bad.json:1", culprit)


def test_a_checkpoint_bandwidth_below_a_disk_s_is_refused_not_printed_as_nan(cli):
    """1e-300 GB/s made the checkpoint stall infinite: 'goodput nan % -> nan days' and numpy warnings."""
    r = cli("plan", "llama-3-8b", "--gpus", "8", "--tokens", "1T", "--checkpoint-bandwidth", "1e-300GB/s")
    assert_one_line_error(r, "--checkpoint-bandwidth", "1 MB/s")
    ok = cli("plan", "llama-3-8b", "--gpus", "8", "--tokens", "1T", "--checkpoint-bandwidth", "0.001GB/s")
    assert ok.code == 0 and "nan" not in ok.out


# ------------------------------------------------------------------ searches that end

def test_serve_plan_disaggregated_search_at_a_huge_rate_ends(cli):
    """--rate 1e6 --disagg had looped over every replica count up to the colocated deployment's
    (1e5 of them: a minute at 1e5, unbounded above); the split is now one array over at most
    DISAGG_MAX_REPLICAS = 64 replicas. (No test times things: the call returning is the check.)"""
    r = cli("serve-plan", "llama-3-8b", "--rate", "1000000", "--disagg", "--top", "1", "--json")
    assert r.code == 0, r.err
    assert r.json()["candidates"][0]["replicas"] > 64    # colocated: rate / one replica's


# ---------------------------------------------- options a mode ignores, errors that blame

@pytest.mark.parametrize("args,culprit", [
    (("step", "llama-3-8b", "--gpus", "8", "--json", "--explain"), "--explain changes nothing with --json"),
    (("step", "llama-3-8b", "--gpus", "8", "--json", "--units", "gib"), "--units changes nothing with --json"),
    (("memory", "llama-3-8b", "--json", "--units", "gib"), "--units changes nothing with --json"),
    (("hardware", "--json", "--units", "gib"), "--units changes nothing with --json"),
    (("serve", "llama-3-8b", "--json", "--explain"), "--explain changes nothing with --json"),
    (("plan", "llama-3-8b", "--gpus", "8", "--emit", "megatron", "--top", "3"), "--top changes nothing with --emit"),
    (("plan", "llama-3-8b", "--gpus", "8", "--csv", "--explain-rank", "3"), "--explain-rank changes nothing"),
    (("sweep", "llama-3-8b", "--gpus", "8,16", "--tokens", "1T", "--deadline", "90d", "--csv"),
     "--deadline changes nothing with --csv"),
    (("step", "llama-3-8b", "--gpus", "8", "--ep-dispatcher", "deepep"), "llama-3-8b is dense"),
    (("step", "llama-3-8b", "--gpus", "8", "--ep-overlap", "0.5"), "llama-3-8b is dense"),
    (("plan", "llama-3-8b", "--gpus", "8", "--ep-overlap", "0.5"), "llama-3-8b is dense"),
    (("sweep", "llama-3-8b", "--min-gpus"), "--min-gpus"),
    (("plan", "mixtral-8x7b", "--gpus", "16", "--ep", "16"), "--ep 16 does not divide the 8 experts"),
    (("serve-plan", "llama-3-8b", "--rate", "0"), "positive number of requests per second"),
    (("serve-plan", "llama-3-8b", "--gpus", "1", "--engine", ","), "an empty name"),
    (("calibrate", "runs", str(REPO / "validation" / "llm-foundry-mpt.yaml"), "--fit", ""), "--fit names no parameter"),
])
def test_an_option_the_mode_does_not_read_is_refused(cli, args, culprit):
    """Each had printed exactly what the command prints without it (or, for plan --ep 16, exit 1
    'nothing to search' where step says exit 2 and why)."""
    r = cli(*args)
    assert_one_line_error(r, culprit)
    if "--rate" in args:
        assert "or inf" not in r.err          # serve-plan takes no inf: its message does not offer it


@pytest.mark.parametrize("gpus,replicas,tp", [(6, 3, 2), (12, 3, 4), (8, 1, 8), (3, 3, 1)])
def test_serve_gpus_without_tp_takes_the_largest_tp_that_divides_heads_and_gpus(cli, gpus, replicas, tp):
    """`serve llama-3-70b --gpus 6` had taken tp = 6 and refused it as '--tp 6 does not divide the
    64 heads', an option never given; 12 GPUs as 'not a multiple of tp x pp = 8 x 1'. Now tp is the
    largest divisor of the heads that divides gpus / pp, within a node; the rest replicas."""
    r = cli("serve", "llama-3-70b", "--gpus", str(gpus), "--json")
    assert r.code in (0, 1), r.err          # 1: a replica of tp 1-2 may hold no KV pool (DOES NOT FIT)
    s = r.json()["settings"]
    assert (s["replicas"], s["tp"]) == (replicas, tp)


def test_a_quantized_checkpoint_is_said_not_silently_costed_as_bf16(cli, tmp_path):
    """A config.json's quantization_config (an FP8 checkpoint) had been dropped with no word: the spec
    keeps it (`checkpoint`) and serve notes that the weights are costed as --weights says."""
    cfg = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
           "quantization_config": {"quant_method": "fp8"}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = cli("serve", "--hf", str(path), "--json")
    assert any("checkpoint is fp8" in n for n in r.json()["notes"])
    again = cli("serve", "--hf", str(path), "--weights", "fp8", "--json")
    assert not any("checkpoint is" in n for n in again.json()["notes"])
    assert cli("models", "show", str(path), "--json").json()["spec"]["checkpoint"] == "fp8"
    assert math.isfinite(r.json()["tpot_s"])


def test_vllm_splits_a_replica_s_experts_over_every_tp_rank_or_none(cli):
    """vLLM's --enable-expert-parallel makes EP = TP x DP (engines/vllm.yaml expert_parallel: tp):
    --ep 2 of tp 8 had been priced under vLLM although no vLLM flag runs it; SGLang and TensorRT-LLM
    take any divisor (--ep-size; moe_ep_size x moe_tp_size = tp)."""
    base = ("serve", "deepseek-v3", "--hardware", "h200", "--tp", "8", "--weights", "fp8")
    assert_one_line_error(cli(*base, "--ep", "2"), "--ep 2 with vllm", "give --ep 8")
    assert cli(*base, "--ep", "2", "--engine", "sglang").code == 0
    assert cli(*base, "--ep", "8").code == 0


# -------------------------------------------------- a newcomer's re-run of the planning tasks

@pytest.mark.parametrize("args", [("plan", "llama-3.1-405b", "--gpus", "2048", "--top", "3"),
                                  ("sweep", "llama-3-8b", "--gpus", "8,16"),
                                  ("validate", "--source", "korthikanti2022-table5"), ("hardware",)])
def test_columns_on_a_pipe_is_honoured_by_every_table(cli, monkeypatch, args):
    """docs/cli.md: on a pipe the width is COLUMNS when set. plan, sweep, validate and hardware had
    set 140-160 columns of their own (lines of 140-160 characters under COLUMNS=80)."""
    monkeypatch.setenv("COLUMNS", "80")
    r = cli(*args)
    assert r.code == 0, r.err
    assert max(len(line) for line in r.out.splitlines()) <= 80


def test_a_token_budget_s_days_and_cost_carry_their_band_in_text(cli):
    """The days, GPU-hours, energy and cost of a budget scale as the step time, so they carry its
    80 % band (evidence.speed_json); plan and step printed it only in --json (sweep in its table)."""
    r = cli("step", "llama-3-8b", "--gpus", "8", "--zero", "3", "--tokens", "1T", "--gpu-hour-price", "2")
    band = cli("step", "llama-3-8b", "--gpus", "8", "--zero", "3", "--tokens", "1T", "--gpu-hour-price", "2",
               "--json").json()["interval"]
    lo, hi = band["days"]
    assert f"80 % band: {lo:.1f}-{hi:.1f} days" in r.out
    assert "80 % band:" in cli("plan", "llama-3-8b", "--gpus", "8", "--tokens", "1T", "--top", "1").out


# ---------------------------------------------- a fuzz sweep of calibrate, specs and emitters

@pytest.mark.parametrize("args", [("validate", "--source", "korthikanti2022-table5", "--limit", "2"),
                                  ("calibrate", "runs", str(REPO / "validation" / "llm-foundry-mpt.yaml"), "--check")])
def test_a_bare_tolerance_above_one_is_refused_everywhere(cli, args):
    """`--tolerance 10` had meant 1000 % in validate and calibrate runs --check (a CI gate that can
    never fail) while calibrate check refused it: one parser now (units.parse_tolerance)."""
    assert_one_line_error(cli(*args, "--tolerance", "10"), "reads as a fraction (1000%)", "write 10% or 0.1")


@pytest.mark.parametrize("kind,text,culprit", [
    ("hardware", "tiers: [{name: nvlink, kind: nvlink, domain_size: 8, bandwidth: 450 GB/s, latency: 0.6}]",
     "0.6 s is more than any interconnect step"),
    ("hardware", "host_memory_per_gpu: 256", "256 bytes is less than any host memory per GPU"),
    ("hardware", "gpu_hour_price: 1e306", "gpu_hour_price"),
    ("stacks", "memory: {cuda_context_bytes: 0.6}", "0.6 bytes is less than any runtime buffer"),
])
def test_a_spec_number_missing_its_unit_is_refused_with_the_unit(cli, tmp_path, kind, text, culprit):
    """A bare tier latency had been seconds (0.6 meant as us: 600,000 us), a bare host memory or
    CUDA context bytes (256 meant as GB: 256 B), and a hand-written price of 1e306 printed 'cost inf'."""
    base = "h100-sxm" if kind == "hardware" else "megatron-core"
    f = tmp_path / "mine.yaml"
    f.write_text(f"name: mine\nextends: {base}\n{text}\n")
    assert_one_line_error(cli(kind, "show", str(f)), culprit)


@pytest.mark.parametrize("columns,culprit", [("step_time_s,step_time_ms", "step_time_s given twice"),
                                             ("mfu,mfu_pct", "mfu given twice"), ("model,Model", "model given twice")])
def test_a_runs_table_with_two_columns_for_one_figure_is_refused(cli, tmp_path, columns, culprit):
    """`step_time_s: 5` beside `step_time_ms: 9000` had read 9 s (the last column won, with no word);
    a layout knob given twice was already refused, a measurement or a record field now is too."""
    a, b = columns.split(",")
    vals = {"step_time_s": "5", "step_time_ms": "9000", "mfu": "0.4", "mfu_pct": "41", "model": "llama-3-8b",
            "Model": "llama-3-70b"}
    f = tmp_path / "runs.csv"
    head = ["model", "hardware", "gpus", "tp", "seq", "global_batch", "step_time_s"]
    cols = list(dict.fromkeys([*head, a, b]))
    row = {"model": "llama-3-8b", "hardware": "h100-sxm", "gpus": "8", "tp": "1", "seq": "8192",
           "global_batch": "64", "step_time_s": "5", **{k: vals[k] for k in (a, b)}}
    f.write_text(",".join(cols) + "\n" + ",".join(row[c] for c in cols) + "\n")
    assert_one_line_error(cli("calibrate", "runs", str(f), "--folds", "0"), "runs.csv:2", culprit)


def test_the_calibrate_sweep_s_options_that_changed_nothing_or_lacked_a_unit(cli, tmp_path):
    """hardware show --json --units gib printed what it prints without --units; calibrate runs --name
    without --out named nothing; a benchmark file's negative duration switched its own consistency
    check off; calibrate gemm --peak 1000 (meant as TFLOP/s) divided by 1 kFLOP/s."""
    assert_one_line_error(cli("hardware", "show", "h100-sxm", "--json", "--units", "gib"), "--units changes nothing")
    runs = str(REPO / "validation" / "llm-foundry-mpt.yaml")
    assert_one_line_error(cli("calibrate", "runs", runs, "--name", "foo"), "--name names the stack --out writes")
    d = json.loads(VLLM_C100.read_text())
    d["duration"] = -5
    bad = tmp_path / "neg.json"
    bad.write_text(json.dumps(d))
    assert_one_line_error(cli("calibrate", "serve", str(bad), "--model", "llama-3.1-70b", "--tp", "8"),
                          "neg.json:1", "duration = -5")


def test_a_long_nccl_tests_log_lists_its_first_rows_and_says_how_many_more(cli, tmp_path):
    """A 30,000-row log took 14-30 s to draw as one table; the table lists --rows (60) and says how
    many it left out; --json has every row."""
    from conftest import REPO as R

    src = (R / "tests" / "fixtures" / "nccl").glob("*.txt")
    log = next(iter(sorted(src)))
    lines = log.read_text().splitlines()
    at = [i for i, ln in enumerate(lines) if ln.strip() and ln.strip()[0].isdigit()]
    first, last = at[0], at[-1]
    rows = lines[first:last + 1]
    big = tmp_path / "big.txt"
    big.write_text("\n".join(lines[:first] + rows * 200 + lines[last + 1:]) + "\n")
    r = cli("calibrate", "parse", str(big), "--rows", "10")
    assert r.code == 0, r.err
    assert f"{len(rows) * 200 - 10:,} more rows not shown" in r.out
    assert_one_line_error(cli("calibrate", "parse", str(big), "--rows", "10", "--json"), "--rows")


def test_a_sweep_gives_the_failure_interval_at_its_smallest_and_largest_count(cli):
    """One GPU fails at λ = 1.97e-5 per hour (Llama 3 §3.3.4: 419 interruptions, 54 days, 16,384
    GPUs), so a job of N fails every 1 / (λ N) hours: 198 h at 256 GPUs, 12.4 h at 4,096. The sweep's
    note had given the largest count's alone, beside rows from 256 GPUs up."""
    r = cli("sweep", "llama-3-70b", "--gpus", "256,4096", "--tokens", "15T")
    assert r.code == 0, r.err
    assert "the job fails every 198 h at 256 GPUs; 12.4 h at 4,096 GPUs" in r.out.replace("\n", " ")


def test_rows_with_json_is_refused_in_both_calibrate_tables(cli):
    """--rows shortens a table; --json has every row or run: calibrate parse and calibrate runs refuse
    the pair alike (one had taken it silently)."""
    runs = str(REPO / "validation" / "llm-foundry-mpt.yaml")
    assert_one_line_error(cli("calibrate", "runs", runs, "--json", "--rows", "3"), "--rows")


R70 = REPO / "tests" / "data" / "serving" / "vllm-bench-serve-llama3.1-70b-8xH100-tp8-isl1024-osl128-c100.json"
SG70 = R70.with_name("sglang-bench-serving-llama3.1-70b-8xH100-tp8-isl1024-osl128-c100.jsonl")


@pytest.mark.parametrize("args", [
    ("validate", "--markdown", "--out"),
    ("plan", "llama-3-8b", "--gpus", "8", "--emit", "megatron", "--out"),
    ("calibrate", "serve", str(R70), str(SG70), "--model", "llama-3.1-70b", "--tp", "8", "--out"),
])
@pytest.mark.parametrize("path", ["", "."])
def test_an_empty_or_folder_out_is_refused_before_any_work(cli, args, path):
    """Fuzz review 2026-12-04: `--out ""` (which click reads as ".") reached the writer after the
    whole run and raised "PosixPath('.') has an empty name"; every writer now says it first (for an
    explicit folder click's own path check says it: "File '.' is a directory")."""
    r = cli(*args, path)
    assert_one_line_error(r)
    assert "is a folder: name the file to write" in r.err or "is a directory" in r.err, r.err


@pytest.mark.parametrize("args, culprit", [
    (("serve", "llama-3-8b", "--rate", "2", "--osl", "1", "--spec-tokens", "3", "--acceptance", "0.7"), "--spec-tokens with --osl 1"),
    (("serve-plan", "llama-3-8b", "--gpus", "8", "--osl", "1", "--spec-tokens", "3", "--acceptance", "0.7"),
     "--spec-tokens with --osl 1"),
    (("serve", "mixtral-8x7b", "--tp", "2", "--dp-attention", "--concurrency", "8", "--ep", "1"), "not --ep 1"),
])
def test_serving_options_that_would_change_nothing_are_refused(cli, args, culprit):
    """Fuzz review 2026-12-04: drafts for one-token answers, and --ep 1 beside --dp-attention (which
    puts the experts over every GPU of the replica), were taken and changed nothing."""
    assert_one_line_error(cli(*args), culprit)


def test_serve_plan_shows_no_tpot_for_one_token_answers_and_no_nan(cli):
    r = cli("serve-plan", "llama-3-8b", "--gpus", "8", "--osl", "1")
    assert r.code == 0, r.err
    assert "nan" not in r.out and "TPOT nan" not in r.out
    assert "#1: TTFT" in r.out and ", TPOT" not in r.out.split("#1:")[1].split("\n")[0]


def test_speculative_decoding_takes_at_least_one_step_per_request():
    """16 drafts at acceptance 0.99 emit E = (1 - 0.99^17) / 0.01 = 15.7 tokens a step, so the fluid
    (O - 1) / E read 1/15.7 of a step for O = 2 and a TPOT of 1 ms under a 10 ms iteration; one
    token after the first still takes one step: TPOT is then that step (at least the iteration)."""
    import llmpar

    r = llmpar.serve("llama-3-8b", osl=2, concurrency=4, spec_tokens=16, acceptance=0.99)
    assert r.tpot_s >= r.load["iteration_s"] * (1 - 1e-9)


def test_disagg_suggestion_names_tp_and_does_not_loop(cli):
    """`--disagg 1 --gpus 2` without --tp (tp fills the GPUs: replicas of 2) had suggested --disagg 2
    --gpus 4, where tp filled 4 and the next message suggested 8. It now names --tp."""
    r = cli("serve", "llama-3-8b", "--disagg", "1", "--gpus", "2", "--rate", "5")
    assert_one_line_error(r, "--tp 1 for a prefill pool of 1 GPU")
    assert cli("serve", "llama-3-8b", "--disagg", "1", "--gpus", "2", "--tp", "1", "--rate", "5").code == 0


def test_an_engine_with_no_generation_is_refused_at_load(cli, tmp_path):
    f = tmp_path / "t83.yaml"
    f.write_text("name: t83\nextends: vllm\ngenerations: []\n")
    assert_one_line_error(cli("serve", "llama-3-8b", "--engine", str(f), "--concurrency", "2"), "generations")


@pytest.mark.parametrize("text, seconds", [("1h", 3600.0), ("2 min", 120.0), ("500ms", 0.5)])
def test_latency_targets_read_minutes_and_hours(text, seconds):
    """The documented bound is 'at most an hour', which could not be written (`--ttft 1h` was
    unreadable); 0 and negatives now share one wording."""
    from llmpar.serving.plan_api import _slo
    from llmpar.errors import UserError

    assert _slo(text, "ttft") == pytest.approx(seconds)
    for bad in ("0ms", "-5ms"):
        with pytest.raises(UserError, match="must be positive"):
            _slo(bad, "ttft")


@pytest.mark.parametrize("rate", [[1.0, 2.0], 1 + 2j, True])
def test_api_rate_of_the_wrong_type_is_a_user_error(rate):
    import numpy as np

    import llmpar
    from llmpar.errors import UserError

    with pytest.raises(UserError, match="expected requests per second"):
        llmpar.serve("llama-3-8b", rate=np.array(rate) if isinstance(rate, list) else rate)


def test_a_calibrated_engine_is_not_called_prior_only():
    """serve-plan had said a `calibrate serve` profile rested on 'prior values only, fitted on no
    published run'; its calibration record makes it 'calibrated'."""
    from types import SimpleNamespace

    from llmpar.serving.plan_api import _engine_evidence

    assert _engine_evidence(SimpleNamespace(calibration={"runs": 4}, fitted_on=[])) == "calibrated"
    assert _engine_evidence(SimpleNamespace(calibration=None, fitted_on=["FITTED on x"])) == "fitted"
    assert _engine_evidence(SimpleNamespace(calibration=None, fitted_on=["a prior"])) == "prior only"


@pytest.mark.parametrize("value, needle", [("0", "must be positive: e.g. '450 GB/s'"), ("12", "e.g. '12 GB/s'")])
def test_a_bare_bandwidth_is_told_its_unit(cli, value, needle):
    """`--checkpoint-bandwidth 0` had read "cannot read ... expected e.g. '450 GB/s'" (fuzz review)."""
    assert_one_line_error(cli("sweep", "llama-3-8b", "--gpus", "8", "--tokens", "1T", "--checkpoint-bandwidth", value),
                          "needs its unit", needle)


def test_plan_emit_takes_top_1_and_a_lone_sweep_row_is_one_row(cli):
    """--top 1 agrees with what --emit prints (it had been refused as changing nothing); "(1 rows"."""
    assert cli("plan", "llama-3-8b", "--gpus", "8", "--top", "1", "--emit", "megatron").code == 0
    assert_one_line_error(cli("plan", "llama-3-8b", "--gpus", "8", "--top", "2", "--emit", "megatron"), "--top")
    for moot in (("--pareto",), ("--explain-rank", "3")):   # still refused beside it
        assert_one_line_error(cli("plan", "llama-3-8b", "--gpus", "8", *moot, "--emit", "megatron"), moot[0])
    assert_one_line_error(cli("sweep", "llama-3-8b", "--gpus", "1000000"), "(1 row: see the reasons)", code=1)
