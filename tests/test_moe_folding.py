"""MoE parallel folding (Megatron-Core; Liu et al. 2025, arXiv:2504.14960 §3): the expert
tensor-parallel degree etp (--etp, default tp) and EP spanning TP ranks. Every number below is
derived by hand beside it. The model is DeepSeek-V3 (models/deepseek-v3.yaml: h 7168, 256 routed
experts of f_e 2048, top-8, SwiGLU, 58 of 61 layers MoE)."""

from __future__ import annotations

import numpy as np
import pytest

from llmpar.calibrate.runs_io import read_runs
from llmpar.cost import activations as A
from llmpar.cost import comm, flops
from llmpar.cost.shards import layer_shard
from llmpar.cost.states import _zero_divisors
from llmpar.cost.topology import _groups, dims_placement
from llmpar.errors import UserError
from llmpar.parallel import Parallel
from llmpar.layout import check_layout, resolve
from llmpar.specs import load_hardware, load_model


@pytest.fixture(scope="module")
def dsv3():
    return load_model("deepseek-v3")


# tp 2, pp 8 on 256 GPUs: dp = 256 / 16 = 16, so one pipeline stage holds tp*cp*dp = 32 GPUs
FOLDED = dict(tp=2, pp=8, dp=16, cp=1, ep=32, etp=1)


def test_ep_beyond_dp_needs_folding(dsv3):
    # without --etp, expert-TP = tp = 2 and EP must divide dp*cp = 16: 32 does not
    with pytest.raises(UserError, match=r"ep=32 does not divide dp\*cp = 16.*--etp 1"):
        check_layout(dsv3, Parallel(tp=2, pp=8, dp=16, cp=1, ep=32))
    check_layout(dsv3, Parallel(**FOLDED))                          # 32 * 1 divides 2 * 1 * 16 = 32
    with pytest.raises(UserError, match=r"ep\*etp = 32\*4 does not divide tp\*cp\*dp = 32"):
        check_layout(dsv3, Parallel(tp=2, pp=8, dp=16, cp=1, ep=32, etp=4))
    with pytest.raises(UserError, match="has no experts"):
        resolve(load_model("llama-3-8b"), load_hardware("h100-sxm"), gpus=8, tp=2, etp=1)
    # --etp equal to --tp is the default, not folding (Parallel.etp = 0)
    r = resolve(dsv3, load_hardware("h100-sxm"), gpus=256, tp=2, pp=8, ep=16, etp=2)
    assert r.parallel.etp == 0 and r.parallel.expert_tp == 2 and r.parallel.as_dict()["etp"] == 2


def test_groups_fold_over_the_stage(dsv3):
    # etp = 1: the 32 GPUs of a stage (ranks 0..31 under tp-cp-dp-pp) are one EP group of 32
    # consecutive ranks; edp = 32 / (32 * 1) = 1
    g = _groups(Parallel(**FOLDED), ("tp", "cp", "dp", "pp"))
    assert (int(g["ep"][0]), int(g["ep"][1])) == (32, 1)
    assert (int(g["edp"][0]), int(g["etp"][0])) == (1, 1)
    # tp 4, dp 8, ep 8, etp 2: etp groups are rank pairs (stride 1), EP strides by etp = 2 over
    # 16 ranks, edp = 32 / (8 * 2) = 2 at stride 16
    g = _groups(Parallel(tp=4, pp=8, dp=8, cp=1, ep=8, etp=2), ("tp", "cp", "dp", "pp"))
    assert [tuple(int(x) for x in g[k]) for k in ("etp", "ep", "edp")] == [(2, 1), (8, 2), (2, 16)]
    # without folding EP lives in the dp x cp space as before: stride tp = 2, edp = 16 / 16 = 1
    g = _groups(Parallel(tp=2, pp=8, dp=16, cp=1, ep=16), ("tp", "cp", "dp", "pp"))
    assert [tuple(int(x) for x in g[k]) for k in ("ep", "edp", "etp")] == [(16, 2), (1, 32), (2, 1)]
    # on 8-GPU nodes: 32 consecutive ranks are 4 whole nodes, 8 members each; EP 16 at stride 2
    # spans 32 ranks = 4 nodes with 4 members in each
    hw = load_hardware("h100-sxm")
    assert int(dims_placement(hw, Parallel(**FOLDED))["ep"][1]) == 8
    assert int(dims_placement(hw, Parallel(tp=2, pp=8, dp=16, cp=1, ep=16))["ep"][1]) == 4
    with pytest.raises(UserError, match="tp innermost and pp outermost"):
        _groups(Parallel(**FOLDED), ("cp", "tp", "dp", "pp"))


def test_expert_shard_and_zero_divisor(dsv3):
    # one expert: SwiGLU, 3 * h * f_e = 3 * 7168 * 2048 = 44,040,192 parameters (no biases)
    one = 3 * 7168 * 2048
    assert one == 44_040_192
    # ep 32, etp 1: 256 / 32 = 8 whole experts per GPU; ep 16, etp = tp = 2: 16 halves = the same
    assert float(layer_shard(dsv3, Parallel(**FOLDED)).experts) == 8 * one
    assert float(layer_shard(dsv3, Parallel(tp=2, pp=8, dp=16, ep=16)).experts) == 8 * one
    # ep 8, etp 1: 32 whole experts per GPU
    assert float(layer_shard(dsv3, Parallel(tp=2, pp=8, dp=16, ep=8, etp=1)).experts) == 32 * one
    # ZeRO-1 shards expert optimizer states over edp = tp*cp*dp / (ep*etp): 32 / 32 = 1 and 32 / 8 = 4
    (_, _, od), (_, _, ode) = _zero_divisors(Parallel(**FOLDED, zero=1))
    assert (float(od), float(ode)) == (16.0, 1.0)
    (_, _, od), (_, _, ode) = _zero_divisors(Parallel(tp=2, pp=8, dp=16, ep=8, etp=1, zero=1))
    assert (float(od), float(ode)) == (16.0, 4.0)


def test_expert_gemms_same_flops_other_shapes(dsv3):
    # T = b*s/cp = 4096 tokens, tp 2: each GPU dispatches its T/tp = 2048 sequence-parallel tokens.
    # etp 1, ep 32: an expert gets ep*(T/tp)*etp*k/E = 32 * 2048 * 1 * 8 / 256 = 2048 tokens and
    # is whole (up 2*f_e = 4096 wide); etp = tp = 2, ep 16: 16 * 2048 * 2 * 8 / 256 = 2048 tokens
    # through half an expert (2048 wide). FLOPs per GPU either way: 2 * (T/tp) * k * 3 * h * f_e.
    def experts(par_ep, etp):
        g = {n: (m, nn, k, c) for n, m, nn, k, c in
             flops.layer_gemms(dsv3, 1, 4096, 2, 1, moe=True, ep=par_ep, etp=etp)}
        return g["expert_up"], g["expert_down"]

    up, down = experts(32, 1)
    assert (up[0], up[1], up[3]) == (2048, 4096, 8)
    up2, _ = experts(16, 2)
    assert (up2[0], up2[1], up2[3]) == (2048, 2048, 16)
    want = 2 * 2048 * 8 * 3 * 7168 * 2048
    for e, t in ((32, 1), (16, 2), (8, 1)):
        u, d = experts(e, t)
        assert 2 * (u[0] * u[1] * u[2] * u[3] + d[0] * d[1] * d[2] * d[3]) == want


def test_tp_collectives_of_a_folded_moe_layer(dsv3):
    # a layer's TP traffic: one (all-gather + reduce-scatter) pair for attention; in a MoE layer the
    # expert-TP group all-gathers the dispatched tokens (top_k = 8 copies of each rank's T/tp) and
    # reduce-scatters the outputs (Megatron-Core MoEAlltoAllTokenDispatcher), and DeepSeek-V3's one
    # shared expert is a dense TP MLP with its own pair.
    # SP, P = 2: a pair of the b*s*h activation sends (P-1)/P * 2 * b*s*h*2 = 0.5 * 2 * 4096 * 7168 * 2
    hw = load_hardware("h100-sxm")
    pair = 0.5 * 2 * 4096 * 7168 * 2
    par = Parallel(**FOLDED, sp=True, seq=4096)
    place = dims_placement(hw, par)
    t_dense, _, b_dense, _ = comm.tp_layer(hw, dsv3, par, place)
    t_moe, _, b_moe, _ = comm.tp_layer(hw, dsv3, par, place, moe=True)
    # dense layer: attention + MLP = 2 pairs; folded MoE layer (etp 1): attention + shared expert,
    # the experts need none
    assert float(b_dense) == pytest.approx(2 * pair) and float(b_moe) == pytest.approx(2 * pair)
    assert float(t_moe) == pytest.approx(float(t_dense))
    # without folding (etp = tp = 2): attention + shared + the experts' pair over 8 copies = 10 pairs
    par = Parallel(tp=2, pp=8, dp=16, cp=1, ep=16, sp=True, seq=4096)
    place = dims_placement(hw, par)
    assert float(comm.tp_layer(hw, dsv3, par, place, moe=True)[2]) == pytest.approx(10 * pair)
    # a MoE model without shared experts, folded: attention only (Mixtral, 8 experts: ep 4, etp 1)
    mix = load_model("mixtral-8x7b")
    par = Parallel(tp=2, pp=2, dp=16, cp=1, ep=4, etp=1, sp=True, seq=4096)
    mix_pair = 0.5 * 2 * 4096 * 4096 * 2
    assert float(comm.tp_layer(hw, mix, par, dims_placement(hw, par), moe=True)[2]) == pytest.approx(mix_pair)
    # ... and unfolded: attention + top_k = 2 copies' pair = 3 pairs
    par = Parallel(tp=2, pp=2, dp=16, cp=1, ep=4, sp=True, seq=4096)
    assert float(comm.tp_layer(hw, mix, par, dims_placement(hw, par), moe=True)[2]) == pytest.approx(3 * mix_pair)


def test_expert_inputs_activation_scales_with_etp(dsv3):
    # the k = 8 dispatched copies of each token, bf16: 2 * b*s/c * k * h = 2 * 8192 * 8 * 7168
    # = 939,524,096 bytes when the expert-TP group gathered all T tokens (etp = tp); with etp = 1
    # each GPU keeps its own T/tp tokens' copies: x 1/2
    term = next(t for t in A.activation_terms(dsv3, True, "flash") if t.name.startswith("expert inputs"))
    full = 2 * 8192 * 8 * 7168
    assert full == 939_524_096
    assert float(A.term_bytes(term, Parallel(tp=2, pp=8, dp=16, ep=16, sp=True, seq=8192))) == full
    assert float(A.term_bytes(term, Parallel(**FOLDED, sp=True, seq=8192))) == full / 2


def test_arrays_match_scalars_with_folding(dsv3):
    # the planner evaluates etp as an array column: entry i equals the scalar layout i
    from llmpar.cost.step import step_time
    from llmpar.parallel import Settings

    hw, st = load_hardware("h100-sxm"), Settings(dtype="fp8")
    rows = [dict(FOLDED), dict(tp=2, pp=8, dp=16, cp=1, ep=16, etp=0)]
    arr = Parallel(**{k: np.array([r[k] for r in rows]) for k in rows[0]}, seq=4096, microbatches=16,
                   sp=np.array([True, True]))
    many = step_time(dsv3, hw, arr, st, with_memory=False)["step_time_s"]
    for i, r in enumerate(rows):
        one = step_time(dsv3, hw, Parallel(**r, seq=4096, microbatches=16, sp=True), st,
                        with_memory=False)["step_time_s"]
        assert float(many[i]) == pytest.approx(float(one), rel=1e-12)


def test_cli_and_runs_format(cli, tmp_path):
    res = cli("step", "deepseek-v3", "--gpus", "256", "--tp", "2", "--pp", "8", "--ep", "32", "--dtype", "fp8")
    assert res.code == 2 and "--etp 1" in res.err
    res = cli("step", "deepseek-v3", "--gpus", "256", "--tp", "2", "--pp", "8", "--ep", "32", "--etp", "1",
              "--dtype", "fp8", "--global-batch", "2048", "--json")
    assert res.code == 0, res.err
    assert res.json()["parallel"]["etp"] == 1 and res.json()["parallel"]["ep"] == 32
    res = cli("plan", "mixtral-8x7b", "--gpus", "64", "--etp", "1", "--top", "2", "--json")
    assert res.code == 0, res.err
    assert {p["parallel"]["etp"] for p in res.json()["plans"]} == {1}
    # the text output says so: the header of step/memory, the plan table's ep cell ('4 e1')
    res = cli("memory", "deepseek-v3", "--gpus", "256", "--tp", "2", "--pp", "8", "--ep", "32", "--etp", "1")
    assert res.code == 0 and "ep 32 · etp 1)" in res.out
    # (tp fixed at 2 so that etp 1 differs from tp in the top row)
    res = cli("plan", "mixtral-8x7b", "--gpus", "64", "--etp", "1", "--fix", "tp=2", "--top", "1")
    assert res.code == 0 and " e1 " in res.out
    # a measured-runs table names the expert-TP size as Megatron does
    f = tmp_path / "runs.csv"
    f.write_text("model,hardware,gpus,tp,pp,expert_model_parallel_size,expert_tensor_parallel_size,seq,"
                 "global_batch,micro_batch,step_time_s\n"
                 "deepseek-v3,h100-sxm,256,2,8,32,1,4096,2048,1,60\n")
    run = read_runs([f]).runs[0]
    assert (run.layout["ep"], run.layout["etp"], run.layout["dp"]) == (32, 1, 16)


def test_planner_searches_folding_where_the_stack_has_it(tmp_path):
    # megatron-core states moe_folding (expert_tensor_parallel_size): for an MoE model the planner
    # tries etp = tp and etp = 1. At tp = 1 the two are one layout, so --fix tp=1 enumerates the
    # same candidates either way; at tp = 2 every degree row gets an etp = 1 twin: twice as many.
    from llmpar import plan
    from llmpar.specs import load_stack

    assert load_stack("megatron-core").moe_folding and not load_stack("nanotron").moe_folding
    f = tmp_path / "nofold.yaml"
    f.write_text("name: nofold\nextends: megatron-core\ndescription: test\nmoe_folding: false\n")
    n = {}
    for stack in ("megatron-core", str(f)):
        for tp in (1, 2):
            n[stack, tp] = plan("mixtral-8x7b", gpus=64, tp=tp, stack=stack, top=1).space.candidates
    assert n["megatron-core", 1] == n[str(f), 1]
    assert n["megatron-core", 2] == 2 * n[str(f), 2]
    # the search reaches layouts only folding allows: tp 2 x pp 8 on 64 GPUs leaves dp 4, and EP 8
    # over dp*cp = 4 exists only with etp 1 (8 * 1 divides tp*cp*dp = 8)
    best = plan("mixtral-8x7b", gpus=64, tp=2, pp=8, ep=8, stack="megatron-core", top=1).plans[0]
    d = best.parallel.as_dict()
    assert (d["etp"], d["dp"] * d["cp"]) == (1, 4)
