"""Serving options that change nothing in the mode given, or name what cannot run, are refused with
one line (exit 2), not ignored (issue 24 §2, "an option that changes nothing in the mode given is
refused"; found by a review of issues 24/25 on 2026-12-03, each case failing before the fix):
--seed without --simulate, --simulate with --disagg, serve-plan's --tpot with --osl 1, an engine
named twice, and TensorRT-LLM on an AMD GPU."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error


@pytest.mark.parametrize("args, needle", [
    (("serve", "llama-3-8b", "--seed", "5", "--concurrency", "4"), "--seed seeds --simulate"),
    (("serve", "llama-3-8b", "--gpus", "4", "--tp", "1", "--disagg", "2", "--rate", "2", "--simulate", "100"),
     "--simulate with --disagg"),
    (("serve-plan", "llama-3-70b", "--gpus", "8", "--osl", "1", "--tpot", "1us"), "--tpot with --osl 1"),
    (("serve-plan", "llama-3-70b", "--gpus", "8", "--engine", "vllm,vllm"), "'vllm' is given twice"),
    (("serve", "llama-3-8b", "--hardware", "mi300x", "--engine", "trtllm"), "--engine trtllm runs on"),
    (("serve-plan", "llama-3-70b", "--gpus", "8", "--hardware", "mi300x", "--engine", "trtllm"),
     "not mi300x's cdna3"),
])
def test_refused(cli, args, needle):
    assert_one_line_error(cli(*args), needle)


def test_the_seed_still_seeds_a_simulation_and_all_engines_leave_trtllm_out_on_amd(cli):
    a = cli("serve", "llama-3-8b", "--rate", "2", "--simulate", "200", "--seed", "3", "--json").json()
    b = cli("serve", "llama-3-8b", "--rate", "2", "--simulate", "200", "--json").json()   # the default seed, 0
    assert a["simulation"]["seed"] == 3 and b["simulation"]["seed"] == 0
    res = cli("serve-plan", "llama-3-70b", "--gpus", "8", "--hardware", "mi300x", "--engine", "all", "--json")
    assert res.code in (0, 1), res.err
    assert "trtllm" not in res.json()["engines"] and "vllm" in res.json()["engines"]
