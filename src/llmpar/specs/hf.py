"""Read a Hugging Face ``config.json`` into a :class:`ModelSpec`.

Supported ``model_type``: llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, gpt_oss, deepseek_v3, gpt2,
gpt_neox, phi3, gemma2, gemma3_text, gemma3, llama4. Keys follow the transformers configuration classes of those models (``LlamaConfig``,
``MistralConfig``, ``MixtralConfig``, ``Qwen2Config``, ``Qwen3Config``, ``Qwen3MoeConfig``,
``GptOssConfig``, ``DeepseekV3Config``, ``GPT2Config``, ``GPTNeoXConfig``, ``Phi3Config``); where a
key may be absent, the default is the one those classes use. Bad input is a :class:`UserError`:
malformed JSON (file and line), an unknown ``model_type`` (naming the supported ones) or a missing
or non-integer key (naming the key).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from llmpar.errors import UserError
from llmpar.specs.hf_keys import ConfigReader as _Config
from llmpar.specs.model import ModelSpec

SUPPORTED = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gpt_oss", "deepseek_v3", "gpt2", "gpt_neox",
             "phi3", "gemma2", "gemma3_text", "gemma3", "llama4")

#: keys that change what a step costs (experts, windows, per-layer patterns): present with a value
#: and unread by the model_type's builder, a key is refused rather than dropped (transformers'
#: LlamaModel ignores a `num_local_experts` and would run a dense model; llmpar says so)
COST_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
             "sliding_window", "layer_types", "sliding_window_pattern", "attention_chunk_size", "use_sliding_window",
             "interleave_moe_layer_step", "first_k_dense_replace", "kv_lora_rank", "q_lora_rank")

def _llama_like(c: _Config, family: str) -> dict[str, Any]:
    """LlamaConfig / MistralConfig / MixtralConfig / Qwen2Config: SwiGLU, RMSNorm, RoPE, GQA."""
    heads = c.integer("num_attention_heads")
    out: dict[str, Any] = dict(
        family=family,
        layers=c.integer("num_hidden_layers"),
        hidden=c.integer("hidden_size"),
        heads=heads,
        kv_heads=c.integer("num_key_value_heads", default=heads),  # None/absent: MHA (transformers default)
        head_dim=c.integer("head_dim", default=None),  # Mistral-Nemo, Qwen3 state it; else hidden/heads
        ffn_hidden=c.integer("intermediate_size"),
        ffn_type="swiglu",
        vocab=c.integer("vocab_size"),
        max_seq=c.integer("max_position_embeddings"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        norm="rmsnorm",
        position="rope",
        attention="flash",
        dropout=c.probability("attention_dropout", 0.0) > 0,
    )
    if family == "llama":
        attn_bias = c.flag("attention_bias", False)  # LlamaAttention: bias on q, k, v and o
        out.update(qkv_bias=attn_bias, attention_out_bias=attn_bias, mlp_bias=c.flag("mlp_bias", False))
    if family == "qwen2":
        out["qkv_bias"] = True  # Qwen2Attention: q/k/v_proj bias=True, o_proj bias=False
        _sliding(c, out, "qwen")
    if family in ("mistral", "mixtral"):
        # MistralAttention / MixtralAttention: sliding_window (null: none) on every layer
        # (transformers models/mistral/modeling_mistral.py: sliding_window=config.sliding_window);
        # a newer config's layer_types says per layer
        _sliding(c, out, "all")
    if family == "mixtral":
        out["moe"] = dict(
            experts=c.integer("num_local_experts"),
            top_k=c.integer("num_experts_per_tok"),
            shared_experts=0,
            expert_ffn_hidden=out["ffn_hidden"],
            dense_layers=[],
            router_bias=False,
        )
    return out


def _sliding(c: _Config, out: dict[str, Any], default: str) -> None:
    """``sliding_window`` and its share of the layers into ``out`` (ModelSpec fields), as the
    transformers attention classes apply it: ``layer_types`` (one entry per layer,
    "sliding_attention" or "full_attention") when the config states it; otherwise ``default``:
    "all" (Mistral, Mixtral: every layer), "alternate" (GPT-OSS: the even layers), "pattern"
    (Gemma 3: ``sliding_window_pattern`` p, default 6: layer i slides unless (i + 1) % p == 0,
    transformers Gemma3TextConfig, "five sliding to one full") or "qwen"
    (Qwen2/Qwen3: only with ``use_sliding_window`` true, on the layers from ``max_window_layers``
    on; Qwen2Config: "the first max_window_layers layers use full attention"). A window of null,
    or one at least the model's max_seq, changes nothing and is not set."""
    window = c.integer("sliding_window", default=None, allow_null=True)
    layers = out["layers"]
    types = c.raw("layer_types")
    if window is None:
        # newer transformers save layer_types beside a null window ("full_attention" throughout):
        # read, it changes nothing; a sliding layer without a window is a contradiction
        if isinstance(types, list) and "sliding_attention" in types:
            raise c._fail("key 'layer_types' lists sliding_attention layers, but sliding_window is null")
        return
    if types is not None:
        if not (isinstance(types, list) and len(types) == layers):
            raise c._fail(f"key 'layer_types' must list one type per layer ({layers}), got {types!r}")
        unknown = sorted({str(t) for t in types} - {"sliding_attention", "full_attention"})
        if unknown:     # reliability review, item 19: an unknown type silently made the window share 0
            raise c._fail(f"key 'layer_types': unknown layer type(s) {', '.join(unknown)} (known: sliding_attention, "
                          "full_attention)")
        share = sum(t == "sliding_attention" for t in types) / layers
    elif default == "qwen":
        if not c.flag("use_sliding_window", False):
            return
        first = c.count("max_window_layers", layers)
        share = max(layers - min(first, layers), 0) / layers
    elif default == "alternate":
        share = (layers + 1) // 2 / layers     # transformers GptOssConfig: sliding on even layers
    elif default == "pattern":
        p = c.integer("sliding_window_pattern", default=6)
        share = sum(1 for i in range(layers) if (i + 1) % p) / layers
    else:
        share = 1.0
    if share > 0 and window < out["max_seq"]:
        out.update(sliding_window=window, sliding_window_share=share)


def _phi3(c: _Config) -> dict[str, Any]:
    """Phi3Config (Phi-3 mini / medium, Phi-3.5 mini): a Llama block with q, k, v fused into one
    qkv_proj and gate, up into one gate_up_proj (transformers models/phi3/modeling_phi3.py: the same
    weights, no biases), RMSNorm, RoPE; the sliding window (Phi-3 mini 4K: 2047) on every layer.
    ``partial_rotary_factor`` (Phi-4 mini) changes no count: RoPE has no weights. Phi-3 small's
    block-sparse attention is model_type phi3small, not read."""
    out = _llama_like(c, "llama")
    _sliding(c, out, "all")
    return out


def _gemma2(c: _Config) -> dict[str, Any]:
    """Gemma2Config / Gemma3TextConfig (transformers models/gemma2, gemma3): a Llama-shaped block
    with four norms (input, post_attention, pre_feedforward, post_feedforward: sandwich norms), a
    gated GeLU-tanh MLP (gate, up, down: the SwiGLU shapes and FLOPs), head_dim stated (256 for
    Gemma 2 9B / 27B: 16 or 32 heads of it beside a 3,584 / 4,608 hidden), tied embeddings, and the
    sliding window on every other layer (Gemma2: the even layers; Gemma 3: ``layer_types``, five
    sliding to one full). The attention and final-logit soft-capping (a tanh over the scores and
    the logits) are element-wise and not priced; RMSNorm's (1 + w) scaling has the same weights."""
    out = _llama_like(c, "llama")
    out.update(sandwich_norms=True, tied_embeddings=c.flag("tie_word_embeddings", True),
               head_dim=c.integer("head_dim", default=256))
    _sliding(c, out, "pattern" if c.model_type.startswith("gemma3") else "alternate")
    return out


def _gemma3(c: _Config) -> dict[str, Any]:
    """Gemma3Config (Gemma 3 4B / 12B / 27B, image-text): the language model under ``text_config``
    (a Gemma3TextConfig, read as ``gemma3_text``). The SigLIP vision tower (``vision_config``,
    ~0.4B parameters) and its projector are not priced: llmpar plans the text model; the
    description says so."""
    text = c.raw("text_config")
    if not isinstance(text, dict):
        raise c._fail(f"key 'text_config' must be a mapping (Gemma3Config's language model), got {text!r}")
    c.raw("vision_config")   # read: not priced, and said so (load_hf_config)
    _text_model_type(c, text, "gemma3_text")
    return _gemma2(c.nested("text_config", "gemma3_text"))


def _text_model_type(c: _Config, text: dict, expected: str) -> None:
    """A nested text model states its own model_type; another than the one read is refused (a
    gemma3 text_config saying 'llama' had been read as gemma3_text unsaid)."""
    mt = text.get("model_type")
    if mt is not None and mt != expected:
        raise c._fail(f"key 'text_config.model_type' is {mt!r}: model_type {c.model_type!r} holds a {expected!r} "
                      "text model")


def _llama4(c: _Config) -> dict[str, Any]:
    """Llama4Config (Scout, Maverick): the text model under ``text_config`` (Llama4TextConfig). Every
    ``interleave_moe_layer_step``-th layer is MoE (layer i when (i + 1) % step == 0: Scout 1 = all,
    Maverick 2 = the odd layers), with ``num_local_experts`` routed experts of ``intermediate_size``
    top ``num_experts_per_tok`` and one shared expert of the same size; the other layers a dense
    SwiGLU of ``intermediate_size_mlp``. The router has no bias and the L2 QK-norm no weights. The
    layers with RoPE (``no_rope_layers`` 1; absent: three of every four) attend inside
    ``attention_chunk_size`` chunks: priced as that window on those layers (equal up to one chunk;
    beyond it a chunk's queries see half of it on average, so attention is overcounted there)."""
    text = c.raw("text_config", c.data)
    if not isinstance(text, dict):
        raise c._fail(f"key 'text_config' must be a mapping, got {text!r}")
    if "text_config" in c.data:
        _text_model_type(c, text, "llama4_text")
    t = c.nested("text_config") if "text_config" in c.data else c
    out = _llama_like(t, "llama")
    layers, step = out["layers"], t.integer("interleave_moe_layer_step", default=1)
    moe_idx = [i for i in range(layers) if (i + 1) % step == 0]
    out["ffn_hidden"] = t.integer("intermediate_size_mlp", default=t.integer("intermediate_size"))
    out["moe"] = dict(experts=t.integer("num_local_experts"), top_k=t.integer("num_experts_per_tok", default=1),
                      shared_experts=1, expert_ffn_hidden=t.integer("intermediate_size"),
                      dense_layers=[i for i in range(layers) if i not in moe_idx], router_bias=False)
    chunk = t.integer("attention_chunk_size", default=None, allow_null=True)
    rope = t.raw("no_rope_layers")
    if rope is not None and not (isinstance(rope, list) and len(rope) == layers
                                 and all(x in (0, 1) and not isinstance(x, float) for x in rope)):
        # a list of another length had fallen back to "three of every four" unsaid
        raise t._fail(f"key 'no_rope_layers' must list 1 (RoPE, chunked attention) or 0 per layer ({layers}), "
                      f"got {rope!r}")
    share = (sum(1 for x in rope if x) / layers if rope is not None
             else sum(1 for i in range(layers) if (i + 1) % 4 != 0) / layers)
    if chunk is not None and share > 0 and chunk < out["max_seq"]:
        out.update(sliding_window=chunk, sliding_window_share=share)
    return out


def _qwen3(c: _Config) -> dict[str, Any]:
    """Qwen3Config: a Llama block with ``attention_bias`` (default false) on q, k, v and o, a stated
    head_dim, and an RMSNorm on each head's queries and keys (QK-norm: 2·head_dim weights per
    layer, not counted, as models/qwen3-*.yaml say)."""
    out = _llama_like(c, "qwen2")
    bias = c.flag("attention_bias", False)
    out.update(qkv_bias=bias, attention_out_bias=bias)
    return out


def _qwen3_moe(c: _Config) -> dict[str, Any]:
    """Qwen3MoeConfig: Qwen3 attention; MoE FFN of ``num_experts`` experts of ``moe_intermediate_size``,
    top ``num_experts_per_tok``, no shared expert, router without bias (Qwen3MoeSparseMoeBlock);
    layer i is MoE unless it is in ``mlp_only_layers`` or (i + 1) % ``decoder_sparse_step`` != 0."""
    out = _qwen3(c)
    step = c.integer("decoder_sparse_step", default=1)
    only = c.raw("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                             and 0 <= i < out["layers"] for i in only):
        # an index outside the layers ([-1, 100]) had been accepted and changed nothing
        raise c._fail(f"key 'mlp_only_layers' must be a list of layer indices from 0 to {out['layers'] - 1}, "
                      f"got {only!r}")
    dense = sorted({i for i in range(out["layers"]) if i in only or (i + 1) % step})
    out["moe"] = dict(experts=c.integer("num_experts"), top_k=c.integer("num_experts_per_tok"), shared_experts=0,
                      expert_ffn_hidden=c.integer("moe_intermediate_size"), dense_layers=dense, router_bias=False)
    return out


def _gpt_oss(c: _Config) -> dict[str, Any]:
    """GptOssConfig: every layer MoE (``num_local_experts`` SwiGLU experts of ``intermediate_size``
    with biases, top ``num_experts_per_tok``, a router with a bias), ``attention_bias`` (default
    true) on q, k, v and o, a learned sink per head, and ``sliding_window`` on the layers that
    ``layer_types`` calls "sliding_attention" (absent: every other layer, as the default builds it)."""
    out = _llama_like(c, "gpt_oss")
    bias = c.flag("attention_bias", True)
    out.update(qkv_bias=bias, attention_out_bias=bias, mlp_bias=True, attention_sinks=True)
    out["moe"] = dict(experts=c.integer("num_local_experts"), top_k=c.integer("num_experts_per_tok"),
                      shared_experts=0, expert_ffn_hidden=out["ffn_hidden"], dense_layers=[], router_bias=True)
    _sliding(c, out, "alternate")
    return out


def _deepseek_v3(c: _Config) -> dict[str, Any]:
    """DeepseekV3Config: MLA, DeepSeekMoE with shared experts, first_k_dense_replace dense layers."""
    layers = c.integer("num_hidden_layers")
    heads = c.integer("num_attention_heads")
    out: dict[str, Any] = dict(
        family="deepseek",
        layers=layers,
        hidden=c.integer("hidden_size"),
        heads=heads,
        ffn_hidden=c.integer("intermediate_size"),
        ffn_type="swiglu",
        vocab=c.integer("vocab_size"),
        max_seq=c.integer("max_position_embeddings"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        norm="rmsnorm",
        position="rope",
        attention="flash",
        mla=dict(
            q_lora_rank=c.integer("q_lora_rank", allow_null=True),  # null: no query compression
            kv_lora_rank=c.integer("kv_lora_rank"),
            qk_nope_head_dim=c.integer("qk_nope_head_dim"),
            qk_rope_head_dim=c.integer("qk_rope_head_dim"),
            v_head_dim=c.integer("v_head_dim"),
        ),
    )
    out["head_dim"] = out["mla"]["v_head_dim"]  # as models/deepseek-v3.yaml: the output width per head
    attn_bias = c.flag("attention_bias", False)
    out.update(qkv_bias=attn_bias, attention_out_bias=attn_bias)
    experts = c.integer("n_routed_experts", default=None, allow_null=True)
    if experts is not None:
        first_dense = c.count("first_k_dense_replace", 0)
        freq = c.integer("moe_layer_freq", default=1)
        # DeepseekV3DecoderLayer: MoE when layer_idx >= first_k_dense_replace and layer_idx % moe_layer_freq == 0
        dense = [i for i in range(layers) if not (i >= first_dense and i % freq == 0)]
        if len(dense) == layers:
            # n_routed_experts says MoE, but no layer would hold experts: a config that contradicts
            # itself (a typo in first_k_dense_replace, or num_hidden_layers cut down for a test)
            raise c._fail(f"n_routed_experts = {experts} but no layer is MoE: first_k_dense_replace = {first_dense} "
                          f"and moe_layer_freq = {freq} leave all {layers} layers (num_hidden_layers) dense; "
                          "fix the config, or drop n_routed_experts for a dense model")
        out["moe"] = dict(
            experts=experts,
            top_k=c.integer("num_experts_per_tok"),
            shared_experts=c.count("n_shared_experts", 0),
            expert_ffn_hidden=c.integer("moe_intermediate_size"),
            dense_layers=dense,
            router_bias=c.raw("topk_method") == "noaux_tc",  # e_score_correction_bias
        )
        out["mtp_layers"] = c.count("num_nextn_predict_layers", 0)   # the MTP modules (DeepSeek-V3 §2.2)
        # group-limited routing (DeepseekV3TopkRouter: n_group groups, topk_group of them per token)
        groups = c.integer("n_group", default=None, allow_null=True)
        per_token = c.integer("topk_group", default=None, allow_null=True)
        if groups is not None and per_token is not None and groups > 1:
            out["moe"].update(groups=groups, groups_per_token=per_token)
    return out


def _gpt2(c: _Config) -> dict[str, Any]:
    """GPT2Config: learned positions, LayerNorm, GeLU 4h (n_inner null), biases everywhere, tied."""
    hidden = c.integer("n_embd")
    drops = [c.probability(k, 0.1) for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop")]
    return dict(
        family="gpt",
        layers=c.integer("n_layer"),
        hidden=hidden,
        heads=c.integer("n_head"),
        ffn_hidden=c.integer("n_inner", default=4 * hidden),
        ffn_type="gelu",
        vocab=c.integer("vocab_size"),
        max_seq=c.integer("n_positions"),
        tied_embeddings=c.flag("tie_word_embeddings", True),
        norm="layernorm",
        position="learned",
        linear_bias=True,
        dropout=any(p > 0 for p in drops),
        attention="standard",
    )


def _gpt_neox(c: _Config) -> dict[str, Any]:
    """GPTNeoXConfig: parallel attention+MLP block (two LayerNorms), rotary, biases, untied head."""
    attn_bias = c.flag("attention_bias", True)
    return dict(
        family="gpt_neox",
        layers=c.integer("num_hidden_layers"),
        hidden=c.integer("hidden_size"),
        heads=c.integer("num_attention_heads"),
        ffn_hidden=c.integer("intermediate_size"),
        ffn_type="gelu",
        vocab=c.integer("vocab_size"),
        max_seq=c.integer("max_position_embeddings"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        norm="layernorm",
        position="rope",
        parallel_block=c.flag("use_parallel_residual", True),
        qkv_bias=attn_bias,
        attention_out_bias=attn_bias,
        mlp_bias=True,  # dense_h_to_4h and dense_4h_to_h always have biases
        dropout=max(c.probability("hidden_dropout", 0.0), c.probability("attention_dropout", 0.0)) > 0,
        attention="standard",  # gpt-neox's default attention is the unfused "global" kernel
    )


_BUILDERS: dict[str, Callable[[_Config], dict[str, Any]]] = {
    "llama": lambda c: _llama_like(c, "llama"),
    "mistral": lambda c: _llama_like(c, "mistral"),
    "mixtral": lambda c: _llama_like(c, "mixtral"),
    "qwen2": lambda c: _llama_like(c, "qwen2"),
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "gpt_oss": _gpt_oss,
    "deepseek_v3": _deepseek_v3,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "phi3": _phi3,
    "gemma2": _gemma2,
    "gemma3_text": _gemma2,
    "gemma3": _gemma3,
    "llama4": _llama4,
}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8-sig")    # a UTF-8 byte-order mark is read, as in runs CSVs
        from llmpar.specs.reading import note_read

        note_read(path)
    except FileNotFoundError:
        raise UserError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    from llmpar.specs.reading import loads_json   # the one JSON reader (a key given twice: item 31)

    data = loads_json(text, str(path), "JSON (a model's config.json)")
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object at the top level")
    return data


def _name(path: Path, data: dict[str, Any]) -> str:
    given = data.get("_name_or_path")
    if isinstance(given, str) and given.strip():
        return given.strip().rstrip("/").split("/")[-1].lower()
    if path.name == "config.json" and path.resolve().parent.name:
        return path.resolve().parent.name.lower()
    return path.stem.lower()


def _quantization(q) -> str:
    """The checkpoint's precision from its ``quantization_config`` (transformers' quantizers:
    ``quant_method`` fp8 / awq / gptq / bitsandbytes / mxfp4 / compressed-tensors, with ``bits``
    where they state it), '' without one. Not a cost input: the weights' precision is --weights /
    --dtype; `serve` says when they differ (an FP8 DeepSeek-V3 config had been costed as bf16 with
    no word)."""
    if not isinstance(q, dict):
        return ""
    method = q.get("quant_method")
    method = method.strip().lower() if isinstance(method, str) and method.strip() else "quantized"
    bits = q.get("bits") if isinstance(q.get("bits"), int) and not isinstance(q.get("bits"), bool) else None
    if q.get("load_in_4bit") is True:
        bits = 4
    elif q.get("load_in_8bit") is True:
        bits = 8
    return f"{method} {bits}-bit" if bits else method


def _unread_cost_keys(data: dict[str, Any], seen: set[str]) -> list[str]:
    """The cost-changing keys stated with a value that no builder read, by their path in the file:
    at the top level and inside a nested ``text_config`` (Gemma 3's, Llama 4's), whose MoE or window
    keys had been dropped unchecked."""
    scopes = [("", data)] + [(f"{k}.", data[k]) for k in ("text_config",) if isinstance(data.get(k), dict)]
    return [p + k for p, d in scopes for k in COST_KEYS
            if k in d and d[k] not in (None, False, 0, [], {}) and p + k not in seen]


def load_hf_config(path: Path) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json`` (see the module docstring)."""
    from llmpar.specs.reading import validate

    path = Path(path)
    data = _read_json(path)
    model_type = data.get("model_type")
    if model_type is None:
        raise UserError(f"{path}: missing key 'model_type' (supported: {', '.join(SUPPORTED)})")
    if not isinstance(model_type, str) or model_type not in _BUILDERS:
        raise UserError(f"{path}: unsupported model_type {model_type!r}; supported: {', '.join(SUPPORTED)}")
    c = _Config(data, path, model_type)
    spec = _BUILDERS[model_type](c)
    q = data.get("quantization_config")
    if q is not None and not isinstance(q, dict):   # "fp8" (a string) had been passed over unsaid
        raise UserError(f"{path}: key 'quantization_config' must be a mapping (transformers' quantizer config, "
                        f"e.g. {{\"quant_method\": \"fp8\"}}), got {q!r}")
    unread = _unread_cost_keys(data, c.seen)
    if unread:   # an unknown field that would change the cost is never silently dropped
        raise UserError(f"{path}: key {unread[0]!r} changes the cost, but llmpar's reading of model_type "
                        f"{model_type!r} does not use it: the model_type has no such field (transformers would ignore "
                        "it too), or the keys it goes with are absent (an expert count beside no experts); if the "
                        f"model has it, its config names another model_type (supported: {', '.join(SUPPORTED)})")
    spec.update(
        checkpoint=_quantization(data.get("quantization_config")),
        name=_name(path, data),
        description=f"{model_type} model read from a Hugging Face config.json"
                    + (" (the text model: its vision tower is not priced)" if "vision_config" in data else ""),
        source=f"Hugging Face config.json: {path}",
    )
    return validate(ModelSpec, spec, str(path))
