"""Placement of parallel groups on the tiers (llmpar.cost.topology).

Every expected value is derived by hand from the rank order tp -> cp -> dp -> pp (Megatron
parallel_state) and the domain size: rank r lives in scale-up domain r // D (D = 8 on a DGX, 72
on GB200 NVL72).
"""

from __future__ import annotations

import numpy as np
import pytest

from llmpar.cost.topology import dims_placement, group_placement, placement_table, strides
from llmpar.parallel import Parallel
from llmpar.specs.registry import load_hardware


@pytest.fixture(scope="module")
def dgx():
    return load_hardware("h100-sxm")


@pytest.fixture(scope="module")
def nvl72():
    """Ranks fill whole 72-GPU racks (job_domain unset): the straddling cases below."""
    hw = load_hardware("gb200-nvl72").model_copy(deep=True)
    hw.job_domain = None
    return hw


@pytest.fixture(scope="module")
def nvl72_seg64():
    """The shipped profile: a large job fills 64 GPUs (16 trays) of each rack (job_domain 64)."""
    return load_hardware("gb200-nvl72")


def test_dgx_hand_examples(dgx):
    # tp=8, stride 1: ranks 0..7 = one node -> k=8, stays on NVLink
    assert group_placement(dgx, 8, 1) == (8, False)
    # dp=4 with tp=8: stride 8 -> ranks 0, 8, 16, 24 in 4 different nodes -> k=1, crosses
    assert group_placement(dgx, 4, 8) == (1, True)
    # tp=4, dp=2: dp stride 4 -> ranks 0 and 4, both in node 0 -> k=2, inside
    assert group_placement(dgx, 2, 4) == (2, False)
    # tp=2, dp=8: dp stride 2 -> ranks 0,2,...,14: 4 in node 0, 4 in node 1 -> k=4, crosses
    assert group_placement(dgx, 8, 2, 16) == (4, True)
    # a group of one is nowhere
    assert group_placement(dgx, 1, 8) == (1, False)


def test_nvl72_domain_is_72_not_the_tray(nvl72):
    # gpus_per_node 4 but one 72-GPU NVLink domain: tp=8 (and even a 72-rank group) stays inside
    assert nvl72.gpus_per_node == 4 and nvl72.nvlink_domain == 72
    assert group_placement(nvl72, 8, 1) == (8, False)
    # tp=8, dp=9: dp stride 8, span 72 = the domain -> k=9, inside
    assert group_placement(nvl72, 9, 8, 72) == (9, False)
    # 8 GPUs in all: one domain, whatever the group
    assert group_placement(nvl72, 8, 1, 8) == (8, False)


def test_nvl72_straddling_groups(nvl72):
    # tp=4, dp=32 on 128 GPUs: dp group 0 = ranks 0,4,...,124; domain 0 holds 0..68 (18 members),
    # domain 1 holds 72..124 (14) -> the smaller side, 14, pools its NICs; crosses
    assert group_placement(nvl72, 32, 4, 128) == (14, True)
    # tp=16 on 144 GPUs: group 4 = ranks 64..79 splits 8 | 8 at rank 72 -> k=8, crosses
    assert group_placement(nvl72, 16, 1, 144) == (8, True)
    # unbounded cluster: boundaries fall on every multiple of gcd(72, 128) = 8 within a span,
    # so some group has 8/4 = 2 members on one side -> k=2
    assert group_placement(nvl72, 32, 4) == (2, True)


def test_nvl72_in_64_gpu_segments(nvl72_seg64):
    # job_domain 64: ranks 0..63 in rack 0, 64..127 in rack 1 (the shipped GB200 profile)
    hw = nvl72_seg64
    assert hw.job_domain == 64 and hw.placement_domain == 64 and hw.nvlink_domain == 72
    # tp=4, dp=32 on 128 GPUs: dp group 0 = ranks 0,4,...,124, span 128 = two whole segments,
    # 64/4 = 16 members in each -> k=16, crosses (with whole racks it straddled at 18 | 14)
    assert group_placement(hw, 32, 4, 128) == (16, True)
    # tp=16 on 144 GPUs: every group of 16 consecutive ranks lies in one 64-GPU segment -> inside
    assert group_placement(hw, 16, 1, 144) == (16, False)
    # EP 64 (stride 1) on 256 GPUs: one segment each -> all-to-all on NVLink only
    assert group_placement(hw, 64, 1, 256) == (64, False)
    # unbounded cluster: span 128 = two segments, k = 64/4 = 16
    assert group_placement(hw, 32, 4) == (16, True)
    # a job of at most one rack's 72 GPUs stays in one rack, whatever the segment:
    # tp=8, dp=9 on 72 GPUs -> the dp group (span 72) is inside
    assert group_placement(hw, 9, 8, 72) == (9, False)


def test_array_polymorphic_matches_scalar(dgx, nvl72, nvl72_seg64):
    sizes = np.array([8, 4, 2, 8, 32, 16])
    strides_ = np.array([1, 8, 4, 2, 4, 1])
    totals = np.array([8, 32, 8, 16, 128, 144])
    for hw in (dgx, nvl72, nvl72_seg64):
        k, cross = group_placement(hw, sizes, strides_, totals)
        for i in range(len(sizes)):
            assert (k[i], cross[i]) == group_placement(hw, int(sizes[i]), int(strides_[i]), int(totals[i]))


def test_dims_placement_hand_layout(dgx):
    # tp=2, cp=2, dp=8, ep=4, pp=2 on 64 GPUs (ranks tp -> cp -> dp -> pp)
    par = Parallel(tp=2, cp=2, dp=8, ep=4, pp=2)
    assert strides(par) == {"tp": 1, "cp": 2, "dp": 4, "pp": 32}
    pl = dims_placement(dgx, par)
    assert pl["tp"] == (2, 2)      # ranks 0,1
    assert pl["cp"] == (2, 2)      # ranks 0,2
    assert pl["dp"] == (8, 2)      # stride 4, span 32: 2 per node
    assert pl["pp"] == (2, 1)      # stride 32: other node
    assert pl["ep"] == (4, 4)      # 4 consecutive dp x cp ranks, stride tp=2: ranks 0,2,4,6
    assert pl["edp"] == (4, 1)     # dp*cp/ep = 4 ranks at stride tp*ep = 8: one per node
    assert pl["dpcp"] == (16, 4)   # stride 2, span 32: 4 per node


def test_dims_placement_arrays(dgx):
    par = Parallel(tp=np.array([8, 4, 2]), dp=np.array([4, 2, 16]), pp=np.array([2, 1, 1]))
    pl = dims_placement(dgx, par)
    # tp inside the node in all three; dp: stride 8 -> 1/node; stride 4 size 2 -> 2; stride 2 size 16 -> 4
    assert list(pl["tp"][1]) == [8, 4, 2]
    assert list(pl["dp"][1]) == [1, 2, 4]


def test_placement_table_names_tiers(dgx):
    t = placement_table(dgx, Parallel(tp=8, dp=4))
    assert t["tp"]["tiers"] == ["nvlink"] and not t["tp"]["crosses_nodes"]
    assert t["dp"]["tiers"] == ["infiniband"] and t["dp"]["members_per_node"] == 1


def test_custom_order(dgx):
    # dp innermost: dp=8 stride 1 -> inside the node; tp=8 stride 8 -> across nodes
    pl = dims_placement(dgx, Parallel(tp=8, dp=8), order=("dp", "tp", "cp", "pp"))
    assert pl["dp"] == (8, 8) and pl["tp"] == (8, 1)
