"""`--optimizer-offload F`: optimizer states in host memory, their step on the CPU (docs/memory.md,
Optimizer offload; ZeRO-Offload, Ren et al. 2021 §4; Megatron-Core --optimizer-offload-fraction).

Expected numbers by hand from the model's parameter count, Adam's 12 B of state per parameter,
the 4 B fp32 gradient buffer kept beside them on the host, and the profile's host DRAM and link.
"""

from __future__ import annotations

import pytest

import llmpar
from llmpar.cost.step import _OPT_TRAFFIC
from tests.conftest import assert_one_line_error


def test_memory_moves_the_states_and_an_fp32_gradient_buffer_to_the_host():
    kw = dict(gpus=2, dp=2, zero=1, seq=4096, recompute="full")
    base = llmpar.memory("llama-3-8b", **kw)
    n = base.params_total / 2                       # ZeRO-1 over 2: each GPU optimises half
    assert base.memory["optimizer_bytes"] == pytest.approx(12 * n, rel=1e-9)
    half = llmpar.memory("llama-3-8b", optimizer_offload=0.5, **kw)
    full = llmpar.memory("llama-3-8b", optimizer_offload=1, **kw)
    assert half.memory["optimizer_bytes"] == pytest.approx(6 * n, rel=1e-9)
    assert full.memory["optimizer_bytes"] == 0.0
    # host: F x (12 + 4) B per optimised parameter = 16 x 4.015e9 = 64.2 GB at F = 1
    note = next(a for a in full.assumptions if a.startswith("optimizer offload 1"))
    assert f"{16 * n / 1e9:,.2f} GB" in note
    # the weights and gradients stay where they were
    assert full.memory["weights_bytes"] == base.memory["weights_bytes"]
    assert full.memory["gradients_bytes"] == base.memory["gradients_bytes"]


def test_the_step_pays_the_cpu_step_and_the_copies():
    kw = dict(gpus=8, dp=8, zero=1, seq=8192, global_batch=64, micro_batch=1)
    base = llmpar.step("llama-3-8b", **kw)
    off = llmpar.step("llama-3-8b", optimizer_offload=1, **kw)
    hw = llmpar.load_hardware("h100-sxm")
    n = base.detail["parts"]["optimizer_params"]      # parameters this GPU optimises (8.03e9 / 8)
    assert n == pytest.approx(llmpar.memory("llama-3-8b", **kw).params_total / 8, rel=1e-9)
    # Adam's state traffic per parameter (cost/step.py _OPT_TRAFFIC 46) + the fp32 grad read (4) + 4:
    # 54 B at the host DRAM's 76.8 GB/s; gradients down (4 B, megatron-core's fp32) and 16-bit weights
    # up (2 B) over the 64 GB/s PCIe 5 link
    per = _OPT_TRAFFIC["adam"] + 4 + 4
    assert per == 54
    cpu = n * per / 76.8e9
    copies = n * (4 + 2) / 64e9
    assert float(hw.host_memory_bandwidth) == 76.8e9 and float(hw.host_bandwidth) == 64e9
    assert off.breakdown_s["optimizer"] == pytest.approx(cpu + copies, rel=1e-9)
    assert off.step_time_s - base.step_time_s == pytest.approx(cpu + copies - base.breakdown_s["optimizer"], rel=1e-6)


def test_the_planner_never_offloads_zero_0_layouts():
    r = llmpar.plan("llama-3-8b", gpus=8, optimizer_offload=1, seq=4096, global_batch=64, top=5)
    assert all(int(p.parallel.zero) >= 1 for p in r.plans)
    assert r.space.rejected["optimizer_offload"] > 0


def test_does_not_fit_names_offloading_the_optimizer_when_it_fits():
    r = llmpar.memory("llama-3-8b", gpus=2, dp=2, zero=1, seq=4096, recompute="full")
    assert not r.fits
    assert any(c["change"].startswith("optimizer states to host memory") for c in r.changes_that_fit)


@pytest.mark.parametrize("args, needle", [
    (("memory", "llama-3-8b", "--gpus", "8", "--optimizer-offload", "1"), "--zero 1, 2 or 3"),
    (("memory", "llama-3-8b", "--hardware", "mi300x", "--zero", "1", "--optimizer-offload", "1"), "host_memory_bandwidth"),
    (("memory", "llama-3-8b", "--zero", "1", "--optimizer-offload", "1.5"), "fraction from 0 to 1"),
    (("memory", "llama-3-8b", "--zero", "1", "--optimizer-offload", "nan"), "fraction from 0 to 1"),
    (("memory", "llama-3-8b", "--zero", "1", "--optimizer-offload", "half"), "fraction from 0 to 1"),
    # 1e-400 underflows to 0.0: it was silently no offload (and none of its rules applied)
    (("memory", "llama-3-8b", "--zero", "1", "--optimizer-offload", "1e-400"), "rounds to 0"),
    (("memory", "llama-3-8b", "--inference", "--optimizer-offload", "1"), "--optimizer-offload"),
    (("plan", "llama-3-8b", "--gpus", "8", "--hardware", "mi300x", "--optimizer-offload", "1"), "host_memory_bandwidth"),
])
def test_bad_offload_input_is_one_line(cli, args, needle):
    assert_one_line_error(cli(*args), needle)


def test_plan_that_fits_nowhere_says_which_offload_would(cli):
    # Llama 3 70B on one DGX H100 (megatron-core): no layout fits in 80 GB. The planner re-evaluates
    # the same candidates with the offload settings (memory's own function) and names the first that
    # makes some fit; planning with it then ranks layouts, every one with ZeRO >= 1
    res = cli("plan", "llama-3-70b", "--gpus", "8")
    assert res.code == 1
    assert "no layout fits" in res.err and "with --optimizer-offload 1" in res.err and "of these layouts fit" in res.err
    r = llmpar.plan("llama-3-70b", gpus=8, optimizer_offload=1, top=3)
    assert r.plans and all(p.parallel.zero >= 1 for p in r.plans)
    # where no offload helps (405B on 8 GPUs), the refusal says nothing about offloading
    res = cli("plan", "llama-3.1-405b", "--gpus", "8")
    assert res.code == 1 and "offload" not in res.err
