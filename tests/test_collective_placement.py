"""One placement rule for every command (issue 9, item 3), and the collective model's invariants.

`llmpar collective` used to take k = min(P, domain) members per domain, so 12 GPUs on 8-GPU
nodes pooled 8 NICs per node; `step` and `plan` place the same group (ranks 0..11, nodes filled
in order: 8 + 4) with k = 4 (cost/topology.group_placement). Now all three read
cost/topology.py: `collective` through `collective_group`, `step` and `plan` through
`dims_placement` (arrays for the planner's candidates).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmpar.cost import collective_algos as CA
from llmpar.cost import collective_params as CP
from llmpar.cost import collectives as C
from llmpar.cost.comm import dp_step
from llmpar.cost.topology import collective_group, dims_placement, placement_table
from llmpar.parallel import Parallel
from llmpar.specs.registry import load_hardware, shipped_names

GiB = 2**30
HARDWARE = {name: load_hardware(name) for name in shipped_names("hardware")}


# ----------------------------------------------------------------------------- item 3 regression

def test_uneven_group_pools_the_smaller_side(cli):
    # h100-sxm: 8 GPUs per node, one 400 Gb/s NIC per GPU = 50 GB/s x efficiency 0.94 = 47 GB/s.
    # 12 consecutive ranks: node 0 holds ranks 0-7, node 1 ranks 8-11 -> the smaller side k = 4
    # pools 4 NIC shares: beta_o = 4 x 47 = 188 GB/s. NVLink: 450 x 0.82 = 369 GB/s, carrying
    # (k-1)/k = 3/4 of the ring's traffic -> 369 / 0.75 = 492 GB/s equivalent: the NICs bound.
    # Ring all-reduce bandwidth term: S x 2(P-1)/P / beta_o, so busbw of that term = beta_o
    # = 188 GB/s (before the fix: k = 8, beta_o = 376 GB/s, the 353-373 GB/s of the issue).
    out = cli("collective", "all-reduce", "--size", "1GiB", "--gpus", "12", "--algorithm", "ring", "--json").json()
    assert out["members_per_node"] == 4 and out["nodes"] == 2 and out["crosses_nodes"]
    assert out["tiers"] == ["nvlink", "infiniband"]
    ring = next(a for a in out["algorithms"] if a["algorithm"] == "ring")
    factor = 2 * 11 / 12
    assert GiB / ring["bandwidth_s"] * factor / 1e9 == pytest.approx(4 * 50 * 0.94)
    assert ring["busbw_GBps"] < 188                      # latency on top: 182 GB/s at 1 GiB
    assert any("k = 4" in a for a in out["assumptions"])


def test_stated_members_per_node(cli):
    # --gpus 16 --gpus-per-node 2 on h100-sxm: the dp group under tp = 4 (stride 4): ranks 0, 4 in
    # node 0, 8, 12 in node 1, ... -> k = 2, 8 nodes; beta_o = 2 x 47 = 94 GB/s
    out = cli("collective", "all-reduce", "--gpus", "16", "--gpus-per-node", "2", "--json").json()
    assert out["members_per_node"] == 2 and out["nodes"] == 8
    assert dims_placement(HARDWARE["h100-sxm"], Parallel(tp=4, dp=16))["dp"] == (16, 2)


def test_unavailable_reason_comes_from_cost(cli):
    # the reasons are cost/collectives.why_unavailable, stated beside the availability masks
    out = cli("collective", "all-reduce", "--gpus", "16", "--json").json()
    rows = {a["algorithm"]: a for a in out["algorithms"]}
    assert rows["nvls"]["unavailable_because"] == "group spans NVLink domains"
    assert rows["collnet"]["unavailable_because"] == "no SHARP on the NIC tier"
    one = cli("collective", "all-reduce", "--gpus", "8", "--hardware", "a100-80gb", "--json").json()
    rows = {a["algorithm"]: a for a in one["algorithms"]}
    assert rows["nvls"]["unavailable_because"] == "no NVLink SHARP on this hardware"
    assert rows["hierarchical"]["unavailable_because"] == "single node"
    assert "unavailable_because" not in rows["ring"]


@st.composite
def _group(draw):
    name = draw(st.sampled_from(sorted(HARDWARE)))
    hw = HARDWARE[name]
    D = hw.placement_domain     # --gpus-per-node m: m members in each domain a job fills
    divisors = [m for m in range(1, D + 1) if D % m == 0]
    per_node = draw(st.sampled_from([None] + divisors))
    if per_node is None:
        gpus = draw(st.integers(2, 4 * D + 7))
    else:
        gpus = per_node * draw(st.integers(1 if per_node > 1 else 2, 9))
    return name, gpus, per_node


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_group(), st.integers(10, 34))   # `cli` only captures output: safe to share between examples
def test_collective_step_plan_agree_on_placement(cli, group, log2):
    """`collective --gpus G [--gpus-per-node m]` costs the dp group of the layout tp = D/m, dp = G
    (dp-only without m): same k, same tiers crossed, same time as step's dp all-reduce (ZeRO-0)
    and as the planner's array evaluation of that layout among others."""
    name, gpus, per_node = group
    hw = HARDWARE[name]
    D = hw.placement_domain
    tp = 1 if per_node is None else D // per_node
    par = Parallel(tp=tp, dp=gpus)
    size, k = dims_placement(hw, par)["dp"]
    table = placement_table(hw, par)["dp"]
    place = collective_group(hw, gpus, per_node)
    assert (place["members_per_node"], place["crosses_nodes"], place["tiers"]) == (
        k, table["crosses_nodes"], table["tiers"])
    # the planner: the same layout inside an array of candidates
    arr = Parallel(tp=np.array([1, tp, 2]), dp=np.array([4, gpus, 3]))
    assert int(dims_placement(hw, arr)["dp"][1][1]) == k
    # the CLI's time = step's ZeRO-0 gradient all-reduce of that many bytes
    S = float(2**log2)
    args = ["collective", "all-reduce", "--size", str(int(S)), "--gpus", str(gpus), "--hardware", name, "--json"]
    if per_node is not None:
        args += ["--gpus-per-node", str(per_node)]
    out = cli(*args).json()
    assert (out["members_per_node"], out["crosses_nodes"], out["tiers"]) == (k, table["crosses_nodes"], table["tiers"])
    t_step, _, _ = dp_step(hw, Parallel(tp=tp, dp=gpus, zero=0, microbatches=1), dims_placement(hw, par),
                           S / 2.0, 0.0, 2.0, 2.0)
    assert out["time_s"] == pytest.approx(float(t_step), rel=1e-12)


# ----------------------------------------------------------------------------- invariants

@st.composite
def _shape(draw):
    name = draw(st.sampled_from(sorted(HARDWARE)))
    hw = HARDWARE[name]
    P = draw(st.integers(2, 4 * hw.nvlink_domain + 5))
    k = collective_group(hw, P)["members_per_node"]
    return hw, P, k


@settings(max_examples=60, deadline=None)
@given(_shape(), st.floats(1.0, 2.0**36))
def test_ring_all_reduce_is_reduce_scatter_plus_all_gather(shape, S):
    """The exact relation the model implements, per protocol p (cost/collective_algos.algorithm_table):

    bandwidth: ring AR moves x = 2(P-1)/P per rank, RS and AG (P-1)/P each, over the same tiers
    and betas, and every term is linear in x: bw_AR(p) = bw_RS(p) + bw_AG(p).
    latency: AR takes 2(P-n) intra + 2(n-1) inter steps, RS and AG (P-n) + (n-1) each, plus ONE
    launch base for AR against one each for RS and AG; NCCL's multi-node ring/Simple all-reduce
    latency is x1.4 (tuning.cc): lat_AR(p) = (lat_RS(p) + lat_AG(p) - base(p)) x (1.4 if p is
    Simple and n > 1 else 1). Hence T_AR(p) = T_RS(p) + T_AG(p) - base(p) (+ the plateau term).
    """
    hw, P, k = shape
    ar = CA.algorithm_table(hw, "all_reduce", S, P, k, only=("ring",))["ring"]
    rs = CA.algorithm_table(hw, "reduce_scatter", S, P, k, only=("ring",))["ring"]
    ag = CA.algorithm_table(hw, "all_gather", S, P, k, only=("ring",))["ring"]
    n = -(-P // k)
    for p in range(3):
        assert float(ar.bw_time[p]) == pytest.approx(float(rs.bw_time[p]) + float(ag.bw_time[p]), rel=1e-12)
        plateau = CP.RING_PLATEAU if (p == 2 and n > 1) else 1.0
        base = CP.BASE_LATENCY_US["ring"][p] * 1e-6
        assert float(ar.latency[p]) == pytest.approx((float(rs.latency[p]) + float(ag.latency[p]) - base) * plateau,
                                                     rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(_shape(), st.sampled_from(C.COLLECTIVES), st.floats(1.0, 2.0**36))
def test_busbw_is_algbw_times_factor(shape, coll, S):
    hw, P, k = shape
    rep = C.collective_report(hw, coll, S, P, k)
    for r in rep.rows:
        if r.available:
            assert r.algbw_GBps == pytest.approx(S / r.time_s / 1e9, rel=1e-12)
            assert r.busbw_GBps == pytest.approx(r.algbw_GBps * CP.bus_factor(coll, P), rel=1e-12)
    t = C.collective_time(hw, coll, S, P, k)
    assert C.busbw(coll, S, t, P) == pytest.approx(rep.chosen_row.busbw_GBps * 1e9, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(_shape(), st.sampled_from(C.COLLECTIVES), st.floats(1.0, 2.0**40), st.floats(1.0, 64.0))
def test_time_non_decreasing_in_size(shape, coll, S, grow):
    hw, P, k = shape
    assert C.collective_time(hw, coll, S * grow, P, k) >= C.collective_time(hw, coll, S, P, k) > 0


def _slow_nics(hw):
    """The same hardware with a scale-out tier 1000x slower and with 1000x its latency."""
    out = hw.model_copy(deep=True)
    nic = out.tiers[-1]
    nic.bandwidth = nic.bandwidth / 1000.0
    nic.latency = nic.latency * 1000.0
    return out


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(HARDWARE)), st.integers(2, 72), st.sampled_from(C.COLLECTIVES),
       st.floats(1.0, 2.0**36))
def test_group_inside_one_node_never_touches_scale_out(name, P, coll, S):
    hw = HARDWARE[name]
    P = min(P, hw.nvlink_domain)
    if P < 2:
        return
    place = collective_group(hw, P)
    assert place["members_per_node"] == P and not place["crosses_nodes"]
    assert hw.tiers[-1].name not in place["tiers"]
    rep = C.collective_report(hw, coll, S, P, place["members_per_node"])
    for r in rep.rows:
        assert hw.tiers[-1].name not in r.tiers
    # and its time does not depend on the NICs at all
    assert C.collective_time(_slow_nics(hw), coll, S, P, P) == C.collective_time(hw, coll, S, P, P)
