"""Every shipped hardware profile loads and states the numbers its sources give.

Derived numbers are checked against the datasheet/paper figures cited in the YAML comments
(docs/hardware.md): per-direction NVLink = bidirectional / 2; NIC share = NIC line rate / 8 bits;
max GEMM efficiency x peak = the MAMF measurement; memory efficiency x bandwidth = STREAM.
"""

from __future__ import annotations

import re

import pytest

from llmpar.specs.registry import data_dir, load_hardware, shipped_names

EXPECTED = {"a100-80gb", "a100-40gb", "h100-sxm", "h200", "h800", "b200", "gb200-nvl72", "gb300-nvl72", "h100-sxm-roce", "h100-96gb",
            "mi300x", "mi325x"}


def test_all_shipped_profiles_load():
    names = set(shipped_names("hardware"))
    assert EXPECTED <= names
    for name in names:
        hw = load_hardware(name)
        # the runtime reserve moved to the stacks (docs/design-notes.md): no shipped profile sets it
        assert hw.reserve is None
        assert hw.tiers[-1].domain_size is None
        assert hw.source and hw.description


@pytest.mark.parametrize(
    "name, nvlink_per_dir_GBps, nic_share_GBps, domain, per_node",
    [
        ("a100-80gb", 300, 25, 8, 8),       # NVLink3 600 bidir; 8x HDR 200 Gb/s per 8 GPUs
        ("a100-40gb", 300, 25, 8, 8),       # DGX A100 320GB: the same NVLink3 and 8x HDR (extends a100-80gb)
        ("h100-sxm", 450, 50, 8, 8),        # NVLink4 900 bidir; 8x NDR 400 Gb/s
        ("h200", 450, 50, 8, 8),            # same NVLink/NICs as DGX H100
        ("h800", 200, 50, 8, 8),            # NVLink 400 bidir; DeepSeek-V3: IB 50 GB/s
        ("b200", 900, 50, 8, 8),            # NVLink5 1800 bidir; 8x 400 Gb/s
        ("gb200-nvl72", 900, 50, 72, 4),    # 4 GPUs per tray, 72-GPU NVLink domain
        ("gb300-nvl72", 900, 100, 72, 4),   # the same rack; one ConnectX-8 800 Gb/s per GPU
        ("h100-sxm-roce", 450, 50, 8, 8),   # Llama 3: 400 Gbps RoCE per GPU
        ("mi300x", 448, 50, 8, 8),          # 7 Infinity Fabric links x 128 GB/s bidir = 896 / 2; Azure ND MI300X v5 400 Gb/s per GPU
        ("mi325x", 448, 50, 8, 8),          # the same baseboard (extends mi300x)
    ],
)
def test_interconnect_numbers(name, nvlink_per_dir_GBps, nic_share_GBps, domain, per_node):
    hw = load_hardware(name)
    assert hw.tiers[0].bandwidth == pytest.approx(nvlink_per_dir_GBps * 1e9)
    assert hw.tiers[-1].bandwidth == pytest.approx(nic_share_GBps * 1e9)
    assert hw.nvlink_domain == domain and hw.gpus_per_node == per_node


def test_compute_and_memory_numbers():
    a100, h100, h200 = (load_hardware(n) for n in ("a100-80gb", "h100-sxm", "h200"))
    b200, gb200, h800 = (load_hardware(n) for n in ("b200", "gb200-nvl72", "h800"))
    assert a100.gpu.peak("bf16") == 312e12 and a100.gpu.peak("tf32") == 156e12
    assert "fp8" not in a100.gpu.peak_flops                         # Ampere has no FP8
    assert h100.gpu.peak("fp8") == 1979e12
    # H200 inherits H100's compute through `extends:` and overrides memory
    assert h200.gpu.peak("bf16") == h100.gpu.peak("bf16") == 989e12
    assert h200.gpu.memory_bandwidth == 4.8e12 and h200.gpu.memory == 140 * 2**30
    assert h800.gpu.peak("bf16") == 989e12 and h800.gpu.memory_bandwidth == 3.35e12
    assert b200.gpu.peak("bf16") == 2250e12 and gb200.gpu.peak("bf16") == 2500e12
    # GB300 NVL72: 360 PF dense FP8 per 72 GPUs = 5 PF each; 8 stacks x 36 GiB = 288 GiB raw x
    # GB200's usable share 185/192 = 277.5 -> 277 GiB; GB200's MAMF curve and job_domain (extends)
    gb300 = load_hardware("gb300-nvl72")
    assert gb300.gpu.peak("fp8") == 360e15 / 72 and gb300.gpu.peak("bf16") == 2500e12
    assert gb300.gpu.memory == 277 * 2**30 and gb300.gpu.board_power == 1400
    assert gb300.gpu.gemm == gb200.gpu.gemm and gb300.placement_domain == 64 and gb300.gpu.generation == "blackwell"
    # A100's curve is fitted on the published Megatron runs (docs/validation.md); it must stay at or
    # below the best case MAMF measures, 271.2 / 312 = 0.869
    assert 0.5 < a100.gpu.gemm.max_efficiency <= 271.2 / 312 + 1e-9
    # The other GPUs: MAMF (ml-engineering best-shape bf16 TFLOP/s / peak) times the software
    # factor the A100 fit needed, 0.74 / 0.869 (docs/time-model.md), to two decimals:
    # H100 794.5/989 = 0.803 -> 0.68; B200 1745/2250 = 0.776 -> 0.66; GB200 1822/2500 = 0.729 -> 0.62
    factor = a100.gpu.gemm.max_efficiency / (271.2 / 312)
    for hw, mamf in ((h100, 794.5), (h200, 794.5), (b200, 1745.0), (gb200, 1822.0)):
        assert hw.gpu.gemm.max_efficiency == pytest.approx(mamf / (hw.gpu.peak("bf16") / 1e12) * factor, abs=0.005)
    # Azure STREAM triad: A100 1.70 TB/s, H100 2.97, H200 4.15 = memory_efficiency x bandwidth
    for hw, triad in ((a100, 1.70e12), (h100, 2.97e12), (h200, 4.15e12)):
        assert hw.gpu.memory_efficiency * hw.gpu.memory_bandwidth == pytest.approx(triad, rel=0.01)


def test_h800_efficiency_gives_deepseek_figure():
    # DeepSeek-V3 report: NVLink "160 GB/s" achieved = 200 GB/s per direction x 0.80
    hw = load_hardware("h800")
    assert hw.tiers[0].bandwidth * hw.tiers[0].efficiency == pytest.approx(160e9)


def test_roce_profile_is_ethernet():
    hw = load_hardware("h100-sxm-roce")
    assert hw.tiers[-1].kind == "ethernet" and not hw.tiers[-1].in_network_reduction


def test_every_number_line_is_commented():
    # each line stating a unit-bearing quantity in a shipped profile carries its source in a comment
    quantity = re.compile(r":\s*[\d.]+\s*(GB/s|Gb/s|TB/s|TFLOPS|GiB|us)\b")
    for path in sorted(data_dir("hardware").glob("*.yaml")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            body = line.split("#", 1)[0]
            if quantity.search(body):
                assert "#" in line or _block_commented(path, i), f"{path.name}:{i} has no source comment"


def _block_commented(path, lineno):
    """peak_flops entries sit under a commented `peak_flops:` header."""
    lines = path.read_text().splitlines()
    for j in range(lineno - 2, -1, -1):
        if lines[j].strip().startswith("peak_flops:"):
            return "#" in lines[j]
        if not lines[j].startswith("    "):
            return False
    return False


def test_a100_40gb_is_the_80gb_node_with_the_40gb_part():
    # A100 datasheet, A100 40GB SXM column: 40GB HBM2 at 1,555 GB/s, the same 312 TFLOP/s bf16 dense
    # and 400 W; everything else (GEMM curve, tiers, node) is a100-80gb's (extends)
    a40, a80 = load_hardware("a100-40gb"), load_hardware("a100-80gb")
    assert a40.gpu.memory == 40 * 2**30 and a40.gpu.memory_bandwidth == pytest.approx(1555e9)
    assert a40.gpu.peak("bf16") == a80.gpu.peak("bf16") == 312e12
    assert a40.gpu.gemm == a80.gpu.gemm and a40.gpu.memory_efficiency == a80.gpu.memory_efficiency
    assert a40.gpu.board_power == a80.gpu.board_power and a40.tiers == a80.tiers
