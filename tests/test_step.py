"""Step-time model (cost/step.py): composition checks derived by hand, invariants, and the
published A100 rows (docs/validation.md)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmpar.cost import pipeline
from llmpar.cost import step as S
from llmpar.cost.collectives import collective_time
from llmpar.cost.topology import dims_placement
from llmpar.parallel import RECOMPUTE, SCHEDULES, Parallel, Settings
from llmpar.specs import load_hardware, load_model, load_stack
from llmpar.specs.model import ModelSpec
from llmpar.specs.stack import Stack

# A stack with every software inefficiency removed: GEMMs on the hardware curve (factor 1), a
# fused causal attention kernel at 100 % of peak forward and backward, nothing overlapped, no
# fixed costs. With ideal_hw() below, step time = FLOPs / peak, derivable by hand.
# the default stack with its gradient reduction in one collective (no buckets): the DP tests below
# derive the overlap arithmetic for one all-reduce; test_dp_buckets_each_pay_latency the buckets
NO_BUCKETS = load_stack("megatron-core").model_copy(deep=True)
NO_BUCKETS.overlap.dp_bucket_bytes = 0.0
# the DP window tests below check the hiding arithmetic alone; what hiding costs in SMs
# (overlap.dp_sms) is test_hidden_dp_collectives_cost_their_sms
NO_BUCKETS.overlap.dp_sms = 0

IDEAL = Stack.model_validate({
    "name": "ideal", "kernels": {"gemm_efficiency": 1.0, "attention": {
        "kernel": "flash-3", "forward_efficiency": 1.0, "backward_efficiency": 1.0, "causal_skip": True}},
    "overlap": {"tp": 0.0, "dp": 0.0, "pp": 0.0, "cp": 1.0, "ep": 0.0}})

TINY = ModelSpec(name="tiny-gpt", family="gpt", layers=4, hidden=1024, heads=8, ffn_hidden=4096, ffn_type="gelu",
                 vocab=8192, max_seq=2048, norm="layernorm", position="learned", tied_embeddings=True)


def ideal_hw(profile: str = "a100-80gb"):
    """An A100 (or ``profile``) with every inefficiency removed: GEMMs at peak, memory and links
    (almost) free. Then step time = FLOPs / peak exactly, which we can derive by hand."""
    hw = load_hardware(profile).model_copy(deep=True)
    hw.gpu.gemm.max_efficiency = 1.0
    hw.gpu.gemm.half_dim = 0.0
    hw.gpu.gemm.half_flops = 0.0
    hw.gpu.memory_bandwidth = 1e30
    for t in hw.tiers:
        t.bandwidth = 1e30
        t.latency = 0.0
    return hw


def test_single_gpu_is_flops_over_peak():
    # tp=pp=dp=1, no recompute, flash attention: the time is the GEMM FLOPs at 312 TFLOP/s.
    # Forward FLOPs of one layer, b=1, s=2048, h=1024, f=4h (GPT, MHA):
    #   QKV 2*s*h*3h + out 2*s*h*h + MLP 2*s*h*4h*2 = 24*s*h^2 = 24*2048*1024^2 = 51,539,607,552
    #   attention core 2 * 2*s^2*h * c, c = causal block fraction (128-blocks, s=2048: n=16 ->
    #   17/32 = 0.53125): 4*2048^2*1024*0.53125 = 9,126,805,504
    # LM head 2*s*h*V = 2*2048*1024*8192 = 34,359,738,368.
    # Forward + backward: linear GEMMs and head 1 + 2 = 3x forward; the fused attention kernel's
    # backward does 2.5x its forward FLOPs (Dao 2023 §3), so 3.5x.
    # Step (m=3) = 3 * (4 * (3 * 51,539,607,552 + 3.5 * 9,126,805,504) + 3 * 34,359,738,368) / 312e12
    lin = 24 * 2048 * 1024**2
    core = 4 * 2048**2 * 1024 * (17 / 32)
    head = 2 * 2048 * 1024 * 8192
    expected = 3 * (4 * (3 * lin + 3.5 * core) + 3 * head) / 312e12
    par = Parallel(tp=1, pp=1, dp=1, micro_batch=1, microbatches=3, seq=2048)
    out = S.step_time(TINY, ideal_hw(), par, Settings(stack=IDEAL), with_memory=False)
    assert out["step_time_s"] == pytest.approx(expected, rel=1e-9)
    assert out["breakdown_s"]["bubble"] == pytest.approx(0.0, abs=1e-15)


def test_pipeline_bubble_by_hand():
    # Same ideal GPU, pp=2 (2 layers per stage), m=4, 1F1B: the last stage holds the LM head,
    # so it is the critical stage: t = 2 * 3 * layer + 3 * head per micro-batch (fwd + 2x bwd).
    # 1F1B: step = (m + p - 1) * t = 5 * t;  bubble = (p - 1) * t, where t also carries the
    # stage-boundary send of each micro-batch each way (the links are ideal, but NCCL's base
    # latency per p2p remains: breakdown "pp" / m).
    # (per layer: 3x the linear GEMMs' forward + 3.5x the attention core's, as above)
    lin = 24 * 2048 * 1024**2
    core = 4 * 2048**2 * 1024 * (17 / 32)
    head = 2 * 2048 * 1024 * 8192
    t = (2 * (3 * lin + 3.5 * core) + 3 * head) / 312e12
    par = Parallel(tp=1, pp=2, dp=1, micro_batch=1, microbatches=4, seq=2048, schedule=SCHEDULES.index("1f1b"))
    out = S.step_time(TINY, ideal_hw(), par, Settings(stack=IDEAL), with_memory=False)
    t = t + out["breakdown_s"]["pp"] / 4
    assert out["breakdown_s"]["pp"] > 0
    assert out["step_time_s"] == pytest.approx(5 * t, rel=1e-9)
    assert out["breakdown_s"]["bubble"] == pytest.approx(1 * t, rel=1e-9)


def test_full_recompute_adds_one_forward():
    # Full recompute re-runs each layer's forward once: + 1x (linear + core) per layer; head unchanged.
    lin = 24 * 2048 * 1024**2
    core = 4 * 2048**2 * 1024 * (17 / 32)
    head = 2 * 2048 * 1024 * 8192
    par = Parallel(tp=1, pp=1, dp=1, micro_batch=1, microbatches=1, seq=2048, recompute=RECOMPUTE.index("full"))
    out = S.step_time(TINY, ideal_hw(), par, Settings(stack=IDEAL), with_memory=False)
    assert out["step_time_s"] == pytest.approx((4 * (4 * lin + 4.5 * core) + 3 * head) / 312e12, rel=1e-9)
    assert out["breakdown_s"]["recompute"] == pytest.approx(4 * (lin + core) / 312e12, rel=1e-9)


def test_tp_comm_is_four_collectives_per_layer():
    # tp=2 without SP: 2 all-reduces forward + 2 backward per layer of the b*s*h*2-byte activation
    # (Shoeybi 2019 §3). With SP: 4 all-gathers + 4 reduce-scatters of the same array. No overlap
    # here (tp_overlap = 0, as Megatron-LM 2021-22): all of it is exposed.
    hw = load_hardware("a100-80gb")
    act = 1 * 2048 * 1024 * 2
    for sp, per_layer in ((False, 4 * collective_time(hw, "all_reduce", act, 2, 2)),
                          (True, 4 * (collective_time(hw, "all_gather", act, 2, 2)
                                      + collective_time(hw, "reduce_scatter", act, 2, 2)))):
        par = Parallel(tp=2, pp=1, dp=1, sp=sp, micro_batch=1, microbatches=2, seq=2048)
        out = S.step_time(TINY, hw, par, Settings(attention="flash", tp_overlap=0.0), with_memory=False)
        assert out["breakdown_s"]["tp"] == pytest.approx(2 * 4 * per_layer, rel=1e-12)
        # bytes sent per GPU: 4 all-reduces' worth, each 2(P-1)/P * act = act for P = 2, per layer
        # and micro-batch: 2 micro-batches * 4 layers * 4 * act
        assert out["comm_bytes_per_gpu"]["tp"] == pytest.approx(2 * 4 * 4 * act, rel=1e-12)


def test_tp_overlap_hides_behind_the_gemms_inside_a_node_only():
    # With tp_overlap f the forward collectives hide behind f x the layer's forward GEMM time (and
    # the backward's behind f x twice that), capped at their own length; a TP group that spans
    # nodes (tp=16 on 8-GPU DGX nodes) gets no overlap (userbuffers need NVLink).
    hw = load_hardware("h100-sxm")
    model = load_model("llama-3-8b")
    par = Parallel(tp=8, pp=1, dp=1, sp=True, micro_batch=1, microbatches=1, seq=8192)
    none = S.step_time(model, hw, par, Settings(tp_overlap=0.0), with_memory=False)
    half = S.step_time(model, hw, par, Settings(tp_overlap=0.5), with_memory=False)
    p = none["parts"]
    t_f, t_b, g = p["tp_forward_s"], p["tp_backward_s"], p["linear_forward_s"]
    hidden = 0.5 * min(t_f, g) + 0.5 * min(t_b, 2 * g)
    assert half["breakdown_s"]["tp"] == pytest.approx(none["breakdown_s"]["tp"] - 32 * hidden, rel=1e-9)
    wide = Parallel(tp=16, pp=1, dp=1, sp=True, micro_batch=1, microbatches=1, seq=8192)
    model16 = load_model("llama-2-7b")    # 32 heads, MHA: tp=16 divides them
    a = S.step_time(model16, hw, wide, Settings(tp_overlap=0.0), with_memory=False)["breakdown_s"]["tp"]
    b = S.step_time(model16, hw, wide, Settings(tp_overlap=1.0), with_memory=False)["breakdown_s"]["tp"]
    assert a == b


def test_dp_overlap_uses_the_backward_window():
    # dp=8 on one DGX A100, ZeRO-0: one all-reduce of the gradients of every parameter on the
    # GPU, in fp32 (the default stack reduces in fp32: overlap.grad_reduce_dtype). dp_overlap 0 exposes all of it; dp_overlap f hides f x min(t_dp, t_b) behind the last
    # micro-batch's backward t_b, but never the last layer's bucket: exposed >= t_dp / L_stage.
    hw = load_hardware("a100-80gb")
    par = Parallel(tp=1, pp=1, dp=8, micro_batch=1, microbatches=1, seq=2048)
    from llmpar.cost.params import total_params

    n = total_params(TINY)
    t_ar = collective_time(hw, "all_reduce", n * 4.0, 8, 8)
    none = S.step_time(TINY, hw, par, Settings(dp_overlap=0.0, stack=NO_BUCKETS), with_memory=False)
    assert none["breakdown_s"]["dp"] == pytest.approx(t_ar, rel=1e-12)
    half = S.step_time(TINY, hw, par, Settings(dp_overlap=0.5, stack=NO_BUCKETS), with_memory=False)
    t_b = half["stage_backward_s"]
    assert half["breakdown_s"]["dp"] == pytest.approx(max(t_ar - 0.5 * min(t_ar, t_b), t_ar / 4), rel=1e-12)


layouts = st.tuples(
    st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 8, 32]),
    st.sampled_from([1, 2, 4]), st.sampled_from([0, 1, 2, 3]), st.sampled_from([0, 1, 2]), st.booleans(),
)


@given(layouts)
def test_breakdown_adds_up_and_arrays_match_scalars(layout):
    tp, pp, dp, b, zero, rec, sp = layout
    model = load_model("llama-3-8b")
    hw = load_hardware("h100-sxm")
    par = Parallel(tp=tp, pp=pp, dp=dp, zero=zero, recompute=rec, sp=sp and tp > 1, micro_batch=b,
                   microbatches=8, seq=4096)
    out = S.step_time(model, hw, par, Settings(), with_memory=False)
    assert sum(out["breakdown_s"].values()) == pytest.approx(out["step_time_s"], rel=1e-12)
    assert all(v >= 0 for v in out["breakdown_s"].values())
    # the same layout inside an array of candidates gives the same numbers (planner == step)
    arr = Parallel(tp=np.array([1, tp]), pp=np.array([1, pp]), dp=np.array([1, dp]), zero=np.array([0, zero]),
                   recompute=np.array([0, rec]), sp=np.array([False, sp and tp > 1]), micro_batch=np.array([1, b]),
                   microbatches=np.array([8, 8]), seq=4096, schedule=np.array([1, 1]), virtual_stages=np.array([1, 1]))
    vec = S.step_time(model, hw, arr, Settings(), with_memory=False)
    assert vec["step_time_s"][1] == pytest.approx(out["step_time_s"], rel=1e-12)


def test_place_tp_inside_node_dp_across():
    hw = load_hardware("h100-sxm")
    place = dims_placement(hw, Parallel(tp=8, pp=2, dp=4))
    assert place["tp"] == (8, 8) and place["dp"][1] == 1


def test_published_a100_rows():
    """docs/validation.md: Korthikanti 2022 Table 5 (iteration time) and Narayanan 2021 Table 1
    (TFLOP/s per GPU; micro-batch and chunks per stage as Megatron-LM examples/sc21/run_table_1.sh
    sets them) under the megatron-2022 stack, through `llmpar validate` (the shipped validation/
    rows). The stack's GEMM fraction was fitted on these 18 rows (3.2 % mean / 7.2 % max in-sample,
    3.5 % / 8.1 % leave-one-configuration-out: stacks/megatron-2022.yaml); the issue's target on the
    published metrics is mean <= 3.5 %, max <= 8 % (validate: 3.3 % / 7.6 %)."""
    from llmpar.validation.core import validate

    res = validate(["korthikanti2022-table5", "narayanan2021-table1"], cross_validate=False)
    errs = [abs(r["error"]) for r in res.rows if r["metric"] in ("step_time_s", "tflops_per_gpu")]
    assert len(errs) == 18
    assert sum(errs) / len(errs) <= 0.035 and max(errs) <= 0.08, errs
    k = [abs(r["error"]) for r in res.rows if r["source"] == "korthikanti2022-table5" and r["metric"] == "step_time_s"]
    assert len(k) == 8 and sum(k) / len(k) <= 0.05 and max(k) <= 0.10


def _tiny_dp8(zero, m=1):
    """TINY on 8 A100s, dp = 8 (one node), with ZeRO ``zero`` and m micro-batches: the layout and
    its unbucketed fp32 gradient reduce-scatter and bf16 weight all-gather times (one collective
    each, as NO_BUCKETS runs them)."""
    from llmpar.cost.params import total_params

    hw = load_hardware("a100-80gb")
    par = Parallel(tp=1, pp=1, dp=8, zero=zero, micro_batch=1, microbatches=m, seq=2048)
    n = total_params(TINY)
    return hw, par, n, collective_time(hw, "reduce_scatter", n * 4.0, 8, 8), collective_time(hw, "all_gather", n * 2.0, 8, 8)


def test_zero1_weight_gather_hides_behind_the_next_forward():
    # ZeRO-1 (distributed optimizer): reduce-scatter the fp32 grads after the backward, all-gather
    # the bf16 weights after the optimizer. With overlap f the reduce-scatter hides behind
    # f x min(t_rs, t_b) of the last backward and the gather behind f x min(t_ag, t_f) of the next
    # step's forward (Megatron-Core overlap_grad_reduce / overlap_param_gather); the last
    # layer's bucket stays exposed: exposed >= (t_rs + t_ag) / L_stage.
    hw, par, n, t_rs, t_ag = _tiny_dp8(zero=1)
    none = S.step_time(TINY, hw, par, Settings(dp_overlap=0.0, grad_dtype="fp32", stack=NO_BUCKETS), with_memory=False)
    assert none["breakdown_s"]["dp"] == pytest.approx(t_rs + t_ag, rel=1e-12)
    half = S.step_time(TINY, hw, par, Settings(dp_overlap=0.5, grad_dtype="fp32", stack=NO_BUCKETS), with_memory=False)
    t_f, t_b = half["stage_forward_s"], half["stage_backward_s"]
    hidden = 0.5 * (min(t_rs, t_b) + min(t_ag, t_f))
    assert half["breakdown_s"]["dp"] == pytest.approx(max(t_rs + t_ag - hidden, (t_rs + t_ag) / 4), rel=1e-12)


def test_zero1_weight_gather_synchronous_in_one_collective():
    # nanotron's ZeRO-1 (optim/zero.py ZeroDistributedOptimizer.step): the optimizer updates the
    # rank's shard, then one synchronous all_gather of the flattened bf16 shard; the gradients are
    # reduce-scattered per DDP bucket, overlapped. Stack: overlap.param_gather 0,
    # param_gather_bucket_bytes 0. With a 25 MB gradient bucket and dp overlap f = 0.5:
    #   t_rs = k x time(RS, 4n/k), k = ceil(4n / 25 MB)  (bucketed, as before)
    #   t_ag = time(AG, 2n)                              (one collective, not k)
    #   exposed = t_rs + t_ag - 0.5 x min(t_rs, t_b)     (nothing of the gather hidden)
    hw, par, n, _, t_ag = _tiny_dp8(zero=1)
    stack = NO_BUCKETS.model_copy(deep=True)
    stack.overlap.dp_bucket_bytes = 25e6
    stack.overlap.param_gather = 0.0
    stack.overlap.param_gather_bucket_bytes = 0.0
    k = -(-4.0 * n // 25e6)
    assert k >= 2
    t_rs = k * collective_time(hw, "reduce_scatter", 4.0 * n / k, 8, 8)
    out = S.step_time(TINY, hw, par, Settings(grad_dtype="fp32", stack=stack.model_copy(
        update={"overlap": stack.overlap.model_copy(update={"dp": 0.5})})), with_memory=False)
    t_b = out["stage_backward_s"]
    assert out["breakdown_s"]["dp"] == pytest.approx(t_rs + t_ag - 0.5 * min(t_rs, t_b), rel=1e-12)
    # unset (megatron-core): the gather is bucketed like the gradients and hidden at overlap.dp
    stack.overlap.param_gather = None
    stack.overlap.param_gather_bucket_bytes = None
    stack.overlap.dp = 0.5
    out = S.step_time(TINY, hw, par, Settings(grad_dtype="fp32", stack=stack), with_memory=False)
    t_ag_k = k * collective_time(hw, "all_gather", 2.0 * n / k, 8, 8)
    t_f, t_b = out["stage_forward_s"], out["stage_backward_s"]
    expect = t_rs + t_ag_k - 0.5 * (min(t_rs, t_b) + min(t_ag_k, t_f))
    assert out["breakdown_s"]["dp"] == pytest.approx(max(expect, (t_rs + t_ag_k) / 4), rel=1e-12)
    # the shipped stacks that gather synchronously say so
    assert load_stack("nanotron").overlap.param_gather == 0.0
    assert load_stack("nanotron").overlap.param_gather_bucket_bytes == 0.0
    assert load_stack("deepspeed").overlap.param_gather == 0.0


def test_zero1_gather_host_loop_per_tensor_and_rank():
    # nanotron's gather loops over (DP rank x parameter tensor): a view and a copy_ per pair
    # (distributed.py all_gather_coalesced). TINY (GPT, LayerNorm, no linear biases) holds per
    # block the qkv, dense, fc1 and fc2 weights + 2 LayerNorms x (weight, bias) = 8 tensors;
    # 4 layers + embedding, final norm, head = 4 x 8 + 3 = 35 on the one stage. With 10 us per
    # pair at dp 8: 10e-6 x 8 x 35 = 2.8 ms more exposed DP time under ZeRO-1, none under ZeRO-0
    from llmpar.cost.params import param_tensors_per_layer

    assert param_tensors_per_layer(TINY) == 8
    assert param_tensors_per_layer(load_model("megatron-gpt-22b")) == 12   # + the 4 linear biases
    assert param_tensors_per_layer(load_model("llama-3-8b")) == 6   # nanotron's fused Llama block
    slow = NO_BUCKETS.model_copy(deep=True)
    slow.kernels.zero_gather_s_per_tensor_rank = 10e-6
    for zero, extra in ((1, 10e-6 * 8 * 35), (0, 0.0)):
        hw, par, *_ = _tiny_dp8(zero=zero)
        base = S.step_time(TINY, hw, par, Settings(grad_dtype="fp32", stack=NO_BUCKETS), with_memory=False)
        more = S.step_time(TINY, hw, par, Settings(grad_dtype="fp32", stack=slow), with_memory=False)
        assert more["breakdown_s"]["dp"] - base["breakdown_s"]["dp"] == pytest.approx(extra, abs=1e-12)
        assert more["step_time_s"] - base["step_time_s"] == pytest.approx(extra, abs=1e-12)
    assert load_stack("megatron-core").kernels.zero_gather_s_per_tensor_rank == 0.0


def test_zero2_reduce_scatters_hide_behind_every_backward():
    # ZeRO-2 with m = 4 micro-batches: the fp32 gradients are reduce-scattered after each
    # micro-batch's backward (m x t_rs), each behind its own backward (DeepSpeed stage 2
    # overlap_comm), so the window is m x t_b, not the last backward alone; the weight gather
    # (t_ag) hides behind the next step's forward. With f = 0.5 and one collective each:
    #   exposed = max(m t_rs + t_ag - 0.5 (min(m t_rs, m t_b) + min(t_ag, t_f)), (t_rs + t_ag) / L)
    hw, par, _, t_rs, t_ag = _tiny_dp8(zero=2, m=4)
    out = S.step_time(TINY, hw, par, Settings(dp_overlap=0.5, grad_dtype="fp32", stack=NO_BUCKETS), with_memory=False)
    t_f, t_b = out["stage_forward_s"], out["stage_backward_s"]
    hidden = 0.5 * (min(4 * t_rs, 4 * t_b) + min(t_ag, t_f))
    assert out["breakdown_s"]["dp"] == pytest.approx(max(4 * t_rs + t_ag - hidden, (t_rs + t_ag) / 4), rel=1e-12)
    # more than ZeRO-1 would leave exposed of the same reduce-scatters behind one backward
    assert out["breakdown_s"]["dp"] < 4 * t_rs + t_ag - 0.5 * (min(4 * t_rs, t_b) + min(t_ag, t_f))


def test_dp_buckets_each_pay_latency():
    # With a 160 MB bucket (megatron-core's 40M fp32 elements), the ZeRO-0 all-reduce of the
    # n = total_params(TINY) fp32 gradients runs as k = ceil(4n / 160e6) all-reduces of 4n/k bytes:
    # k x time(4n/k) > time(4n) by (k - 1) latencies (cost/comm.dp_step).
    hw = load_hardware("a100-80gb")
    par = Parallel(tp=1, pp=1, dp=8, micro_batch=1, microbatches=1, seq=2048)
    from llmpar.cost.params import total_params

    n = total_params(TINY)
    k = -(-4.0 * n // 160e6)
    assert k >= 2
    bucketed = k * collective_time(hw, "all_reduce", 4.0 * n / k, 8, 8)
    out = S.step_time(TINY, hw, par, Settings(dp_overlap=0.0), with_memory=False)
    assert out["breakdown_s"]["dp"] == pytest.approx(bucketed, rel=1e-12)
    assert bucketed > collective_time(hw, "all_reduce", 4.0 * n, 8, 8)


def test_ep_overlap_hides_the_all_to_alls_behind_the_moe_layer():
    # EP exposed per MoE layer and micro-batch = t_a2a - f x h x min(t_a2a, t_compute), f =
    # --ep-overlap (the stack's overlap.ep when not given; megatron-core 0), h the share of chunks
    # the schedule pairs with one of the other direction (pipeline.ep_paired_share). Mixtral on 8
    # H100, ep 8, no pipeline: 64 sequences over dp 8 = 8 micro-batches, of which Megatron-Core's
    # combined 1F1B runs the first forward alone and pairs the other 7: h = 7/8. The all-to-alls
    # are shorter than the layer's compute, so f = 0.5 exposes 1 - 7/16 = 9/16 of what f = 0 does
    # and f = 1 exposes 1/8 (the unpaired micro-batch's).
    from llmpar.api import step
    from llmpar.cost.pipeline import ep_paired_share

    kw = dict(gpus=8, ep=8, global_batch=64, seq=4096)
    e0, e5, e1 = (step("mixtral-8x7b", ep_overlap=f, **kw).breakdown_s["ep"] for f in (None, 0.5, 1.0))
    assert load_stack("megatron-core").overlap.ep == 0.0 and e0 > 0
    assert float(ep_paired_share(SCHEDULES.index("1f1b"), 1, 8)) == pytest.approx(7 / 8)
    assert e5 == pytest.approx(e0 * 9 / 16, rel=1e-12) and e1 == pytest.approx(e0 / 8, rel=1e-12)
    assert step("mixtral-8x7b", ep_overlap=0.5, **kw).settings.ep_overlap == 0.5


def test_ep_paired_share_by_hand():
    # Megatron-Core's combined 1F1B (schedules.py get_pp_rank_microbatches): rank 0 runs its
    # warm-up 2(p-1) + (v-1)p forwards and one more alone. p = 2, v = 12, m = 32 (NeMo 25.11's H100
    # Qwen3-30B preset): 2 + 22 + 1 = 25 of 384 chunks alone, 359/384 paired; 1F1B at p = 16,
    # m = 120: 16 alone, 104/120; m·v no larger than the warm-up: none; GPipe: none; DualPipe at
    # p = 16, m = 120: 97/120 (dualpipe_paired_share)
    from llmpar.cost.pipeline import ep_paired_share

    idx = SCHEDULES.index
    assert float(ep_paired_share(idx("interleaved"), 2, 32, 12)) == pytest.approx(359 / 384)
    assert float(ep_paired_share(idx("1f1b"), 16, 120)) == pytest.approx(104 / 120)
    assert float(ep_paired_share(idx("interleaved"), 16, 16, 8)) == 0.0
    assert float(ep_paired_share(idx("gpipe"), 4, 64)) == 0.0
    assert float(ep_paired_share(idx("dualpipe"), 16, 120)) == pytest.approx(97 / 120)


def test_cp_with_mla_moves_the_per_head_k_and_v():
    # Megatron-Core's MLA up-projects each CP rank's own tokens and hands the per-head key and value
    # to the core attention's CP ring (multi_latent_attention.py), so the ring moves K and V, not
    # the 576-wide latent. DeepSeek-V3: 128 heads x (128 + 64 + 128) = 40,960 elements per token,
    # 81,920 B at 2 B. b = 1, s = 4096 over cp = 8, tp = 1: 512 tokens x 81,920 B = 41,943,040 B
    # per rank; the forward all-gather's array is 8 x that and each rank sends 7/8 of it:
    # 293,601,280 B; the backward all-gathers again and reduce-scatters the gradients: twice that.
    from llmpar.cost import comm
    from llmpar.cost.collectives import collective_time
    from llmpar.cost.topology import dims_placement

    hw, m = load_hardware("h800"), load_model("deepseek-v3")
    par = Parallel(tp=1, pp=16, dp=16, cp=8, ep=8, micro_batch=1, seq=4096)
    place = dims_placement(hw, par)
    f, b, sent_f, sent_b = comm.cp_layer(hw, m, par, place, 2.0)
    assert float(sent_f) == pytest.approx(293_601_280) and float(sent_b) == pytest.approx(2 * 293_601_280)
    size, k = place["cp"]
    total = 8 * 41_943_040
    assert float(f) == pytest.approx(float(collective_time(hw, "all_gather", total, size, k)))
    assert float(b) == pytest.approx(float(f) + float(collective_time(hw, "reduce_scatter", total, size, k)))


def test_bf16_gradients_given_are_reduced_in_bf16(cli):
    # megatron-core reduces its fp32 main grads in fp32 (grad_reduce_in_fp32); --grad-dtype bf16
    # (Megatron-Core grad_reduce_in_fp32 = False) makes the buffer bf16 and it is reduced so. ZeRO-1
    # sends f x (gradient bytes + weight bytes) per step (cost/comm.dp_step): (4 + 2) Psi by
    # default, (2 + 2) Psi with bf16 gradients, a ratio of 2/3; memory drops by 2 B per parameter.
    args = ("step", "llama-3-8b", "--gpus", "16", "--zero", "1", "--micro-batch", "1", "--global-batch", "64",
            "--seq", "4096", "--json")
    fp32 = cli(*args).json()
    bf16 = cli(*args, "--grad-dtype", "bf16").json()
    assert fp32["settings"]["grad_dtype"] == "fp32" and bf16["settings"]["grad_dtype"] == "bf16"
    assert bf16["comm_bytes_per_gpu"]["dp"] == pytest.approx(fp32["comm_bytes_per_gpu"]["dp"] * 2 / 3, rel=1e-9)
    n = fp32["memory"]["params_per_gpu"]
    assert fp32["memory"]["gradients_bytes"] - bf16["memory"]["gradients_bytes"] == pytest.approx(2 * n, rel=1e-9)


def test_fp8_primary_weights_are_gathered_in_fp8(cli):
    # Megatron-Core --fp8-param-gather ("keep the compute param in fp8 ... and perform the param
    # all-gather in fp8", arguments.py; megatron-core's kernels.fp8.primary_weights): the ZeRO-1
    # weight all-gather moves 1 B per linear weight of the FP8 GEMMs instead of 2; norms, embedding
    # and head stay 2 B, and the gradients are untouched. llama-3-8b at tp 1, pp 1, dp 8: a layer's
    # linear weights are q 4096^2 + k, v 2 x 4096 x 1024 + o 4096^2 = 41,943,040 and SwiGLU
    # 3 x 4096 x 14336 = 176,160,768, 218,103,808 in all; x 32 layers = 6,979,321,856. The ring
    # all-gather sends (dp-1)/dp of the array, so the step sends 7/8 x 6,979,321,856 =
    # 6,106,906,624 bytes fewer per GPU. torchtitan (primary_weights false) gathers bf16 both ways.
    args = ("step", "llama-3-8b", "--gpus", "8", "--tp", "1", "--pp", "1", "--zero", "1", "--micro-batch", "1",
            "--global-batch", "8", "--seq", "4096", "--recompute", "full", "--json")
    bf16, fp8 = cli(*args).json(), cli(*args, "--dtype", "fp8").json()
    assert bf16["comm_bytes_per_gpu"]["dp"] - fp8["comm_bytes_per_gpu"]["dp"] == pytest.approx(6_106_906_624,
                                                                                            rel=1e-9)
    tt = [cli(*args, "--stack", "torchtitan", *d).json()["comm_bytes_per_gpu"]["dp"] for d in ((), ("--dtype", "fp8"))]
    assert tt[0] == pytest.approx(tt[1], rel=1e-12)


def _ideal_h100():
    """ideal_hw on an H100: BF16 GEMMs at 989, FP8 at 1979 TFLOP/s."""
    return ideal_hw("h100-sxm")


def _ideal_fp8(start, end):
    st = IDEAL.model_copy(deep=True)
    st.kernels.fp8.gemm_efficiency = 1.0
    st.kernels.fp8.bf16_layers_at_start = start
    st.kernels.fp8.bf16_layers_at_end = end
    return st


def test_fp8_recipe_bf16_boundary_layers_by_hand():
    # Megatron-Core --first-last-layers-bf16 (Megatron-Bridge's FP8 current-scaling recipe: the
    # first and the last layer): those layers' linear GEMMs run at the BF16 peak. On the ideal
    # H100 a layer's linear GEMMs (TINY: 24 s h^2 = 51.5 GFLOP forward, x3 with the backward)
    # take 3 lin / 1979e12 in FP8 and 3 lin / 989e12 in BF16; casts are free (HBM ideal).
    lin = 24 * 2048 * 1024**2
    extra = 3 * lin * (1 / 989e12 - 1 / 1979e12)          # 78.3 us per BF16 layer and micro-batch
    hw = _ideal_h100()

    def step(par, start, end):
        return S.step_time(TINY, hw, par, Settings(dtype="fp8", stack=_ideal_fp8(start, end)), with_memory=False)

    # pp = 1, one micro-batch: both boundary layers on the one stage -> + 2 x extra
    one = Parallel(tp=1, pp=1, dp=1, micro_batch=1, microbatches=1, seq=2048)
    assert step(one, 1, 1)["step_time_s"] - step(one, 0, 0)["step_time_s"] == pytest.approx(2 * extra, rel=1e-9)
    assert step(one, 1, 1)["parts"]["bf16_layers_extra_s"] == pytest.approx(2 * extra, rel=1e-9)
    # pp = 2 (2 layers per stage), m = 4, 1F1B: the last stage also runs the BF16 LM head (3 x 2 s h V
    # = 103.1 GFLOP at 989: 104.3 us per micro-batch), so it is the critical stage. A BF16 last layer
    # lands there: + (m + p - 1) x extra = 5 x extra. A BF16 first layer lands on stage 0, whose
    # 78.3 us extra stays below the head's 104.3 us: the step does not move.
    two = Parallel(tp=1, pp=2, dp=1, micro_batch=1, microbatches=4, seq=2048, schedule=SCHEDULES.index("1f1b"))
    base = step(two, 0, 0)["step_time_s"]
    assert step(two, 0, 1)["step_time_s"] - base == pytest.approx(5 * extra, rel=1e-9)
    assert step(two, 1, 0)["step_time_s"] == pytest.approx(base, rel=1e-12)
    # and only under --dtype fp8
    bf16 = Settings(dtype="bf16", stack=_ideal_fp8(1, 1))
    assert S.step_time(TINY, hw, one, bf16, with_memory=False)["step_time_s"] == pytest.approx(
        S.step_time(TINY, hw, one, Settings(dtype="bf16", stack=IDEAL), with_memory=False)["step_time_s"], rel=1e-12)


def test_bf16_boundary_layers_placement():
    # the first N layers on stage 0, the last N on stage p-1, capped at those stages' sizes
    # (Llama 3's uneven split: 126 layers on 16 stages, 7 on each end stage); pp = 1: all on one
    assert [int(x) for x in pipeline.bf16_boundary_layers(32, 1, 1, 1)] == [2, 0]
    assert [int(x) for x in pipeline.bf16_boundary_layers(126, 16, 1, 1)] == [1, 1]
    assert [int(x) for x in pipeline.bf16_boundary_layers(126, 16, 9, 2)] == [7, 2]
    first, last = pipeline.bf16_boundary_layers(126, np.array([1, 8, 16]), 1, 2)
    assert first.tolist() == [3, 1, 1] and last.tolist() == [0, 2, 2]


def test_bf16_boundary_layers_arrays_match_scalars():
    # the planner's path: one array evaluation equals the scalar ones, candidate by candidate
    hw, st = _ideal_h100(), _ideal_fp8(1, 1)
    pps, ms = np.array([1, 2, 4]), np.array([1, 4, 8])
    arr = S.step_time(TINY, hw, Parallel(tp=1, pp=pps, dp=1, micro_batch=1, microbatches=ms, seq=2048,
                                         schedule=SCHEDULES.index("1f1b")),
                      Settings(dtype="fp8", stack=st), with_memory=False)["step_time_s"]
    for i, (p, m) in enumerate(zip(pps, ms)):
        one = S.step_time(TINY, hw, Parallel(tp=1, pp=int(p), dp=1, micro_batch=1, microbatches=int(m), seq=2048,
                                             schedule=SCHEDULES.index("1f1b")),
                          Settings(dtype="fp8", stack=st), with_memory=False)["step_time_s"]
        assert float(arr[i]) == pytest.approx(float(one), rel=1e-12)


def test_bf16_boundary_layers_gathered_in_bf16():
    # With FP8 primary weights (megatron-core: --fp8-param-gather) ZeRO-1 gathers linear weights in
    # 1 B; the recipe's BF16 boundary layers hold 16-bit weights, 2 B. Llama-3 8B at pp 1, dp 8:
    # 2 layers x 218,103,808 linear params x 1 B more, of which each GPU sends 7/8 = 381,681,664 B.
    hw, m = load_hardware("h100-sxm"), load_model("llama-3-8b")
    st = load_stack("megatron-core").model_copy(deep=True)
    st.kernels.fp8.bf16_layers_at_start = st.kernels.fp8.bf16_layers_at_end = 1
    par = Parallel(tp=1, pp=1, dp=8, zero=1, micro_batch=1, microbatches=8, seq=8192)

    def dp_bytes(stack):
        return S.step_time(m, hw, par, Settings(dtype="fp8", stack=stack), with_memory=False)["comm_bytes_per_gpu"]["dp"]

    assert dp_bytes(st) - dp_bytes(load_stack("megatron-core")) == pytest.approx(2 * 218_103_808 * 7 / 8, rel=1e-9)


def test_hidden_dp_collectives_cost_their_sms():
    import llmpar

    # overlap.dp_sms (cost/step.py _dp): compute under a hidden collective of C seconds has
    # (S - s)/S of the SMs, so hiding C costs s/S x C. Llama 3 8B, ZeRO-1 over 64 H100s:
    # at dp_overlap 0 nothing hides, so the DP term is the whole traffic t_dp (0.2760 s); at
    # dp_overlap 1 with dp_sms 0 the exposed floor e0 (0.0086 s) is left; with the default 24 of
    # 132 SMs: e0 + 24/132 x (t_dp - e0) = 0.0086 + 0.1818 x 0.2674 = 0.0572 s.
    from llmpar.specs import load_stack

    base = load_stack("megatron-core")
    assert base.overlap.dp_sms == 24
    d = base.model_dump()
    free = type(base).model_validate({**d, "overlap": {**d["overlap"], "dp_sms": 0}})
    kw = dict(gpus=64, tp=1, dp=64, zero=1, micro_batch=1, global_batch=64)
    t_dp = llmpar.step("llama-3-8b", stack=free, dp_overlap=0.0, **kw).breakdown_s["dp"]
    e0 = llmpar.step("llama-3-8b", stack=free, dp_overlap=1.0, **kw).breakdown_s["dp"]
    priced = llmpar.step("llama-3-8b", stack=base, dp_overlap=1.0, **kw).breakdown_s["dp"]
    assert e0 < t_dp
    assert priced == pytest.approx(e0 + 24 / 132 * (t_dp - e0), rel=1e-12)
    # nothing hidden, nothing charged
    assert llmpar.step("llama-3-8b", stack=base, dp_overlap=0.0, **kw).breakdown_s["dp"] == pytest.approx(t_dp)
