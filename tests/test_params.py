"""Exact parameter counts (llmpar.cost.params) against published totals and hand derivations.

Notation: L layers, h hidden, a heads, kv KV heads, d head dim, f FFN size, V vocab, s positions.
"""

import pytest

from llmpar.cost import params as P
from llmpar.specs import load_model
from llmpar.specs.model import ModelSpec
from llmpar.specs.registry import shipped_names


# --------------------------------------------------------------------------- published totals

@pytest.mark.parametrize(
    "name,expected",
    [
        # Llama-2-7B, HF model card / safetensors 6,738,415,616:
        # 32*(4*4096^2 + 3*4096*11008 + 2*4096) + 2*32000*4096 + 4096
        ("llama-2-7b", 6_738_415_616),
        # Llama-2-13B (HF safetensors 13,015,864,320):
        # 40*(4*5120^2 + 3*5120*13824 + 2*5120) + 2*32000*5120 + 5120
        ("llama-2-13b", 13_015_864_320),
        # Llama-2-70B (HF safetensors 68,976,648,192), GQA 8 KV heads of 128:
        # 80*(2*8192^2 + 2*8192*1024 + 3*8192*28672 + 2*8192) + 2*32000*8192 + 8192
        ("llama-2-70b", 68_976_648_192),
        # Llama-3-8B 8,030,261,248 (HF): 32*(2*4096^2 + 2*4096*1024 + 3*4096*14336 + 2*4096)
        #   + 2*128256*4096 + 4096
        ("llama-3-8b", 8_030_261_248),
        # Llama-3-70B 70,553,706,496 (HF): 80*(2*8192^2 + 2*8192*1024 + 3*8192*28672 + 2*8192)
        #   + 2*128256*8192 + 8192
        ("llama-3-70b", 70_553_706_496),
        # Llama-3.1-405B 405,853,388,800 (HF): 126*(2*16384^2 + 2*16384*1024 + 3*16384*53248 + 2*16384)
        #   = 126 * 3,187,703,808 = 401,650,679,808; + 2*128256*16384 (4,202,692,608) + 16384
        ("llama-3.1-405b", 405_853_388_800),
        # Mixtral-8x7B 46,702,792,704 (HF): per layer attention 2*4096^2 + 2*4096*1024 = 41,943,040,
        #   8 experts * 3*4096*14336 = 1,409,286,144, router 4096*8 = 32,768, norms 2*4096:
        #   32 * 1,451,270,144 = 46,440,644,608; + 2*32000*4096 + 4096
        ("mixtral-8x7b", 46_702_792_704),
        # Qwen3-30B-A3B (Qwen3 report: 30.5B total): per layer attention 2048*4096 (q) + 2*2048*512
        #   (k, v: 4 KV heads of 128) + 4096*2048 (o) = 18,874,368, 128 experts * 3*2048*768 =
        #   603,979,776, router 2048*128 = 262,144, norms 2*2048: 48 * 623,120,384 = 29,909,778,432;
        #   + 2*151936*2048 (untied) + 2048 = 30,532,110,336 (HF's 30,532,122,624 adds QK-norm, 48*2*128)
        ("qwen3-30b-a3b", 30_532_110_336),
        # Qwen3-32B (Qwen3 report: 32.8B): per layer q 5120*8192, k and v 2*5120*1024, o 8192*5120
        #   = 94,371,840, SwiGLU 3*5120*25600 = 393,216,000, norms 2*5120: 64 * 487,598,080 =
        #   31,206,277,120; + 2*151936*5120 (untied) + 5120 = 32,762,106,880 (+ QK-norm 64*256 in HF)
        ("qwen3-32b", 32_762_106_880),
        # gpt-oss-120b (model card Table 1: 116.83B): per layer attention q 2880*4096 + 4096, k and v
        #   2*(2880*512 + 512), o 4096*2880 + 2880, 64 sinks = 26,550,144; 128 experts * (2880*5760 +
        #   5760 + 2880*2880 + 2880) = 3,186,155,520; router 2880*128 + 128; norms 2*2880:
        #   36 * 3,213,080,192 = 115,670,886,912; + 2*201088*2880 (untied) + 2880 = 116,829,156,672
        ("gpt-oss-120b", 116_829_156_672),
        # DeepSeek-V3 main model (no MTP module, no FP8 scale tensors): 671,026,419,200, the count of
        # the HF checkpoint's tensors for layers 0-60 + embed + head + norm (public header audits).
        # Derivation (attention 187,107,328 per layer, see test_mla_attention):
        #   dense layer  = 187,107,328 + 3*7168*18432 (396,361,728) + 2*7168            =   583,483,392
        #   MoE layer    = 187,107,328 + 257*3*7168*2048 (11,318,329,344) + 256*7168+256 + 2*7168
        #                = 11,507,286,272
        #   3*583,483,392 + 58*11,507,286,272 + 2*129280*7168 + 7168 = 671,026,419,200
        ("deepseek-v3", 671_026_419_200),
        # Qwen2.5-72B (model card: 72.7B): 80*(2*8192^2 + 2*8192*1024 + 8192+2*1024 (QKV bias)
        #   + 3*8192*29568 + 2*8192) + 2*152064*8192 + 8192 = 72,706,203,648
        ("qwen2.5-72b", 72_706_203_648),
        # GPT-3 175B (Brown 2020, "175.0B"): 96*(12*12288^2 + 13*12288) + (50257+2048)*12288 + 2*12288
        #   = 173,946,175,488 + 642,723,840 + 24,576 = 174,604,259,328 (~174.6B)
        ("gpt3-175b", 174_604_259_328),
        # Mistral 7B v0.3 ("7.25B"): 32*(2*4096^2 + 2*4096*1024 + 3*4096*14336 + 2*4096)
        #   + 2*32768*4096 + 4096 = 6,979,584,000 + 268,435,456 + 4,096 = 7,248,023,552
        ("mistral-7b", 7_248_023_552),
        # Mixtral 8x22B ("141B"): 56*(2*6144^2 + 2*6144*1024 + 8*3*6144*16384 + 6144*8 + 2*6144)
        #   + 2*32768*6144 + 6144 = 140,227,411,968 + 402,653,184 + 6,144 = 140,630,071,296
        ("mixtral-8x22b", 140_630_071_296),
        # Llama 3.2 1B ("1.24B"): 16*(2*2048^2 + 2*2048*512 + 3*2048*8192 + 2*2048) + 128256*2048 (tied)
        #   + 2048 = 973,144,064 + 262,668,288 + 2,048 = 1,235,814,400
        ("llama-3.2-1b", 1_235_814_400),
        # Llama 3.2 3B ("3.21B"): 28*(2*3072^2 + 2*3072*1024 + 3*3072*8192 + 2*3072) + 128256*3072 (tied)
        #   + 3072 = 2,818,744,320 + 394,002,432 + 3,072 = 3,212,749,824
        ("llama-3.2-3b", 3_212_749_824),
        # Qwen2.5 7B ("7.61B"): 28*(2*3584^2 + 2*3584*512 + 3584+2*512 (QKV bias) + 3*3584*18944 + 2*3584)
        #   + 2*152064*3584 + 3584 = 6,525,618,176 + 1,089,994,752 + 3,584 = 7,615,616,512
        ("qwen2.5-7b", 7_615_616_512),
        # DeepSeek-R1: the DeepSeek-V3 architecture (an alias of it), 671,026,419,200 as above
        ("deepseek-r1", 671_026_419_200),
        # Gemma 2 9B (checkpoint 9,241,705,984): 42*(3584*4096*2 + 2*3584*2048 + 3*3584*14336 + 4*3584)
        #   + 256000*3584 (tied) + 3584 = 8,324,198,400 + 917,504,000 + 3,584
        ("gemma-2-9b", 9_241_705_984),
        # Gemma 2 27B ("27.2B"): 46*(4608*4096*2 + 2*4608*2048 + 3*4608*36864 + 4*4608)
        #   + 256000*4608 (tied) + 4608 = 26,047,475,712 + 1,179,648,000 + 4,608 = 27,227,128,320
        ("gemma-2-27b", 27_227_128_320),
        # Llama 4 Scout text model (17B active; 109B with the vision encoder): 48*(2*5120^2 + 2*5120*1024
        #   + 16*3*5120*8192 (routed) + 3*5120*8192 (shared) + 5120*16 (router) + 2*5120)
        #   + 2*202048*5120 + 5120 = 105,700,884,480 + 2,068,971,520 + 5,120 = 107,769,861,120
        ("llama-4-scout", 107_769_861_120),
    ],
)
def test_published_totals(name, expected):
    assert P.total_params(load_model(name)) == expected


def test_gpt3_is_174_6b():
    # GPT-3 "175B" is 174.6B once counted exactly (Brown et al. 2020 Table 2.1 shapes)
    assert round(P.total_params(load_model("gpt3")) / 1e9, 1) == 174.6


def test_active_params_moe():
    # Mixtral: 13B active per the paper (Jiang et al. 2024 §1: "13B active parameters");
    # total minus 32 layers * (8-2) idle experts * 3*4096*14336 = 46,702,792,704 - 33,822,867,456
    assert P.active_params(load_model("mixtral-8x7b")) == 12_879_925_248
    # DeepSeek-V3: "37B activated" (arXiv:2412.19437 abstract):
    # 671,026,419,200 - 58*(256-8)*3*7168*2048 = 671,026,419,200 - 633,474,121,728
    ds = load_model("deepseek-v3")
    assert P.active_params(ds) == 37_552_297_472
    # without the input embedding (DeepSeek README_WEIGHTS convention) it is 36.6B ≈ "37B"
    assert round((P.active_params(ds) - 129280 * 7168) / 1e9, 1) == 36.6
    # dense model: active == total
    m = load_model("llama-3-8b")
    assert P.active_params(m) == P.total_params(m)


# ----------------------------------------------------------------- Megatron GPT / Narayanan eq. 2

def _eq2(l, h, V=51200, s=2048):
    """Narayanan et al. 2021 eq. 2: P = 12lh^2 (1 + 13/(12h) + (V+s)/(12lh)), exactly in integers."""
    return 12 * l * h * h + 13 * l * h + (V + s) * h


# Narayanan et al. 2021 (arXiv:2104.04473) Table 1: (name, layers, hidden, published billions)
NARAYANAN_TABLE1 = [
    ("megatron-gpt-1.7b", 24, 2304, 1.7),
    ("megatron-gpt-3.6b", 30, 3072, 3.6),
    ("megatron-gpt-7.5b", 36, 4096, 7.5),
    ("megatron-gpt-18.4b", 40, 6144, 18.4),
    ("megatron-gpt-39.1b", 48, 8192, 39.1),
    ("megatron-gpt-76.1b", 60, 10240, 76.1),
    ("megatron-gpt-145.6b", 80, 12288, 145.6),
    ("megatron-gpt-310.1b", 96, 16384, 310.1),
    ("megatron-gpt-530b", 105, 20480, 529.6),
    ("megatron-gpt-1t", 128, 25600, 1008.0),
]


@pytest.mark.parametrize("name,l,h,published", NARAYANAN_TABLE1)
def test_narayanan_table1(name, l, h, published):
    m = load_model(name)
    assert (m.layers, m.hidden, m.vocab, m.max_seq) == (l, h, 51200, 2048)
    total = P.total_params(m)
    # eq. 2 omits the final LayerNorm (weight + bias = 2h); everything else agrees exactly
    assert total - _eq2(l, h) == 2 * h
    # the table prints eq. 2 to one decimal (1.7B row: 1.652B, within the rounding half-step 0.05B)
    assert abs(_eq2(l, h) / 1e9 - published) <= 0.05


def test_korthikanti_22b():
    # Korthikanti et al. 2022 Table 3: 48 layers, h 6144, 64 heads -> eq. 2 = 22,074,261,504 (~22B)
    m = load_model("megatron-gpt-22b")
    assert (m.layers, m.hidden, m.heads) == (48, 6144, 64)
    assert P.total_params(m) == 22_074_261_504 + 2 * 6144


def test_gpt_components():
    # GPT block (Megatron, linear biases, LayerNorm): attention QKV 3h^2+3h + proj h^2+h = 4h^2+4h;
    # FFN h*4h+4h + 4h*h+h = 8h^2+5h; two LayerNorms 4h; embedding (V+s)h; tied head 0; final LN 2h
    m = load_model("megatron-gpt-7.5b")
    h = 4096
    assert P.attention_params(m) == 4 * h * h + 4 * h
    assert P.dense_mlp_params(m) == 8 * h * h + 5 * h
    assert P.norm_params_per_layer(m) == 4 * h
    assert P.embedding_params(m) == (51200 + 2048) * h
    assert P.head_params(m) == 0
    assert P.final_norm_params(m) == 2 * h
    assert P.expert_params(m) == P.shared_expert_params(m) == P.router_params(m) == 0


# ------------------------------------------------------------------------------- components

def test_mla_attention():
    # DeepSeek-V3 MLA (arXiv:2405.04434 §2.1, eqs. 9-14, 37-40), per layer:
    #   q_a 7168*1536 = 11,010,048; q_a_norm 1536; q_b 1536*128*(128+64) = 37,748,736;
    #   kv_a 7168*(512+64) = 4,128,768; kv_a_norm 512; kv_b 512*128*(128+128) = 16,777,216;
    #   o 128*128*7168 = 117,440,512.   Sum = 187,107,328
    assert P.attention_params(load_model("deepseek-v3")) == 187_107_328


def test_mla_without_query_compression():
    # DeepSeek-V2-Lite (HF config.json: q_lora_rank null, 27 layers, h 2048, 16 heads, 64 experts top-6,
    # 2 shared, first_k_dense_replace 1, ffn 10944, expert 1408, vocab 102400): HF "16B" (15.7B).
    # attention per layer: q 2048*16*192 = 6,291,456; kv_a 2048*576 = 1,179,648; norm 512;
    #   kv_b 512*16*256 = 2,097,152; o 16*128*2048 = 4,194,304 -> 13,763,072
    m = ModelSpec(
        name="v2-lite", family="deepseek", layers=27, hidden=2048, heads=16, ffn_hidden=10944, vocab=102400,
        max_seq=163840,
        moe=dict(experts=64, top_k=6, shared_experts=2, expert_ffn_hidden=1408, dense_layers=[0]),
        mla=dict(q_lora_rank=None, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
    )
    assert P.attention_params(m) == 13_763_072
    # 27*13,763,072 + 3*2048*10944 + 26*(66*3*2048*1408 + 2048*64) + 27*2*2048 + 2*102400*2048 + 2048
    assert P.total_params(m) == 15_706_484_224
    assert round(P.total_params(m) / 1e9, 1) == 15.7


def test_moe_components():
    ds = load_model("deepseek-v3")
    # one routed expert: SwiGLU 3*7168*2048; one shared expert the same
    assert P.expert_params(ds) == 3 * 7168 * 2048 == 44_040_192
    assert P.shared_expert_params(ds) == 44_040_192
    # router: 7168 x 256 gate + 256 e_score_correction_bias (aux-loss-free balancing)
    assert P.router_params(ds) == 7168 * 256 + 256
    # dense FFN of the first 3 layers: 3*7168*18432
    assert P.dense_mlp_params(ds) == 396_361_728
    mx = load_model("mixtral")
    assert P.router_params(mx) == 4096 * 8  # no bias
    assert P.shared_expert_params(mx) == 0


def test_qkv_bias():
    # Qwen2: biases on Q (a*d = 8192), K and V (kv*d = 1024 each), none on O:
    # 2*8192^2 + 2*8192*1024 + 8192 + 2*1024 = 151,005,184
    assert P.attention_params(load_model("qwen2.5-72b")) == 151_005_184


def test_optional_biases():
    # HF llama attention_bias: biases on q,k,v,o; mlp_bias: on gate, up, down.
    base = load_model("llama-2-7b").model_copy(update={"qkv_bias": True, "attention_out_bias": True, "mlp_bias": True})
    h, f = 4096, 11008
    assert P.attention_params(base) == 4 * h * h + 3 * h + h
    assert P.dense_mlp_params(base) == 3 * h * f + 2 * f + h


def test_breakdown_adds_up():
    for name in ("deepseek-v3", "mixtral-8x7b", "gpt3-175b", "qwen2.5-72b"):
        m = load_model(name)
        b = P.breakdown(m)
        assert set(b) == {"embedding", "attention", "mlp", "experts", "shared_experts", "router", "norms",
                          "head", "total", "active"}
        assert sum(v for k, v in b.items() if k not in ("total", "active")) == b["total"]
        # per-layer view gives the same total: sum of blocks + embedding + head + final norm
        layers = sum(P.layer_params(m, i) for i in range(m.layers))
        assert layers + P.embedding_params(m) + P.head_params(m) + P.final_norm_params(m) == b["total"]
    ds = P.breakdown(load_model("deepseek-v3"))
    # 58 MoE layers * 256 experts * 44,040,192; 3 dense FFNs * 396,361,728
    assert ds["experts"] == 58 * 256 * 44_040_192
    assert ds["mlp"] == 3 * 396_361_728
    assert P.is_moe_layer(load_model("deepseek-v3"), 2) is False
    assert P.is_moe_layer(load_model("deepseek-v3"), 3) is True


# ------------------------------------------------------------------------------ shipped specs

REQUIRED = [
    "gpt3-175b", "megatron-gpt-1.7b", "megatron-gpt-3.6b", "megatron-gpt-7.5b", "megatron-gpt-18.4b",
    "megatron-gpt-22b", "megatron-gpt-39.1b", "megatron-gpt-76.1b", "megatron-gpt-145.6b",
    "megatron-gpt-310.1b", "megatron-gpt-530b", "megatron-gpt-1t", "llama-2-7b", "llama-2-13b",
    "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3.1-405b", "mixtral-8x7b", "deepseek-v3",
    "qwen2.5-72b",
]


def test_shipped_models_and_aliases():
    names = shipped_names("models")
    assert set(REQUIRED) <= set(names)
    for alias, canon in [("llama-70b", "llama-3-70b"), ("llama-8b", "llama-3-8b"), ("llama-405b", "llama-3.1-405b"),
                         ("llama-3-405b", "llama-3.1-405b"), ("gpt3", "gpt3-175b"), ("gpt-3", "gpt3-175b"),
                         ("mixtral", "mixtral-8x7b"), ("deepseek", "deepseek-v3"), ("LLaMA-70B", "llama-3-70b")]:
        assert load_model(alias).name == canon
    for name in names:
        m = load_model(name)
        assert m.source, name  # every shape names its source


def test_megatron_family_settings():
    # Megatron GPT family: tied, learned positions, LayerNorm, GeLU 4h, biases, dropout, standard attention
    for name in [n for n in REQUIRED if n.startswith("megatron-gpt")]:
        m = load_model(name)
        assert m.family == "gpt" and m.tied_embeddings and m.position == "learned" and m.norm == "layernorm"
        assert m.ffn_type == "gelu" and m.ffn_hidden == 4 * m.hidden and m.linear_bias and m.dropout
        assert m.attention == "standard" and m.vocab == 51200 and m.max_seq == 2048
