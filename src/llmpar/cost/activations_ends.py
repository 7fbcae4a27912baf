"""Saved activations of the pipeline's ends (docs/memory.md, Activations): what the first stage
keeps per micro-batch besides its layers (token ids, the embedding-dropout mask) and what the
last stage keeps (final norm, LM-head input, the logits of the vocab-parallel cross-entropy and
the stack's copies of them), as named terms; Korthikanti et al. 2022 (arXiv:2205.05198) §4.3.

Split out of cost/activations.py (the per-layer tables and their per-token byte sums).
"""

from __future__ import annotations

import numpy as np

from llmpar.cost.act_term import ActTerm
from llmpar.cost.activations import term_bytes
from llmpar.cost.states import SRC_MEGATRON_CONV
from llmpar.parallel import Parallel
from llmpar.specs.model import ModelSpec

SRC_KORTH_EXTRA = "Korthikanti et al. 2022 §4.3 (embedding dropout, final norm, output layer, fp32 logits)"


def first_stage_extra_terms(model: ModelSpec) -> list[ActTerm]:
    """Per micro-batch on the first stage: token ids (int64, Megatron theoretical_memory_usage.py)
    and the embedding-dropout mask (Korthikanti §4.3), when the model has dropout."""
    T = [ActTerm("token ids (int64)", 8.0, 1, "1", tp=False, sp=False, selective=True, source=SRC_MEGATRON_CONV)]
    if model.dropout:
        T.append(ActTerm("embedding dropout mask", 1.0, model.hidden, "h", tp=False, sp=True, selective=True,
                         source=SRC_KORTH_EXTRA))
    return T


SRC_LOGITS_GRAD = ("PyTorch log_softmax / Megatron vocab_parallel_cross_entropy backward: the fp32 gradient of "
                   "the logits is allocated while the saved fp32 softmax is alive (nanotron: the fp32 cast copy "
                   "beside it in the forward)")


SRC_LOGITS_16BIT = ("torchtitan train.py (9dec370): pred = model(input_ids); loss = loss_fn(pred, labels) with "
                    "loss_fn = cross_entropy(pred.float(), ...); 'del pred' only before loss.backward()")


SRC_LOSS_PARALLEL = ("torch distributed/tensor/parallel/loss.py _log_softmax (loss_parallel, torch 2.5-2.6): x - "
                     "amax(x), exp of that, then shifted - log(sumexp): x, shifted and exp(shifted) (then the "
                     "result) live together in fp32, one copy more than a fused log_softmax; torchtitan 9dec370 "
                     "enables loss_parallel whenever TP > 1 (parallel_dims.loss_parallel_enabled)")


def last_stage_extra_terms(model: ModelSpec, mem=None) -> list[ActTerm]:
    """Per micro-batch on the last stage (Korthikanti §4.3, 4sbh/t·(1 + V/h)): final-norm input,
    LM-head input, and the logits of the vocab-parallel cross-entropy (fp32: 4·s·b·V/t; for a
    128K vocabulary these outweigh a layer). ``mem`` (a stack's memory block, None = Korthikanti's
    accounting): ``fp32_logits`` False keeps 16-bit logits (2 B); ``logits_grad`` adds the logits'
    fp32 gradient, live at the same time (2x); ``logits_16bit_live`` the LM head's 16-bit output
    beside them (2 B; torchtitan keeps ``pred`` through its fp32 loss); ``loss_parallel_fp32_copies``
    more fp32 copies when TP > 1 (torch loss_parallel's decomposed log-softmax); ``activations``/
    ``norm_kernel`` 'eager' gives the final RMSNorm the eager saved set."""
    h = model.hidden
    norm = "LayerNorm" if model.norm == "layernorm" else "RMSNorm"
    fp32 = True if mem is None else bool(mem.fp32_logits)
    nb = 4.0 if fp32 else 2.0
    T = [
        ActTerm(f"final {norm} input", 2.0, h, "h", tp=False, sp=True, selective=True, source=SRC_KORTH_EXTRA),
        ActTerm("LM-head input", 2.0, h, "h", tp=False, sp=True, selective=True, source=SRC_KORTH_EXTRA),
        ActTerm(f"logits ({'fp32' if fp32 else '16-bit'}, vocab-parallel cross-entropy)", nb, model.vocab, "V",
                tp=True, sp=False, selective=True, source=SRC_KORTH_EXTRA),
    ]
    if mem is not None and mem.logits_grad:
        T.append(ActTerm("gradient of the logits (fp32, live with them)", 4.0, model.vocab, "V", tp=True, sp=False,
                         selective=True, source=SRC_LOGITS_GRAD))
    if mem is not None and mem.loss_parallel_fp32_copies > 0:
        T.append(ActTerm("vocab-parallel log-softmax temporaries (fp32, TP > 1)", 4.0 * mem.loss_parallel_fp32_copies,
                         model.vocab, "V", tp=True, sp=False, selective=True, source=SRC_LOSS_PARALLEL, only_tp=True))
    if mem is not None and mem.logits_16bit_live:
        T.append(ActTerm("16-bit logits (the LM head's output, live through the loss)", 2.0, model.vocab, "V", tp=True,
                         sp=False, selective=True, source=SRC_LOGITS_16BIT))
    if mem is not None and (mem.norm_kernel or mem.activations) == "eager":
        from llmpar.cost.activations_eager import eager_terms

        T = eager_terms(T, model, block=False, norms=True)
    return T


def _extra_bytes(terms: list[ActTerm], par: Parallel):
    total = 0.0
    for term in terms:
        total = total + np.asarray(term_bytes(term, par))
    return total
