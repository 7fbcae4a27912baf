"""Bad input found by a CLI fuzz pass (1,209 cases) that crashed, exited 1 or was accepted:
each is now one line on stderr and exit 2 (README: bad input -> exit 2)."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error

CSV_HEAD = "model,hardware,gpus,tp,pp,micro_batch,global_batch,seq,step_time_s"
TITAN = ("[rank0]:[titan] 2025-06-16 22:30:50,322 - root - INFO - step: 200  loss:  6.1384  "
         "memory: 49.66GiB(52.28%)  tps: {tps}  tflops: {tflops}  mfu: {mfu}%\n")
LOG_LAYOUT = ["--folds", "0", "--model", "llama-3-8b", "--hardware", "h100-sxm",
              "--layout", "gpus=8,seq=8192,global_batch=64"]


@pytest.mark.parametrize("args, needle", [
    # A,B,...,Z with Z below B used to crash building its own message (IndexError)
    (["sweep", "llama-3-8b", "--gpus", "8,16,...,7"], "the last count 7 is below the second 16"),
    (["sweep", "llama-3-8b", "--gpus", "8,,16"], "empty entry"),
    # 2^22 = 4,194,304 GPUs is the bound memory/step/plan already apply (parallel.MAX_GPUS)
    (["sweep", "llama-3-8b", "--gpus", "8,99999999"], "at most 4,194,304"),
    (["collective", "all-reduce", "--gpus", "99999999999"], "at most 4,194,304"),   # was a 93 GiB allocation
    # tp=3 divides neither 8 nor 16: bad input as in `plan` (was exit 1, "no GPU count ... runs")
    (["sweep", "llama-3-8b", "--gpus", "8,16", "--tp", "3"], "--tp 3 does not divide --gpus 8"),   # as typed
    (["sweep", "llama-3-8b", "--gpus", "8,16", "--fix", "tp=3"], "nor any other GPU count"),
])
def test_sweep_and_collective_bounds(cli, args, needle):
    assert_one_line_error(cli(*args), needle)


def test_sweep_fix_that_divides_some_counts_is_still_rows(cli):
    # dp=3 divides 24 but not 8 (and 48 = 3 x 16 sequences split over it): the 8-GPU row says why,
    # the sweep itself runs
    res = cli("sweep", "llama-3-8b", "--gpus", "8,24", "--dp", "3", "--global-batch", "48", "--json")
    assert res.code == 0, res.err
    rows = {r["gpus"]: r for r in res.json()["rows"]}
    assert (rows[8]["status"], rows[8]["reason"]) == ("no_layout", "--dp 3 does not divide --gpus 8")
    assert rows[24]["status"] == "ok"


@pytest.mark.parametrize("body, needle", [
    ("name: x\nextends: megatron-core\nzero_stages: []\n", "zero_stages"),   # a framework with no ZeRO stage
    ("name: x\naliases: 5\nextends: megatron-core\n", "'aliases': expected a list of names"),
])
def test_stack_file_fields(cli, tmp_path, body, needle):
    f = tmp_path / "stack.yaml"
    f.write_text(body)
    for cmd in (["memory", "llama-3-8b"], ["plan", "llama-3-8b", "--gpus", "8"]):
        assert_one_line_error(cli(*cmd, "--stack", str(f)), needle)


@pytest.mark.parametrize("row, needle", [
    ("llama-3-8b,h100-sxm,8,1,1,1,64,8192,,150%", "mfu 1.5 is above 1"),       # an mfu column in percent
    ("llama-3-8b,h100-sxm,8,1,1,1,64,99999999999,10,", "at most 16,777,216"),   # parallel.MAX_SEQ = 2^24
    ("llama-3-8b,h100-sxm,8,1,1,1,64,8192,,0", "mfu must be > 0"),
])
def test_runs_table_rates_and_bounds(cli, tmp_path, row, needle):
    f = tmp_path / "runs.csv"
    f.write_text(f"{CSV_HEAD},mfu\n{row}\n")
    assert_one_line_error(cli("calibrate", "runs", str(f), "--check"), needle)


@pytest.mark.parametrize("tps, tflops, mfu, needle", [
    ("0", "0", "0", "tokens_per_s_per_gpu must be > 0"),   # was an infinite step time and a divide warning
    ("6,542", "339.16", "340", "mfu 340 % is above 100 %"),   # refused on the line itself (a median hid one)
])
def test_torchtitan_log_rates(cli, tmp_path, tps, tflops, mfu, needle):
    f = tmp_path / "titan.log"
    f.write_text(TITAN.format(tps=tps, tflops=tflops, mfu=mfu))
    assert_one_line_error(cli("calibrate", "runs", str(f), *LOG_LAYOUT), needle)


def test_drop_slower_than_nan(cli, tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text(f"{CSV_HEAD}\nllama-3-8b,h100-sxm,8,1,1,1,64,8192,10\n")
    assert_one_line_error(cli("calibrate", "runs", str(f), "--folds", "0", "--drop-slower-than", "nan"), "nan")


def test_a_zero_rate_beside_a_real_one_is_dropped_with_a_note(cli, tmp_path):
    # the playbook prints MFU 0.0 % (a tiny MFU, rounded) beside a real tokens/s on 14 runs: the
    # zero is no measurement, the tokens/s is; tps 0 beside mfu 34 % likewise keeps the MFU
    f = tmp_path / "titan.log"
    f.write_text(TITAN.format(tps="0", tflops="339.16", mfu="34"))
    res = cli("calibrate", "runs", str(f), *LOG_LAYOUT, "--check", "--json")
    assert res.code in (0, 1), res.err
    assert "tokens_per_s_per_gpu = 0 (rounded to zero?) is no measurement: not used" in res.out + res.err


def test_interleaved_with_one_chunk_per_stage_is_bad_input(cli):
    # `--schedule interleaved --virtual-stages 1` used to become v=2 with a note saying the option
    # was not given; an explicit 1 chunk per stage is 1F1B, not interleaving
    assert_one_line_error(cli("step", "llama-3-8b", "--gpus", "16", "--tp", "8", "--pp", "2",
                              "--schedule", "interleaved", "--virtual-stages", "1"),
                          "--schedule interleaved needs --virtual-stages >= 2")
    res = cli("step", "llama-3-8b", "--gpus", "16", "--tp", "8", "--pp", "2", "--schedule", "interleaved", "--json")
    assert res.code == 0, res.err
    assert res.json()["parallel"]["virtual_stages"] == 2
