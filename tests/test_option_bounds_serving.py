"""Every option that scales a printed figure is bounded (reliability review, item 22, re-checked
2026-12-03 on the serving commands and `collective`): beyond a bound an input is a typing slip and
gets one line naming the option and the bound, exit 2, never an overflow warning, a 300-digit
number or `inf` in a table. The bounds: a rate from one request a day (1/86,400 = 1.16e-05 per
second) to a million per second; a GPU-hour price up to a million (the training commands' bound,
cost/training.py MAX_PRICE); a latency target up to an hour; a message up to 1 PiB (2^50 B)."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error


@pytest.mark.parametrize("args, needles", [
    (("serve", "llama-3-8b", "--rate", "1e308"), ("--rate", "1,000,000")),
    (("serve", "llama-3-8b", "--rate", "1e-300"), ("--rate", "1.16e-05")),
    (("serve-plan", "llama-3-8b", "--gpus", "8", "--rate", "1e308"), ("--rate", "1,000,000")),
    (("serve-plan", "llama-3-8b", "--rate", "inf"), ("--rate inf", "finite")),
    (("serve-plan", "llama-3-8b", "--gpus", "8", "--ttft", "2s", "--gpu-hour-price", "1e308"),
     ("--gpu-hour-price", "1,000,000")),
    (("serve-plan", "llama-3-8b", "--gpus", "8", "--ttft", "1e308s"), ("--ttft", "an hour")),
    (("serve-plan", "llama-3-8b", "--gpus", "8", "--tpot", "7200s"), ("--tpot", "an hour")),
    (("collective", "all-gather", "--size", "1e30", "--gpus", "8"), ("--size", "1 PiB")),
    (("collective", "all-gather", "--sweep", "1KiB:1e30", "--gpus", "8"), ("--sweep", "1 PiB")),
])
def test_an_option_beyond_its_bound_is_one_line(cli, args, needles):
    assert_one_line_error(cli(*args), *needles)


def test_the_bounds_themselves_are_accepted(cli):
    # 1 PiB exactly is a message llmpar prices; an hour exactly is a target; a rate of a day is a load
    assert cli("collective", "all-gather", "--size", "1PiB", "--gpus", "8").code == 0
    r = cli("serve-plan", "llama-3-8b", "--gpus", "8", "--ttft", "3600s")
    assert r.code == 0, r.err
    r = cli("serve", "llama-3-8b", "--rate", str(1 / 86400))
    assert r.code == 0, r.err


def test_isl_beyond_the_context_names_the_model_limit(cli):
    """issue 25, bad input: an ISL beyond the model's context says which limit binds (llama-3-70b's
    max_seq 8,192)."""
    for cmd in (("serve", "llama-3-70b", "--tp", "4"), ("serve-plan", "llama-3-70b", "--gpus", "8", "--ttft", "1s",
                                                        "--tpot", "50ms")):
        res = cli(*cmd, "--isl", "200000", "--osl", "10")
        assert_one_line_error(res, "8,192", "llama-3-70b's context")
