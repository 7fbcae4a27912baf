"""Findings of a fuzz review of the readers (HF configs, nccl-tests logs, runs tables and training
logs, serving benchmark results) and the unit parsers, each named after what it had done: a
traceback, a value read wrongly, or a measurement dropped or fitted unsaid. Each now ends in one
line (exit 2), a note, or the value as written."""

from __future__ import annotations

import copy
import json
import math

import pytest

import llmpar
from conftest import REPO, assert_one_line_error
from llmpar.errors import UserError
from llmpar.specs.hf import load_hf_config
from test_hf import GEMMA3_27B, LLAMA4_MAVERICK, LLAMA_3_8B, QWEN3_32B, write

NCCL = REPO / "tests" / "fixtures" / "nccl"
TITAN_LOG = REPO / "tests" / "fixtures" / "train_logs" / "torchtitan_pr1287_llama3_8b.log"


# ----------------------------------------------------------------------------- JSON readers

def test_an_integer_of_5000_digits_is_one_line_not_a_traceback(cli, tmp_path):
    # Python refuses int-from-text beyond 4,300 digits with a ValueError the JSON reader let through
    cfg = dict(LLAMA_3_8B)
    path = write(tmp_path, cfg)
    path.write_text(path.read_text().replace('"hidden_size": 4096', '"hidden_size": ' + "9" * 5000))
    assert_one_line_error(cli("memory", "--hf", path), "a number too long to read")
    with pytest.raises(UserError, match="a number too long to read"):
        llmpar.load_model(hf=str(path))


def test_nccl_json_config_that_is_not_an_object(cli, tmp_path):
    doc = json.loads((NCCL / "allreduce_8r2n.json").read_text())
    doc["config"] = "x"   # had been AttributeError: 'str' object has no attribute 'get'
    f = tmp_path / "c.json"
    f.write_text(json.dumps(doc))
    assert_one_line_error(cli("calibrate", "parse", f), "'config' is not an object")


def test_nccl_json_fractional_size_is_refused_not_truncated(cli, tmp_path):
    doc = json.loads((NCCL / "allreduce_8r2n.json").read_text())
    doc["results"][1]["size"] = doc["results"][1]["size"] + 0.5   # int() had read it as the size below
    f = tmp_path / "s.json"
    f.write_text(json.dumps(doc))
    assert_one_line_error(cli("calibrate", "parse", f), "results[1]", "integer size")


def test_nccl_row_whose_time_contradicts_its_algbw_is_flagged(cli, tmp_path):
    # nccl-tests prints algbw = size / time: the 16 MiB row's 250 us gives 16,777,216 / 250e-6 / 1e9
    # = 67.1 GB/s, the 67.11 it prints. A time of 1e30 us gives 1.7e-23 GB/s against the same 67.11:
    # a corrupted row, which had been fitted (and printed as a 1e24 s step)
    text = (NCCL / "current_allgather_4r2n.txt").read_text()
    row = next(ln for ln in text.splitlines() if ln.split()[:1] == ["16777216"])
    assert 16777216 / 250e-6 / 1e9 == pytest.approx(67.11, abs=0.01)
    f = tmp_path / "t.txt"
    f.write_text(text.replace(row, row.replace("250.00", "1e30", 1)))
    res = cli("calibrate", "parse", f, "--json")
    assert res.code == 0, res.err
    rows = {r["size_bytes"]: r for r in res.json()["files"][0]["rows"]}
    assert rows[16777216]["flagged"] and "disagree" in rows[16777216]["problem"]
    # the untouched file has no such row: the check agrees with every real row it reads
    clean = cli("calibrate", "parse", NCCL / "current_allgather_4r2n.txt", "--json").json()
    assert not any("disagree" in (r["problem"] or "") for r in clean["files"][0]["rows"])


# --------------------------------------------------------------------------------- HF configs

def test_cost_keys_inside_text_config_are_checked(tmp_path):
    # the unread-key check had looked at the top level only: 64 experts in Gemma 3's text model
    # were dropped and the model read as the dense 27B
    cfg = copy.deepcopy(GEMMA3_27B)
    cfg["text_config"].update(num_experts=64, num_experts_per_tok=8)
    with pytest.raises(UserError, match=r"key 'text_config.num_experts' changes the cost"):
        load_hf_config(write(tmp_path, cfg, "g"))
    cfg = copy.deepcopy(LLAMA4_MAVERICK)
    cfg["text_config"]["kv_lora_rank"] = 512
    with pytest.raises(UserError, match=r"key 'text_config.kv_lora_rank' changes the cost"):
        load_hf_config(write(tmp_path, cfg, "l"))


def test_a_top_level_window_beside_text_config_is_not_taken_as_read(tmp_path):
    # text_config's sliding_window had marked the top-level one read as well
    cfg = copy.deepcopy(GEMMA3_27B)
    cfg["sliding_window"] = 4096
    with pytest.raises(UserError, match=r"key 'sliding_window' changes the cost"):
        load_hf_config(write(tmp_path, cfg))


def test_layer_types_beside_a_null_window_is_read(tmp_path):
    # newer transformers save layer_types = full_attention x layers with sliding_window null: the
    # same model as without them (it had been refused: "qwen3 has no such field")
    plain = load_hf_config(write(tmp_path, QWEN3_32B, "a"))
    cfg = dict(QWEN3_32B, sliding_window=None, layer_types=["full_attention"] * QWEN3_32B["num_hidden_layers"])
    typed = load_hf_config(write(tmp_path, cfg, "b"))
    assert typed.model_dump(exclude={"source", "name"}) == plain.model_dump(exclude={"source", "name"})
    cfg["layer_types"] = ["sliding_attention"] + cfg["layer_types"][1:]
    with pytest.raises(UserError, match="lists sliding_attention layers, but sliding_window is null"):
        load_hf_config(write(tmp_path, cfg, "c"))


def test_llama4_no_rope_layers_of_the_wrong_length(tmp_path):
    # [1, 0] on 48 layers had fallen back to "three of every four" unsaid
    cfg = copy.deepcopy(LLAMA4_MAVERICK)
    cfg["text_config"]["no_rope_layers"] = [1, 0]
    with pytest.raises(UserError, match=r"'no_rope_layers' must list 1 .* or 0 per layer \(48\)"):
        load_hf_config(write(tmp_path, cfg))


@pytest.mark.parametrize("p", [math.nan, -1, 1e308, math.inf])
def test_a_dropout_probability_is_from_0_to_1(tmp_path, p):
    # NaN had read as no dropout and 1e308 as dropout on (48.39 -> 48.95 GB)
    with pytest.raises(UserError, match="'attention_dropout' must be a probability from 0 to 1"):
        load_hf_config(write(tmp_path, dict(LLAMA_3_8B, attention_dropout=p)))   # json writes NaN, Infinity


# ------------------------------------------------------------------------------------- units

def test_a_bidirectional_checkpoint_bandwidth_is_halved():
    # a write is one direction: '2 GB/s bidirectional' is 1 GB/s (the qualifier had been dropped).
    # At 1 GB/s per node the checkpoint takes twice as long as at 2 GB/s
    g = {bw: llmpar.step("llama-3-8b", gpus=8, tokens="1T", checkpoint_bandwidth=bw).training["goodput"]
         for bw in ("2GB/s bidirectional", "1 GB/s", "2 GB/s")}
    assert g["2GB/s bidirectional"]["checkpoint_write_s"] == pytest.approx(g["1 GB/s"]["checkpoint_write_s"])
    assert g["1 GB/s"]["checkpoint_write_s"] == pytest.approx(2 * g["2 GB/s"]["checkpoint_write_s"])


def test_binary_bandwidth_prefixes_are_read():
    from llmpar.units import parse_bandwidth

    assert parse_bandwidth("25 GiB/s") == (25 * 2**30, False)      # had been "cannot read"
    assert parse_bandwidth("3.35 TiB/s")[0] == pytest.approx(3.35 * 2**40)
    assert parse_bandwidth("400 Gb/s") == (50e9, False)            # decimal, bits: unchanged


@pytest.mark.parametrize("args, culprit", [
    (("step", "llama-3-8b", "--gpus", "8", "--tokens", "1T", "--gpu-hour-price", "1_000"), "--gpu-hour-price"),
    (("step", "llama-3-8b", "--gpus", "8", "--tokens", "1T", "--pue", "1_2"), "--pue"),
    (("serve", "llama-3-8b", "--rate", "1_0"), "--rate"),
])
def test_underscores_in_numbers_are_refused_everywhere(cli, args, culprit):
    # float("1_0") is 10.0: a few options took Python's literal underscores while sizes, times and
    # bandwidths refused them
    assert_one_line_error(cli(*args), culprit)


def test_runs_table_step_time_with_an_underscore(cli, tmp_path):
    # '6_5' had been read as 65 s and fitted
    f = tmp_path / "runs.csv"
    f.write_text("model,hardware,gpus,tp,global_batch,seq,step_time_s\nllama-3-8b,h100-sxm,8,1,64,8192,6_5\n")
    assert_one_line_error(cli("calibrate", "runs", f, "--check"), "runs.csv:2", "step_time_s", "6_5")


# ------------------------------------------------------------------------------ runs and logs

def test_out_and_plot_naming_one_file(cli, tmp_path):
    # calibrate runs had reported writing both; the YAML replaced the figure
    f = tmp_path / "runs.csv"
    f.write_text("model,hardware,gpus,tp,global_batch,seq,step_time_s\nllama-3-8b,h100-sxm,8,1,64,8192,6.5\n"
                 "llama-3-8b,h100-sxm,8,2,64,8192,7.0\n")
    same = tmp_path / "same.svg"
    assert_one_line_error(cli("calibrate", "runs", f, "--folds", "0", "--out", same, "--plot", same),
                          "--out and --plot both name")
    assert not same.exists()
    from llmpar.outputs import refuse_same_outputs   # the one rule, also behind plan/sweep/validate's outputs

    with pytest.raises(UserError, match="--out and --html both name"):
        refuse_same_outputs({"--out": tmp_path / "r.html", "--plot": None, "--html": tmp_path / "." / "r.html"})


@pytest.mark.parametrize("edit, culprit", [
    (("mfu: 34.37%", "mfu: 340.37%"), "above 100 %"),
    (("tps: 5,869", "tps: -5,869"), "is negative"),
])
def test_a_log_line_that_is_no_measurement_is_refused(cli, tmp_path, edit, culprit):
    # a steady-state line with a 340 % MFU or negative tokens/s had gone into the median unsaid
    # (docs/runs-format.md promises the refusal "from any column or log line")
    lines = TITAN_LOG.read_text().splitlines(keepends=True)
    i = next(k for k, ln in enumerate(lines) if "step: 230" in ln)
    lines[i] = lines[i].replace(*edit)
    f = tmp_path / "t.log"
    f.write_text("".join(lines))
    assert_one_line_error(cli("calibrate", "runs", f, "--model", "llama-3-8b", "--layout",
                              "gpus=8,seq=8192,global_batch=64", "--check"), f"t.log:{i + 1}", culprit)


def test_figures_a_table_gives_but_cannot_use_are_said(tmp_path):
    from llmpar.calibrate.runs_io import read_runs

    f = tmp_path / "runs.csv"
    f.write_text("model,hardware,gpus,tp,global_batch,seq,step_time_s,peak_reserved_gib,status\n"
                 "llama-3-8b,h100-sxm,8,1,64,8192,6.5,60,oom\n"        # an OOM row with a time
                 "llama-3-8b,h100-sxm,8,2,64,8192,7.0,0,ok\n"          # a zero peak
                 "llama-3-8b,h100-sxm,8,4,64,8192,6.0,50,ok\n"
                 "llama-3-8b,h100-sxm,8,4,64,8192,12.0,50,ok\n")       # the same run, 2x apart
    notes = read_runs([f]).notes
    assert any("runs.csv:2: status oom beside measured" in n for n in notes), notes
    assert any("runs.csv:3: peak_reserved_bytes = 0 is no measurement" in n for n in notes), notes
    assert any("runs.csv:4 and" in n and "runs.csv:5" in n and "2.00x apart" in n for n in notes), notes


def test_serving_result_whose_model_id_is_not_text(cli, tmp_path):
    data = REPO / "tests" / "data" / "serving"
    online = data / "sglang-bench-serving-llama3.3-70b-4xH200-tp4-online.jsonl"
    lines = online.read_text().splitlines()
    rec = json.loads(lines[2])
    rec["model_id"] = 5   # had skipped the check of the served model against --model
    lines[2] = json.dumps(rec)
    f = tmp_path / "on.jsonl"
    f.write_text("\n".join(lines) + "\n")
    assert_one_line_error(cli("calibrate", "serve", f, data / "sglang-bench-serving-llama3.3-70b-4xH200-tp4-offline.jsonl",
                              "--model", "llama-3.3-70b", "--hardware", "h200", "--tp", "4", "--engine", "sglang"),
                          "on.jsonl:3", "model_id = 5")


def test_sweep_whose_deadline_no_count_makes_exits_1(cli):
    # Llama 3 8B on 16 H100 at ~20 % MFU trains 100B tokens in weeks, not a day: nothing swept
    # answers the question --deadline asks (valid, nothing feasible: exit 1), after the table
    res = cli("sweep", "llama-3-8b", "--gpus", "8,16", "--tokens", "100B", "--deadline", "1d")
    assert_one_line_error(res, "1-day deadline", "larger counts", code=1)
    assert "deadline 1.00 days: no swept count of h100-sxm makes it" in res.out


# ------------------------------------------------------------------------ smaller findings

def test_quantization_config_is_a_mapping_and_memory_says_it(cli, tmp_path):
    with pytest.raises(UserError, match="'quantization_config' must be a mapping"):
        load_hf_config(write(tmp_path, dict(LLAMA_3_8B, quantization_config="fp8"), "s"))
    # memory --inference counts the weights at --dtype: it now says the checkpoint is quantized,
    # as serve does (2 B/param for bf16, not the checkpoint's 0.5)
    path = write(tmp_path, dict(LLAMA_3_8B, quantization_config={"quant_method": "gptq", "bits": 4}), "q")
    res = cli("memory", "--hf", path, "--inference", "--json")
    assert any("the checkpoint is gptq 4-bit" in a and "(2 B/param)" in a for a in res.json()["assumptions"])


def test_qwen3_moe_mlp_only_layers_are_layer_indices(tmp_path):
    from test_hf import QWEN3_30B_A3B

    with pytest.raises(UserError, match=r"'mlp_only_layers' must be a list of layer indices from 0 to 47"):
        load_hf_config(write(tmp_path, dict(QWEN3_30B_A3B, mlp_only_layers=[-1, 100])))


def test_a_nested_text_model_of_another_type(tmp_path):
    cfg = copy.deepcopy(GEMMA3_27B)
    cfg["text_config"]["model_type"] = "llama"   # had been read as gemma3_text unsaid
    with pytest.raises(UserError, match=r"'text_config.model_type' is 'llama'"):
        load_hf_config(write(tmp_path, cfg))


def test_a_runs_table_stack_is_checked_where_it_is_written(cli, tmp_path):
    f = tmp_path / "runs.yaml"
    f.write_text("stack: 5\nhardware: h100-sxm\nruns:\n"
                 "  - {model: llama-3-8b, gpus: 8, tp: 1, global_batch: 64, seq: 8192, step_time_s: 6.5}\n")
    assert_one_line_error(cli("calibrate", "runs", f, "--check"), "runs.yaml: top level", "stack must be")


@pytest.mark.parametrize("args, needle", [
    (("step", "llama-3-8b", "--gpus", "8", "--tokens", "1T", "--restart-time", "10 GB"), "'10 GB'"),  # not '10 gb'
    (("collective", "all-reduce", "--size", "nan"), "--size 'nan'"),
    (("calibrate", "runs", str(TITAN_LOG), "--model", "llama-3-8b", "--layout", "seq=8k", "--check"),
     "--layout/--model/--hardware: seq"),
])
def test_refusals_name_the_option_as_typed(cli, args, needle):
    assert_one_line_error(cli(*args), needle)


def test_greek_mu_and_negative_zero():
    from llmpar.units import parse_seconds

    assert parse_seconds("30μs") == parse_seconds("30µs") == pytest.approx(30e-6)   # U+03BC and U+00B5
    r = llmpar.memory("llama-3-8b", reserve="-0")
    assert math.copysign(1.0, r.memory["runtime_bytes"]) == 1.0   # had printed "-0.00 GiB"
