"""The shared options, declared once (issue 24 §1; docs/architecture.md, CLI conventions).

Each :class:`Option` holds what every face of llmpar needs to know about one option: its keyword
(the API's, the JSON's and ``calibrate runs`` columns' name), its flag, default, domain, help text
and which *mode* it describes. From this table:

- ``cli/common.py`` generates the click options of ``memory``, ``step``, ``plan`` and ``sweep``
  (the help a user reads is the text here);
- ``tests/test_options_declared_once.py`` checks that every API function those commands call takes
  each option under the same keyword with the same default;
- :func:`refuse_moot` refuses an option given in a mode it changes nothing in (``--recompute``
  with ``--inference``, ``--seq`` with ``--params``): one rule, one message, instead of a list
  written out per command (reliability review items 15 and 18).

Nothing here computes: the domains come from :mod:`llmpar.parallel`, where the values are checked
when the layout resolves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmpar.errors import UserError
from llmpar.parallel import (ATTENTION, CONVENTIONS, DTYPES, FINETUNE, GRAD_DTYPES, LORA_TARGETS, OPTIMIZERS,
                             RECOMPUTE, SCHEDULES)

# what an option describes, for refuse_moot: a training layout (refused with --inference), the
# activations (refused with --params, a bare parameter count that has none) and the experts of a
# mixture-of-experts model (refused for a dense one: refuse_expert_options)
TRAINING, ACTIVATIONS, EXPERTS = "training", "activations", "experts"


@dataclass(frozen=True)
class Option:
    """One option: ``name`` is the keyword (``micro_batch``), the flag is ``--micro-batch``."""

    name: str
    help: str | None = None
    kind: str = "int"                 # int | text | choice | bool (--x/--no-x) | switch (a flag)
    default: Any = None
    choices: tuple[str, ...] | None = None
    int_range: tuple[int, int] | None = None
    metavar: str | None = None
    show_default: bool = False
    describes: frozenset[str] = frozenset()
    unset: tuple[Any, ...] = (None,)  # values that ask for nothing (recompute "none", offload 0 layers)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def shown_flag(self) -> str:
        """The flag as a message names it: ``--sp/--no-sp`` for an on/off option."""
        return f"{self.flag}/--no-{self.flag[2:]}" if self.kind == "bool" else self.flag

    def given(self, value) -> bool:
        """True when ``value`` asks for something: not None, nor a value that means "none" (``unset``)."""
        if self.kind == "switch":
            return bool(value)
        return value not in self.unset


def _opt(name: str, help: str | None = None, **kw) -> Option:
    describes = frozenset(kw.pop("describes", ()))
    return Option(name, help, describes=describes, **kw)


_T, _A = TRAINING, ACTIVATIONS

LAYOUT = (
    _opt("gpus", "Total GPUs = tp*cp*pp*dp."),
    _opt("tp", "Tensor-parallel degree (default 1)."),
    _opt("pp", "Pipeline-parallel degree (default 1; uneven stages allowed)."),
    _opt("dp", "Data-parallel degree (default: derived from --gpus, or one node)."),
    _opt("cp", "Context-parallel degree (default 1)."),
    _opt("ep", "Expert-parallel degree, carved out of dp*cp (default 1)."),
    _opt("etp", "Expert tensor-parallel degree (default tp). Below tp, EP also spans the TP ranks: ep*etp divides "
                "tp*cp*dp (Megatron-Core MoE parallel folding)."),
    _opt("zero", "ZeRO stage over dp*cp.", default=0, int_range=(0, 3), show_default=True),
    _opt("sp", "Sequence parallelism (default: on when tp > 1).", kind="bool", describes=(_T, _A)),
    _opt("recompute", None, kind="choice", choices=RECOMPUTE, default="none", show_default=True,
         describes=(_T, _A), unset=(None, "none")),
    _opt("micro_batch", "Sequences per micro-batch (default 1).", describes=(_T, _A)),
    _opt("global_batch", "Sequences per step (m = B / (b*dp)).", describes=(_T,)),
    _opt("microbatches", "Micro-batches per step, instead of --global-batch.", describes=(_T,)),
    _opt("seq", "Sequence length (default min(8192, model max)).", describes=(_A,)),
    _opt("schedule", "Pipeline schedule (default 1f1b).", kind="choice", choices=SCHEDULES, describes=(_T, _A)),
    _opt("virtual_stages", "Chunks per stage; > 1 means interleaved.", describes=(_T, _A)),
    _opt("recompute_layers", "With --recompute full: recompute only N layers of each pipeline chunk, as "
                             "Megatron-Core's --recompute-method block --recompute-num-layers N (default: all).",
         describes=(_T, _A)),
    _opt("offload_layers", "Hold the saved activations of the first N layers in host memory, copied out after "
                           "their forward and back before their backward (Megatron-Core --cpu-offloading-num-layers; "
                           "needs --pp 1 and --recompute none).", describes=(_T, _A), unset=(None, 0)),
)

PRECISION = (
    _opt("dtype", "Compute/weight dtype.", kind="choice", choices=DTYPES, default="bf16", show_default=True),
    _opt("optimizer", None, kind="choice", choices=OPTIMIZERS, default="adam", show_default=True, describes=(_T,)),
    _opt("stack", "Framework profile: shipped name (see `llmpar stacks`) or a YAML path (default megatron-core).",
         kind="text"),
    _opt("grad_dtype", "Gradient dtype (default: the stack's: fp32 when it keeps an fp32 main-grad buffer, else bf16); "
                       "bf16 given here is also reduced in bf16.", kind="choice", choices=GRAD_DTYPES,
         describes=(_T,)),
    _opt("convention", "Byte accounting: llmpar, megatron (18 B/param) or deepspeed (ZeRO estimators).",
         kind="choice", choices=CONVENTIONS, default="llmpar", show_default=True, describes=(_T,)),
    _opt("attention", "standard (s² scores in HBM) or flash (default: the stack's attention kernel).",
         kind="choice", choices=ATTENTION, describes=(_A,)),
    _opt("recompute_modules", "What --recompute selective re-runs, as Megatron-Core --recompute-modules: "
                              "comma-separated core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts "
                              "(default: the stack's selective set; megatron-core: core_attn).", kind="text",
         describes=(_T, _A)),
    _opt("reserve", "Runtime memory held back, e.g. 6GiB: replaces the stack's CUDA context + NCCL buffers "
                    "(the allocator overhead still applies).", kind="text"),
    _opt("finetune", "full (default), lora (frozen 16-bit base + rank-r adapters) or qlora (frozen NF4 base with "
                     "double quantization + adapters): docs/finetune.md.", kind="choice", choices=FINETUNE,
         describes=(_T, _A), unset=(None, "full")),
    _opt("lora_rank", "LoRA/QLoRA adapter rank r (default 16): r (d_in + d_out) trainable parameters per adapted "
                      "matrix.", int_range=(1, 65536), metavar="R", describes=(_T, _A)),
    _opt("optimizer_offload", "Share of the optimizer states kept in host memory, their step run on the CPU (0-1; "
                              "1 = DeepSpeed ZeRO-Offload; Megatron-Core --optimizer-offload-fraction): needs ZeRO "
                              ">= 1.", kind="text", metavar="F", describes=(_T,)),
    _opt("param_offload", "Hold ZeRO-3's 16-bit parameter shards in host memory, copied in before each gather "
                          "(DeepSpeed ZeRO-Infinity offload_param device cpu): needs --zero 3 and a stack that does "
                          "it.", kind="switch", describes=(_T,)),
    _opt("lora_targets", "Linears that get adapters: all (every block linear, QLoRA's choice; default), attention "
                         "(q, k, v, o) or qv (PEFT's Llama default).", kind="choice", choices=LORA_TARGETS,
         describes=(_T, _A)),
)

OVERLAP = (
    _opt("dp_overlap", "Usable fraction of the compute DP traffic hides behind (default: the stack's overlap.dp; 0: "
                       "none, as Megatron-LM 2021).", kind="float"),
    _opt("tp_overlap", "Usable fraction of the GEMM time TP collectives hide behind inside an NVLink domain "
                       "(default: the stack's overlap.tp; 0: none, as Megatron-LM 2021-22).", kind="float"),
    _opt("ep_overlap", "Usable fraction of a MoE layer's compute its all-to-alls hide behind, on the chunks the "
                       "schedule pairs with one of the other direction (default: the stack's overlap.ep; 1: "
                       "Megatron-Core --overlap-moe-expert-parallel-comm; DualPipe always pairs).", kind="float",
         describes=(EXPERTS,)),
    _opt("ep_dispatcher", "How MoE tokens reach their experts (default: the stack's kernels.ep_dispatcher): "
                          "alltoall, one copy per (token, expert); deepep, once per remote node over the NICs, then "
                          "NVLink (Megatron-Core --moe-enable-deepep / flex dispatcher; DeepSeek-V3).",
         kind="choice", choices=("alltoall", "deepep"), describes=(EXPERTS,)),
    _opt("rank_order", "Rank order, innermost first: which groups share a node (default tp-cp-dp-pp, Megatron's).",
         kind="text"),
)

BY_NAME: dict[str, Option] = {o.name: o for o in LAYOUT + PRECISION + OVERLAP}
LAYOUT_KEYS: tuple[str, ...] = tuple(o.name for o in LAYOUT)


def pick(values: dict[str, Any], group) -> dict[str, Any]:
    """The options of ``group`` (a tuple of :class:`Option`) out of a keyword dict, by name."""
    return {o.name: values[o.name] for o in group if o.name in values}


def refuse_moot(values: dict[str, Any], what: str, why: str) -> None:
    """Refuse every option of the table that describes ``what`` (TRAINING or ACTIVATIONS) and was
    given in ``values``: one line naming them all, ``why`` completing the sentence. An option that
    changes nothing in the mode given is refused, never silently dropped (issue 24 §2)."""
    bad = [o.shown_flag for o in LAYOUT + PRECISION + OVERLAP
           if what in o.describes and o.name in values and o.given(values[o.name])]
    if bad:
        one = len(bad) == 1
        raise UserError(why.format(flags=", ".join(bad), s="s" if one else "", it="it" if one else "them"))


def refuse_expert_options(values: dict[str, Any], model) -> None:
    """A dense model has no experts: --ep-overlap and --ep-dispatcher change nothing there and are
    refused (step had taken them silently; plan refused --ep alone). One rule for memory, step and
    plan; ``values`` their keywords (None: not given). --etp has its layout rule (layout.py "etp":
    refused where it differs from tp; equal to tp it is the default a plan row's layout carries)."""
    if model.moe is None:
        refuse_moot(values, EXPERTS, "{flags} describe{s} the experts of a mixture-of-experts model; "
                    f"{model.name} is dense: drop {{it}}")
