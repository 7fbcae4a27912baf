"""DOES NOT FIT names what would fit, each change computed with memory's and step's own functions
(llmpar.remedies; docs/memory.md, When it does not fit)."""

from __future__ import annotations

import pytest

import llmpar


def test_each_listed_change_is_what_memory_and_step_say_of_it():
    """Llama 3 8B on 8 GPUs without ZeRO holds 2 + 4 + 12 = 18 B per parameter: 8.03e9 x 18 =
    144.5 GB of model states, over an H100's 85.9 GB. ZeRO 3 over 8 GPUs fits: the listed total and
    step time are `memory --zero 3`'s and `step --zero 3`'s."""
    r = llmpar.memory("llama-3-8b", dp=8)
    assert not r.fits
    z3 = next(c for c in r.changes_that_fit if c["change"] == "ZeRO 3")
    m = llmpar.memory("llama-3-8b", dp=8, zero=3)
    assert m.fits and z3["total_bytes"] == pytest.approx(m.memory["total_bytes"], rel=1e-12)
    base = llmpar.step("llama-3-8b", dp=8).step_time_s
    s = llmpar.step("llama-3-8b", dp=8, zero=3).step_time_s
    assert z3["step_time_s"] == pytest.approx(s, rel=1e-12)
    assert z3["step_time_ratio"] == pytest.approx(s / base, rel=1e-12)
    times = [c["step_time_s"] for c in r.changes_that_fit]
    assert times == sorted(times)          # fastest first


def test_pairs_when_no_single_change_fits_and_the_json_carries_them(cli):
    r = llmpar.memory("llama-3-70b", gpus=64, tp=8, micro_batch=4)
    assert r.changes_that_fit and all(" and " in c["change"] for c in r.changes_that_fit)
    assert all(c["total_bytes"] <= r.capacity_bytes for c in r.changes_that_fit)
    j = cli("memory", "llama-3-70b", "--gpus", "64", "--tp", "8", "--micro-batch", "4", "--json").json()
    assert [c["change"] for c in j["changes_that_fit"]] == [c["change"] for c in r.changes_that_fit]


def test_a_fitting_layout_lists_nothing_and_the_states_message_is_right(cli):
    assert llmpar.memory("llama-3-8b", dp=8, zero=3).changes_that_fit is None
    out = cli("memory", "llama-3-8b", "--dp", "8").out
    assert "the model states alone" in out and "exceed the HBM" in out
