"""`llmpar serve` and ``llmpar.serve``: the command, its JSON, its refusals (docs/serving.md)."""

from __future__ import annotations

import math

import pytest
from conftest import assert_one_line_error

import llmpar
from llmpar.errors import UserError


def test_json_keys_and_figures_agree(cli):
    r = cli("serve", "llama-3-8b", "--concurrency", "16", "--json")
    assert r.code == 0, r.err
    d = r.json()
    for key in ("ttft_s", "tpot_s", "e2e_s", "output_tokens_per_s", "output_tokens_per_s_per_gpu", "requests_per_s",
                "max_concurrency", "breakdown", "interval", "settings"):
        assert key in d
    assert d["settings"]["engine"] == "vllm"
    # e2e = TTFT + (O - 1) x TPOT; output tokens/s = requests/s x O (docs/serving.md, Under load)
    assert d["e2e_s"] == pytest.approx(d["ttft_s"] + 127 * d["tpot_s"], rel=1e-9)
    assert d["output_tokens_per_s"] == pytest.approx(d["requests_per_s"] * 128, rel=1e-9)
    # 385 concurrent requests of 1,152 tokens (tests/test_serving_cost.py derives the KV pool)
    assert d["max_concurrency"] == 385
    lo, hi = d["interval"]["output_tokens_per_s"]["low"], d["interval"]["output_tokens_per_s"]["high"]
    assert lo <= d["output_tokens_per_s"] <= hi
    # the median token gap is the decode-only iteration: never above the mean gap (TPOT), which also
    # averages the iterations that carry a prefill chunk
    assert 0 < d["itl_median_s"] <= d["tpot_s"]
    # with its band, the TPOT band's ratios applied to it (the same residuals hold both gaps)
    band, tb = d["interval"]["itl_median_s"], d["interval"]["tpot_s"]
    assert band["low"] / d["itl_median_s"] == pytest.approx(tb["low"] / d["tpot_s"], rel=1e-9)
    assert band["high"] / d["itl_median_s"] == pytest.approx(tb["high"] / d["tpot_s"], rel=1e-9)


def test_api_matches_cli_and_replicas_scale_throughput():
    one = llmpar.serve("llama-3-8b", concurrency=16)
    two = llmpar.serve("llama-3-8b", gpus=2, tp=1, concurrency=32)
    # two replicas, each with 16 clients: twice the throughput, the same latency
    assert two.output_tokens_per_s == pytest.approx(2 * one.output_tokens_per_s, rel=1e-9)
    assert two.tpot_s == pytest.approx(one.tpot_s, rel=1e-9)
    assert two.output_tokens_per_s_per_gpu == pytest.approx(one.output_tokens_per_s_per_gpu, rel=1e-9)


@pytest.mark.parametrize("args, culprit", [
    (("llama-3-8b", "--isl", "8000", "--osl", "500"), "context of 8,192"),
    (("llama-3-8b", "--concurrency", "4", "--rate", "2"), "give one load"),
    (("llama-3-8b", "--prompts", "10", "--concurrency", "4"), "--prompts"),
    (("llama-3-8b", "--rate", "-3"), "--rate"),
    (("llama-3-8b", "--rate", "2", "--prompts", "0"), "--prompts"),
    (("llama-3-70b", "--gpus", "8", "--tp", "2", "--disagg", "4", "--rate", "2", "--prompts", "100"), "--prompts"),
    (("llama-3.1-8b", "--engine", "trtllm", "--isl", "12000", "--osl", "100"), "does not chunk prompts"),
    (("llama-3-8b", "--rate", "fast"), "--rate"),
    (("llama-3-8b", "--tp", "3"), "--tp 3"),
    (("llama-3-8b", "--ep", "2", "--tp", "2"), "dense"),
    (("llama-3-8b", "--gpus", "3", "--tp", "2"), "--gpus 3"),
    (("llama-3-8b", "--memory-fraction", "1.5"), "--memory-fraction"),
    (("llama-3-8b", "--batch", "100000"), "--batch"),
    (("llama-3-8b", "--engine", "nope"), "unknown engine"),
    (("llama-3-8b", "--acceptance", "0.7"), "--spec-tokens"),
    (("llama-3-8b", "--spec-tokens", "3"), "--acceptance"),
    (("llama-3-8b", "--spec-tokens", "3", "--acceptance", "1.5"), "--acceptance"),
    (("llama-3-8b", "--prefix-hit", "1"), "--prefix-hit"),
    (("llama-3-8b", "--spec-tokens", "40", "--acceptance", "0.5"), "--spec-tokens"),
    (("llama-3-8b", "--tp", "2", "--dp-attention"), "dense"),
    (("mixtral-8x7b", "--dp-attention"), "--tp 2"),
    (("mixtral-8x7b", "--tp", "4", "--ep", "2", "--dp-attention"), "--ep"),
    (("llama-3-70b", "--gpus", "8", "--tp", "2", "--disagg", "3", "--rate", "2"), "whole replicas"),
    (("llama-3-70b", "--gpus", "8", "--tp", "2", "--disagg", "2", "--concurrency", "8"), "--rate"),
    (("mixtral-8x7b", "--gpus", "4", "--tp", "2", "--dp-attention", "--rate", "5", "--disagg", "2"), "--dp-attention"),
])
def test_bad_input_is_one_line_exit_2(cli, args, culprit):
    assert_one_line_error(cli("serve", *args), culprit)


# A deployment whose weights do not fit (llama-3.1-405b in bf16 on one H100: 810 GB of weights on
# 80 GB) is exit 1; bad load options on it are still bad input, exit 2, and name themselves: the
# options are checked before the memory verdict (serving/run.py _check_load_options).
@pytest.mark.parametrize("args, culprit", [
    (("--concurrency", "0"), "--concurrency"),
    (("--batch", "0"), "--batch"),
    (("--rate", "2", "--simulate", "0"), "--simulate"),
    (("--concurrency", "8", "--simulate", "100"), "Poisson --rate"),
    (("--rate", "2", "--prompts", "0"), "--prompts"),
    (("--gpus", "8", "--tp", "1", "--disagg", "0", "--rate", "2"), "--disagg"),
    (("--gpus", "8", "--tp", "1", "--disagg", "2", "--concurrency", "4"), "--rate"),
])
def test_bad_load_options_are_exit_2_even_where_nothing_fits(cli, args, culprit):
    assert_one_line_error(cli("serve", "llama-3.1-405b", "--tp", "1", *args), culprit)


# vLLM's SchedulerConfig refuses max_num_batched_tokens < max_num_seqs (vllm/config/scheduler.py at
# f0de1a60): on H100 its defaults are 8,192 tokens and 1,024 sequences (engines/vllm.yaml), so a
# budget of 512 alone, or 9,000 sequences alone, is a server that does not start; 512 tokens with
# 256 sequences starts. SGLang and TensorRT-LLM state no such rule (budget_covers_seqs false).
@pytest.mark.parametrize("args, culprit", [
    (("--max-num-batched-tokens", "512"), "--max-num-batched-tokens: vllm refuses max_num_batched_tokens 512 "
                                          "below max_num_seqs 1,024"),
    (("--max-num-seqs", "9000"), "--max-num-seqs: vllm refuses max_num_batched_tokens 8,192 below max_num_seqs 9,000"),
])
def test_vllm_budget_below_its_sequences_is_refused(cli, args, culprit):
    assert_one_line_error(cli("serve", "llama-3-8b", *args), culprit)


def test_vllm_budget_at_its_sequences_and_other_engines_run(cli):
    assert cli("serve", "llama-3-8b", "--max-num-batched-tokens", "512", "--max-num-seqs", "256").code == 0
    assert cli("serve", "llama-3-8b", "--engine", "sglang", "--max-num-batched-tokens", "512").code == 0


def test_a_rate_above_capacity_exits_1_naming_the_limit(cli):
    assert_one_line_error(cli("serve", "llama-3-8b", "--rate", "10000"), "exceeds what the deployment sustains",
                          code=1)


def test_weights_that_do_not_fit_exit_1(cli):
    assert_one_line_error(cli("serve", "llama-3.1-405b", "--tp", "8", "--hardware", "h100-sxm"), "DOES NOT FIT",
                          code=1)


def test_fp8_and_int4_read_fewer_bytes_and_decode_faster():
    """Batch-1 decode is weight-bound: fp8 halves the linear layers' bytes, int4 quarters them
    (plus scales); the 16-bit head stays."""
    t = {w: llmpar.serve("llama-3-70b", tp=4, concurrency=1, weights=w).tpot_s for w in ("bf16", "fp8", "int4")}
    assert t["int4"] < t["fp8"] < t["bf16"]


def test_offline_default_is_vllm_bench_serve_default():
    r = llmpar.serve("llama-3-8b")
    assert r.load["kind"] == "offline" and r.load["prompts"] == 1000
    assert r.load["duration_s"] == pytest.approx(1000 / r.requests_per_s, rel=1e-9)


def test_every_figure_is_finite_at_extremes():
    for kw in ({"isl": 1, "osl": 1, "concurrency": 1}, {"isl": 8000, "osl": 1, "rate": 0.01},
               {"isl": 1, "osl": 8000, "batch": 1}):
        r = llmpar.serve("llama-3-8b", **kw)
        for key in ("ttft_s", "e2e_s", "output_tokens_per_s", "requests_per_s"):
            assert math.isfinite(getattr(r, key)) and getattr(r, key) > 0
        if kw["osl"] == 1:
            assert r.tpot_s is None


def test_api_refuses_bad_rate_string():
    with pytest.raises(UserError, match="--rate"):
        llmpar.serve("llama-3-8b", rate="soon")


def test_engines_listing_and_show(cli):
    r = cli("engines", "--json")
    assert r.code == 0, r.err
    names = [e["name"] for e in r.json()]
    assert names == ["sglang", "trtllm", "vllm"] and all(e["fitted"] for e in r.json())
    s = cli("engines", "show", "vllm", "--json").json()
    assert s["profile"]["scheduler"]["memory_rule"] == "total"
    assert_one_line_error(cli("engines", "show", "vlm"), "did you mean", "llmpar engines")


def test_a_finite_run_above_capacity_is_answered_not_saturated(cli):
    """`--rate R --prompts N` is a benchmark of N requests (vllm bench serve --request-rate R
    --num-prompts N): above the capacity its figures are finite, exit 0, and the note says they hold
    for that run's length; without --prompts the same rate is SATURATED (exit 1)."""
    r = cli("serve", "llama-3-8b", "--rate", "500", "--prompts", "300", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["load"]["saturated"] and d["load"]["prompts"] == 300
    assert math.isfinite(d["ttft_s"]) and math.isfinite(d["tpot_s"])
    # the run cannot finish faster than its capacity allows, nor than its requests arrive
    assert d["requests_per_s"] <= d["load"]["capacity_requests_per_s"] * (1 + 1e-9)
    assert d["load"]["duration_s"] >= 300 / 500
    assert any("this run's length" in n for n in d["notes"])
    assert cli("serve", "llama-3-8b", "--rate", "500").code == 1


def test_disaggregated_running_is_per_decode_replica(cli):
    """--gpus 8 --tp 2 --disagg 4: 2 decode replicas of tp 2 hold every running request (the prefill
    pool holds none), so the table divides by 2, not by all 4 replicas."""
    args = ("serve", "llama-3-70b", "--gpus", "8", "--tp", "2", "--disagg", "4", "--rate", "2")
    d = cli(*args, "--json").json()
    assert d["load"]["decode_replicas"] == 2
    text = cli(*args).out
    line = next(ln for ln in text.splitlines() if ln.startswith("running per decode replica"))
    assert float(line.split()[-1]) == pytest.approx(d["load"]["running"] / 2, abs=0.05)


def test_an_engine_file_whose_defaults_break_the_rule_is_refused_when_read(cli, tmp_path):
    # extends vllm (8,192 tokens by default on every generation but ampere) and asks 9,000 sequences on
    # Hopper: a server vLLM would not start, refused at load on the generation it names, for serve
    # and serve-plan alike (the rule lives in specs/engine.py Scheduler, not in one command)
    f = tmp_path / "my-vllm.yaml"
    f.write_text("extends: vllm\nname: my-vllm\nscheduler:\n  max_num_seqs: {default: 1024, hopper: 9000}\n")
    for cmd in (("serve", "llama-3-8b"), ("serve-plan", "llama-3-8b", "--gpus", "1")):
        assert_one_line_error(cli(*cmd, "--engine", f), "max_num_batched_tokens 8,192 is below max_num_seqs 9,000 (hopper)")
