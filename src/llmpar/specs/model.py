"""Model specification (data, validated by pydantic).

A model is a YAML file in ``models/`` (or a user path, or a Hugging Face ``config.json`` read by
:mod:`llmpar.specs.hf`). Shapes only: every count derived from them (parameters, FLOPs, memory)
lives in ``llmpar.cost``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from llmpar.specs.base import STRICT_SPEC, Name, Text

# Upper bounds on a model's shapes: far above any real model (the shipped largest are 128 layers,
# hidden 25,600, FFN 102,400, 160 heads, 256 experts, vocab 201,088, max_seq 163,840), low enough
# that every count derived from them (parameters ~ layers x experts x h x f, activations ~ seq x h)
# stays a finite number: a hidden size of 10^30 overflowed int64 in llmpar.cost and 10^11 layers
# printed 5 x 10^11 GB per GPU. Checked for YAML specs and Hugging Face config.json alike (both
# validate here).
MAX_WIDTH = 2**20           # 1,048,576: hidden, ffn_hidden, head_dim, expert FFN, MLA ranks/dims
MAX_VOCAB = 2**24           # 16,777,216 tokens
MAX_LAYERS = 10_000         # layers, MTP modules
MAX_HEADS = 65_536          # attention and KV heads
MAX_EXPERTS = 65_536        # routed and shared experts, expert groups
MAX_SEQ = 2**24             # 16,777,216 tokens: max_seq, sliding_window (the CLI's --seq bound too)


class MoESpec(BaseModel):
    """Mixture of experts (Mixtral: 8 experts top-2; DeepSeek-V3: 256 routed top-8 + 1 shared)."""

    model_config = STRICT_SPEC
    experts: int = Field(gt=0, le=MAX_EXPERTS, description="routed experts per MoE layer")
    top_k: int = Field(gt=0, le=MAX_EXPERTS, description="routed experts each token goes through")
    shared_experts: int = Field(0, ge=0, le=MAX_EXPERTS, description="experts every token goes through")
    expert_ffn_hidden: int = Field(gt=0, le=MAX_WIDTH, description="FFN size of one expert")
    dense_layers: list[int] = Field(
        default_factory=list, description="indices of layers with a dense FFN instead of experts (DeepSeek-V3: 0, 1, 2)"
    )
    router_bias: bool = Field(False, description="per-expert router bias (DeepSeek-V3's aux-loss-free balancing)")
    # group-limited routing (DeepSeek-V2 §2.1.3 device-limited, DeepSeek-V3 §2.1.2 node-limited
    # routing; HF config n_group / topk_group; Megatron-Core --moe-router-num-groups /
    # --moe-router-group-topk): the experts form `groups` contiguous blocks and a token's top_k
    # experts come from at most `groups_per_token` of them. What it saves is traffic, and only
    # with a dispatcher that sends a token once per destination node (stack kernels.ep_dispatcher)
    groups: int | None = Field(None, gt=0, le=MAX_EXPERTS,
                               description="expert groups for group-limited routing (None: no limit)")
    groups_per_token: int | None = Field(None, gt=0, le=MAX_EXPERTS,
                                         description="groups one token's experts may come from")

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds experts ({self.experts})")
        if (self.groups is None) != (self.groups_per_token is None):
            raise ValueError("groups and groups_per_token go together (group-limited routing)")
        if self.groups is not None:
            if self.experts % self.groups:
                raise ValueError(f"groups ({self.groups}) must divide experts ({self.experts})")
            if self.groups_per_token > self.groups:
                raise ValueError(f"groups_per_token ({self.groups_per_token}) exceeds groups ({self.groups})")
            if self.top_k > self.groups_per_token * (self.experts // self.groups):
                raise ValueError(f"top_k ({self.top_k}) exceeds the experts of {self.groups_per_token} groups")
        return self


class MLASpec(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3, arXiv:2405.04434 §2.1)."""

    model_config = STRICT_SPEC
    q_lora_rank: int | None = Field(None, gt=0, le=MAX_WIDTH, description="None: queries are not compressed")
    kv_lora_rank: int = Field(gt=0, le=MAX_WIDTH)
    qk_nope_head_dim: int = Field(gt=0, le=MAX_WIDTH)
    qk_rope_head_dim: int = Field(gt=0, le=MAX_WIDTH)
    v_head_dim: int = Field(gt=0, le=MAX_WIDTH)


class ModelSpec(BaseModel):
    # strict: `layers: true` is not 1 layer and `hidden: "4096"` is not a number
    model_config = STRICT_SPEC

    name: Name
    aliases: list[Name] = Field(default_factory=list)
    description: Text = ""
    source: Text = Field("", description="where the shapes come from")
    checkpoint: Text = Field("", description="the checkpoint's own precision where its config states one "
                                             "(a Hugging Face quantization_config: 'fp8', 'awq 4-bit'); "
                                             "costs still use --weights / --dtype, and say so")
    family: Literal["gpt", "llama", "mistral", "mixtral", "qwen2", "deepseek", "gpt_neox", "gpt_oss"] = "llama"

    layers: int = Field(gt=0, le=MAX_LAYERS)
    hidden: int = Field(gt=0, le=MAX_WIDTH)
    heads: int = Field(gt=0, le=MAX_HEADS)
    kv_heads: int | None = Field(None, gt=0, le=MAX_HEADS, description="GQA key/value heads; None = heads (MHA)")
    head_dim: int | None = Field(None, gt=0, le=MAX_WIDTH, description="None = hidden / heads")
    ffn_hidden: int = Field(gt=0, le=MAX_WIDTH, description="FFN inner size of a dense layer")
    ffn_type: Literal["gelu", "swiglu"] = Field(
        "swiglu", description="gelu: 2 matrices (h->f->h); swiglu: 3 matrices (gate, up, down)"
    )
    vocab: int = Field(gt=0, le=MAX_VOCAB)
    tied_embeddings: bool = False
    norm: Literal["layernorm", "rmsnorm"] = "rmsnorm"
    position: Literal["learned", "rope", "alibi"] = "rope"
    max_seq: int = Field(gt=0, le=MAX_SEQ)
    linear_bias: bool = Field(False, description="biases on every linear layer (GPT-2/3, Megatron GPT)")
    qkv_bias: bool = Field(False, description="biases on the Q, K, V projections only (Qwen2)")
    attention_out_bias: bool = Field(
        False, description="bias on the attention output projection (HF llama attention_bias: true, with qkv_bias)"
    )
    mlp_bias: bool = Field(False, description="biases on the FFN linears (HF llama mlp_bias: true)")
    dropout: bool = Field(False, description="dropout in the block (paper-era GPT: yes; Llama: no)")
    attention: Literal["standard", "flash"] = Field(
        "flash", description="default attention kernel: standard keeps the s^2 softmax/dropout activations"
    )
    parallel_block: bool = Field(False, description="attention and MLP in parallel from one norm (GPT-NeoX, GPT-J)")
    sandwich_norms: bool = Field(False, description="a norm after attention and after the MLP too, before each "
                                                    "residual add: 4 norms per block (Gemma 2/3: post_attention_"
                                                    "layernorm, post_feedforward_layernorm)")
    sliding_window: int | None = Field(
        None, gt=0, le=MAX_SEQ,
        description="tokens a query attends back to in the sliding-window (banded) layers; None = none")
    sliding_window_share: float = Field(
        1.0, gt=0, le=1, description="share of the layers with the sliding window (gpt-oss alternates: 0.5)")
    mtp_layers: int = Field(
        0, ge=0, le=MAX_LAYERS,
        description="multi-token-prediction modules trained with the model (DeepSeek-V3 §2.2; HF "
                             "num_nextn_predict_layers): each a block like the last one, a 2h->h projection and norms, "
                             "sharing the embedding and output head, on the last pipeline stage; not in the parameter "
                             "total (DeepSeek-V3's 671B excludes its 14B MTP module)")
    attention_sinks: bool = Field(False, description="a learned sink logit per attention head (gpt-oss): heads params per layer")
    moe: MoESpec | None = None
    mla: MLASpec | None = None

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        kv = self.kv_heads or self.heads
        if self.heads % kv:
            raise ValueError(f"heads ({self.heads}) is not a multiple of kv_heads ({kv})")
        if self.head_dim is None and self.mla is None and self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) is not divisible by heads ({self.heads}); give head_dim")
        if self.moe:
            bad = [i for i in self.moe.dense_layers if not 0 <= i < self.layers]
            if bad:
                raise ValueError(f"moe.dense_layers {bad} outside 0..{self.layers - 1}")
            # reliability review, item 19: contradictory MoE specs
            if len(set(self.moe.dense_layers)) != len(self.moe.dense_layers):
                raise ValueError(f"moe.dense_layers {self.moe.dense_layers} names a layer twice")
            if len(set(self.moe.dense_layers)) >= self.layers:
                raise ValueError(f"moe: every one of the {self.layers} layers is in moe.dense_layers, so no layer "
                                 "is MoE: drop moe, or the dense layers")
        return self

    # -- derived shapes (not counts: counts live in llmpar.cost.params)
    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def moe_layers(self) -> int:
        if not self.moe:
            return 0
        return self.layers - len(set(self.moe.dense_layers))

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers
