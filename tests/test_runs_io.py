"""llmpar.calibrate.runs_io / train_logs: measured runs in (tables and training logs), one record out.

The log fixtures in tests/fixtures/train_logs/ are excerpts of real logs posted in public GitHub
issues and pull requests; each file's header names its source (one synthetic file says so). Every
expected number below is derived by hand from the lines visible in the fixture.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmpar.calibrate.runs_io import read_runs
from llmpar.calibrate.runs_record import ALIASES, MeasuredRun
from llmpar.calibrate.train_logs import WARMUP_ITERS
from llmpar.errors import UserError

LOGS = Path(__file__).parent / "fixtures" / "train_logs"
PLAYBOOK = Path(__file__).resolve().parents[2] / "shared" / "validation" / "hf_playbook_runs_1b_3b.yaml"
MIB, GIB = 2.0**20, 2.0**30


def one(path, **kw) -> MeasuredRun:
    got = read_runs([path], **kw)
    assert len(got.runs) == 1
    return got.runs[0]


def write(tmp_path, name, text) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ----------------------------------------------------------------------------- real log excerpts

def test_megatron_issue756_mixtral():
    # NVIDIA/Megatron-LM#756. Logged iterations 2,3,4,29,30,31,71,72,73; warm-up drops 2 (the first
    # logged) and 3 (<= 3). Step time = median(5364.1, 5912.1, 5571.1, 5718.9, 5361.6, 5470.7, 5829.9) ms
    # = 5571.1 ms; TFLOP/s/GPU = median(243.5, 220.9, 234.4, 228.3, 243.6, 238.7, 224.0) = 234.4.
    r = one(LOGS / "megatron_lm_issue756_mixtral_16xh100.log", defaults={"gpus": 16})
    assert WARMUP_ITERS == 3
    assert r.step_time_s == pytest.approx(5.5711)
    assert r.tflops_per_gpu == pytest.approx(234.4)
    # [Rank 1] memory report: max allocated 54250.98583984375 MB, max reserved 61480.0 MB (MB = MiB)
    assert r.peak_allocated_bytes == pytest.approx(54250.98583984375 * MIB)
    assert r.peak_reserved_bytes == pytest.approx(61480.0 * MIB)
    assert r.layout["global_batch"] == 128 and r.layout["gpus"] == 16 and r.layout["dp"] == 16
    assert r.status == "ok" and r.source.endswith("megatron_lm_issue756_mixtral_16xh100.log:7")
    assert r.notes == ()  # the truncated iteration-4 line still has its elapsed time and TFLOP/s


def test_megatron_issue60_old_format():
    # NVIDIA/Megatron-LM#60 (2020 format): iterations 5, 10, 15; the first logged (5: 16491.5 ms) is
    # warm-up, step time = median(1993.9, 1978.1) = 1986.0 ms. "after 5 iterations memory (MB)":
    # max allocated 12606.06201171875, max reserved 17482.0.
    r = one(LOGS / "megatron_lm_issue60_gpt2_v100.log", defaults={"tp": 2, "dp": 8})
    assert r.step_time_s == pytest.approx(1.986)
    assert r.tflops_per_gpu is None
    assert r.peak_allocated_bytes == pytest.approx(12606.06201171875 * MIB)
    assert r.peak_reserved_bytes == pytest.approx(17482.0 * MIB)
    assert r.layout["gpus"] == 16  # mp=2 dp=8 from the issue's title, given as defaults


def test_megatron_epfl_issue22_truncated_line_is_a_note():
    # epfLLM/Megatron-LLM#22, TP=2 PP=1: iterations 5 (warm-up) and 10 (14642.7 ms); the third line is
    # cut before its elapsed time: a note with file:line, not silently dropped.
    got = read_runs([LOGS / "megatron_llm_epfl_issue22_llama2_7b_tp2.log"], defaults={"tp": 2, "pp": 1})
    r = got.runs[0]
    assert r.step_time_s == pytest.approx(14.6427)
    assert r.layout["global_batch"] == 64 and r.layout["tp"] == 2
    assert any("megatron_llm_epfl_issue22_llama2_7b_tp2.log:6:" in n for n in got.notes)


def test_nemo2_bionemo_pr740():
    # NVIDIA-BioNeMo/bionemo-recipes#740: steps 120-125 (126 cut). 120 is the first logged, dropped;
    # median(0.03163, 0.03215, 0.03157, 0.0317, 0.03147) = 0.03163 s.
    got = read_runs([LOGS / "nemo2_bionemo_recipes_pr740.log"], defaults={"gpus": 1})
    r = got.runs[0]
    assert r.step_time_s == pytest.approx(0.03163)
    assert r.layout["global_batch"] == 1
    assert any("nemo2_bionemo_recipes_pr740.log:11:" in n for n in got.notes)


def test_torchtitan_pr1287_llama3_8b():
    # pytorch/torchtitan#1287: steps 200..250 (log_freq 10); 200 is the first logged, dropped.
    # tps median(5593, 5868, 5869, 5864, 5862) = 5864; mfu median(32.75, 34.36, 34.37, 34.34, 34.33)
    # = 34.34 %; tflops median(323.92, 339.82, 339.88, 339.59, 339.48) = 339.59; memory 49.66 GiB
    # is torchtitan's max_reserved_gib.
    got = read_runs([LOGS / "torchtitan_pr1287_llama3_8b.log"], defaults={"gpus": 8})
    r = got.runs[0]
    assert r.tokens_per_s_per_gpu == pytest.approx(5864)
    assert r.mfu == pytest.approx(0.3434)
    assert r.tflops_per_gpu == pytest.approx(339.59)
    assert r.peak_reserved_bytes == pytest.approx(49.66 * GIB)
    assert r.peak_allocated_bytes is None and r.step_time_s is None
    assert got.notes == []  # launcher, GC and profiler lines are foreign


def test_torchtitan_issue1232_pp16_layout_from_trainer_line():
    # pytorch/torchtitan#1232: steps 1-4 read (5 is cut: a note); 1-3 are warm-up, step 4: tps 8,
    # mfu 0.58 %, tflops 1.81. Peak reserved = max(36.90, 42.78, 42.78, 42.78) GiB.
    got = read_runs([LOGS / "torchtitan_issue1232_llama3_70b_pp16.log"], defaults={"pp": 16, "gpus": 16})
    r = got.runs[0]
    assert (r.tokens_per_s_per_gpu, r.mfu, r.tflops_per_gpu) == pytest.approx((8, 0.0058, 1.81))
    assert r.peak_reserved_bytes == pytest.approx(42.78 * GIB)
    # "Trainer is initialized with local batch size 2, global batch size 2, sequence length 4096"
    assert r.layout["global_batch"] == 2 and r.layout["seq"] == 4096 and r.layout["dp"] == 1
    assert any("torchtitan_issue1232_llama3_70b_pp16.log:19:" in n for n in got.notes)
    # every line is "[rank0]:[titan] ...": the 42.78 GiB is world rank 0's, i.e. pipeline stage 0's of
    # the 16, and is compared with llmpar's stage 0 (memory_stage first), not the most-loaded stage
    assert r.memory_stage == "first"


def test_torchtitan_pr1349_mesh_and_warmup_fallback():
    # pytorch/torchtitan#1349: "Building 1-D device mesh with ['dp_shard'], [8]" -> dp 8, 8 GPUs, with no
    # defaults. Steps 1-3 only (4 is cut): nothing is past warm-up, so steps 2-3 are used, with a note:
    # tps median(168877, 175100) = 171988.5.
    got = read_runs([LOGS / "torchtitan_pr1349_autoparallel_dp8.log"])
    r = got.runs[0]
    assert r.layout["dp"] == 8 and r.layout["gpus"] == 8
    assert r.tokens_per_s_per_gpu == pytest.approx(171988.5)
    assert r.peak_reserved_bytes == pytest.approx(2.66 * GIB)
    assert any("warm-up" in n for n in got.notes)


def test_torchtitan_pr2389_every_rank_prints():
    # pytorch/torchtitan#2389: seven ranks print step 4 (all dropped: first logged iteration), one
    # full step-5 line: tps 10,007, tflops 313.36, mfu 13.93 %; memory 66.91 GiB.
    r = one(LOGS / "torchtitan_pr2389_all_ranks.log", defaults={"gpus": 8})
    assert (r.tokens_per_s_per_gpu, r.tflops_per_gpu, r.mfu) == pytest.approx((10007, 313.36, 0.1393))
    # several ranks print memory: the peak is the largest over them (memory_stage max, the default)
    assert r.memory_stage == "max"
    assert r.peak_reserved_bytes == pytest.approx(66.91 * GIB)


def test_synthetic_arguments_block_layout():
    # Synthetic file (says so): the arguments block gives the whole layout. Iterations 4-7 are steady:
    # median(10100, 10000, 19000, 10200) = 10150 ms; TFLOP/s median(412, 416, 219, 408) = 410.
    # Peaks over ranks 0 and 48: max allocated 61000.0 MiB, max reserved 72000.0 MiB.
    r = one(LOGS / "synthetic_megatron_arguments_block.log")
    assert r.layout == {"gpus": 64, "tp": 8, "pp": 2, "dp": 2, "cp": 2, "ep": 1, "zero": 1, "sp": True,
                        "recompute": "selective", "micro_batch": 1, "global_batch": 512, "seq": 8192,
                        "schedule": "interleaved", "virtual_stages": 4, "dtype": "bf16"}  # v = 80/(2*10)
    assert r.step_time_s == pytest.approx(10.15) and r.tflops_per_gpu == pytest.approx(410)
    assert r.peak_allocated_bytes == pytest.approx(61000 * MIB)
    assert r.peak_reserved_bytes == pytest.approx(72000 * MIB)


@pytest.mark.parametrize("name", ["megatron_nccl_issue743_arguments_only.log",
                                  "nemo_speech_issue11900_empty_progress.log"])
def test_log_without_iteration_lines_is_a_user_error(name):
    # NVIDIA/nccl#743 (hung before iteration 1); NVIDIA-NeMo/Speech#11900 (empty progress metrics)
    with pytest.raises(UserError, match=rf"{name}: no iteration lines"):
        read_runs([LOGS / name], defaults={"gpus": 8})


def test_log_without_layout_is_a_user_error():
    with pytest.raises(UserError, match=r"issue756_mixtral_16xh100.log:7: no layout"):
        read_runs([LOGS / "megatron_lm_issue756_mixtral_16xh100.log"])


def test_oom_log(tmp_path):
    # the error line quoted in NVIDIA/Megatron-LM#525: an OOM before any iteration is a run with status oom
    p = write(tmp_path, "oom.log", "building GPT model ...\n\"torch.cuda.OutOfMemoryError: CUDA out of memory. "
              "Tried to allocate 786.00 MiB (GPU 0; 31.74 GiB total capacity; 28.82 GiB already allocated)\"\n")
    r = one(p, defaults={"gpus": 1})
    assert r.status == "oom" and r.step_time_s is None and r.source.endswith("oom.log:2")


def test_log_defaults_conflict_noted_and_log_wins():
    got = read_runs([LOGS / "torchtitan_pr1349_autoparallel_dp8.log"], defaults={"dp": 4})
    assert got.runs[0].layout["dp"] == 8
    assert any("default dp=4 not used" in n for n in got.notes)


# ----------------------------------------------------------------------------- tables

def test_csv_aliases_units_and_notes(tmp_path):
    p = write(tmp_path, "runs.csv", (
        "# my runs\n"
        "model,gpu,tensor_model_parallel_size,pipeline-model-parallel-size,data_parallel,context_parallel_size,"
        "expert_model_parallel_size,zero_stage,micro_batch_size,global_batch_size,seq_length,sequence_parallel,"
        "recompute_granularity,vpp,dtype,step_time_ms,mfu_pct,tflops,peak_reserved_gib,max_allocated,status,cluster\n"
        "llama3-70b,h100-sxm,8,4,2,1,2,1,1,64,8192,true,selective,5,bf16,9500,41.5,410,71.5,60.5 GiB,ok,eos\n"
        "\n"
        "llama3-70b,h100-sxm,8,4,2,1,1,1,2,64,8192,yes,full,,,,,,,,OOM,eos\n"))
    got = read_runs([p])
    a, b = got.runs
    assert a.source == f"{p}:3" and b.source == f"{p}:5"
    assert a.layout == {"gpus": 64, "tp": 8, "pp": 4, "dp": 2, "cp": 1, "ep": 2, "zero": 1, "sp": True,
                        "recompute": "selective", "micro_batch": 1, "global_batch": 64, "seq": 8192,
                        "schedule": "interleaved", "virtual_stages": 5, "dtype": "bf16"}
    assert a.model == "llama3-70b" and a.hardware == "h100-sxm"
    assert a.step_time_s == pytest.approx(9.5) and a.mfu == pytest.approx(0.415)
    assert a.tflops_per_gpu == 410 and a.peak_reserved_bytes == pytest.approx(71.5 * GIB)
    assert a.peak_allocated_bytes == pytest.approx(60.5 * GIB)
    assert b.status == "oom" and b.step_time_s is None and b.layout["recompute"] == "full"
    assert any(f"{p}:3: column 'cluster' is not a known column" in n for n in got.notes)


@pytest.mark.parametrize("alias,canonical", [
    ("tensor_parallel", "tp"), ("tensor_model_parallel_size", "tp"), ("pipeline_parallel", "pp"),
    ("pipeline_model_parallel_size", "pp"), ("data_parallel", "dp"), ("context_parallel_size", "cp"),
    ("expert_model_parallel_size", "ep"), ("zero_stage", "zero"), ("micro_batch_size", "micro_batch"),
    ("global_batch_size", "global_batch"), ("grad_accum", "microbatches"), ("seq_len", "seq"),
    ("seq_length", "seq"), ("num_gpus", "gpus"), ("virtual-stages", "virtual_stages")])
def test_each_alias(tmp_path, alias, canonical):
    assert ALIASES[alias.replace("-", "_")] == canonical
    value = {"zero": 2, "virtual_stages": 2}.get(canonical, 4)
    row = {alias: value}
    if canonical == "ep":
        row["dp"] = 4
    if canonical == "virtual_stages":
        row["pp"] = 2
    if canonical == "global_batch":
        row.update(micro_batch=1, dp=4)
    if canonical in ("zero", "micro_batch", "microbatches", "seq"):
        row["gpus"] = 8
    p = write(tmp_path, "r.jsonl", json.dumps(row) + "\n")
    r = one(p)
    assert r.layout[canonical] == value


def test_units(tmp_path):
    p = write(tmp_path, "u.yaml", """runs:
- {gpus: 8, peak_allocated_gb: 61.2, peak_reserved: 61.2 GiB, step_time: 850 ms, mfu: 0.4}
- {gpus: 8, peak_memory_bytes: 1000, max_reserved_mib: 1024, step_time_s: 1.5, mfu: 38%, tokens_per_s: 80000}
""")
    a, b = read_runs([p]).runs
    assert a.peak_allocated_bytes == pytest.approx(61.2e9) and a.peak_reserved_bytes == pytest.approx(61.2 * GIB)
    assert a.step_time_s == pytest.approx(0.85) and a.mfu == 0.4
    assert b.peak_allocated_bytes == 1000 and b.peak_reserved_bytes == pytest.approx(2**30)
    assert b.mfu == pytest.approx(0.38) and b.tokens_per_s_per_gpu == pytest.approx(10000)  # 80000 / 8 GPUs


def test_yaml_common_and_log_column(tmp_path):
    log = tmp_path / "logs" / "run1.log"
    log.parent.mkdir()
    log.write_text((LOGS / "torchtitan_pr1287_llama3_8b.log").read_text())
    p = write(tmp_path, "t.yaml", """common: {hardware: h100-sxm, seq_len: 8192, owner: me}
runs:
  - model: llama3-8b
    num_gpus: 8
    log: logs/run1.log
  - {model: llama3-8b, num_gpus: 8, mfu: 0.3, log: logs/run1.log}
""")
    got = read_runs([p])
    a, b = got.runs
    assert a.source == f"{p}:3" and a.layout["seq"] == 8192 and a.hardware == "h100-sxm"
    assert a.tokens_per_s_per_gpu == pytest.approx(5864) and a.mfu == pytest.approx(0.3434)
    assert b.mfu == 0.3 and any("mfu given in the row" in n for n in got.notes)
    assert any("common key 'owner'" in n for n in got.notes)


@pytest.mark.skipif(not PLAYBOOK.is_file(), reason="../shared/validation/hf_playbook_runs_1b_3b.yaml not present")
def test_playbook_yaml():
    raw = yaml.load(PLAYBOOK.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["runs"]
    ok = sum(1 for r in raw if r["status"] == "ok")
    did_not_run = sum(1 for r in raw if r["status"] == "crashed_or_oom")
    got = read_runs([PLAYBOOK])
    assert len(got.runs) == len(raw) == 1650
    assert sum(r.status == "ok" for r in got.runs) == ok == 1127
    assert sum(r.status == "crashed" for r in got.runs) == did_not_run == 523
    first = got.runs[0]  # model 1B, 8 GPUs, mbs 2, grad_accum 16, dp 8, mfu 39.2 %, 40150 tok/s, 50.2 "GB"
    assert first.model == "1B" and first.hardware == "H100"
    assert first.layout == {"gpus": 8, "tp": 1, "pp": 1, "dp": 8, "cp": 1, "zero": 0, "micro_batch": 2,
                            "global_batch": 256, "microbatches": 16, "seq": 4096}
    assert first.mfu == pytest.approx(0.392) and first.tokens_per_s_per_gpu == 40150
    assert first.peak_allocated_bytes == pytest.approx(50.2 * GIB)  # GiB of peak allocated: docs/runs-format.md
    # rows whose grad_accum disagrees with 256 / (mbs*dp) keep the global batch, with a note
    disagree = sum(1 for r in raw if r["micro_batch_size"] * r["grad_accum"] * r["data_parallel"] != 256)
    assert sum("microbatches" not in r.layout for r in got.runs) == disagree
    assert any("column 'nodes' is not a known column" in n for n in got.notes)


# ----------------------------------------------------------------------------- bad input

BAD = [
    ("no_layout.csv", "model,step_time_s\nx,1.0\n", r"no_layout.csv:2: no layout"),
    ("frac.csv", "tp,gpus\n2.5,8\n", r"frac.csv:2: tp must be an integer"),
    ("mult.csv", "tp,pp,dp,gpus\n\n4,2,2,8\n", r"mult.csv:3: gpus=8 disagrees with tp\*cp\*pp\*dp"),
    ("div.jsonl", '{"tp": 3, "gpus": 8}\n', r"div.jsonl:1: gpus=8 is not divisible"),
    ("neg.csv", "gpus,step_time_s\n8,-1\n", r"neg.csv:2: step_time_s must be a finite number >= 0"),
    ("nan.jsonl", '{"gpus": 8}\n{"gpus": 8, "tokens_per_s_per_gpu": NaN}\n', r"nan.jsonl:2: tokens_per_s_per_gpu"),
    ("inf.yaml", "runs:\n- {gpus: 8}\n- {gpus: 8, mfu: .inf}\n", r"inf.yaml:3: mfu"),
    ("mem.csv", "gpus,peak_memory\n8,61.2\n", r"mem.csv:2: memory column 'peak_memory' has no unit"),
    ("twice.csv", "gpus,peak_reserved_gb\n8,61 GiB\n", r"twice.csv:2: .*already gives the unit"),
    ("status.csv", "gpus,status\n8,maybe\n", r"status.csv:2: status 'maybe'"),
    ("fields.csv", "gpus,tp\n8,2,1\n", r"fields.csv:2: 3 fields, the header has 2"),
    # (ep not dividing dp*cp: a layout rule, refused by calibrate runs with file:line in the words
    # memory and step use: tests/test_rules_once.py)
    ("gb.csv", "gpus,micro_batch,global_batch\n8,1,12\n", r"gb.csv:2: global_batch=12 is not divisible"),
    ("mfu.csv", "gpus,mfu\n8,39.2\n", r"mfu.csv:2: mfu '39.2' is above 1"),
    ("time.csv", "gpus,step_time\n8,12\n", r"time.csv:2: step_time '12' has no unit"),
    ("syntax.yaml", "runs:\n- {gpus: 8\n- [\n", r"syntax.yaml:\d+: YAML"),
    ("norun.yaml", "common: {seq: 4}\n", r"norun.yaml:1: no 'runs:' list"),
    ("empty.csv", "", r"empty.csv:1: empty runs table"),
    ("notjson.jsonl", '{"gpus": 8}\n{gpus\n', r"notjson.jsonl:2: malformed JSON"),
    ("missing_log.csv", "gpus,log\n8,nowhere.log\n", r"missing_log.csv:2: log 'nowhere.log' not found"),
    ("optim.csv", "gpus,optimizer\n8,lion\n", r"optim.csv:2: .*optimizer.*lion"),
    ("gdtype.csv", "gpus,grad_dtype\n8,fp16\n", r"gdtype.csv:2: .*grad_dtype.*fp16"),
    ("epov.csv", "gpus,ep_overlap\n8,1.5\n", r"epov.csv:2: ep_overlap must be a fraction between 0 and 1"),
    ("epdisp.csv", "gpus,ep_dispatcher\n8,nvshmem\n", r"epdisp.csv:2: .*ep_dispatcher.*nvshmem"),
]


@pytest.mark.parametrize("name,text,match", BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_file_and_line(tmp_path, name, text, match):
    with pytest.raises(UserError, match=match):
        read_runs([write(tmp_path, name, text)])


def test_non_utf8_table_and_missing_file(tmp_path):
    p = tmp_path / "bin.csv"
    p.write_bytes(b"gpus,tp\n8,2\n\xff\xfe,1\n")
    with pytest.raises(UserError, match=r"bin.csv:3: not UTF-8"):
        read_runs([p])
    with pytest.raises(UserError, match="cannot read"):
        read_runs([tmp_path / "absent.csv"])
    with pytest.raises(UserError, match=r"--layout: 'tpp' is not a layout option"):
        read_runs([LOGS / "torchtitan_pr1349_autoparallel_dp8.log"], defaults={"tpp": 2})


def test_log_layout_conflicting_with_its_row(tmp_path):
    (tmp_path / "a.log").write_text((LOGS / "torchtitan_pr1349_autoparallel_dp8.log").read_text())
    p = write(tmp_path, "t.csv", "gpus,dp,log\n16,16,a.log\n")
    with pytest.raises(UserError, match=r"t.csv:2: dp=16 but its log .*a.log:6 says dp=8"):
        read_runs([p])


# ----------------------------------------------------------------------------- fuzz

_SEEDS = [
    ("megatron_lm_issue756_mixtral_16xh100.log", (LOGS / "megatron_lm_issue756_mixtral_16xh100.log").read_bytes()),
    ("torchtitan_pr1287_llama3_8b.log", (LOGS / "torchtitan_pr1287_llama3_8b.log").read_bytes()),
    ("synthetic_megatron_arguments_block.log", (LOGS / "synthetic_megatron_arguments_block.log").read_bytes()),
    ("runs.csv", b"model,tp,pp,num_gpus,step_time_ms,peak_reserved_gib,status\nm,2,2,8,950,61.5,ok\nm,4,2,8,,,oom\n"),
    ("runs.jsonl", b'{"tp": 2, "gpus": 8, "mfu": 0.4}\n{"tp": 8, "gpus": 8, "peak_reserved": "60 GiB"}\n'),
    ("runs.yaml", b"common: {seq_len: 4096, note: x}\nruns:\n- {tensor_parallel: 2, num_gpus: 8, mfu_pct: 40}\n"
                  b"- {tensor_parallel: 1, num_gpus: 8, status: crashed_or_oom}\n"),
]


@st.composite
def mutated(draw):
    name, data = draw(st.sampled_from(_SEEDS))
    lines = data.split(b"\n")
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "truncate", "inject", "cut_line"]))
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        if op == "delete" and lines:
            del lines[i]
        elif op == "duplicate" and lines:
            lines.insert(i, lines[i])
        elif op == "swap" and len(lines) > 1:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "truncate":
            lines = lines[:i]
        elif op == "inject" and lines:
            junk = draw(st.binary(min_size=1, max_size=8))
            k = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:k] + junk + lines[i][k:]
        elif op == "cut_line" and lines:
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
    return name, b"\n".join(lines)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=mutated())
def test_fuzz_only_user_errors_escape(tmp_path, case):
    name, data = case
    p = tmp_path / name
    p.write_bytes(data)
    try:
        got = read_runs([p], defaults={"gpus": 8} if name.endswith(".log") else None)
    except UserError as exc:
        assert str(p) in str(exc) or "defaults" in str(exc)
        return
    for r in got.runs:
        for key in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "tflops_per_gpu", "peak_allocated_bytes",
                    "peak_reserved_bytes"):
            v = getattr(r, key)
            assert v is None or (math.isfinite(v) and v >= 0)
        assert r.layout["gpus"] == r.layout["tp"] * r.layout["pp"] * r.layout["dp"] * r.layout["cp"]


def test_memory_stage_column_and_header(tmp_path):
    # whose peak a run measured: 'max' (default) or 'first' (world rank 0 = pipeline stage 0);
    # a column, a common: key or a top-level key of a YAML table; anything else is refused
    p = write(tmp_path, "runs.yaml", "hardware: h100-sxm\nmemory_stage: first\nruns:\n"
              "  - {model: llama-3-8b, gpus: 8, pp: 2, peak_reserved_gib: 40}\n"
              "  - {model: llama-3-8b, gpus: 8, pp: 2, peak_reserved_gib: 40, memory_stage: max}\n")
    runs = read_runs([p]).runs
    assert [r.memory_stage for r in runs] == ["first", "max"]
    p = write(tmp_path, "runs.csv", "model,gpus,pp,peak_reserved_gib\nllama-3-8b,8,2,40\n")
    assert read_runs([p], defaults={"hardware": "h100-sxm"}).runs[0].memory_stage == "max"
    p = write(tmp_path, "bad.csv", "model,gpus,pp,peak_reserved_gib,memory_stage\nllama-3-8b,8,2,40,last\n")
    with pytest.raises(UserError, match="memory_stage"):
        read_runs([p], defaults={"hardware": "h100-sxm"})
    # a bad file-wide default is reported at the top level, not at the first row that inherits it
    p = write(tmp_path, "bad.yaml", "hardware: h100-sxm\nmemory_stage: last\nruns:\n"
              "  - {model: llama-3-8b, gpus: 8, pp: 2, peak_reserved_gib: 40}\n")
    with pytest.raises(UserError, match=r"bad\.yaml: top level: memory_stage 'last'"):
        read_runs([p])


def test_torchtitan_rank0_memory_under_pp_is_stage_0(tmp_path):
    # A log whose memory lines all carry torchrun's "[rank0]:" prefix, from a run with pp 2 (its mesh
    # line): rank 0 is pipeline stage 0, so the peak is that stage's (memory_stage first), said in a note.
    # With a second rank's lines in the log the peak is the largest over the ranks (memory_stage max).
    head = "[rank0]:[titan] 2025-01-01 00:00:00,000 - root - INFO - Building 2-D device mesh with ['pp', 'dp_shard'], [2, 4]\n"
    steps = "".join(f"[rank0]:[titan] 2025-01-01 00:00:0{i},000 - root - INFO - step: {i}  loss: 7.0  "
                    f"memory: 40.00GiB(50.00%)  tps: 1,000  tflops: 300.0  mfu: 30.00%\n" for i in range(1, 7))
    p = write(tmp_path, "pp2.log", head + steps)
    got = read_runs([p], defaults={"hardware": "h100-sxm", "model": "llama-3-8b"})
    r = got.runs[0]
    assert r.layout["pp"] == 2 and r.memory_stage == "first" and r.peak_reserved_bytes == pytest.approx(40 * GIB)
    assert any("rank 0's only (pipeline stage 0 of 2)" in n for n in got.notes)
    other = steps.replace("[rank0]", "[rank7]").replace("40.00GiB", "45.00GiB")
    p = write(tmp_path, "pp2_all.log", head + steps + other)
    r = read_runs([p], defaults={"hardware": "h100-sxm", "model": "llama-3-8b"}).runs[0]
    assert r.memory_stage == "max" and r.peak_reserved_bytes == pytest.approx(45 * GIB)


def test_megatron_memory_of_stage_0_ranks_only(tmp_path):
    # The synthetic Megatron log (64 GPUs, pp 2: stage = rank // 32) reports memory from ranks 0 and 48,
    # i.e. both stages: the peak is the largest, 72,000 MiB (memory_stage max). Without rank 48's line
    # only stage 0 reported: its 70,000 MiB is stage 0's peak (memory_stage first), and a note says so.
    text = (LOGS / "synthetic_megatron_arguments_block.log").read_text()
    r = read_runs([LOGS / "synthetic_megatron_arguments_block.log"], defaults={"hardware": "h100-sxm",
                                                                              "model": "llama-3-70b"}).runs[0]
    assert r.memory_stage == "max" and r.peak_reserved_bytes == pytest.approx(72000 * 2**20)
    only0 = "\n".join(x for x in text.split("\n") if not x.startswith("[Rank 48]"))
    p = write(tmp_path, "stage0.log", only0)
    got = read_runs([p], defaults={"hardware": "h100-sxm", "model": "llama-3-70b"})
    assert got.runs[0].memory_stage == "first" and got.runs[0].peak_reserved_bytes == pytest.approx(70000 * 2**20)
    assert any("pipeline stage 0's ranks only (0 of 64, pp 2)" in n for n in got.notes)


def test_megatron_arguments_state_gradients_overlaps_and_dispatcher():
    # Megatron-LM prints its arguments after validate_args, so the block holds effective values:
    # accumulate_allreduce_grads_in_fp32 is True for fp32 main grads (arguments.py sets it) and False
    # with --grad-reduce-in-bf16 (bf16 gradients, reduced in bf16); the combined-1F1B all-to-all
    # overlap is ep_overlap 1 (or 0 when off); TP / DP overlap switched off is 0 (switched on, the
    # stack's fraction stands); the DeepEP flex dispatcher is deepep. Synthetic argument dicts.
    from llmpar.calibrate.train_log_layout import megatron_layout

    base = {"bf16": True, "tensor_model_parallel_size": 2}
    on = megatron_layout({**base, "accumulate_allreduce_grads_in_fp32": False,
                           "overlap_moe_expert_parallel_comm": True, "tp_comm_overlap": False,
                           "overlap_grad_reduce": False, "moe_enable_deepep": True,
                           "moe_token_dispatcher_type": "flex"}, "x.log", [])
    assert (on["grad_dtype"], on["ep_overlap"], on["tp_overlap"], on["dp_overlap"], on["ep_dispatcher"]) == \
        ("bf16", 1.0, 0.0, 0.0, "deepep")
    off = megatron_layout({**base, "accumulate_allreduce_grads_in_fp32": True,
                            "overlap_moe_expert_parallel_comm": False, "tp_comm_overlap": True,
                            "overlap_grad_reduce": True, "moe_token_dispatcher_type": "alltoall"}, "x.log", [])
    assert (off["grad_dtype"], off["ep_overlap"], off["ep_dispatcher"]) == ("fp32", 0.0, "alltoall")
    assert "tp_overlap" not in off and "dp_overlap" not in off
    assert not {"grad_dtype", "ep_overlap", "ep_dispatcher"} & set(megatron_layout(base, "x.log", []))
