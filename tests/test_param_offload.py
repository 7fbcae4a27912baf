"""`--param-offload`: ZeRO-3's 16-bit parameter shards in host memory, copied in before each gather
(docs/memory.md, Parameter offload; ZeRO-Infinity, Rajbhandari et al. 2021 §5; DeepSpeed
zero_optimization.offload_param).

Expected numbers by hand from the model's parameter count, 2 B per 16-bit weight, the ZeRO-3
degree, and the profile's host link (h100-sxm: 64 GB/s per GPU, one GPU per link) and the
deepspeed stack's ZeRO-3 prefetch share (0.5).
"""

from __future__ import annotations

import json

import pytest

import llmpar
from llmpar.specs import load_hardware, load_stack
from tests.conftest import assert_one_line_error

KW = dict(stack="deepspeed", zero=3, dp=8, recompute="full")


def test_memory_moves_the_shards_and_keeps_the_gathered_layers():
    base = llmpar.memory("llama-3-70b", **KW)
    off = llmpar.memory("llama-3-70b", param_offload=True, **KW)
    n = base.params_total
    shard = 2.0 * n / 8                                  # 2 B x 70.55B / 8 = 17.64 GB
    assert shard / 1e9 == pytest.approx(17.64, abs=0.005)
    # what stays in HBM is the two gathered layers (current + prefetch) ZeRO-3 holds anyway
    assert base.memory["weights_bytes"] - off.memory["weights_bytes"] == pytest.approx(shard, rel=1e-9)
    assert off.memory["gradients_bytes"] == base.memory["gradients_bytes"]
    assert off.memory["optimizer_bytes"] == base.memory["optimizer_bytes"]
    note = next(a for a in off.assumptions if a.startswith("parameter offload"))
    assert f"{shard / 1e9:,.2f} GB" in note
    # with the optimizer offloaded too the host holds both: 17.64 + 16 B x 70.55B / 8 = 158.75 GB
    both = llmpar.memory("llama-3-70b", param_offload=True, optimizer_offload=1, **KW)
    note = next(a for a in both.assumptions if a.startswith("parameter offload"))
    assert f"{(shard + 16.0 * n / 8) / 1e9:,.2f} GB offloaded" in note


def test_explain_terms_add_up_under_both_offloads():
    for po in (False, True):
        for oo in (0.0, 1.0):
            r = llmpar.memory("llama-3-70b", param_offload=po, optimizer_offload=oo, explain=True, **KW)
            for comp in ("weights", "optimizer"):
                got = sum(t.bytes for t in r.terms if t.component == comp)
                assert got == pytest.approx(r.memory[f"{comp}_bytes"], rel=1e-9, abs=1.0), (po, oo, comp)


def test_step_pays_the_copies_it_cannot_prefetch():
    # 512 sequences of 8192 over dp 8 at micro-batch 1: m = 64. Each micro-batch copies the 17.64 GB
    # shard in twice (forward and backward gathers) and, with the optimizer on the GPU, the updated
    # shard goes back once: (2 x 64 + 1) x 17.64 GB / 64 GB/s = 35.55 s of copies. The compute
    # window (605 s) dwarfs them; deepspeed's ZeRO-3 prefetch hides half: 17.78 s exposed.
    hw, st = load_hardware("h100-sxm"), load_stack("deepspeed")
    assert (hw.host_bandwidth, hw.gpus_per_host_link, st.overlap.zero3_prefetch) == (64e9, 1, 0.5)
    base = llmpar.step("llama-3-70b", **KW)
    off = llmpar.step("llama-3-70b", param_offload=True, **KW)
    shard = 2.0 * llmpar.memory("llama-3-70b", **KW).params_total / 8
    want = 0.5 * (2 * 64 + 1) * shard / 64e9
    assert want == pytest.approx(17.78, abs=0.01)
    assert off.breakdown_s["offload"] == pytest.approx(want, rel=1e-9)
    assert off.step_time_s - base.step_time_s == pytest.approx(want, rel=1e-9)
    # with the optimizer step on the CPU the updated shard is written in host memory: 2 m copies only
    both = llmpar.step("llama-3-70b", param_offload=True, optimizer_offload=1, **KW)
    assert both.breakdown_s["offload"] == pytest.approx(0.5 * 128 * shard / 64e9, rel=1e-9)


def test_refusals_name_the_culprit(cli):
    assert_one_line_error(cli("memory", "llama-3-70b", "--zero", "3", "--dp", "8", "--param-offload"),
                          "--param-offload", "megatron-core")
    assert_one_line_error(cli("step", "llama-3-70b", "--stack", "deepspeed", "--zero", "1", "--dp", "8",
                              "--param-offload"), "--param-offload", "--zero 3")
    assert_one_line_error(cli("step", "llama-3-70b", "--stack", "torchtitan", "--zero", "3", "--dp", "8",
                              "--param-offload"), "--optimizer-offload 1")
    assert_one_line_error(cli("memory", "llama-3-8b", "--stack", "deepspeed", "--zero", "3", "--gpus", "8",
                              "--finetune", "lora", "--param-offload"), "--param-offload", "lora")
    assert_one_line_error(cli("memory", "llama-3-8b", "--stack", "deepspeed", "--inference", "--param-offload"),
                          "--param-offload")


def test_plan_searches_zero3_only_and_says_why():
    r = llmpar.plan("llama-3-70b", gpus=8, stack="deepspeed", param_offload=True, optimizer_offload=1, top=3)
    assert r.plans and all(p.parallel.zero == 3 for p in r.plans)
    assert r.space.rejected["param_offload"] > 0
    assert "param-offload" in r.plans[0].interval["evidence"]["class"]
    assert r.plans[0].interval["evidence"]["extrapolated"] is True


def test_does_not_fit_offers_it_where_the_stack_does_it(cli):
    # 70B over 24 GPUs, ZeRO-3, full recompute: 88.55 GB against 85.90; moving the 2 x 70.55B / 24
    # = 5.88 GB of shards to host memory saves 5.88 x 1.15 (deepspeed's allocator overhead) = 6.76 GB
    # and leaves 81.79 GB: it fits
    res = cli("memory", "llama-3-70b", "--stack", "deepspeed", "--zero", "3", "--dp", "24", "--recompute", "full")
    assert "parameters to host memory (--param-offload): 81.79 GB" in res.out
    # megatron-core cannot: not offered
    res = cli("memory", "llama-3-70b", "--zero", "3", "--dp", "24", "--recompute", "full")
    assert "--param-offload" not in res.out


def test_emitted_configs(cli):
    r = cli("plan", "llama-3-8b", "--gpus", "8", "--seq", "4096", "--stack", "deepspeed", "--param-offload",
            "--fix", "tp=1,pp=1,cp=1,recompute=none", "--emit", "deepspeed")
    assert r.code == 0, r.err
    cfg = json.loads(r.out[r.out.index("{"):])
    assert cfg["zero_optimization"]["stage"] == 3
    assert cfg["zero_optimization"]["offload_param"] == {"device": "cpu", "pin_memory": True}
    r = cli("plan", "llama-3-8b", "--gpus", "8", "--seq", "4096", "--stack", "torchtitan", "--param-offload",
            "--optimizer-offload", "1", "--fix", "tp=1,pp=1,cp=1,recompute=selective", "--emit", "torchtitan")
    assert r.code == 0, r.err
    assert "enable_cpu_offload = true" in r.out
    assert_one_line_error(cli("plan", "llama-3-8b", "--gpus", "8", "--stack", "deepspeed", "--param-offload",
                              "--emit", "megatron"), "--param-offload")


def test_a_bare_count_whose_offload_exceeds_host_memory_does_not_fit():
    # --params 20B on one GPU, ZeRO-3 with both offloads: the host holds 2 B (16-bit shard) +
    # 12 B (Adam states) + 4 B (fp32 gradients) = 18 B x 20e9 = 360 GB, above h100-sxm's 256 GB per
    # GPU; the HBM (46.6 GB) holds the rest, so it is the host that refuses it
    r = llmpar.memory(params="20B", zero=3, gpus=1, stack="deepspeed", param_offload=True, optimizer_offload=1)
    note = next(a for a in r.assumptions if a.startswith("offload:"))
    assert "360.00 GB" in note and "DOES NOT FIT" in note
    assert r.memory["total_bytes"] < r.capacity_bytes
    assert r.fits is False and r.verdict == "does_not_fit"
