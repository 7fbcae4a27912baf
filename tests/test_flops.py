"""FLOPs: per-layer components by hand, GEMM lists vs totals, the papers' closed forms, and
Korthikanti 2022 Table 5's MFU/HFU reproduced from its iteration times."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from conftest import SHARED
from llmpar.cost import flops as fl
from llmpar.cost import flops_papers as fp
from llmpar.cost import params as pa
from llmpar.parallel import Parallel
from llmpar.specs.model import ModelSpec
from llmpar.specs.registry import load_model

NONE, SEL, FULL = 0, 1, 2


def tiny(**kw) -> ModelSpec:
    base = dict(name="tiny", layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn_hidden=128,
                ffn_type="swiglu", vocab=1000, max_seq=64)
    return ModelSpec(**{**base, **kw})


# --- per-layer components, by hand -----------------------------------------------------------

def test_tiny_gqa_swiglu_layer_by_hand():
    m = tiny()
    f = fl.layer_flops(m, 2, 8)          # b = 2, s = 8 -> T = 16 tokens
    # qkv: 2·T·h·(a + 2kv)·d = 2·16·64·(4 + 4)·16 = 262,144
    assert f["qkv"] == 262_144
    # scores and context: 2·b·a·s²·d = 2·2·4·64·16 = 16,384 each (causal counted in full)
    assert f["attn_scores"] == 16_384 and f["attn_context"] == 16_384
    # output projection: 2·T·(a·d)·h = 2·16·64·64 = 131,072
    assert f["attn_out"] == 131_072
    # SwiGLU, 3 matrices: 2·T·3·h·f = 2·16·3·64·128 = 786,432
    assert f["mlp"] == 786_432
    assert fl.layer_forward_flops(m, 2, 8) == 262_144 + 2 * 16_384 + 131_072 + 786_432
    # causal flash kernel: half of the s² work
    assert fl.layer_flops(m, 2, 8, causal=fl.CAUSAL_FLASH)["attn_scores"] == 8_192
    # LM head: 2·b·s·h·V = 2·2·8·64·1000 = 2,048,000
    assert fl.head_flops(m, 2, 8) == 2_048_000
    # whole model, one sequence of 8: 2 layers at b = 1 (half of the above) + head at b = 1
    assert fl.forward_flops_per_sequence(m, 8) == 2 * (1_212_416 / 2) + 1_024_000


def test_tiny_gelu_mha_layer_by_hand():
    m = tiny(kv_heads=None, head_dim=None, ffn_type="gelu", ffn_hidden=256)
    f = fl.layer_flops(m, 1, 4)          # T = 4
    # MHA: qkv 2·4·64·(3·64) = 98,304 (= 6·T·h²); GeLU 2 matrices: 2·4·2·64·256 = 262,144 (= 16·T·h²)
    assert f["qkv"] == 6 * 4 * 64**2 == 98_304
    assert f["mlp"] == 16 * 4 * 64**2 == 262_144
    # the GPT identity: per token 24h² + 4·s·h, here 4·(24·4096 + 4·4·64) = 397,312
    assert fl.layer_forward_flops(m, 1, 4) == 4 * (24 * 64**2 + 4 * 4 * 64) == 397_312


def test_tiny_moe_layer_by_hand():
    m = tiny(moe=dict(experts=8, top_k=2, shared_experts=1, expert_ffn_hidden=32, dense_layers=[0]))
    f = fl.mlp_flops(m, 1, 10)           # T = 10
    # router 2·T·h·E = 2·10·64·8 = 10,240; routed 2·T·k·3·h·f_e = 2·10·2·3·64·32 = 245,760;
    # shared 2·T·1·3·64·32 = 122,880
    assert f == {"router": 10_240, "experts": 245_760, "shared_experts": 122_880}
    # the dense layer 0 keeps the dense FFN: 2·10·3·64·128 = 491,520
    assert fl.mlp_flops(m, 1, 10, moe=False) == {"mlp": 491_520}
    # one sequence: layer 0 dense + layer 1 MoE + head
    att = sum(fl.attention_flops(m, 1, 10).values())
    assert fl.forward_flops_per_sequence(m, 10) == pytest.approx(
        2 * att + 491_520 + 10_240 + 245_760 + 122_880 + 2 * 10 * 64 * 1000)


def test_deepseek_v3_mla_per_token():
    m = load_model("deepseek-v3")
    f = fl.attention_flops(m, 1, 1)
    # DeepSeek-V3 config: h 7168, 128 heads, r_q 1536, r_kv 512, nope 128, rope 64, v 128.
    assert f["q_down"] == 2 * 7168 * 1536
    assert f["q_up"] == 2 * 1536 * 128 * 192
    assert f["kv_down"] == 2 * 7168 * (512 + 64)
    assert f["kv_up"] == 2 * 512 * 128 * (128 + 128)
    assert f["attn_out"] == 2 * 128 * 128 * 7168
    # s = 1: scores 2·a·d_qk = 2·128·192, context 2·128·128
    assert (f["attn_scores"], f["attn_context"]) == (2 * 128 * 192, 2 * 128 * 128)


def test_matmul_params_match_exact_parameter_counts():
    # N of 6N, derived from the FLOPs formulas, equals params.py's independent count minus what
    # is not a matmul: embedding lookup, norms, biases, MLA's inner norms, router bias; plus the
    # LM head when tied. Llama-2-7B: 6,738,415,616 − 131,072,000 − 266,240 = 6,607,077,376.
    assert fp.matmul_params_per_token(load_model("llama-2-7b")) == 6_607_077_376
    # GPT-3 175B: biases 9h per layer (3h QKV, h proj, 4h + h FFN), tied head V·h added back.
    g = load_model("gpt3-175b")
    b = pa.breakdown(g)
    h = g.hidden
    assert fp.matmul_params_per_token(g) == (b["total"] - b["embedding"] - b["norms"] - 96 * 9 * h
                                              + g.vocab * h)
    # DeepSeek-V3 (activated): active − embedding − block/final norms − MLA norms (1536 + 512 per
    # layer) − router bias (256 per MoE layer, 58 layers) = 36,624,596,992.
    d = load_model("deepseek-v3")
    bd = pa.breakdown(d)
    assert fp.matmul_params_per_token(d) == (bd["active"] - bd["embedding"] - bd["norms"]
                                              - 61 * (1536 + 512) - 58 * 256) == 36_624_596_992


def test_palm_formula_equals_component_count():
    # PaLM App. B: 6N + 12·L·h·s per token (MHA/GQA with a·d = h) = 3 x forward / s.
    for name, s in (("llama-2-7b", 4096), ("mixtral-8x7b", 4096), ("deepseek-v3", 4096)):
        m = load_model(name)
        assert fp.palm_flops_per_token(m, s) == pytest.approx(3 * fl.forward_flops_per_sequence(m, s) / s, rel=1e-12)
    m = load_model("llama-2-7b")
    assert fp.palm_flops_per_token(m, 4096) == pytest.approx(6 * 6_607_077_376 + 12 * 32 * 4096 * 4096)


def test_causal_block_fraction():
    # n = 8192/128 = 64 blocks per side: (64 + 1)/(2·64) = 65/128
    assert fl.causal_block_fraction(8192) == pytest.approx(65 / 128)
    np.testing.assert_allclose(fl.causal_block_fraction(np.array([128, 2048])), [1.0, 17 / 32])


# --- GEMM lists --------------------------------------------------------------------------------

def test_layer_gemms_llama70b_tp8_shapes():
    m = load_model("llama-3-70b")
    g = {name: (mm, n, k, c) for name, mm, n, k, c in fl.layer_gemms(m, 1, 8192, tp=8, cp=2)}
    # T = 8192/2 = 4096 tokens; QKV n = (64 + 2·8)·128/8 = 1280
    assert g["qkv"] == (4096, 1280, 8192, 1)
    # per (sequence, local head): 64/8 = 8 heads, causal 0.5 -> count 4; queries 4096, keys 8192
    assert g["attn_scores"] == (4096, 8192, 128, 4.0)
    assert g["attn_context"] == (4096, 128, 8192, 4.0)
    assert g["attn_out"] == (4096, 8192, 1024, 1)
    # SwiGLU fused gate+up: n = 2·28672/8 = 7168; down k = 3584
    assert g["mlp_up"] == (4096, 7168, 8192, 1)
    assert g["mlp_down"] == (4096, 8192, 3584, 1)


@pytest.mark.parametrize("name", ["llama-3-70b", "megatron-gpt-175b", "mixtral-8x7b"])
def test_gemms_times_gpus_equal_layer_flops(name):
    # Summed over the tp·cp GPUs (and the ep experts' share), the GEMMs are the layer's FLOPs.
    m = load_model(name)
    for tp, cp, ep, causal in ((1, 1, 1, 1.0), (8, 2, 1, 0.5), (4, 1, 8, 0.5)):
        if m.moe is None and ep > 1:
            continue
        per_gpu = fl.gemm_flops(fl.layer_gemms(m, 2, 4096, tp, cp, ep=ep, causal=causal))
        assert per_gpu * tp * cp == pytest.approx(fl.layer_forward_flops(m, 2, 4096, causal=causal), rel=1e-12)


def test_mla_down_projections_replicated_over_tp():
    m = load_model("deepseek-v3")
    tp, T = 4, 4096
    per_gpu = fl.gemm_flops(fl.layer_gemms(m, 1, T, tp, ep=8))
    whole = fl.layer_forward_flops(m, 1, T, causal=0.5)
    down = 2 * T * 7168 * 1536 + 2 * T * 7168 * 576
    # each TP rank repeats q_down and kv_down: tp·per_gpu = whole + (tp − 1)·down
    assert per_gpu * tp == pytest.approx(whole + (tp - 1) * down, rel=1e-12)


def test_moe_expert_gemm_balanced_routing():
    m = load_model("mixtral-8x7b")
    g = {name: (mm, n, k, c) for name, mm, n, k, c in fl.layer_gemms(m, 1, 4096, tp=2, ep=4)}
    # 4 EP ranks x 4096 tokens x top-2 over 8 experts = 4096 tokens per expert; 8/4 = 2 local experts
    assert g["expert_up"] == (4096, 2 * 14336 / 2, 4096, 2)
    assert g["expert_down"] == (4096, 4096, 14336 / 2, 2)
    assert g["router"] == (2048, 8, 4096, 1)


def test_gemms_array_polymorphic():
    m = load_model("llama-3-8b")
    tp = np.array([1, 2, 4, 8])
    b = np.array([1, 2, 1, 4])
    got = fl.gemm_flops(fl.layer_gemms(m, b, 8192, tp))
    for i in range(4):
        assert got[i] == pytest.approx(fl.gemm_flops(fl.layer_gemms(m, int(b[i]), 8192, int(tp[i]))))


def test_recompute_gemms():
    m = load_model("llama-3-8b")
    g = fl.layer_gemms(m, 1, 4096, 2)
    sel = fl.recompute_gemms(g, SEL)
    # selective re-runs the attention core only: 2·b·a/tp·causal·s·s·d·2 = 2·16·0.5·4096²·128·2
    assert fl.gemm_flops(sel) == pytest.approx(2 * 16 * 0.5 * 4096**2 * 128 * 2)
    assert fl.gemm_flops(fl.recompute_gemms(g, FULL)) == pytest.approx(fl.gemm_flops(g))
    assert fl.gemm_flops(fl.recompute_gemms(g, NONE)) == 0
    arr = fl.gemm_flops(fl.recompute_gemms(g, np.array([NONE, SEL, FULL])))
    np.testing.assert_allclose(arr, [0, fl.gemm_flops(sel), fl.gemm_flops(g)])


# --- per step: the papers' formulas ------------------------------------------------------------

def test_narayanan_eq3_gpt3_175b_full_recompute():
    # Narayanan 2021 eq. 3, GPT-3 175B, B = 1536, s = 2048: 96·B·s·L·h²(1 + s/6h + V/16Lh).
    # Our count (matmuls only, 3 forwards + 1 recompute forward of the layers, head 3x) equals
    # it exactly: eq. 3 and the component count both leave out biases, LayerNorm, GeLU, softmax
    # and dropout (O(s·h) per token per layer, < 0.1 % here; docs/flops.md).
    m = load_model("gpt3-175b")
    par = Parallel(tp=8, pp=16, dp=12, micro_batch=1, microbatches=128, seq=2048, recompute=FULL)
    assert par.global_batch == 1536
    eq3 = fp.narayanan_eq3_flops(1536, 2048, 96, 12288, m.vocab)
    assert fl.hardware_flops_per_step(m, par) == pytest.approx(eq3, rel=1e-12)
    # 96·1536·2048·96·12288² = 4.3775e18; x (1 + 2048/73728 + 50257/(16·96·12288))
    # = x (1 + 0.027778 + 0.002663) = x 1.030440 -> 4.5108e18 FLOPs per iteration
    assert eq3 == pytest.approx(4.5108e18, rel=1e-4)
    # model FLOPs are eq. 7 (3 forwards), 3/4 of the layer part plus the head
    assert fl.model_flops_per_step(m, par) == pytest.approx(
        fp.korthikanti_eq7_flops(1536, 2048, 96, 12288, m.vocab), rel=1e-12)


def test_selective_recompute_vs_eq8():
    # Selective recompute re-runs the attention core: 4·B·s²·L·h per step (scores + context);
    # Korthikanti eq. 8 − eq. 7 = 72·B·s·L·h²·s/(6h) = 12·B·s²·L·h, three times as much.
    m = load_model("megatron-gpt-22b")
    par = Parallel(tp=8, micro_batch=4, microbatches=1, seq=2048, recompute=SEL)
    B, s, L, h, V = 4, 2048, 48, 6144, 51200
    extra = fl.hardware_flops_per_step(m, par) - fl.model_flops_per_step(m, par)
    assert extra == pytest.approx(4 * B * s**2 * L * h, rel=1e-12)
    assert fp.korthikanti_eq8_flops(B, s, L, h, V) - fp.korthikanti_eq7_flops(B, s, L, h, V) == pytest.approx(3 * extra)


def test_step_flops_array_polymorphic():
    m = load_model("llama-3-70b")
    par = Parallel(tp=np.array([8, 4, 8]), pp=np.array([4, 8, 4]), dp=np.array([2, 2, 4]),
                   micro_batch=np.array([1, 2, 1]), microbatches=np.array([8, 4, 4]), seq=8192,
                   recompute=np.array([NONE, SEL, FULL]))
    mf = fl.model_flops_per_step(m, par)
    hf = fl.hardware_flops_per_step(m, par)
    assert mf.shape == hf.shape == (3,)
    # all three have B = 16 sequences -> same model FLOPs
    np.testing.assert_allclose(mf, mf[0])
    for i in range(3):
        p = par.take(i)
        assert mf[i] == pytest.approx(fl.model_flops_per_step(m, p))
        assert hf[i] == pytest.approx(fl.hardware_flops_per_step(m, p))
    assert hf[0] == mf[0] and hf[1] > hf[0] and hf[2] > hf[1]
    # full recompute adds every layer's forward: 16 sequences x (forward − head)
    assert hf[2] - mf[2] == pytest.approx(16 * (fl.forward_flops_per_sequence(m, 8192) - fl.head_flops(m, 1, 8192)))


def _korthikanti_rows():
    data = yaml.safe_load((SHARED / "validation" / "public.yaml").read_text())
    configs = {r["model"].split()[0]: r for r in data["korthikanti2022_table3_configs"]["rows"]}
    return [(configs[r["model"]], r) for r in data["korthikanti2022_table5_end_to_end"]["rows"]]


MODELS = {"22B": "megatron-gpt-22b", "175B": "megatron-gpt-175b", "530B": "megatron-gpt-530b", "1T": "megatron-gpt-1t"}


@pytest.mark.skipif(not (SHARED / "validation" / "public.yaml").exists(), reason="shared validation data absent")
@pytest.mark.parametrize("row", range(4))
def test_korthikanti_table5_mfu_hfu(row):
    # Korthikanti 2022 Table 5 "present work" (SP + selective recompute): MFU = eq. 7 FLOPs /
    # (time · GPUs · 312 TFLOP/s), HFU with eq. 8. E.g. 175B: B = 64, 64 GPUs, 13.75 s ->
    # 72·64·2048·96·12288²·(1 + 2048/73728 + 51200/1179648) / (13.75·64·312e12) = 51.39 % (paper 51.4).
    # Tolerance: the paper prints times to 0.01 s and percentages to 0.1: the published MFU must
    # lie within the range the rounded time allows, ± 0.05 points.
    cfg, pub = _korthikanti_rows()[row]
    m = load_model(MODELS[pub["model"]])
    assert (m.layers, m.hidden, m.heads) == (cfg["num_layers"], cfg["hidden_size"], cfg["attention_heads"])
    par = Parallel(tp=cfg["tensor_parallel"], pp=cfg["pipeline_parallel"], dp=1,
                   micro_batch=cfg["micro_batch_size"],
                   microbatches=cfg["global_batch_size"] // cfg["micro_batch_size"], seq=2048, recompute=SEL)
    gpus = cfg["num_gpus"]
    assert par.gpus == gpus
    B, L, h, V = cfg["global_batch_size"], m.layers, m.hidden, m.vocab
    model_flops = fl.model_flops_per_step(m, par)
    assert model_flops == pytest.approx(fp.korthikanti_eq7_flops(B, 2048, L, h, V), rel=1e-12)
    t = pub["iteration_time_s_present_work"]
    for flops, published in ((model_flops, pub["mfu_pct_present_work"]),
                             (fp.korthikanti_eq8_flops(B, 2048, L, h, V), pub["hfu_pct_present_work"])):
        hi = 100 * fl.flops_utilization(flops, t - 0.005, gpus, 312e12)
        lo = 100 * fl.flops_utilization(flops, t + 0.005, gpus, 312e12)
        assert lo - 0.05 <= published <= hi + 0.05, (pub["model"], lo, hi, published)


def test_sliding_window_layers_count_their_band():
    # gpt-oss-120b: every other layer attends to a 128-token causal band. At s = 4096 the band holds
    # 128*4096 - 128*127/2 = 516,160 of the 4096^2 = 16,777,216 pairs (0.030766); a windowed layer
    # counts causal x band / 0.5, a dense one causal: averaged over the layers,
    # causal convention 0.5*0.5 + 0.5*0.030766 = 0.265383, full convention twice that
    attention_fraction = fl.attention_fraction
    m = load_model("gpt-oss-120b")
    band = (128 * 4096 - 128 * 127 / 2) / 4096**2
    assert attention_fraction(m, 4096, 0.5) == pytest.approx(0.5 * 0.5 + 0.5 * band, rel=1e-12)
    assert attention_fraction(m, 4096, 1.0) == pytest.approx(2 * attention_fraction(m, 4096, 0.5), rel=1e-12)
    assert attention_fraction(m, 128, 0.5) == 0.5                      # s <= w: the band is the triangle
    assert attention_fraction(load_model("llama-3-8b"), 4096, 0.5) == 0.5   # no window: unchanged
    # the attention core FLOPs of one layer follow: 2 x 2*b*a*s^2*d*fraction (scores + context)
    f = fl.attention_flops(m, 1, 4096, 0.5)
    core = f["attn_scores"] + f["attn_context"]
    assert core == pytest.approx(2 * 2.0 * 64 * 4096**2 * 64 * attention_fraction(m, 4096, 0.5), rel=1e-12)
