"""`llmpar sweep` (llmpar.planner.sweep): rows are plan #1 at each count, scaling efficiency, training
cost, the JSON/CSV contract, rows that say why nothing runs, and exit codes (issue 10)."""

from __future__ import annotations

import csv
import io

import pytest

from llmpar.errors import UserError
from llmpar.planner.search import plan
from llmpar.planner.sweep import parse_gpu_list, sweep

from conftest import assert_one_line_error


@pytest.fixture(scope="module")
def small():
    # llama-3-8b on 8, 16 and 32 H100: three plans, well under a second each
    return sweep("llama-3-8b", gpus="8,16,32", hardware="h100-sxm", tokens="15T", pue=1.2, gpu_hour_price=2.5)


def test_parse_gpu_list():
    assert parse_gpu_list("8,16,...,64") == [8, 16, 32, 64]
    assert parse_gpu_list("256,512,...,16384") == [256, 512, 1024, 2048, 4096, 8192, 16384]
    assert parse_gpu_list("64, 8,8") == [8, 64]          # ascending, no repeats
    assert parse_gpu_list([16, 8]) == [8, 16] and parse_gpu_list(8) == [8]
    for bad in ("8,12,...,64", "8,16,...,100", "0,8", "eight", "8,...,64", "", None):
        with pytest.raises(UserError):
            parse_gpu_list(bad)


def test_rows_are_plan_one_with_training_cost(small):
    assert [r.gpus for r in small.rows] == [8, 16, 32] and all(r.ok for r in small.rows)
    # the row is `llmpar plan`'s #1 at that count: same layout, same numbers
    ref = plan("llama-3-8b", gpus=16, hardware="h100-sxm", top=1).best
    row = small.rows[1]
    assert row.plan.parallel.as_dict() == ref.parallel.as_dict()
    assert row.plan.tokens_per_s == ref.tokens_per_s
    for r in small.rows:
        tps = r.plan.tokens_per_s
        t = r.training
        assert t["days"] == pytest.approx(15e12 / tps / 86_400)
        assert t["gpu_hours"] == pytest.approx(r.gpus * 15e12 / tps / 3_600)
        # DGX H100: 10.2 kW / 8 GPUs = 1,275 W per GPU (maximum), x PUE 1.2
        assert t["energy_mwh"] == pytest.approx(t["gpu_hours"] * 1275 * 1.2 / 1e6)
        assert t["cost"] == pytest.approx(t["gpu_hours"] * 2.5)


def test_scaling_efficiency_against_the_smallest_count(small):
    r0 = small.rows[0]
    assert r0.scaling_efficiency == 1.0 and r0.scaling_reference_gpus == 8
    for r in small.rows[1:]:
        expect = (r.plan.tokens_per_s / r.gpus) / (r0.plan.tokens_per_s / 8)
        assert r.scaling_efficiency == pytest.approx(expect)
        assert r.scaling_reference_gpus == 8


def test_json_contract(cli):
    res = cli("sweep", "llama-3-8b", "--gpus", "8,16", "--hardware", "h100-sxm,b200", "--tokens", "300B",
              "--gpu-hour-price", "2", "--json")
    assert res.code == 0, res.err
    d = res.json()
    assert d["model"] == "llama-3-8b" and d["hardware"] == ["h100-sxm", "b200"] and d["gpus"] == [8, 16]
    assert d["tokens"] == 300e9 and d["global_batch"] == 512 and d["seq"] == 8192
    assert [(r["hardware"], r["gpus"]) for r in d["rows"]] == [("h100-sxm", 8), ("h100-sxm", 16), ("b200", 8),
                                                               ("b200", 16)]
    for r in d["rows"]:
        assert set(r) >= {"gpus", "hardware", "plan", "days", "gpu_hours", "energy_mwh", "cost", "status",
                          "reason", "scaling_efficiency", "training"}
        assert r["status"] == "ok" and r["reason"] is None
        p = r["plan"]
        assert p["gpus"] == r["gpus"] and p["hardware"] == r["hardware"]
        par = p["parallel"]
        assert par["tp"] * par["pp"] * par["dp"] * par["cp"] == r["gpus"]
        assert r["cost"] == pytest.approx(2 * r["gpu_hours"])
    # scaling is per hardware: each profile's smallest count is the 1.0
    assert d["rows"][0]["scaling_efficiency"] == 1.0 and d["rows"][2]["scaling_efficiency"] == 1.0
    # B200 draws more per GPU at the maximum (14.3 kW / 8 = 1,787.5 W)
    assert d["rows"][2]["training"]["power_per_gpu_w"] == 1787.5


def test_csv_flattens_with_dots_and_failed_rows_leave_plan_empty(cli):
    res = cli("sweep", "llama-3-8b", "--gpus", "8,12", "--tp", "8", "--tokens", "15T", "--csv")
    assert res.code == 0, res.err
    rows = list(csv.DictReader(io.StringIO(res.out)))
    assert [r["gpus"] for r in rows] == ["8", "12"]
    for k in ("hardware", "status", "plan.parallel.tp", "plan.tokens_per_s", "days", "gpu_hours", "energy_mwh",
              "cost", "training.power_per_gpu_w"):
        assert k in rows[0], k
    assert "plan" not in rows[0]
    assert rows[0]["plan.parallel.tp"] == "8" and rows[0]["cost"] == ""     # no price given
    assert rows[1]["status"] == "no_layout" and "does not divide" in rows[1]["reason"]
    assert rows[1]["plan.parallel.tp"] == "" and rows[1]["days"] == ""


def test_edge_rows_say_why_in_words(cli):
    # llama-3-70b on 8 H100: nothing fits (the planner's message); 64 runs; scaling is against 64
    r = sweep("llama-3-70b", gpus=[8, 64], tokens="1T")
    assert r.rows[0].status == "does_not_fit" and "no layout fits" in r.rows[0].reason
    assert r.rows[0].plan is None and r.rows[0].training is None and r.rows[0].scaling_efficiency is None
    assert r.rows[1].ok and r.rows[1].scaling_efficiency == 1.0 and r.rows[1].scaling_reference_gpus == 64
    assert any("against 64 GPUs" in a for a in r.assumptions)
    # a batch of 4 sequences with tp = pp = cp = 1 cannot be split over 8 GPUs (dp = 8)
    res = cli("sweep", "llama-3-8b", "--gpus", "4,8", "--global-batch", "4", "--tp", "1", "--pp", "1", "--cp", "1",
              "--json")
    assert res.code == 0, res.err
    rows = res.json()["rows"]
    assert rows[0]["status"] == "ok" and rows[0]["plan"]["parallel"]["dp"] == 4
    assert rows[1]["status"] == "batch_cannot_split"
    assert "global batch of 4 sequences cannot be split over 8 GPUs" in rows[1]["reason"]
    assert rows[1]["days"] is None and rows[1]["plan"] is None
    # the table names the reason under a footnote
    res = cli("sweep", "llama-3-8b", "--gpus", "4,8", "--global-batch", "4", "--tp", "1", "--pp", "1", "--cp", "1")
    assert res.code == 0 and "batch cannot split [1]" in res.out and "[1] h100-sxm x 8:" in res.out


def test_table(cli):
    res = cli("sweep", "llama-3-8b", "--gpus", "8,16", "--tokens", "15T", "--gpu-hour-price", "2.5", "--pue", "1.2")
    assert res.code == 0, res.err
    for needle in ("sweep llama-3-8b", "token budget 15T", "scaling", "days", "GPU-hours", "MWh", "cost",
                   "upper bound", "PUE 1.2", "same at every count"):
        assert needle in res.out, needle
    res = cli("sweep", "llama-3-8b", "--gpus", "8")
    assert res.code == 0 and "days" not in res.out and "MFU" in res.out   # no --tokens: no training columns


def test_exit_codes(cli):
    assert_one_line_error(cli("sweep", "llama-3-8b", "--gpus", "8", "--hardware", "h100-sxm,nope"), "nope")
    assert_one_line_error(cli("sweep", "llama-3-8b", "--gpus", "8,12,...,64"), "--gpus")
    assert_one_line_error(cli("sweep", "llama-3-8b", "--gpus", "8", "--tokens", "lots"), "--tokens")
    assert_one_line_error(cli("sweep", "llama-3-8b", "--gpus", "8", "--json", "--csv"), "exclusive")
    assert_one_line_error(cli("sweep", "llama-3-8b", "--gpus", "8", "--pue", "1.2"), "--tokens")
    assert_one_line_error(cli("sweep", "llama-3-8b", "--gpus", "8", "--fix", "bogus=3"), "bogus")
    # every row fails: the rows are printed, then exit 1 with one line
    res = cli("sweep", "llama-3-70b", "--gpus", "1,2", "--json")
    assert res.code == 1
    assert [r["status"] for r in res.json()["rows"]] == ["does_not_fit", "does_not_fit"]
    assert len([ln for ln in res.err.splitlines() if ln.strip()]) == 1 and "no GPU count" in res.err


def test_api_sweep_is_the_same_function():
    from llmpar import api

    r = api.sweep("llama-3-8b", gpus=[8], tokens="1T")
    assert r.rows[0].ok and r.rows[0].scaling_efficiency == 1.0
    assert r.to_dict()["rows"][0]["days"] == pytest.approx(1e12 / r.rows[0].plan.tokens_per_s / 86_400)


@pytest.mark.parametrize("gpus", [[8, "16"], ["8"], [None], [8, None], [b"8"]])
def test_a_list_of_gpu_counts_holds_numbers(gpus):
    # docs/api.md: an integer argument takes an int or a whole float, and "2" raises; a list of
    # counts was parsed element by element as text (reliability review, item 30, re-checked
    # 2026-12-03). The text form of the whole list ("8,16") stays the CLI's.
    with pytest.raises(UserError, match="gpus must be whole numbers"):
        sweep("llama-3-8b", gpus=gpus)


def test_gpus_that_is_no_list_is_one_line():
    """gpus=object(): neither a count, a text nor a list (a TypeError traceback before)."""
    with pytest.raises(UserError, match="a list of GPU counts"):
        sweep("llama-3-8b", gpus=object())


def test_a_row_above_every_published_run_of_its_class_is_marked_with_its_days_at_that_run(cli):
    """GPT-3 175B on 1,024 A100s: plan #1 predicts 63.3 % MFU (attention in full) where the best
    published run of A100 · dense · 16-bit · 513-4,096 GPUs measured 47.6 % (NeMo Megatron 2022).
    The MFU cell is marked `!` and a line gives the days at that MFU: the same FLOPs at 47.6 %, so
    days x (step at the record / predicted step) = days x 63.3 / 47.6."""
    res = cli("sweep", "gpt3-175b", "--gpus", "1024", "--hardware", "a100-80gb", "--tokens", "300B", "--json")
    row = res.json()["rows"][0]
    pl = row["plan"]["plausibility"]
    assert pl["above_published"] and pl["best_published_mfu"] == pytest.approx(0.47608)
    ratio = pl["step_time_at_best_s"] / row["plan"]["step_time_s"]
    assert ratio == pytest.approx(row["plan"]["mfu_full_attention"] / 0.47608)
    text = cli("sweep", "gpt3-175b", "--gpus", "1024", "--hardware", "a100-80gb", "--tokens", "300B").out
    from llmpar.cli.training import fmt_days

    assert "%!" in text and "! a100-80gb x 1,024: MFU" in text
    assert f"{fmt_days(row['training']['days'] * ratio)} days" in text
