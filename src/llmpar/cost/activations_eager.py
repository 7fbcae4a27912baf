"""The PyTorch-eager saved set of a transformer block (docs/memory.md, "Eager activations").

In eager PyTorch every autograd node saves what its own backward needs, so a block written as a
chain of small ops (Hugging Face ``LlamaDecoderLayer``, nanotron's ``LlamaDecoderLayer``) keeps
more than Megatron/Transformer Engine's fused kernels (Korthikanti et al. 2022 §4.1, the
``fused`` table of :func:`llmpar.cost.activations.activation_terms`). This module rewrites the
fused table term by term; every difference is traced to the op that saves it:

* RMSNorm (transformers ``LlamaRMSNorm.forward``): ``x32 = x.to(float32)`` (saves nothing);
  ``x32.pow(2).mean(-1)`` — ``pow`` saves x32 (4h bytes per token); ``rsqrt(var + eps)`` saves
  its fp32 output (4 B per token); ``x32 * rstd`` saves x32 (same tensor) and rstd;
  ``weight * y.to(bf16)`` saves the 16-bit normalised y (2h). The 16-bit input itself is not
  saved by the norm: eager = 4h + 4 + 2h where the fused kernel (Apex/TE/Triton RMSNorm) saves
  its input 2h (+ 4 B rstd, which the fused table omits as Korthikanti does).
* SwiGLU (transformers ``LlamaMLP``: ``down(act(gate(x)) * up(x))``; nanotron ``GLUActivation``):
  ``silu`` saves its input, the gate output (2f); ``mul`` saves both operands, silu(gate) (2f)
  and the up output (2f); ``down`` saves the product (2f): 8f against the fused 6f (Megatron's
  ``bias_swiglu`` saves [gate, up] and recomputes silu in backward).
* Standard (non-flash) attention (transformers ``eager_attention_forward``):
  ``softmax(scores, dtype=float32)`` saves its fp32 output (4as per token), ``.to(bf16)`` and
  the AV matmul saves the 16-bit probabilities (2as): 6as² b bytes against the fused 2as² b.
* Unchanged: the q/k/v projections share one saved input; RoPE (``q·cos + rotate_half(q)·sin``)
  saves only cos/sin (no grad), flash-attention saves q, k, v (after RoPE), out and the fp32
  logsumexp (Dao 2023 §3.1), the output projection saves out (the same storage); residual adds
  save nothing; GeLU and LayerNorm are single ATen ops in eager too (same as fused).
"""

from __future__ import annotations

from dataclasses import replace

from llmpar.cost.act_term import ActTerm
from llmpar.specs.model import ModelSpec

SRC_EAGER_NORM = "transformers LlamaRMSNorm.forward (autograd: pow saves x32, rsqrt saves rstd, mul saves y16)"
SRC_EAGER_SWIGLU = "transformers LlamaMLP / nanotron GLUActivation (silu saves gate, mul saves silu(gate) and up)"
SRC_EAGER_SOFTMAX = "transformers eager_attention_forward: softmax(dtype=float32) saves fp32 probs; AV saves bf16 probs"


def eager_terms(terms: list[ActTerm], model: ModelSpec, *, block: bool = True, norms: bool = True) -> list[ActTerm]:
    """The eager version of a fused term table: ``norms`` rewrites the RMSNorm inputs, ``block``
    the SwiGLU and standard-attention terms (see the module docstring for each op)."""
    out: list[ActTerm] = []
    for t in terms:
        if norms and model.norm == "rmsnorm" and "RMSNorm" in t.name and t.name.endswith("input"):
            base = t.name[: -len(" input")]
            out += [
                replace(t, name=f"{base}: fp32 upcast (pow/mul input)", coef=4.0, source=SRC_EAGER_NORM),
                replace(t, name=f"{base}: rstd (fp32)", coef=4.0, dim=1, unit="1", source=SRC_EAGER_NORM),
                replace(t, name=f"{base}: normalised, 16-bit (weight-mul input)", coef=2.0, source=SRC_EAGER_NORM),
            ]
        elif block and "gate and up outputs (SwiGLU input)" in t.name:
            label = t.name.split(" gate and up")[0]
            out += [t, replace(t, name=f"{label} silu(gate) (mul input)", dim=t.dim // 2,
                               unit=t.unit[1:] if t.unit.startswith("2") else t.unit, source=SRC_EAGER_SWIGLU)]
        elif block and t.s2 and t.name.startswith("softmax output"):
            out += [replace(t, name="softmax output (fp32, eager softmax)", coef=4.0, source=SRC_EAGER_SOFTMAX),
                    replace(t, name="attention probabilities, 16-bit (AV matmul input)", coef=2.0,
                            source=SRC_EAGER_SOFTMAX)]
        else:
            out.append(t)
    return out


__all__ = ["eager_terms"]
