"""Megatron-Core recompute modules (--recompute-modules; stack memory.selective_recompute =
modules) and the all-to-alls that recompute repeats, against numbers derived by hand."""

from __future__ import annotations

import pytest

from llmpar import api
from llmpar.cost import activations as A
from llmpar.cost import compute, flops
from llmpar.cost.step import step_time
from llmpar.parallel import Parallel, Settings
from llmpar.specs import load_hardware, load_model, load_stack

PAR = Parallel(tp=1, pp=1, dp=8, micro_batch=1, seq=8192, microbatches=4, recompute=1)


def _layer_bytes(model, settings, par=PAR, moe=False):
    kept = [t for t in A.stack_activation_terms(model, moe, settings) if t.selective and not t.only_tp]
    return sum(float(A.term_bytes(t, par)) for t in kept)


def test_core_attn_alone_is_the_attention_core_policy():
    # Megatron-Core's default module list, ["core_attn"], keeps what Korthikanti's selective keeps
    m = load_model("llama-3-8b")
    assert _layer_bytes(m, Settings(recompute_modules=("core_attn",))) == pytest.approx(_layer_bytes(m, Settings()))


def test_layernorm_drops_the_two_norm_outputs_by_hand():
    # Llama-3-8B, bf16, tp 1, b = 1, s = 8192: the two norm outputs (the QKV projection's and the
    # MLP's input) are 2 x 2 B x 4096 per token = 16,384 B, x 8192 tokens = 134,217,728 B per layer
    m = load_model("llama-3-8b")
    base = _layer_bytes(m, Settings(recompute_modules=("core_attn",)))
    both = _layer_bytes(m, Settings(recompute_modules=("core_attn", "layernorm")))
    assert base - both == pytest.approx(2 * 2 * 4096 * 8192) == pytest.approx(134_217_728)


def test_mla_up_proj_and_moe_act_on_deepseek_by_hand():
    # DeepSeek-V3 MoE layer at b = 1, s = 4096, tp 1: mla_up_proj drops Q, K (128 heads x 192) and
    # V (128 x 128): 2 B x (24576 + 24576 + 16384) = 131,072 B per token; moe_act drops the experts'
    # SwiGLU output, 8 copies x 2048 x 2 B = 32,768 B per token (bf16)
    m = load_model("deepseek-v3")
    par = Parallel(tp=1, pp=1, dp=64, ep=64, micro_batch=1, seq=4096, microbatches=1, recompute=1)
    ref = _layer_bytes(m, Settings(recompute_modules=("core_attn",)), par, moe=True)
    up = _layer_bytes(m, Settings(recompute_modules=("core_attn", "mla_up_proj")), par, moe=True)
    act = _layer_bytes(m, Settings(recompute_modules=("core_attn", "moe_act")), par, moe=True)
    assert ref - up == pytest.approx(131_072 * 4096)
    assert ref - act == pytest.approx(32_768 * 4096)


def test_module_gemms():
    # which GEMMs each module re-runs (flops.MODULE_GEMMS), only those the layer kind has
    ds, ll = load_model("deepseek-v3"), load_model("llama-3-8b")
    assert flops.selective_fractions(ds, True, ("mla_up_proj",)) == {"q_up": 1.0, "kv_up": 1.0}
    assert flops.selective_fractions(ll, False, ("mlp",)) == {"mlp_up": 1.0, "mlp_down": 1.0}
    assert flops.selective_fractions(ll, False, ("moe",)) == {}
    assert set(flops.selective_fractions(ds, True, ("moe",))) == {"router", "expert_up", "expert_down",
                                                                  "shared_up", "shared_down"}


def test_mlp_recompute_time_is_its_gemms_and_the_rebuilt_tensors():
    # Llama-3-8B with --recompute-modules mlp: per layer the MLP's two GEMMs again, plus the gate/up
    # and SwiGLU outputs it dropped rebuilt through HBM at 2 x their bytes
    m, hw = load_model("llama-3-8b"), load_hardware("h100-sxm")
    st = Settings(recompute_modules=("mlp",))
    r = step_time(m, hw, PAR, st, with_memory=False)
    gemms = [g for g in flops.layer_gemms(m, 1, 8192, 1, 1, moe=False) if g[0] in ("mlp_up", "mlp_down")]
    t_g = compute.linear_gemms_time(hw, st.stack, "bf16", gemms)[0]
    dropped = sum(float(A.term_bytes(t, PAR)) for t in A.stack_activation_terms(m, False, st) if t.module == "mlp")
    assert dropped == pytest.approx((3 * 14336 * 2) * 8192)        # gate+up (2f) and SwiGLU out (f), 2 B
    expect = float(t_g) + float(compute.memory_bound_time(hw, 2 * dropped))
    assert float(r["parts"]["layer_recompute_s"]) == pytest.approx(expect, rel=1e-9)


def test_full_recompute_repeats_the_all_to_alls():
    # a MoE layer's forward re-run in backward sends its dispatch and combine again: with nothing
    # hidden (1F1B, overlap.ep 0) forward and backward each move 2 transfers, so full recompute of
    # every layer adds the forward's: 1.5 x the exposed all-to-all time per layer
    m, hw = load_model("mixtral-8x7b"), load_hardware("h100-sxm")
    st = Settings(stack=load_stack("megatron-core"))
    base = dict(tp=1, pp=1, dp=16, ep=8, micro_batch=1, seq=4096, microbatches=2)
    none = step_time(m, hw, Parallel(**base, recompute=0), st, with_memory=False)["parts"]["ep_exposed_s"]
    full = step_time(m, hw, Parallel(**base, recompute=2), st, with_memory=False)["parts"]["ep_exposed_s"]
    assert float(full) == pytest.approx(1.5 * float(none), rel=1e-9)


def test_cli_and_runs_rules(cli, tmp_path):
    res = cli("memory", "llama-3-8b", "--recompute", "full", "--recompute-modules", "mlp")
    assert res.code == 2 and "--recompute selective" in res.err and len(res.err.strip().splitlines()) == 1
    res = cli("memory", "llama-3-8b", "--recompute", "selective", "--recompute-modules", "mlp,attn")
    assert res.code == 2 and "attn" in res.err and "Traceback" not in res.err
    ok = api.memory("llama-3-8b", recompute="selective", recompute_modules="core_attn,mlp")
    assert ok.settings.recompute_modules == ("core_attn", "mlp")
    from llmpar.calibrate.runs_io import read_runs

    f = tmp_path / "r.yaml"
    f.write_text("runs:\n  - {model: llama-3-8b, hardware: h100-sxm, gpus: 8, seq: 8192, global_batch: 8, "
                 "micro_batch: 1, recompute_modules: [core_attn, mlp], tokens_per_s_per_gpu: 9000}\n")
    assert read_runs([f]).runs[0].layout["recompute_modules"] == ("core_attn", "mlp")
    g = tmp_path / "bad.yaml"
    g.write_text("runs:\n  - {model: llama-3-8b, hardware: h100-sxm, gpus: 8, seq: 8192, global_batch: 8, "
                 "micro_batch: 1, recompute: full, recompute_modules: [mlp], tokens_per_s_per_gpu: 9000}\n")
    res = cli("calibrate", "runs", str(g), "--check")
    assert res.code == 2 and "recompute: selective" in res.err


def test_deepseek_caches_the_moe_swiglu_input_in_fp8_by_hand(tmp_path):
    # DeepSeek-V3 §3.3.3: the MoE SwiGLU's inputs are cached in FP8 with 1x128-tile scaling. Per
    # token the routed experts' gate and up outputs are 2 x k x f_e = 2 x 8 x 2048 = 32,768
    # elements: 2 B each under megatron-core (65,536 B), 1 + 4/128 = 1.03125 B each under hai-llm
    # (33,792 B); at b = 1, s = 4096, tp = 1 that is 268,435,456 vs 138,412,032 B per MoE layer.
    # Only under --dtype fp8; every other term is the same. Both apply the routing weights in the
    # activation (memory.moe_probs_in_activation true), so neither keeps the experts' outputs; a
    # stack that applies them at the combine keeps them for the weights' gradient:
    # 2 x k x h = 2 x 8 x 7168 B per token, 469,762,048 B per MoE layer.
    m = load_model("deepseek-v3")
    par = Parallel(tp=1, pp=1, dp=1, micro_batch=1, seq=4096)
    name = "experts gate and up outputs (SwiGLU input)"

    def terms(stack, dtype):
        st = Settings(dtype=dtype, stack=load_stack(stack))
        return {t.name: float(A.term_bytes(t, par)) for t in A.stack_activation_terms(m, True, st)}

    mc, hai = terms("megatron-core", "fp8"), terms("hai-llm", "fp8")
    assert mc[name] == 268_435_456 and hai[name] == 138_412_032
    assert A.EXPERT_OUTPUTS_TERM not in mc and A.EXPERT_OUTPUTS_TERM not in hai
    assert {k: v for k, v in mc.items() if k != name} == {k: v for k, v in hai.items() if k != name}
    assert terms("hai-llm", "bf16")[name] == 268_435_456
    combine = tmp_path / "combine.yaml"
    combine.write_text("name: combine\nextends: hai-llm\nmemory: {moe_probs_in_activation: false}\n")
    kept = terms(str(combine), "fp8")
    assert kept.pop(A.EXPERT_OUTPUTS_TERM) == 469_762_048 and kept == hai
