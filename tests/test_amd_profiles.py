"""AMD Instinct profiles (hardware/mi300x.yaml, mi325x.yaml) and the rules they exercise: the
cdna3 generation key, the attention kernel capped at the GPU's best GEMM, and the note that a
stack has no values for a GPU generation. Numbers from the AMD datasheets and the ml-engineering
MAMF table, as cited in the YAML."""

from __future__ import annotations

import pytest

import llmpar
from llmpar.cost import compute
from llmpar.inputs import generation_note, make_settings
from llmpar.specs import load_hardware, load_stack
from llmpar.specs.stack import per_gen


def test_mi300x_datasheet_and_mamf_numbers():
    mi300, mi325 = load_hardware("mi300x"), load_hardware("mi325x")
    # MI300X datasheet: 1307.4 / 2614.9 / 653.7 / 163.4 TFLOPS dense bf16 / fp8 / tf32 / fp32;
    # 192 GB HBM3 (8 x 24 GiB) at 5.3 TB/s; 304 CUs; 750 W. MI325X: the same compute, 256 GB HBM3E
    # (8 x 32 GiB) at 6 TB/s, 1000 W.
    assert mi300.gpu.peak("bf16") == pytest.approx(1307.4e12) and mi300.gpu.peak("fp8") == pytest.approx(2614.9e12)
    assert mi300.gpu.peak("tf32") == pytest.approx(653.7e12) and mi300.gpu.peak("fp32") == pytest.approx(163.4e12)
    assert mi300.gpu.memory == 192 * 2**30 and mi300.gpu.memory_bandwidth == pytest.approx(5.3e12)
    assert mi300.gpu.sms == 304 and mi300.gpu.board_power == 750 and mi300.gpu.generation == "cdna3"
    assert mi325.gpu.peak("bf16") == pytest.approx(1307.4e12) and mi325.gpu.memory == 256 * 2**30
    assert mi325.gpu.memory_bandwidth == pytest.approx(6e12) and mi325.gpu.board_power == 1000
    assert mi325.tiers == mi300.tiers and mi325.gpu.generation == "cdna3"
    # ml-engineering MAMF v2, bf16: MI300X 668.4, MI325X 784.9 TFLOP/s = max_efficiency x peak;
    # half_flops = 4 us x peak x max_efficiency (the launch cost every profile assumes)
    for hw, mamf in ((mi300, 668.4e12), (mi325, 784.9e12)):
        assert hw.gpu.gemm.max_efficiency * hw.gpu.peak("bf16") == pytest.approx(mamf, rel=1e-3)
        assert hw.gpu.gemm.half_flops == pytest.approx(4e-6 * mamf, rel=2e-3)
    # xGMI: no switch, so no in-network reduction
    assert not mi300.tiers[0].in_network_reduction
    # Azure ND MI300X v5 (AI-benchmarking-guide): STREAM triad 4.09 TB/s = memory_efficiency x 5.3;
    # RCCL all-reduce busbw 316.8 GB/s at 8 GB = efficiency x 448 GB/s per direction
    assert mi300.gpu.memory_efficiency * mi300.gpu.memory_bandwidth == pytest.approx(4.09e12, rel=0.01)
    assert mi300.tiers[0].efficiency * mi300.tiers[0].bandwidth == pytest.approx(316.8e9, rel=0.01)


def test_mi300x_all_reduce_against_azures_published_curve():
    # llmpar's ring all-reduce on 8 MI300X, by hand, against Azure's published busbw (ND MI300X v5,
    # AI-benchmarking-guide). Ring: 2(n-1) = 14 steps, busbw = 1.75 x S / t, achieved link
    # bandwidth B = 448 GB/s x 0.71 = 318.08 GB/s; NCCL tuning.cc base latency (Ring: LL 6.6 us,
    # Simple 8.4 us) + 14 x the tier's per-step latency (LL 0.6 us, Simple 10 us: hardware/mi300x.yaml).
    # - 128 MiB, Simple: t = 8.4 + 14 x 10 = 148.4 us + 1.75 x 134,217,728 / 318.08e9 = 738.43 us
    #   -> 886.83 us, busbw 264.85 GB/s (published 290.8 at "134M": 9 % slow);
    # - 16 MiB, LL (half of Simple's bandwidth): t = 6.6 + 14 x 0.6 = 15.0 us + 1.75 x 16,777,216 /
    #   159.04e9 = 184.61 us -> 199.61 us, busbw 147.09 GB/s (published 171.5 at "16M": 14 % slow);
    # - large messages approach 318.08 GB/s: published 313.9 at 1 GB and 316.8 at 8 GB.
    def busbw(size):   # the busbw llmpar reports for the algorithm and protocol it picks
        r = llmpar.collective("all_reduce", hardware="mi300x", gpus=8, size=size).to_dict()
        (a,) = [a for a in r["algorithms"] if (a["algorithm"], a["protocol"]) == (r["chosen"], r["chosen_protocol"])]
        return a["busbw_GBps"]

    got = {size: busbw(size) for size in ("16MiB", "128MiB", "1GiB", "8GiB")}
    assert got["8GiB"] == pytest.approx(316.8, rel=0.01) and got["1GiB"] == pytest.approx(313.9, rel=0.02)
    t128 = 148.4e-6 + 1.75 * 134_217_728 / 318.08e9
    t16 = 15.0e-6 + 1.75 * 16_777_216 / 159.04e9
    assert got["128MiB"] == pytest.approx(1.75 * 134_217_728 / t128 / 1e9, rel=1e-4)
    assert got["16MiB"] == pytest.approx(1.75 * 16_777_216 / t16 / 1e9, rel=1e-4)
    assert round(got["128MiB"], 2) == 264.85 and round(got["16MiB"], 2) == 147.09


def test_attention_is_capped_at_the_gpus_best_gemm():
    # megatron-core's attention fractions: no cdna3 entry, so the defaults 0.6 / 0.45 of the dense
    # peak; MI300X's best GEMM reaches 668.4 / 1307.4 = 0.511, so the forward is capped there and the
    # backward (0.45 < 0.511) is not. On H100 the fitted hopper values (0.5766 / 0.2681, scripts/fit_stacks.py
    # megatron-core) sit below its
    # MAMF 0.803 and are used as they are.
    mc = load_stack("megatron-core")
    mi300, h100 = load_hardware("mi300x"), load_hardware("h100-sxm")
    e_f, e_b = compute.attention_efficiency(mi300, mc)
    assert e_f == pytest.approx(668.4 / 1307.4, rel=2e-3) and e_b == 0.45
    assert compute.attention_efficiency(h100, mc) == (0.5766, 0.2681)
    # one causal core GEMM pair of 1e12 FLOPs: forward 1e12 / (1307.4e12 x 0.511) = 1.497 ms,
    # backward (2.5 x the forward FLOPs: 5 matmuls against 2, FlashAttention-2 §3.1-3.2)
    # 2.5e12 / (1307.4e12 x 0.45) = 4.249 ms
    core = [("qk", 1e6, 1e3, 250.0, 1), ("pv", 1e6, 1e3, 250.0, 1)]      # 2 x 2mnk = 1e12 FLOPs
    fwd, bwd = compute.attention_core_time(mi300, mc, "bf16", core)
    assert fwd == pytest.approx(1e12 / (1307.4e12 * e_f)) and fwd == pytest.approx(1.497e-3, rel=1e-3)
    assert bwd == pytest.approx(2.5e12 / (1307.4e12 * 0.45)) and bwd == pytest.approx(4.249e-3, rel=1e-3)


def test_a_stack_can_state_cdna3_values(tmp_path):
    # the generation key is accepted in a stack's per-generation mapping and selected on MI300X
    f = tmp_path / "rocm.yaml"
    f.write_text("name: rocm\nextends: megatron-core\nkernels:\n  gemm_efficiency: {default: 0.85, cdna3: 0.7}\n")
    st = load_stack(str(f))
    assert per_gen(st.kernels.gemm_efficiency, "cdna3") == 0.7
    # extends merges a mapping per key: the base's fitted hopper value stays
    assert per_gen(st.kernels.gemm_efficiency, "hopper") == 0.7452


def test_the_step_says_when_a_stack_has_no_values_for_the_gpu():
    mi300, h100 = load_hardware("mi300x"), load_hardware("h100-sxm")
    note = generation_note(mi300, make_settings(None, stack="megatron-core"))
    assert note.startswith("stack megatron-core states values for other GPU generations but none for cdna3 (mi300x)")
    assert "gemm_efficiency 0.85" in note and "attention.forward_efficiency 0.6" in note
    assert generation_note(h100, make_settings(None, stack="megatron-core")) is None
    # megatron-2022 states single values, for no generation in particular: nothing to say
    assert generation_note(mi300, make_settings(None, stack="megatron-2022")) is None
    r = llmpar.step("llama-3-8b", hardware="mi300x", gpus=8, tp=1, global_batch=16, seq=4096)
    assert any(a.startswith("stack megatron-core states values for other GPU generations") for a in r.assumptions)
    assert r.detail["attention_efficiency"] == [pytest.approx(668.4 / 1307.4, rel=2e-3), 0.45]


def test_plan_on_mi300x_says_the_stack_has_no_values_for_it():
    # the planner prices every candidate with the same defaults, and says so once
    r = llmpar.plan("llama-3-8b", hardware="mi300x", gpus=8, global_batch=16, seq=4096)
    notes = [a for a in r.assumptions if "none for cdna3 (mi300x)" in a]
    assert len(notes) == 1 and "priors not fitted on this GPU" in notes[0]
