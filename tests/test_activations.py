"""Stack memory physics: eager saved set, logits, runtime, verdict (docs/memory.md, docs/stacks.md).
Each expected number is derived by hand beside it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from llmpar.cost import activations_ends as AE
from llmpar.cost import memory as M
from llmpar.cost.runtime import communicators, fits_with_margin, verdict_code, verdict_name
from llmpar.parallel import Parallel, Settings
from llmpar.specs import load_hardware, load_model

HW = load_hardware("h100-sxm")
LLAMA7 = load_model("llama-2-7b")
LLAMA70 = load_model("llama-3-70b")
GIB = 2**30


def _layer(model, stack, par):
    c = M.aggregate(M.stack_activation_terms(model, False, Settings(stack=stack, attention="flash")),
                    M.checkpoint_term(model))
    return M.layer_activation_bytes(c, par)[0]


def test_eager_llama7b_layer_by_hand():
    # Llama-2-7B: h = 4096, f = 11008, a = kv = 32, d = 128; b = 1, s = 4096, t = 1, flash attention.
    # fused (Korthikanti-style) per token: norm1 in 2h, QKV in 2h, Q K V 6h, lse 4a, out 2h,
    #   norm2 in 2h, MLP in 2h, gate+up 4f, SwiGLU out 2f = 16h + 6f + 4a = 65,536 + 66,048 + 128 = 131,712
    # eager (HF LlamaDecoderLayer): each RMSNorm input 2h -> fp32 upcast 4h + rstd 4 + normalised 2h
    #   (+4h + 4 per norm, two norms: +32,776), SwiGLU + silu(gate) 2f (+22,016) = 186,504 B/token
    par = Parallel(seq=4096)
    assert _layer(LLAMA7, "megatron-core", par) == 131_712 * 4096
    assert _layer(LLAMA7, "deepspeed", par) == 186_504 * 4096
    # nanotron: fused Triton RMSNorm, eager SwiGLU: 131,712 + 22,016 = 153,728 B/token
    assert _layer(LLAMA7, "nanotron", par) == 153_728 * 4096


def test_logits_and_their_gradient_on_the_last_stage():
    # Llama-3 V = 128,256, s = 4096, b = 1, tp = 1:
    # megatron-2022: fp32 logits once, 4·s·V (Korthikanti §4.3);
    # deepspeed (torch cross_entropy on fp32 logits): + their fp32 gradient, 8·s·V in all;
    # megatron-core: Transformer Engine's parallel_cross_entropy saves the 16-bit logits and writes
    # the gradient into them (transformer_engine/pytorch/cross_entropy.py), 2·s·V.
    # (The V-wide terms only: the final norm's and the head input's terms differ by saved set.)
    par = Parallel(seq=4096)
    vocab = {}
    for st in ("megatron-2022", "deepspeed", "megatron-core"):
        terms = AE.last_stage_extra_terms(LLAMA70, Settings(stack=st).stack.memory)
        vocab[st] = sum(M.term_bytes(x, par) for x in terms if "logits" in x.name)
    assert vocab["megatron-2022"] == 4 * 4096 * 128_256
    assert vocab["deepspeed"] == 8 * 4096 * 128_256
    assert vocab["megatron-core"] == 2 * 4096 * 128_256


@pytest.mark.parametrize("kw,n", [
    (dict(tp=1, pp=1, dp=1, cp=1, ep=1), 0),          # one GPU: no group at all
    (dict(tp=8, pp=1, dp=1, cp=1, ep=1), 2),          # tp + world
    (dict(tp=8, pp=2, dp=4, cp=1, ep=1), 5),          # tp, pp, dp, world + embedding group
    (dict(tp=4, pp=4, dp=8, cp=2, ep=8), 7),          # tp, pp, dp, cp, ep, world, embedding
])
def test_communicators(kw, n):
    assert communicators(**kw) == n
    # middle stages are not in the embedding group
    if kw["pp"] > 1:
        assert communicators(**kw, embedding=False) == n - 1


def test_verdict_thresholds():
    cap, u = 100.0, 0.05
    # FITS when total·1.05 < 100 (total < 95.24); DOES NOT FIT when total·0.95 > 100 (total > 105.26)
    assert verdict_name(verdict_code(95.0, cap, u)) == "fits"
    assert verdict_name(verdict_code(96.0, cap, u)) == "tight"
    assert verdict_name(verdict_code(105.0, cap, u)) == "tight"
    assert verdict_name(verdict_code(106.0, cap, u)) == "does_not_fit"
    assert list(verdict_name(verdict_code(np.array([95.0, 100.0, 106.0]), cap, u))) == ["fits", "tight", "does_not_fit"]
    assert fits_with_margin(95.0, cap, 0.05) and not fits_with_margin(96.0, cap, 0.05) and fits_with_margin(100.0, cap)


def test_megatron_2022_has_no_runtime():
    r = M.memory_per_gpu(LLAMA70, HW, Parallel(tp=8, pp=2, dp=4, seq=4096, microbatches=8, sp=True),
                         Settings(stack="megatron-2022"))
    assert r["runtime_bytes"] == 0 and r["reserved_bytes"] == r["allocated_bytes"] == r["total_bytes"]


def test_ddp_bucket_copy_nanotron():
    # nanotron (torch DDP, no gradient_as_bucket_view): + 2 B x params on this GPU when dp > 1, none at dp = 1;
    # on top, its fitted optimizer-step memory: X B per parameter this GPU optimises (all of them at ZeRO 0)
    s = Settings(stack="nanotron")
    x = s.stack.memory.optimizer_step_bytes_per_param
    assert x > 0
    one = M.memory_per_gpu(LLAMA7, HW, Parallel(seq=4096), s)
    two = M.memory_per_gpu(LLAMA7, HW, Parallel(dp=2, seq=4096), s)
    assert one["buffers_bytes"] == pytest.approx(x * one["params_per_gpu"], rel=1e-12)
    assert two["buffers_bytes"] == pytest.approx((2 + x) * two["params_per_gpu"], rel=1e-12)
    # ZeRO-1 over dp = 2 shards what each GPU optimises: the optimizer-step term halves
    z1 = M.memory_per_gpu(LLAMA7, HW, Parallel(dp=2, zero=1, seq=4096), s)
    assert z1["buffers_bytes"] == pytest.approx((2 + x / 2) * z1["params_per_gpu"], rel=1e-12)


@hsettings(max_examples=25, deadline=None, derandomize=True)
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]), dp=st.sampled_from([1, 2, 8]),
       b=st.integers(1, 4), stack=st.sampled_from(["megatron-core", "nanotron", "deepspeed", "megatron-2022", "torchtitan",
                                                  "torchtitan-compile"]))
def test_total_is_pool_plus_runtime_and_eager_ge_fused(tp, pp, dp, b, stack):
    par = Parallel(tp=tp, pp=pp, dp=dp, sp=tp > 1, micro_batch=b, microbatches=8, seq=4096)
    s = Settings(stack=stack)
    r = M.memory_per_gpu(LLAMA70, HW, par, s)
    oh = s.stack.memory.allocator_overhead
    assert r["total_bytes"] == pytest.approx(r["allocated_bytes"] * (1 + oh) + r["runtime_bytes"], rel=1e-12)
    assert r["fits"] == (r["margin_bytes"] >= 0)
    assert _layer(LLAMA70, "deepspeed", par) >= _layer(LLAMA70, "nanotron", par) >= _layer(LLAMA70, "megatron-core", par)


@pytest.mark.parametrize("stack", ["megatron-core", "megatron-2022", "nanotron", "torchtitan", "torchtitan-compile",
                                   "deepspeed"])
def test_explain_terms_add_up_to_the_components_for_every_stack(stack):
    # --explain lists every term with its formula; for each shipped stack (fused or eager saved
    # set, activation factor, backward working set, buckets) the activation terms must add up to
    # the activations the core counts, and all state + activation + buffer terms to the allocated
    # peak (a term missing from the explain layer -- the working set once was -- breaks this)
    from llmpar import api

    r = api.memory("llama-3-8b", stack=stack, explain=True, tp=2, pp=2, gpus=16, global_batch=64, zero=1)
    act = sum(t.bytes for t in r.terms if t.component == "activations")
    assert act == pytest.approx(r.memory["activations_bytes"], rel=1e-9)
    allocated = sum(t.bytes for t in r.terms if t.component in ("weights", "gradients", "optimizer", "activations",
                                                                "buffers"))
    assert allocated == pytest.approx(r.memory["allocated_bytes"], rel=1e-9)


def test_megatron_core_keeps_no_expert_outputs_for_the_routing_weights(tmp_path):
    # Megatron-Core's grouped experts scale the SwiGLU output by the routing weights
    # (experts.py: weighted_bias_swiglu_impl) and the combine unpermutes without probs, so no copy of
    # the experts' outputs is saved; a stack that applies the weights at the combine (as
    # DeepSeek-V3's inference code does: memory.moe_probs_in_activation false) keeps k 16-bit copies
    # of the hidden vector per token: Qwen3-30B-A3B (k = 8, h = 2048), b = 1, s = 4096, one MoE
    # layer: 2 x 8 x 2048 x 4096 = 134,217,728 B more.
    from llmpar.specs import load_model, load_stack

    combine = tmp_path / "combine.yaml"
    combine.write_text("name: combine\nextends: megatron-core\nmemory: {moe_probs_in_activation: false}\n")
    qwen = load_model("qwen3-30b-a3b")
    par = Parallel(seq=4096)
    total = {}
    for st in ("megatron-core", str(combine)):
        terms = M.stack_activation_terms(qwen, True, Settings(stack=load_stack(st)))
        total[st] = sum(M.term_bytes(x, par) for x in terms)
        assert (M.EXPERT_OUTPUTS_TERM in {t.name for t in terms}) == (st == str(combine))
    assert total[str(combine)] - total["megatron-core"] == 134_217_728
