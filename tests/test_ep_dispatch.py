"""The MoE dispatcher (stack kernels.ep_dispatcher), group-limited routing and the SM cost of
hidden all-to-alls (stack overlap.ep_sms): cost/comm.ep_destinations / ep_moe_layer and
cost/step.py, against numbers derived by hand beside each assertion."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from llmpar.cost import comm
from llmpar.cost.collectives import collective_time
from llmpar.cost.step import step_time
from llmpar.cost.topology import dims_placement
from llmpar.parallel import Parallel, Settings
from llmpar.specs import load_hardware, load_model, load_stack
from llmpar.specs.model import MoESpec


def _prod(num0, den0, k):
    p = Fraction(1)
    for i in range(k):
        p *= Fraction(num0 - i, den0 - i)
    return float(p)


def test_destinations_without_group_limit():
    # Mixtral (8 experts, top-2) on EP 8, one expert per rank: a rank is missed when neither of the
    # 2 experts drawn without replacement is its own: 7/8 x 6/7 = 3/4, so 8 x 1/4 = 2 ranks (every
    # token's two experts are on two different ranks). One node: no remote domain.
    moe = load_model("mixtral-8x7b").moe
    ranks, remote = comm.ep_destinations(moe, 8, 8)
    assert float(ranks) == pytest.approx(2.0) and float(remote) == 0.0
    # the same 8 ranks one per node (k = 1): 2 domains hit, of which (n-1)/n = 7/8 are remote
    ranks, remote = comm.ep_destinations(moe, 8, 1)
    assert float(ranks) == pytest.approx(2.0) and float(remote) == pytest.approx(1.75)


def test_destinations_of_deepseek_v3_node_limited_routing():
    # DeepSeek-V3 (256 experts top-8, 8 groups, 4 per token; config.json n_group / topk_group) on
    # its EP 64 over 8 nodes (DeepSeek-V3 §3.2): a node holds 32 experts = one group. It is hit only
    # if its group is among the 4 drawn (1/2), then unless all 8 experts fall in the other 96 of the
    # 128 allowed: 96·95·…·89 / (128·127·…·121) = 0.092747. Nodes hit 8 x 1/2 x (1 - 0.092747)
    # = 3.6290 (the report's bound is 4); remote 7/8 of them = 3.1754 (the flat all-to-all sends
    # 8 x 56/64 = 7 copies of each token across the NICs: 2.2x more).
    dsv3 = load_model("deepseek-v3")
    assert (dsv3.moe.groups, dsv3.moe.groups_per_token) == (8, 4)
    miss_node = _prod(96, 128, 8)
    assert miss_node == pytest.approx(0.0927473, rel=1e-5)
    ranks, remote = comm.ep_destinations(dsv3.moe, 64, 8)
    assert float(remote) == pytest.approx(8 * 0.5 * (1 - miss_node) * 7 / 8) == pytest.approx(3.1754, abs=1e-4)
    # a rank holds 4 experts inside one group: hit with 1/2 x (1 - 124·…·117 / (128·…·121))
    miss_rank = _prod(124, 128, 8)
    assert float(ranks) == pytest.approx(64 * 0.5 * (1 - miss_rank)) == pytest.approx(7.3594, abs=1e-4)
    # a bin holding two whole groups (EP 64 over 4 domains of 16: 64 experts each): missed when
    # none of its 2 groups is drawn, C(6,4)/C(8,4) = 15/70, or when a = 1 (40/70) or 2 (15/70) of
    # them are and all 8 experts fall elsewhere among the 128 allowed
    p0, p1, p2 = Fraction(15, 70), Fraction(40, 70), Fraction(15, 70)
    miss = float(p0) + float(p1) * _prod(96, 128, 8) + float(p2) * _prod(64, 128, 8)
    _, remote = comm.ep_destinations(dsv3.moe, 64, 16)
    assert float(remote) == pytest.approx(4 * (1 - miss) * 3 / 4)


def test_group_limited_routing_spec_checks():
    base = dict(experts=256, top_k=8, expert_ffn_hidden=2048)
    MoESpec(**base, groups=8, groups_per_token=4)
    for bad, needle in [(dict(groups=8), "go together"), (dict(groups=7, groups_per_token=4), "divide"),
                        (dict(groups=8, groups_per_token=9), "exceeds groups"),
                        (dict(groups=64, groups_per_token=1), "exceeds the experts")]:
        with pytest.raises(ValueError, match=needle):
            MoESpec(**base, **bad)


def _layout(**kw):
    return Parallel(tp=1, pp=16, dp=128, cp=1, ep=64, micro_batch=1, seq=4096, **kw)


def test_alltoall_is_two_flat_all_to_alls_each_way():
    # Megatron-Core's alltoall dispatcher: T top_k h e bytes per rank, once to the experts and once
    # back: T = 4096, 8 copies, h = 7168, 2 B = 469,762,048 B per all-to-all
    hw, dsv3 = load_hardware("h800"), load_model("deepseek-v3")
    par = _layout()
    place = dims_placement(hw, par)
    f, b, sent_f, _ = comm.ep_moe_layer(hw, dsv3, par, place, 2.0)
    payload = 4096 * 8 * 7168 * 2
    assert payload == 469_762_048
    t = collective_time(hw, "all_to_all", payload, 64, 8)
    assert float(f) == pytest.approx(2 * float(t)) and float(b) == pytest.approx(float(f))
    assert float(sent_f) == pytest.approx(2 * payload * 63 / 64)


def test_deepep_bytes_and_fp8_dispatch_by_hand():
    # deepep: per token 3.1754 NIC copies (above) and 7.3594 x 7/8 NVLink forwards; dispatch in FP8
    # with an fp32 scale per 128 elements = 1 + 4/128 = 1.03125 B, combine 2 B:
    # bytes per rank forward = 4096 x 7168 x (3.1754 + 6.4395) x (1.03125 + 2)
    hw, dsv3 = load_hardware("h800"), load_model("deepseek-v3")
    par = _layout()
    place = dims_placement(hw, par)
    ranks, remote = (float(x) for x in comm.ep_destinations(dsv3.moe, 64, 8))
    f, _, sent, _ = comm.ep_moe_layer(hw, dsv3, par, place, 2.0, "deepep", 1.03125)
    per_copy = 4096 * 7168
    assert float(sent) == pytest.approx(per_copy * (remote + ranks * 7 / 8) * 3.03125)
    # time: each transfer is its slower hop; across the NICs (47 GB/s per GPU) the remote copies
    # go to the same-index GPU of each of the other 7 domains: an all-to-all among 8 peers, one per
    # node (nccl-tests size = NIC bytes x 8/7)
    nic_bf16 = per_copy * remote * 2
    t_nic = float(collective_time(hw, "all_to_all", nic_bf16 * 8 / 7, 8, 1))
    t_nvl = float(collective_time(hw, "all_to_all", per_copy * ranks * 7 / 8 * 2 * 8 / 7, 8, 8))
    f_bf16, _, _, _ = comm.ep_moe_layer(hw, dsv3, par, place, 2.0, "deepep", 2.0)
    assert float(f_bf16) == pytest.approx(2 * max(t_nic, t_nvl))
    assert t_nic > t_nvl                      # H800: 50 GB/s IB against 160 GB/s NVLink
    # FP8 dispatch: the dispatch transfer moves 1.03125/2 of the bytes
    assert float(f) < float(f_bf16)
    # and the flat all-to-all moves more: 8 x 56/64 = 7 NIC copies against 3.18
    flat, _, _, _ = comm.ep_moe_layer(hw, dsv3, par, place, 2.0)
    assert float(flat) > 2 * float(f_bf16)


def test_hidden_all_to_alls_cost_their_sms():
    # DualPipe hides the all-to-alls of its overlapped F&B pairs behind compute (cost/step.py); with
    # overlap.ep_sms the compute under them runs on (132 - s)/132 of the SMs, which costs s/132 x
    # the hidden time. The chunks DualPipe runs alone (warm-up, cool-down) expose theirs in full:
    # of device 0's m = 32 forwards at p = 16, m - 3p/2 + 1 = 9 are paired (DualPipe.step, steps
    # 4-5: 2(m/2 - p + 1) + (p/2 - 1) = 2 + 7), so h = 9/32 of the transfer time hides. The ep term
    # is linear in s: m x L_stage x MoE share x (f + b) x ((1 - h) + h s/132).
    hw, dsv3 = load_hardware("h800"), load_model("deepseek-v3")
    par = _layout(schedule=4, microbatches=32)
    base = load_stack("hai-llm")

    def ep(sms):
        st = base.model_copy(update={"overlap": base.overlap.model_copy(update={"ep_sms": sms})})
        return float(step_time(dsv3, hw, par, Settings(dtype="fp8", stack=st), with_memory=False)["breakdown_s"]["ep"])

    e0, e20, e40 = ep(0), ep(20), ep(40)
    assert e40 - e20 == pytest.approx(e20 - e0, rel=1e-9) and e20 > e0 > 0
    # from the same pieces
    place = dims_placement(hw, par)
    f, b, _, _ = comm.ep_moe_layer(hw, dsv3, par, place, 2.0, "deepep", 1.03125)
    r = step_time(dsv3, hw, par, Settings(dtype="fp8", stack=base), with_memory=False)
    n, m = float(r["critical_stage_layers"]), float(r["parts"]["microbatches"])
    frac = dsv3.moe_layers / dsv3.layers
    h = 9 / 32
    assert e0 == pytest.approx(m * n * frac * (float(f) + float(b)) * (1 - h), rel=1e-9)
    assert e20 == pytest.approx(m * n * frac * (float(f) + float(b)) * ((1 - h) + h * 20 / 132), rel=1e-9)


def test_sm_cost_only_with_the_deepep_dispatcher():
    # overlap.ep_sms prices the SMs DeepEP-style kernels hold (DeepSeek-V3 §3.2.2; Megatron-Core
    # gives DeepEP 20 by default: token_dispatcher.py MoEFlexTokenDispatcher). The flat NCCL
    # all-to-all's channels are not priced: with ep_dispatcher alltoall the ep term is the same at
    # 0 and 20 SMs, under the same DualPipe pairing that makes it differ with deepep (test above).
    hw, dsv3 = load_hardware("h800"), load_model("deepseek-v3")
    par = _layout(schedule=4, microbatches=32)
    base = load_stack("hai-llm")

    def ep(sms, dispatcher):
        st = base.model_copy(update={"overlap": base.overlap.model_copy(update={"ep_sms": sms})})
        r = step_time(dsv3, hw, par, Settings(dtype="fp8", stack=st, ep_dispatcher=dispatcher), with_memory=False)
        return float(r["breakdown_s"]["ep"])

    assert ep(20, "alltoall") == pytest.approx(ep(0, "alltoall"), rel=1e-12)
    assert ep(20, "deepep") > ep(0, "deepep")
    assert load_stack("megatron-core").overlap.ep_sms == 20


def test_arrays_match_scalars_with_deepep():
    # the planner's array path: the EP group size varies per candidate (8 domains of 8, 16 of 4...)
    hw, dsv3 = load_hardware("h800"), load_model("deepseek-v3")
    st = Settings(dtype="fp8", stack=load_stack("hai-llm"))
    rows = [dict(tp=1, pp=16, dp=128, ep=64), dict(tp=1, pp=8, dp=256, ep=32), dict(tp=1, pp=16, dp=128, ep=8)]
    arr = Parallel(**{k: np.array([r[k] for r in rows]) for k in rows[0]}, cp=1, seq=4096, microbatches=32)
    many = step_time(dsv3, hw, arr, st, with_memory=False)["step_time_s"]
    for i, r in enumerate(rows):
        one = step_time(dsv3, hw, Parallel(**r, cp=1, seq=4096, microbatches=32), st, with_memory=False)["step_time_s"]
        assert float(many[i]) == pytest.approx(float(one), rel=1e-12)


def test_ep_dispatcher_option_overrides_the_stack(cli):
    # megatron-core's default is the flat all-to-all; --ep-dispatcher deepep prices the two-hop
    # dispatch without a stack file, --explain names it, and it lands in settings
    args = ("step", "deepseek-v3", "--hardware", "h800", "--gpus", "2048", "--pp", "16", "--ep", "64", "--zero", "1",
            "--global-batch", "15360", "--seq", "4096", "--dtype", "fp8", "--recompute", "full")
    flat = cli(*args, "--json").json()
    two = cli(*args, "--ep-dispatcher", "deepep", "--json").json()
    assert flat["settings"]["ep_dispatcher"] == "alltoall" and two["settings"]["ep_dispatcher"] == "deepep"
    # more bytes in all (3.18 NIC copies + 7.36 x 7/8 NVLink forwards = 9.6 per token against the
    # flat 8 x 63/64 = 7.9), but a third of them over the slow NICs: less time
    assert two["comm_bytes_per_gpu"]["ep"] > flat["comm_bytes_per_gpu"]["ep"]
    assert two["breakdown_s"]["ep"] < flat["breakdown_s"]["ep"]
    assert "dispatcher deepep" in " ".join(cli(*args, "--ep-dispatcher", "deepep", "--explain").out.split())
    res = cli(*args, "--ep-dispatcher", "nvshmem")
    assert res.code == 2 and "Traceback" not in res.err


@pytest.mark.parametrize("ep, dp", [(32, 64), (64, 32)])
def test_deepep_nic_rate_matches_deepeps_own_benchmark(ep, dp):
    # DeepEP's first published normal-kernel table (README, now docs/legacy.md: H800, one CX7
    # 400 Gb/s NIC per GPU, DeepSeek-V3's 4096 tokens x 7168, top 8): 43/43, 44/47 and 46/45 GB/s
    # RDMA bottleneck bandwidth (dispatch/combine) at EP 16, 32 and 64. llmpar's NIC hop (an
    # all-to-all among the EP group's ep/8 domains, one peer per domain) moves the remote copies of
    # a BF16 transfer at a rate inside that band, widened by 2 GB/s each way. (At EP 16, two domains,
    # a token's copies mostly stay in its own domain and the NVLink hop paces the transfer.)
    hw, dsv3 = load_hardware("h800"), load_model("deepseek-v3")
    par = Parallel(tp=1, pp=16, dp=dp, cp=1, ep=ep, micro_batch=1, seq=4096)
    place = dims_placement(hw, par)
    _, remote = (float(x) for x in comm.ep_destinations(dsv3.moe, ep, 8))
    f, _, _, _ = comm.ep_moe_layer(hw, dsv3, par, place, 2.0, "deepep", 2.0)
    rate = 4096 * 7168 * remote * 2 / (float(f) / 2)
    assert 41e9 <= rate <= 49e9, rate / 1e9
