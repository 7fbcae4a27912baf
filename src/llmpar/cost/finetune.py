"""Fine-tuning: full, LoRA and QLoRA (docs/finetune.md). The one home of what a frozen base and
low-rank adapters change in the model states, the step's FLOPs and its traffic.

Sources:

* LoRA: Hu et al. 2021, arXiv:2106.09685, §4.1: W0 x + B A x, A: r x d_in, B: d_out x r, W0 frozen;
  "we only need to store and update the low-rank matrices": r (d_in + d_out) trainable parameters
  per adapted matrix; gradients and optimizer states only for them (§4.2: on GPT-3 175B, VRAM
  during training 1.2 TB -> 350 GB with r = 4 on W_q, W_v).
* QLoRA: Dettmers et al. 2023, arXiv:2305.14314, §3: the frozen base stored in 4-bit NormalFloat
  (NF4), blocks of 64 weights with one fp32 absmax each; Double Quantization quantises those
  constants to 8 bits in blocks of 256 with fp32 second-level constants: 32/64 = 0.5 bits of
  constants per parameter become 8/64 + 32/(64 x 256) = 0.127 bits. So 4.127 bits = 0.5159 B per
  quantised weight. "the storage data type ... is dequantized to the computation data type (BF16)
  to perform the forward and backward pass"; adapters and their gradients in BF16 (§3, eq. 5-6).
  Only linear layers are quantised (bitsandbytes Linear4bit replaces nn.Linear; transformers keeps
  the output head in 16 bits: `llm_int8_skip_modules` default, integrations/bitsandbytes.py
  get_keys_to_not_convert).
* The backward of a frozen linear computes its input gradient only (dX = dY W^T: one GEMM, not
  two; no weight gradient): PyTorch autograd skips dW for a weight with requires_grad False;
  bitsandbytes autograd/_functions.py MatMul4Bit.backward computes grad_A from the dequantised
  weight and no grad_B. The attention core has no weights: its backward is unchanged.
* The adapter path in Hugging Face PEFT (src/peft/tuners/lora/layer.py, Linear.forward):
  result = base_layer(x); result += lora_B(lora_A(dropout(x))) * scaling, i.e. two skinny GEMMs
  and element-wise passes over the d_out-wide output; llmpar prices their FLOPs at the GEMM peak
  and their bytes at HBM bandwidth (cost/step.py).
* Targets: "qv" = PEFT's default for Llama-family models (q_proj, v_proj:
  TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING); "attention" = q, k, v, o; "all" = every
  linear layer of the blocks (PEFT target_modules="all-linear", which leaves the output head out;
  QLoRA §4: adapters on all linear layers are needed to match full fine-tuning).

Array-polymorphic in the degrees of a :class:`~llmpar.parallel.Parallel`; fine-tuning is modelled
data-parallel (tp = pp = cp = ep = 1, any ZeRO stage), as the HF PEFT / FSDP / DeepSpeed runs that
publish fine-tuning memory and speed are: :func:`layout_violations`.
"""

from __future__ import annotations

from typing import Any

# the option domains (parallel.py) and the layout rule (layout_settings.py) live with the other
# layout rules, not here

SRC_LORA = "Hu et al. 2021 (LoRA, arXiv:2106.09685) §4.1-4.2"
SRC_QLORA = "Dettmers et al. 2023 (QLoRA, arXiv:2305.14314) §3"

# QLoRA §3: NF4 with blocks of 64, Double Quantization (8-bit constants per 64, fp32 per 256 x 64)
NF4_BITS = 4.0 + 8.0 / 64.0 + 32.0 / (64.0 * 256.0)       # 4.127 bits per quantised weight
NF4_BYTES = NF4_BITS / 8.0                                 # 0.51587 B


def linear_shapes(model, moe: bool) -> list[tuple[str, int, int, float]]:
    """(name, d_in, d_out, count) of one block's linear layers, unsharded (tp = 1): attention q, k,
    v, o (MLA: q or q_down/q_up, kv_down, kv_up, o); FFN gate, up, down (GeLU: up, down); MoE: the
    router, every routed expert's gate/up/down (count = experts) and the shared experts' FFN."""
    from llmpar.cost.params import attention_head_dims, ffn_mats as _ffn_mats

    h, a, kv = model.hidden, model.heads, model.n_kv_heads
    d_qk, d_v = attention_head_dims(model)
    out: list[tuple[str, int, int, float]] = []
    if model.mla is not None:
        mla = model.mla
        if mla.q_lora_rank is None:
            out.append(("q", h, a * d_qk, 1.0))
        else:
            out += [("q_down", h, mla.q_lora_rank, 1.0), ("q", mla.q_lora_rank, a * d_qk, 1.0)]
        out += [("kv_down", h, mla.kv_lora_rank + mla.qk_rope_head_dim, 1.0),
                ("v", mla.kv_lora_rank, a * (mla.qk_nope_head_dim + d_v), 1.0)]   # kv_up carries V
    else:
        out += [("q", h, a * d_qk, 1.0), ("k", h, kv * d_qk, 1.0), ("v", h, kv * d_v, 1.0)]
    out.append(("o", a * d_v, h, 1.0))
    gated = _ffn_mats(model) == 3

    def ffn(prefix: str, f: int, count: float):
        mats = [(f"{prefix}gate", h, f, count)] if gated else []
        return mats + [(f"{prefix}up", h, f, count), (f"{prefix}down", f, h, count)]

    if moe and model.moe is not None:
        e = model.moe
        out.append(("router", h, e.experts, 1.0))
        out += ffn("expert_", e.expert_ffn_hidden, float(e.experts))
        if e.shared_experts:
            out += ffn("shared_", e.shared_experts * e.expert_ffn_hidden, 1.0)
    else:
        out += ffn("", model.ffn_hidden, 1.0)
    return out


_ATTN = {"q", "k", "v", "o", "q_down", "kv_down"}


def targeted(name: str, targets: str) -> bool:
    """Whether an adapter sits on linear ``name`` (:func:`linear_shapes`) under ``targets``."""
    if targets == "qv":
        return name in ("q", "v")
    if targets == "attention":
        return name in _ATTN
    return True


def adapter_params_per_layer(model, moe: bool, targets: str, rank: int) -> float:
    """Trainable LoRA parameters of one block: r (d_in + d_out) per adapted matrix (LoRA §4.1)."""
    return float(sum(rank * (i + o) * c for n, i, o, c in linear_shapes(model, moe) if targeted(n, targets)))


def adapter_shapes(model, moe: bool, targets: str, rank: int) -> list[tuple[str, int, int, float]]:
    return [(n, i, o, c) for n, i, o, c in linear_shapes(model, moe) if targeted(n, targets)]


def adapter_flops_per_token(model, moe: bool, targets: str, rank: int) -> float:
    """Forward FLOPs of one block's adapters per token: 2 r (d_in + d_out) per adapted matrix (the
    A and B products), each routed expert's only for the top-k tokens routed to it."""
    total = 0.0
    for n, i, o, c in adapter_shapes(model, moe, targets, rank):
        share = (model.moe.top_k / model.moe.experts) if n.startswith("expert_") else 1.0
        total += 2.0 * rank * (i + o) * c * share
    return total


def adapter_bytes_per_token(model, moe: bool, targets: str, rank: int, e: float = 2.0,
                            backward: bool = False) -> float:
    """HBM traffic of one block's adapter paths per token, in elements of ``e`` bytes; a routed
    expert's for its top-k share of tokens. Forward (PEFT Linear.forward): read x (d_in) for A,
    write and read x·A (2 r), write x·A·B (d_out), scale it (read + write 2 d_out), add it to the
    base output (read 2 d_out, write d_out): d_in + 2 r + 6 d_out. Backward (autograd of the same
    ops): scale the output gradient (read + write 2 d_out), read it for dB and for d(x·A) (2 d_out),
    write and read d(x·A) (2 r) and read x·A for dB (r), read x for dA (d_in), write dx through A
    and add it to the base's dx (read 2 d_in, write 2 d_in): 4 d_out + 5 d_in + 3 r."""
    total = 0.0
    for n, i, o, c in adapter_shapes(model, moe, targets, rank):
        share = (model.moe.top_k / model.moe.experts) if n.startswith("expert_") else 1.0
        per = (4.0 * o + 5.0 * i + 3.0 * rank) if backward else (i + 2.0 * rank + 6.0 * o)
        total += per * e * c * share
    return total


def largest_linear(model) -> float:
    """Elements of the block's largest linear weight (QLoRA dequantises one at a time into a 16-bit
    buffer: bitsandbytes dequantize_4bit allocates the full matrix)."""
    return float(max(i * o for moe in (False, True) for _, i, o, _ in linear_shapes(model, moe)))


def _wide(model, settings) -> dict[str, tuple[int, int]]:
    """The adapted matrices whose smaller side is below the rank: name -> (d_in, d_out)."""
    return {name: (i, o) for moe in ((False, True) if model.moe is not None else (False,))
            for name, i, o, _ in adapter_shapes(model, moe, settings.lora_targets, settings.lora_rank)
            if settings.lora_rank > min(i, o)}


def refuse_wide_rank(model, settings) -> None:
    """A --lora-rank the user gave above an adapted matrix's smaller side adds parameters and no
    expressiveness there: refused, naming the matrix (the default rank is only noted: wide_rank)."""
    from llmpar.errors import UserError

    for name, (i, o) in _wide(model, settings).items():
        raise UserError(f"--lora-rank {settings.lora_rank} exceeds {model.name}'s {name} matrix ({i} x {o}): "
                        f"a rank above {min(i, o)} is no longer low-rank there")


def wide_rank(model, settings) -> str:
    """The adapted matrices whose smaller side is below the rank, as a clause of the note ('' for
    none): PEFT builds such an adapter (r (d_in + d_out) parameters, as counted here) but it adds
    no expressiveness there (B·A spans the matrix at r = min(d_in, d_out)). For the default rank it
    is said, not refused: rank 16 on every linear meets Mixtral's 4096 x 8 router, and a refusal had
    blamed a --lora-rank the user never gave (a rank given is refused: refuse_wide_rank)."""
    if settings.finetune == "full":
        return ""
    wide = _wide(model, settings)
    if not wide:
        return ""
    shown = ", ".join(f"{n} ({i} x {o})" for n, (i, o) in wide.items())
    low = min(min(io) for io in wide.values())
    return (f"; rank {settings.lora_rank} is above the smaller side of {shown}: PEFT builds those adapters (counted) "
            f"but they are no longer low-rank there (--lora-targets attention leaves them out; --lora-rank {low} or "
            "less keeps them low-rank)")


_TARGET_WORDS = {"all": "every linear layer of the blocks", "attention": "q, k, v, o", "qv": "q and v"}


def note(model, settings, trainable_per_gpu: float, total: float) -> str:
    """One assumption line: the method, its adapters and what stays frozen."""
    full = model.layers and (model.dense_layers * adapter_params_per_layer(model, False, settings.lora_targets,
                                                                              settings.lora_rank)
                             + model.moe_layers * adapter_params_per_layer(model, True, settings.lora_targets,
                                                                           settings.lora_rank))
    base = (f"frozen base with its linear weights in NF4 + double-quantised constants ({NF4_BYTES:.4f} B each), "
            "embeddings, norms and the output head 16-bit (QLoRA §3)" if settings.finetune == "qlora"
            else f"frozen {settings.dtype} base (LoRA §4.1)")
    return (f"fine-tuning {settings.finetune}: rank-{settings.lora_rank} adapters on "
            f"{_TARGET_WORDS[settings.lora_targets]}: {full / 1e6:,.1f}M trainable parameters "
            f"({full / total * 100:.2f} % of {total / 1e9:,.2f}B; {trainable_per_gpu / 1e6:,.1f}M on this GPU's "
            f"stage), with gradients and optimizer states; {base}; activations as full fine-tuning saves them "
            "(an adapter needs its layer's input, as the weight gradient did): docs/finetune.md"
            + wide_rank(model, settings))


def describe(settings) -> dict[str, Any]:
    """The fine-tuning settings as JSON (None for full fine-tuning)."""
    if settings.finetune == "full":
        return {"method": "full"}
    return {"method": settings.finetune, "rank": settings.lora_rank, "targets": settings.lora_targets,
            "base_bytes_per_linear_param": NF4_BYTES if settings.finetune == "qlora" else 2.0,
            "source": SRC_QLORA if settings.finetune == "qlora" else SRC_LORA}
