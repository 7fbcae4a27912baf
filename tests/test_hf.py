"""Hugging Face config.json reading (llmpar.specs.hf).

The fixtures are written here by hand in the HF format (the keys of each model's published
config.json); each is checked against the shipped YAML's exact count or a published total.
"""

import json

import pytest

from conftest import assert_one_line_error
from llmpar.cost.params import active_params, breakdown, total_params
from llmpar.errors import UserError
from llmpar.specs import load_model
from llmpar.specs.hf import SUPPORTED, load_hf_config

LLAMA_2_7B = {  # meta-llama/Llama-2-7b-hf
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "tie_word_embeddings": False,
    "torch_dtype": "float16", "vocab_size": 32000,
}
LLAMA_3_8B = {  # meta-llama/Meta-Llama-3-8B
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0, "tie_word_embeddings": False, "vocab_size": 128256,
}
MISTRAL_7B = {  # mistralai/Mistral-7B-v0.1
    "architectures": ["MistralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": False, "vocab_size": 32000,
}
MIXTRAL = {  # mistralai/Mixtral-8x7B-v0.1
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "num_local_experts": 8, "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02, "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 32000,
}
QWEN25_72B = {  # Qwen/Qwen2.5-72B
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu", "hidden_size": 8192,
    "intermediate_size": 29568, "max_position_embeddings": 131072, "max_window_layers": 80, "model_type": "qwen2",
    "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False, "use_sliding_window": False,
    "vocab_size": 152064,
}
DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
    "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
    "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06, "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid", "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc",
    "v_head_dim": 128, "vocab_size": 129280,
}
GPT2 = {  # openai-community/gpt2 (124M)
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1, "embd_pdrop": 0.1,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12,
    "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257,
}
GPT_NEOX_20B = {  # EleutherAI/gpt-neox-20b
    "architectures": ["GPTNeoXForCausalLM"], "hidden_act": "gelu_fast", "hidden_size": 6144,
    "intermediate_size": 24576, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048, "model_type": "gpt_neox",
    "num_attention_heads": 64, "num_hidden_layers": 44, "rotary_emb_base": 10000, "rotary_pct": 0.25,
    "tie_word_embeddings": False, "use_parallel_residual": True, "vocab_size": 50432,
}


def write(tmp_path, cfg, folder="model"):
    path = tmp_path / folder / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=2))
    return path


QWEN3_30B_A3B = {  # Qwen/Qwen3-30B-A3B
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "decoder_sparse_step": 1, "head_dim": 128,
    "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960, "mlp_only_layers": [],
    "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "tie_word_embeddings": False, "vocab_size": 151936,
}
QWEN3_32B = {  # Qwen/Qwen3-32B
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 25600, "max_position_embeddings": 40960,
    "max_window_layers": 64, "model_type": "qwen3", "num_attention_heads": 64, "num_hidden_layers": 64,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "sliding_window": None, "tie_word_embeddings": False,
    "use_sliding_window": False, "vocab_size": 151936,
}
GPT_OSS_120B = {  # openai/gpt-oss-120b
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "head_dim": 64, "hidden_size": 2880,
    "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 18,
    "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8, "num_local_experts": 128,
    "sliding_window": 128, "tie_word_embeddings": False, "vocab_size": 201088,
}


@pytest.mark.parametrize(
    "cfg,yaml_name",
    [(LLAMA_2_7B, "llama-2-7b"), (LLAMA_3_8B, "llama-3-8b"), (MIXTRAL, "mixtral-8x7b"),
     (QWEN25_72B, "qwen2.5-72b"), (DEEPSEEK_V3, "deepseek-v3"), (QWEN3_30B_A3B, "qwen3-30b-a3b"), (QWEN3_32B, "qwen3-32b"),
     (GPT_OSS_120B, "gpt-oss-120b")],
)
def test_same_count_as_yaml(tmp_path, cfg, yaml_name):
    # the config.json and the shipped YAML describe the same model: every component count agrees
    # (Llama-2-7B 6,738,415,616; Llama-3-8B 8,030,261,248; Mixtral 46,702,792,704;
    #  Qwen2.5-72B 72,706,203,648; DeepSeek-V3 671,026,419,200; Qwen3-30B-A3B 30,532,110,336;
    #  gpt-oss-120b 116,829,156,672 — derivations in test_params.py)
    m = load_hf_config(write(tmp_path, cfg))
    ref = load_model(yaml_name)
    assert breakdown(m) == breakdown(ref)
    # and the attention pattern: gpt-oss's 128-token window on half the layers
    assert (m.sliding_window, m.sliding_window_share) == (ref.sliding_window, ref.sliding_window_share)
    # and the routing: DeepSeek-V3's n_group 8 / topk_group 4 (node-limited routing), none elsewhere
    if ref.moe is not None:
        assert (m.moe.groups, m.moe.groups_per_token) == (ref.moe.groups, ref.moe.groups_per_token)


def test_llama_fields(tmp_path):
    m = load_model(str(write(tmp_path, LLAMA_3_8B, "Meta-Llama-3-8B")))  # the registry routes .json here
    assert m.name == "meta-llama-3-8b"
    assert (m.family, m.n_kv_heads, m.d_head, m.ffn_type, m.norm, m.position) == ("llama", 8, 128, "swiglu", "rmsnorm", "rope")
    assert not m.tied_embeddings and m.attention == "flash" and not m.dropout
    # num_key_value_heads absent -> MHA (LlamaConfig default)
    cfg = {k: v for k, v in LLAMA_2_7B.items() if k != "num_key_value_heads"}
    assert load_hf_config(write(tmp_path, cfg, "nokv")).n_kv_heads == 32


def test_mistral(tmp_path):
    # Mistral-7B-v0.1, HF count 7,241,732,096:
    # 32*(2*4096^2 + 2*4096*1024 + 3*4096*14336 + 2*4096) + 2*32000*4096 + 4096
    m = load_hf_config(write(tmp_path, MISTRAL_7B))
    assert m.family == "mistral"
    assert total_params(m) == 7_241_732_096
    # sliding_window 4096 on every layer (MistralAttention), which the reader used to drop
    # (reliability review, item 5): a 32K step then read as full attention
    assert (m.sliding_window, m.sliding_window_share) == (4096, 1.0)


@pytest.mark.parametrize("extra, want", [
    ({}, (None, 0.0)),                                                     # use_sliding_window false (default)
    ({"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 28}, (4096, 0.0)),  # 28 of 28 full
    ({"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 21}, (4096, 7 / 28)),
    ({"sliding_window": 4096, "layer_types": ["full_attention"] * 14 + ["sliding_attention"] * 14}, (4096, 0.5)),
])
def test_qwen2_sliding_window_rules(tmp_path, extra, want):
    # Qwen2Config: layers from max_window_layers on use the window when use_sliding_window is
    # true; layer_types, where given, says per layer. 28 layers (Qwen2-7B's shape)
    cfg = {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
           "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
           "max_position_embeddings": 32768, **extra}
    m = load_hf_config(write(tmp_path, cfg))
    window, share = want
    if share == 0.0:
        assert m.sliding_window is None
    else:
        assert (m.sliding_window, m.sliding_window_share) == (window, pytest.approx(share))


def test_mistral_window_changes_the_step(tmp_path, cli):
    # the same shapes with and without the window at 32K: the windowed attention does 4096/32768
    # of the causal work per layer, so the step must be shorter (69.4 s against 114.0 s here)
    on = write(tmp_path, MISTRAL_7B)
    off_cfg = dict(MISTRAL_7B, sliding_window=None)
    (tmp_path / "off").mkdir()
    off = write(tmp_path / "off", off_cfg)
    args = ("--gpus", "8", "--seq", "32768", "--recompute", "full", "--json")
    t_on = cli("step", "--hf", on, *args).json()["step_time_s"]
    t_off = cli("step", "--hf", off, *args).json()["step_time_s"]
    assert t_on < 0.7 * t_off


def test_deepseek_layers(tmp_path):
    m = load_hf_config(write(tmp_path, DEEPSEEK_V3))
    # first_k_dense_replace 3, moe_layer_freq 1 -> layers 0,1,2 dense, 58 MoE; noaux_tc -> router bias
    assert m.moe.dense_layers == [0, 1, 2] and m.moe_layers == 58 and m.moe.router_bias
    assert m.mla.q_lora_rank == 1536 and m.ffn_hidden == 18432 and m.moe.expert_ffn_hidden == 2048
    # DeepSeek-V3 "37B activated": 37,552,297,472 (test_params.py)
    assert active_params(m) == 37_552_297_472
    # q_lora_rank null (DeepSeek-V2-Lite style) reads as no query compression
    lite = dict(DEEPSEEK_V3, q_lora_rank=None)
    assert load_hf_config(write(tmp_path, lite, "lite")).mla.q_lora_rank is None


def test_gpt2(tmp_path):
    # GPT-2 small, 124,439,808 (HF): 12*(12*768^2 + 13*768) + (50257 + 1024)*768 + 2*768
    #   = 85,054,464 + 39,383,808 + 1,536
    m = load_hf_config(write(tmp_path, GPT2))
    assert total_params(m) == 124_439_808
    assert (m.family, m.attention, m.ffn_type, m.norm, m.position) == ("gpt", "standard", "gelu", "layernorm", "learned")
    assert m.tied_embeddings and m.linear_bias and m.dropout and m.ffn_hidden == 4 * 768


def test_gpt_neox(tmp_path):
    # GPT-NeoX-20B, 20,554,567,680 (HF model card, Black et al. 2022):
    # 44*(12*6144^2 + 13*6144) + 2*50432*6144 (untied embed_in, embed_out) + 2*6144
    m = load_hf_config(write(tmp_path, GPT_NEOX_20B))
    assert total_params(m) == 20_554_567_680
    assert m.parallel_block and m.position == "rope" and not m.tied_embeddings and m.norm == "layernorm"


# ------------------------------------------------------------------------------------ bad input

def test_unknown_model_type(tmp_path, cli):
    path = write(tmp_path, dict(LLAMA_2_7B, model_type="bert"))
    res = cli("models", "show", path)
    assert_one_line_error(res, "bert", *SUPPORTED)


def test_missing_model_type(tmp_path, cli):
    path = write(tmp_path, {k: v for k, v in LLAMA_2_7B.items() if k != "model_type"})
    assert_one_line_error(cli("models", "show", path), "model_type")


@pytest.mark.parametrize(
    "cfg,key",
    [(LLAMA_2_7B, "hidden_size"), (MIXTRAL, "num_local_experts"), (DEEPSEEK_V3, "kv_lora_rank"),
     (GPT2, "n_embd"), (GPT_NEOX_20B, "intermediate_size"), (QWEN25_72B, "max_position_embeddings")],
)
def test_missing_key(tmp_path, cli, cfg, key):
    path = write(tmp_path, {k: v for k, v in cfg.items() if k != key})
    assert_one_line_error(cli("models", "show", path), f"missing key '{key}'", str(path))


@pytest.mark.parametrize("value", ["4096", -1, 0, None, True, 40.5])
def test_bad_value(tmp_path, cli, value):
    path = write(tmp_path, dict(LLAMA_2_7B, hidden_size=value))
    assert_one_line_error(cli("models", "show", path), "hidden_size")


def test_malformed_json(tmp_path, cli):
    path = tmp_path / "config.json"
    path.write_text('{\n  "model_type": "llama",\n  "hidden_size": 4096,,\n}\n')
    # the stray comma is on line 3
    assert_one_line_error(cli("models", "show", path), "malformed JSON", f"{path}:3")


def test_not_an_object_and_missing_file(tmp_path, cli):
    path = tmp_path / "config.json"
    path.write_text("[1, 2]")
    assert_one_line_error(cli("models", "show", path), "JSON object")
    assert_one_line_error(cli("models", "show", tmp_path / "nope" / "config.json"), "not found")


def test_inconsistent_shapes(tmp_path, cli):
    # 32 heads, 6 KV heads: the spec's own validation names the field
    path = write(tmp_path, dict(LLAMA_2_7B, num_key_value_heads=6))
    assert_one_line_error(cli("models", "show", path), "kv_heads")
    with pytest.raises(UserError):
        load_hf_config(path)


def test_qwen3_moe_sparse_layers_and_gpt_oss_defaults(tmp_path):
    # Qwen3MoeConfig: layer i is MoE unless i is in mlp_only_layers or (i + 1) % decoder_sparse_step;
    # 48 layers, step 2 -> the even-indexed layers 0, 2, ..., 46 are dense (24 of them), plus layer 1
    cfg = dict(QWEN3_30B_A3B, decoder_sparse_step=2, mlp_only_layers=[1])
    m = load_hf_config(write(tmp_path, cfg, "sparse"))
    assert m.moe.dense_layers == sorted({1, *range(0, 48, 2)}) and m.moe_layers == 48 - 25
    bad = dict(QWEN3_30B_A3B, mlp_only_layers="1,2")
    with pytest.raises(UserError, match="mlp_only_layers"):
        load_hf_config(write(tmp_path, bad, "bad"))
    # gpt_oss without layer_types: transformers builds sliding layers on the even indices, 18 of 36
    cfg = {k: v for k, v in GPT_OSS_120B.items() if k != "layer_types"}
    m = load_hf_config(write(tmp_path, cfg, "nolt"))
    assert (m.sliding_window, m.sliding_window_share, m.attention_sinks) == (128, 0.5, True)


# microsoft/Phi-3-mini-4k-instruct config.json (the keys that count)
PHI3_MINI = {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "hidden_size": 3072,
             "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096,
             "sliding_window": 2047, "tie_word_embeddings": False, "attention_bias": False}


def test_phi3_mini_counts_3_8b_by_hand(tmp_path):
    # embedding and head 32,064 x 3,072 = 98,500,608 each (untied); per layer: qkv_proj 3,072 x 9,216
    # + o_proj 3,072^2 = 37,748,736, gate_up_proj 3,072 x 16,384 + down_proj 8,192 x 3,072 = 75,497,472,
    # two RMSNorms 6,144: 113,252,352 x 32 = 3,624,075,264; final norm 3,072.
    # 2 x 98,500,608 + 3,624,075,264 + 3,072 = 3,821,079,552 ("3.8B parameters", the model card)
    from llmpar.cost.params import total_params

    m = load_hf_config(write(tmp_path, PHI3_MINI, "Phi-3-mini-4k-instruct"))
    assert total_params(m) == 3_821_079_552
    # the 2,047-token window is on every layer (Phi3Attention passes config.sliding_window)
    assert (m.sliding_window, m.sliding_window_share) == (2047, 1.0)


# google/gemma-2-9b config.json (the keys that count)
GEMMA2_9B = {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "hidden_size": 3584,
             "intermediate_size": 14336, "num_hidden_layers": 42, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192,
             "sliding_window": 4096, "hidden_activation": "gelu_pytorch_tanh", "attn_logit_softcapping": 50.0,
             "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 256}


def test_gemma2_9b_counts_by_hand(tmp_path):
    # embedding 256,000 x 3,584 = 917,504,000 (tied: once); per layer: q 3,584 x 4,096 (16 heads of
    # 256) = 14,680,064, k and v 3,584 x 2,048 = 7,340,032 each, o 14,680,064 -> 44,040,192; gated
    # MLP 3 x 3,584 x 14,336 = 154,140,672; four norms 14,336 -> 198,195,200 x 42 = 8,324,198,400;
    # final norm 3,584. 917,504,000 + 8,324,198,400 + 3,584 = 9,241,705,984 (the checkpoint's count)
    from llmpar.cost.params import total_params

    m = load_hf_config(write(tmp_path, GEMMA2_9B, "gemma-2-9b"))
    assert total_params(m) == 9_241_705_984
    assert m.sandwich_norms and m.tied_embeddings and m.d_head == 256
    # the 4,096-token window on the even layers: 21 of 42 (and at max_seq 8192 it is a real band)
    assert (m.sliding_window, m.sliding_window_share) == (4096, 0.5)


# google/gemma-3-27b-it config.json (Gemma3ForConditionalGeneration: the text model under
# text_config; the keys that count)
GEMMA3_27B = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "text_config": {
    "model_type": "gemma3_text", "head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504,
    "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16, "sliding_window": 1024,
    "sliding_window_pattern": 6, "vocab_size": 262208, "max_position_embeddings": 131072},
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "num_hidden_layers": 27}}


def test_gemma3_27b_text_model_counts_by_hand(tmp_path):
    """model_type gemma3 (4B/12B/27B) was refused as unsupported (review of 2026-12-03).
    Embedding 262,208 x 5,376 = 1,409,630,208 (tied); per layer q 5,376 x 4,096 (32 heads of 128)
    = 22,020,096, k and v 5,376 x 2,048 = 11,010,048 each, o 22,020,096 -> 66,060,288; gated MLP
    3 x 5,376 x 21,504 = 346,816,512; four norms 21,504 -> 412,898,304 x 62 = 25,599,694,848; final
    norm 5,376: 27,009,330,432 (the vision tower is not priced, and the description says so).
    Windows: layer i slides unless (i + 1) % 6 == 0, so 62 - floor(62 / 6) = 52 of 62 layers."""
    from llmpar.cost.params import total_params

    m = load_hf_config(write(tmp_path, GEMMA3_27B, "gemma-3-27b-it"))
    assert total_params(m) == 27_009_330_432
    assert (m.sliding_window, m.sliding_window_share) == (1024, pytest.approx(52 / 62))
    assert "vision tower is not priced" in m.description


def test_gemma3_1b_sliding_window_pattern_is_read(tmp_path):
    """gemma3_text without layer_types: sliding_window_pattern (default 6) sets which layers slide;
    it had been read as every other layer (share 0.5). 26 layers: 26 - floor(26 / 6) = 22 slide."""
    cfg = dict(GEMMA3_27B["text_config"], num_hidden_layers=26, sliding_window=512)
    assert load_hf_config(write(tmp_path, cfg, "gemma-3-1b")).sliding_window_share == pytest.approx(22 / 26)
    # the default pattern when the key is absent is transformers' 6 as well
    cfg.pop("sliding_window_pattern")
    assert load_hf_config(write(tmp_path, cfg, "gemma-3-1b-b")).sliding_window_share == pytest.approx(22 / 26)


@pytest.mark.parametrize("key, value", [("num_local_experts", 8), ("sliding_window", 4096)])
def test_a_cost_key_the_model_type_does_not_have_is_refused(tmp_path, key, value):
    """A model_type llama config with experts or a window read as a dense, unwindowed model,
    silently (transformers' LlamaModel ignores them too): refused, naming the key."""
    from llmpar.errors import UserError

    cfg = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
           "num_attention_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096, key: value}
    with pytest.raises(UserError, match=f"key '{key}' changes the cost, but llmpar's reading of model_type 'llama' does not use it: the model_type has no such field"):
        load_hf_config(write(tmp_path, cfg, "odd-llama"))


def test_sandwich_norms_save_two_more_inputs(tmp_path):
    # each extra RMSNorm saves its h-wide bf16 input: 2 x 2 B x h per token per layer more
    from llmpar.cost.activations import activation_terms

    m = load_hf_config(write(tmp_path, GEMMA2_9B, "gemma-2-9b"))
    plain = m.model_copy(update={"sandwich_norms": False})
    per_token = lambda model: sum(t.per_token for t in activation_terms(model, False, "flash") if not t.s2)  # noqa: E731
    assert per_token(m) - per_token(plain) == pytest.approx(2 * 2.0 * 3584)


# meta-llama/Llama-4-Maverick-17B-128E config.json (the text_config keys that count)
LLAMA4_MAVERICK = {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"], "text_config": {
    "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
    "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 202048, "max_position_embeddings": 1048576, "num_local_experts": 128, "num_experts_per_tok": 1,
    "interleave_moe_layer_step": 2, "attention_chunk_size": 8192, "tie_word_embeddings": False}}


def test_llama4_maverick_counts_400b_by_hand(tmp_path):
    # 24 dense layers (even indices): attention 2*5120^2 + 2*5120*1024 = 62,914,560, SwiGLU
    # 3*5120*16384 = 251,658,240, norms 10,240 -> 314,583,040 each = 7,549,992,960;
    # 24 MoE layers (odd): attention 62,914,560 + 128 experts x 3*5120*8192 = 16,106,127,360 + one
    # shared expert 125,829,120 + router 5120*128 = 655,360 + norms 10,240 = 16,295,536,640 each
    # = 391,092,879,360; + 2*202,048*5,120 (untied) + 5,120 = 400,711,848,960 ("400B total")
    from llmpar.cost.params import total_params

    m = load_hf_config(write(tmp_path, LLAMA4_MAVERICK, "Llama-4-Maverick-17B-128E"))
    assert total_params(m) == 400_711_848_960
    assert m.moe.dense_layers == list(range(0, 48, 2)) and m.moe.shared_experts == 1 and m.ffn_hidden == 16384
    # chunked attention on the 36 RoPE layers of 48 (three of four)
    assert (m.sliding_window, m.sliding_window_share) == (8192, 0.75)


def test_llama4_scout_config_matches_the_shipped_yaml(tmp_path):
    cfg = {**LLAMA4_MAVERICK, "text_config": {**LLAMA4_MAVERICK["text_config"], "num_local_experts": 16,
                                               "interleave_moe_layer_step": 1, "intermediate_size_mlp": 8192}}
    from llmpar.cost.params import total_params

    assert total_params(load_hf_config(write(tmp_path, cfg, "Llama-4-Scout-17B-16E"))) == \
        total_params(load_model("llama-4-scout")) == 107_769_861_120
