"""One tensor a layer saves for its backward (:class:`ActTerm`): the row type of the saved-activation
tables of cost/activations.py (the fused, Korthikanti-style set) and cost/activations_eager.py (the
PyTorch-eager set), kept apart so neither table module imports the other."""

from __future__ import annotations

from dataclasses import dataclass

SRC_KORTH = "Korthikanti et al. 2022 (arXiv:2205.05198) §4.1, Table 2"


@dataclass(frozen=True)
class ActTerm:
    """One tensor a layer saves for its backward, per token (Korthikanti 2022 §4.1 style).

    bytes per layer per micro-batch = coef · dim · b · (s/c) [· s for s² terms] ÷ t if ``tp``
    (÷ t if ``sp`` and sequence parallelism is on). ``selective``: kept under selective
    recompute (Korthikanti §5 recomputes the attention core: the s² terms and softmax stats).
    """

    name: str
    coef: float          # bytes per element
    dim: int             # elements per token (s² terms: per token per key position)
    unit: str            # symbolic per-token size: 'h', 'f', 'a·d', 'a·s', ...
    tp: bool
    sp: bool
    selective: bool
    s2: bool = False
    source: str = SRC_KORTH
    only_selective: bool = False   # saved only under selective recompute (a policy's own set, e.g. torchtitan-op)
    only_tp: bool = False          # held only when TP > 1 (torch loss_parallel's decomposed log-softmax)
    # dispatched tokens gathered over the expert-TP group: x etp/t of the replicated size (with
    # etp = t every expert-TP rank holds all T tokens' copies; MoE parallel folding with etp < t
    # leaves each rank its own T/t tokens' copies times etp: Liu et al. 2025, arXiv:2504.14960 §3)
    etp: bool = False
    # the Megatron-Core recompute module whose selective recompute drops it (TransformerConfig
    # recompute_modules): core_attn the attention core's own tensors; layernorm, mla_up_proj and
    # moe_act the outputs they discard and recompute; mlp, moe and shared_experts everything inside
    # them but their input (Settings.selective_policy; None: no module drops it)
    module: str | None = None

    @property
    def per_token(self) -> float:
        return self.coef * self.dim
