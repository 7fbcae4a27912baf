"""The torchtitan stacks (stacks/torchtitan.yaml, stacks/torchtitan-compile.yaml; docs/stacks.md).
Each expected value is read from the torchtitan source cited beside it."""

from __future__ import annotations

import pytest

from llmpar.cost import memory as M
from llmpar.parallel import Parallel, Settings
from llmpar.specs import load_model, load_stack
from llmpar.specs.registry import shipped_names

LLAMA7 = load_model("llama-2-7b")


def test_shipped_and_extends():
    assert {"torchtitan", "torchtitan-compile"} <= set(shipped_names("stacks"))
    base, comp = load_stack("torchtitan"), load_stack("torchtitan-compile")
    # FSDP2 = ZeRO-3; reshard_after_forward=False = ZeRO-2; under PP also no gradient sync before the
    # last micro-batch (pipelining stage.py backward_maybe_with_nosync) = ZeRO-1; DDP = 0
    assert base.zero_stages == [0, 1, 2, 3] and comp.zero_stages == [0, 1, 2, 3]
    # training.mixed_precision_reduce = float32; enable_async_tensor_parallel off; torchao Float8Linear on
    # every nn.Linear but "output"; no fp8 all-gather by default (config_manager.py, float8.py at 9dec370)
    assert base.overlap.grad_reduce_dtype == "fp32" and base.overlap.tp_mode == "none" and base.overlap.tp == 0.0
    assert base.kernels.fp8.gemms == ["qkv", "proj", "fc1", "fc2"] and not base.kernels.fp8.primary_weights
    # compile (extends) changes only what Inductor changes: element-wise traffic, launches, the saved set
    assert (base.memory.activations, comp.memory.activations) == ("eager", "fused")
    assert comp.kernels.elementwise_traffic == 1.0 < base.kernels.elementwise_traffic
    assert comp.overlap == base.overlap and comp.zero_stages == base.zero_stages


def _layer(stack):
    c = M.aggregate(M.stack_activation_terms(LLAMA7, False, Settings(stack=stack, attention="flash")),
                    M.checkpoint_term(LLAMA7))
    return M.layer_activation_bytes(c, Parallel(seq=4096))[0]


def test_saved_set_eager_and_compiled():
    # torchtitan's eager block (RMSNorm: x.float() * rsqrt(mean(x^2)); w2(silu(w1 x) * w3 x)) saves the
    # same tensors as HF's LlamaDecoderLayer: 186,504 B/token for Llama-2-7B at b = 1 (tests/test_activations.py);
    # compiled, the fused set 131,712 B/token
    assert _layer("torchtitan") == 186_504 * 4096
    assert _layer("torchtitan-compile") == 131_712 * 4096


@pytest.mark.parametrize("stack", ["torchtitan", "torchtitan-compile"])
def test_step_names_the_stack(cli, stack):
    res = cli("step", "llama-3-8b", "--stack", stack, "--zero", "3", "--gpus", "8", "--json")
    assert res.code == 0, res.err
    d = res.json()
    assert d["settings"]["stack"] == stack and d["parallel"]["zero"] == 3
    # grad reduce in fp32 (mixed_precision_reduce) and no TP overlap by default
    assert d["settings"]["tp_overlap"] == 0.0


# --- torchtitan's op-level selective activation checkpointing (memory.selective_recompute) ------------
# parallelize_llama.py (9dec370): _save_list = {aten.mm, SDPA flash/efficient, reduce_scatter, abs, max};
# "Saves output of all compute ops, except every second mm", mm counted per block in forward order:
# wq 1, wk 2, wv 3, wo 4, w1 5, w3 6, w2 7 (w2(silu(w1 x) * w3 x)). Saved: wq, wv, w1, w2 outputs.

LLAMA3_8B = load_model("llama-3-8b")   # h 4096, 32 heads, 8 KV heads of 128, ffn 14336, 32 layers
SEL = 1


def test_op_sac_policy_is_torchtitans_default():
    assert load_stack("torchtitan").memory.selective_recompute == "torchtitan-op"
    assert load_stack("torchtitan-compile").memory.selective_recompute == "torchtitan-op"   # inherited
    assert load_stack("megatron-core").memory.selective_recompute == "attention-core"


def test_op_sac_saved_bytes_by_hand():
    # per token (bf16 = 2 B): layer input 2h = 8192; wq out 2·a·d = 8192; wv out 2·kv·d = 2048;
    # SDPA out 2·a·d = 8192 + its fp32 logsumexp 4·a = 128; w1 out 2f = 28,672; w2 out 2h = 8192
    # = 63,616 B/token; b = 2, s = 8192 -> 16,384 tokens per micro-batch
    per_token = 8192 + 8192 + 2048 + 8192 + 128 + 28_672 + 8192
    assert per_token == 63_616
    settings = Settings(stack="torchtitan", attention="flash")
    c = M.aggregate(M.stack_activation_terms(LLAMA3_8B, False, settings), M.checkpoint_term(LLAMA3_8B))
    kept, none = M.layer_activation_bytes(c, Parallel(seq=8192, micro_batch=2, recompute=SEL))
    assert kept == per_token * 16_384 == 1_042_284_544
    # without recompute the eager set is unchanged by the policy (the SAC terms are selective-only)
    eager = M.aggregate(M.activation_terms(LLAMA3_8B, False, "flash", saved="eager"), M.checkpoint_term(LLAMA3_8B))
    assert none == M.layer_activation_bytes(eager, Parallel(seq=8192, micro_batch=2))[0]


def test_op_sac_recompute_flops_by_hand():
    from llmpar.cost import flops as F

    # re-run per layer and sequence: wk 2·s·h·(kv·d) + wo 2·s·h·h + w3 2·s·h·f
    # = 2·8192·4096·(1024 + 4096 + 14336) = 1,305,670,057,984; x 32 layers
    per_layer = 2 * 8192 * 4096 * (1024 + 4096 + 14336)
    assert per_layer == 1_305_670_057_984
    got = F.recompute_flops_per_sequence(LLAMA3_8B, 8192, SEL, policy="torchtitan-op")
    assert got == pytest.approx(32 * per_layer, rel=1e-12)
    # attention-core (Megatron): the scores and context GEMMs, 2 x 2·s²·a·d per layer, unmasked
    core = F.recompute_flops_per_sequence(LLAMA3_8B, 8192, SEL)
    assert core == pytest.approx(32 * 2 * 2 * 8192**2 * 32 * 128, rel=1e-12)


def test_op_sac_falls_back_where_torchtitan_has_no_such_block():
    from llmpar.cost import flops as F

    # MoE and MLA layers, and the eager 'standard' attention: the attention-core set (documented)
    assert F.selective_fractions(load_model("mixtral-8x7b"), True, "torchtitan-op") == \
        {n: 1.0 for n in F.ATTENTION_CORE}
    assert F.selective_fractions(LLAMA3_8B, False, "torchtitan-op", attention="standard") == \
        {n: 1.0 for n in F.ATTENTION_CORE}
    assert F.selective_fractions(LLAMA3_8B, False, "torchtitan-op") == \
        {"qkv": 8 / (32 + 16), "attn_out": 1.0, "mlp_up": 0.5, "mlp_down": 0.0}


def test_op_sac_recompute_time_in_the_step():
    # selective under op-SAC re-runs wk, wo, w3 and the element-wise ops: its recompute time lies
    # between none's and a full forward's, and the hardware FLOPs count the
    # re-run GEMMs: B = 16 sequences x 32 layers x 1,305,670,057,984 (test above) more than none
    from llmpar import api

    kw = dict(hardware="h100-sxm", gpus=8, dp=8, zero=3, micro_batch=2, global_batch=16, seq=8192)
    run = {rc: api.step("llama-3-8b", stack="torchtitan", recompute=rc, **kw).model_dump()
           for rc in ("none", "selective", "full")}
    rec = {rc: r["breakdown_s"]["recompute"] for rc, r in run.items()}
    assert rec["none"] == 0 < rec["selective"] < rec["full"]
    hw = {rc: r["detail"]["hardware_flops_per_step"] for rc, r in run.items()}
    assert hw["selective"] - hw["none"] == pytest.approx(16 * 32 * 1_305_670_057_984, rel=1e-12)


def test_bf16_logits_live_through_the_loss_by_hand():
    # torchtitan train.py: pred = model(x); loss = cross_entropy(pred.float(), ...); del pred before
    # backward -> the LM head's bf16 output sits beside the fp32 pair: + 2 B x tokens x V.
    # Llama-3-8B, b = 1, s = 4096, V = 128,256, pp 1 (one micro-batch of logits):
    # 2 x 4,096 x 128,256 = 1,050,673,152 B
    from llmpar.specs import load_hardware

    st = load_stack("torchtitan")
    assert st.memory.logits_16bit_live and load_stack("torchtitan-compile").memory.logits_16bit_live
    data = st.model_dump()
    data["memory"]["logits_16bit_live"] = False
    without = type(st).model_validate(data)
    hw = load_hardware("h100-96gb")
    par = Parallel(seq=4096)
    on = M.memory_per_gpu(LLAMA3_8B, hw, par, Settings(stack=st))["activations_bytes"]
    off = M.memory_per_gpu(LLAMA3_8B, hw, par, Settings(stack=without))["activations_bytes"]
    assert on - off == pytest.approx(2 * 4096 * 128_256, rel=1e-12) == 1_050_673_152


# --- FSDP2 under PP: the accumulated unsharded gradients are fp32 (memory.accumulated_grad_fp32) ----
# torch FSDPParam.to_accumulated_grad_if_needed: with gradient sync off (the pipelining stage turns it
# off for every backward but the last) and reduce_dtype float32 unlike the bf16 gradient, the unsharded
# gradient is upcast and accumulated in fp32: 4 B per local parameter instead of 2, at ZeRO-1 with m > 1.

def test_accumulated_grads_fp32_only_where_fsdp2_accumulates_unsharded():
    st = load_stack("torchtitan")
    assert st.memory.accumulated_grad_fp32 and not load_stack("megatron-core").memory.accumulated_grad_fp32
    s = Settings(stack=st)
    assert s.grad_dtype == "bf16"
    g = {(z, m): float(M.bytes_per_param(s, z, m).gradients) for z in (0, 1, 3) for m in (1, 8)}
    # ZeRO-1 with 8 micro-batches accumulates in fp32; one micro-batch reduce-scatters the bf16 gradient
    # at once; DDP (0) accumulates in param.grad (bf16); FSDP2 (3) reduce-scatters every micro-batch
    assert g == {(0, 1): 2.0, (0, 8): 2.0, (1, 1): 2.0, (1, 8): 4.0, (3, 1): 2.0, (3, 8): 2.0}
    assert "fp32" in M.bytes_per_param(s, 1, 8).describe["gradients"]


def test_accumulated_grads_fp32_by_hand_on_a_pipeline_stage():
    # Llama-3-8B, pp 2, tp 1, dp 1, ZeRO-1, 8 micro-batches: the gradient bytes on each stage are
    # 4 B x that stage's parameters (params_per_gpu), twice what one micro-batch holds (2 B)
    from llmpar.specs import load_hardware

    s, hw = Settings(stack=load_stack("torchtitan")), load_hardware("h100-96gb")
    many = M.memory_per_stage(LLAMA3_8B, hw, Parallel(pp=2, zero=1, microbatches=8, seq=4096), s)
    one = M.memory_per_stage(LLAMA3_8B, hw, Parallel(pp=2, zero=1, microbatches=1, seq=4096), s)
    for a, b in zip(many, one):
        assert a["gradients_bytes"] == pytest.approx(4.0 * a["params_per_gpu"], rel=1e-12)
        assert b["gradients_bytes"] == pytest.approx(2.0 * b["params_per_gpu"], rel=1e-12)


# --- torchao's Float8 TP styles all-gather in FP8 (kernels.fp8.tp_all_gather_fp8) -----------------------
# Float8ColwiseParallel casts its input to e4m3 before the forward all-gather; Float8RowwiseParallel
# casts the output gradient to e5m2 before the backward all-gather; the reduce-scatters stay bf16.

def test_fp8_tp_all_gather_bytes_by_hand():
    from llmpar.cost import comm
    from llmpar.specs import load_hardware

    hw = load_hardware("h100-96gb")
    par = Parallel(tp=8, sp=True, seq=8192)
    place = {"tp": (8, 8)}
    # act = b·s·h·2 = 8,192 x 4,096 x 2 = 67,108,864 B; per direction 2 all-gathers + 2 reduce-scatters,
    # each (P-1)/P of its array: bf16 2 x (67,108,864 + 67,108,864) x 7/8 = 234,881,024 B;
    # FP8 gathers 2 x (33,554,432 + 67,108,864) x 7/8 = 176,160,768 B (3/4)
    f16, b16, sf16, sb16 = comm.tp_layer(hw, LLAMA3_8B, par, place, 2.0)
    f8, b8, sf8, sb8 = comm.tp_layer(hw, LLAMA3_8B, par, place, 2.0, 1.0)
    assert float(sf16) == float(sb16) == 234_881_024
    assert float(sf8) == float(sb8) == 176_160_768
    assert float(f8) < float(f16)
    # without SP there is no all-gather (all-reduces only): nothing changes
    nosp = Parallel(tp=8, sp=False, seq=8192)
    assert comm.tp_layer(hw, LLAMA3_8B, nosp, place, 2.0, 1.0) == comm.tp_layer(hw, LLAMA3_8B, nosp, place, 2.0)


def test_fp8_tp_all_gathers_only_for_fp8_on_torchtitan(cli):
    # every TP byte under SP is in an all-gather + reduce-scatter pair of equal bf16 size, so gathering
    # in FP8 sends (1 + 2)/(2 + 2) = 3/4 of the bytes; BF16 runs and Megatron-Core (TE gathers bf16
    # here) are unchanged
    def tp_bytes(stack, dtype):
        res = cli("step", "llama-3-70b", "--stack", stack, "--gpus", "64", "--tp", "8", "--sp", "--zero", "3",
                  "--dtype", dtype, "--hardware", "h100-96gb", "--global-batch", "64", "--json")
        assert res.code == 0, res.err
        return res.json()["comm_bytes_per_gpu"]["tp"]

    assert tp_bytes("torchtitan", "fp8") == pytest.approx(0.75 * tp_bytes("torchtitan", "bf16"), rel=1e-12)
    assert tp_bytes("megatron-core", "fp8") == pytest.approx(tp_bytes("megatron-core", "bf16"), rel=1e-12)


def test_memory_table_says_why_gradients_are_fp32(cli):
    # 8 sequences over 2 stages at b = 1: m = 8 > 1, ZeRO-1 -> the fp32 accumulated gradients (4 B) are named;
    # one micro-batch (global batch 1) keeps bf16 (2 B) and no such note
    many = cli("memory", "llama-3-8b", "--stack", "torchtitan", "--pp", "2", "--zero", "1", "--gpus", "2",
               "--global-batch", "8")
    one = cli("memory", "llama-3-8b", "--stack", "torchtitan", "--pp", "2", "--zero", "1", "--gpus", "2",
              "--global-batch", "1")
    assert many.code == 0 and one.code == 0, (many.err, one.err)
    assert "4 B/param (fp32, accumulated over micro-batches)" in many.out
    assert "2 B/param" in one.out and "accumulated over micro-batches" not in one.out
    # the JSON says the same in its own key; fp32 asked for with --grad-dtype is 4 B without the note
    args = ("memory", "llama-3-8b", "--stack", "torchtitan", "--pp", "2", "--zero", "1", "--gpus", "2", "--json")
    bpp = cli(*args, "--global-batch", "8").json()["bytes_per_param"]
    assert bpp["gradients"] == 4.0 and bpp["gradients_fp32_accumulated"] is True
    assert cli(*args, "--global-batch", "1").json()["bytes_per_param"]["gradients_fp32_accumulated"] is False
    asked = cli(*args, "--global-batch", "1", "--grad-dtype", "fp32").json()["bytes_per_param"]
    assert asked["gradients"] == 4.0 and asked["gradients_fp32_accumulated"] is False


def test_loss_parallel_fp32_temporaries_by_hand():
    # torch loss_parallel (torchtitan's default when TP > 1) decomposes log_softmax: x, x - max and
    # exp(x - max) are fp32 and live together, one vocab-sharded fp32 copy more than a fused kernel:
    # Llama-3-8B, b = 1, s = 4096, V = 128,256, tp 2: 4 x 4,096 x 128,256 / 2 = 1,050,673,152 B; tp 1: none
    from llmpar.specs import load_hardware

    st = load_stack("torchtitan")
    assert st.memory.loss_parallel_fp32_copies == 1 and load_stack("megatron-core").memory.loss_parallel_fp32_copies == 0
    data = st.model_dump()
    data["memory"]["loss_parallel_fp32_copies"] = 0
    without = type(st).model_validate(data)
    hw = load_hardware("h100-96gb")
    for tp, extra in ((2, 1_050_673_152), (1, 0)):
        par = Parallel(tp=tp, seq=4096)
        on = M.memory_per_gpu(LLAMA3_8B, hw, par, Settings(stack=st))["activations_bytes"]
        off = M.memory_per_gpu(LLAMA3_8B, hw, par, Settings(stack=without))["activations_bytes"]
        assert on - off == pytest.approx(extra, rel=1e-12, abs=1e-6)
