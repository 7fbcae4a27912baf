"""Model states per GPU: bytes per parameter, offload, ZeRO divisors (docs/memory.md).

Split out of cost/memory.py (one concept per module); the TP/PP/EP shards (parameters per GPU
before ZeRO) are in cost/shards.py. Sources:

* Rajbhandari et al. 2019, "ZeRO", arXiv:1910.02054, §3.1 (2 + 2 + K bytes per parameter,
  K = 12 for mixed-precision Adam) and §5 (P_os, P_os+g, P_os+g+p), Fig. 1, Table 1.
* Megatron conventions: NVIDIA/Megatron-LM megatron/training/theoretical_memory_usage.py.
* DeepSpeed: stage_1_and_2.py estimate_zero2_model_states_mem_needs and stage3.py
  estimate_zero3_model_states_mem_needs (non-offload branches).
* fp8: NVIDIA Transformer Engine (bf16 primary weights + cached fp8 copy and transpose).

Array-polymorphic in every degree of a :class:`~llmpar.parallel.Parallel`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmpar.cost.arrays import scalar_out as _out
from llmpar.cost.shards import LayerShard, largest_layer_params
from llmpar.errors import UserError
from llmpar.parallel import Parallel, Settings
from llmpar.specs.model import ModelSpec

SRC_ZERO = "Rajbhandari et al. 2019 (ZeRO, arXiv:1910.02054) §3.1, §5, Fig. 1"
SRC_MEGATRON_CONV = "Megatron-LM megatron/training/theoretical_memory_usage.py (18 B/param; 6 + 12/d with the distributed optimizer)"
SRC_DS2 = "DeepSpeed stage_1_and_2.py estimate_zero2_model_states_mem_needs: 2Ψ + 18Ψ/N"
SRC_DS3 = "DeepSpeed stage3.py estimate_zero3_model_states_mem_needs: 4·largest_layer + 18Ψ/N"
SRC_TE_FP8 = "NVIDIA Transformer Engine fp8_autocast: bf16 primary weights + cached fp8 weight and transpose"
SRC_ZERO3_BUF = "PyTorch FSDP / DeepSpeed ZeRO-3: one layer gathered + one prefetched; its full gradient before reduce-scatter"


# =========================================================================== bytes per parameter

OPTIMIZER_BYTES = {
    # Adam/AdamW: fp32 master weight + first moment m + second moment v (ZeRO §3.1, K = 12)
    "adam": 12.0,
    "adamw": 12.0,
    # SGD with momentum: fp32 master weight + momentum
    "sgd": 8.0,
    # 8-bit Adam (Dettmers et al. 2021, arXiv:2110.02861): fp32 master (4) + m and v in 8 bits (1 + 1)
    "adam-8bit": 6.0,
    # Adam with bf16 moments: fp32 master (4) + m and v in bf16 (2 + 2) (DeepSeek-V3 §3.3.3;
    # Megatron-Core --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)
    "adam-bf16": 8.0,
}
OPTIMIZER_DOC = {
    "adam": "fp32 master 4 + m 4 + v 4", "adamw": "fp32 master 4 + m 4 + v 4",
    "sgd": "fp32 master 4 + momentum 4", "adam-8bit": "fp32 master 4 + 8-bit m 1 + 8-bit v 1",
    "adam-bf16": "fp32 master 4 + bf16 m 2 + bf16 v 2",
}
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp32": 4.0, "tf32": 4.0}   # bytes per element (tf32 is stored as fp32)
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 2.0}   # fp8 training keeps bf16 primary weights (TE)
INFERENCE_WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}  # serving fp8 checkpoints store 1 B/param
KV_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
# an FP8 element with its share of one fp32 scale per 1x128 tile (DeepSeek-V3 §3.3.2 fine-grained
# quantization): 1 + 4/128 = 1.03125 B; its FP8 dispatch and cached SwiGLU inputs (§3.3.3)
FP8_TILE_BYTES = 1.0 + 4.0 / 128.0
GRAD_BYTES = {"bf16": 2.0, "fp32": 4.0}


@dataclass(frozen=True)
class BytesPerParam:
    """Bytes per parameter of each model-state copy (ZeRO §3.1's 2 + 2 + K, generalised).

    ``gradients`` may be an array (the DeepSpeed convention counts 6 B under ZeRO-2 and 4 B under
    ZeRO-3). ``fp8_cache`` applies to linear-layer weights only.
    """

    weights: float
    gradients: Any
    optimizer: float
    fp8_cache: float
    convention: str
    describe: dict[str, str] = field(default_factory=dict)
    # True (or a mask) where the gradients are fp32 only because the stack accumulates them
    # unsharded over micro-batches (memory.accumulated_grad_fp32), not because --grad-dtype says so
    fp32_accumulated: Any = False


def bytes_per_param(settings: Settings, zero=0, microbatches=1) -> BytesPerParam:
    """Bytes per parameter for weights, gradients and optimizer states (docs/memory.md table).

    llmpar (default): weights 2 (bf16/fp16; fp8 keeps bf16 primaries and adds a 2-byte fp8 cache
    of linear weights, as Transformer Engine does), gradients per ``--grad-dtype`` (2 or 4),
    optimizer per ``--optimizer`` (adam/adamw 12, sgd 8, adam-8bit 6, adam-bf16 8). 2 + 2 + 12 = 16 (ZeRO §3.1).
    megatron: fp32 main gradients (4): 2 + 4 + 12 = 18 (theoretical_memory_usage.py).
    deepspeed: DeepSpeed's estimators: ZeRO-2 2 + (2 + 4 + 4 + 8)/N = 2 + 18/N, split here as
    weights 2, gradients 6 (bf16 + fp32), optimizer 12 (fp32 master + m + v); ZeRO-3 18/N split
    as weights 2, gradients 4 (fp32), optimizer 12 (plus 4·largest layer, see model states).
    A stack with ``memory.accumulated_grad_fp32`` (FSDP2 under PP: torchtitan) keeps the unsharded
    gradients it accumulates over m > 1 micro-batches at ZeRO-1 in fp32 (4), whatever
    ``--grad-dtype`` says: FSDP2 upcasts them to its reduce dtype while gradient sync is off
    (torch FSDPParam.to_accumulated_grad_if_needed; MixedPrecisionPolicy reduce_dtype float32).
    """
    conv = settings.convention
    w = WEIGHT_BYTES[settings.dtype]
    # fp8: the stack's recipe says how many bytes of fp8 copies a linear weight keeps (weight +
    # transpose: 2) and whether they are the primary weights (Megatron-Core --fp8-param-gather /
    # TE fp8_model_init: no bf16 copy of linear weights, so the cache replaces its 2 bytes)
    rec = settings.stack.kernels.fp8
    fp8 = (rec.weight_copy_bytes_per_param - (w if rec.primary_weights else 0.0)) if settings.dtype == "fp8" else 0.0
    k = OPTIMIZER_BYTES[settings.optimizer]
    acc = False
    if conv == "megatron":
        g = 4.0
        gdoc = "fp32 main gradients 4 (Megatron)"
    elif conv == "deepspeed":
        g = _out(np.where(np.asarray(zero) >= 3, 4.0, 6.0))
        k = 12.0
        gdoc = "ZeRO-2: bf16 2 + fp32 4; ZeRO-3: fp32 4 (DeepSpeed estimators)"
    else:
        g = GRAD_BYTES[settings.grad_dtype]
        gdoc = f"{settings.grad_dtype} gradients {g:g}"
        if settings.stack.memory.accumulated_grad_fp32 and g < 4.0:
            acc = _out((np.asarray(zero) == 1) & (np.asarray(microbatches) > 1))
            g = _out(np.where(acc, 4.0, g))
            if np.any(acc):
                gdoc = "fp32 gradients 4 (accumulated unsharded over the micro-batches: FSDP2's reduce dtype)"
    wdoc = f"{settings.dtype} weights {w:g}"
    if settings.dtype == "fp8":
        wdoc += (f"; linear weights as fp8 primaries (weight + transpose {rec.weight_copy_bytes_per_param:g}, no "
                 f"{w:g}-byte copy)" if rec.primary_weights else
                 f" + fp8 copy and transpose of linear weights {fp8:g} (Transformer Engine)")
    return BytesPerParam(
        weights=w, gradients=g, optimizer=k, fp8_cache=fp8, convention=conv,
        fp32_accumulated=acc,
        describe={"weights": wdoc, "gradients": gdoc,
                  "optimizer": f"{settings.optimizer}: {OPTIMIZER_DOC[settings.optimizer]} = {k:g}"
                  if conv != "deepspeed" else "fp32 master 4 + Adam m, v 8 = 12 (DeepSpeed)"},
    )


def frozen_precision(prec: BytesPerParam, settings: Settings) -> BytesPerParam:
    """Bytes per parameter of a frozen base (LoRA / QLoRA, cost/finetune.py): its weights only, no
    gradient and no optimizer state (LoRA §4.1). LoRA keeps them in the 16-bit dtype; QLoRA stores
    each linear weight in NF4 with double-quantised constants, 0.5159 B (QLoRA §3), written as the
    per-linear-weight term (``fp8_cache``, the bytes a linear weight holds beyond ``weights``:
    0.5159 - 2 < 0), embeddings, norms and the output head staying 16-bit."""
    from llmpar.cost.finetune import NF4_BYTES

    w = WEIGHT_BYTES[settings.dtype]
    lin = NF4_BYTES - w if settings.finetune == "qlora" else 0.0
    what = (f"frozen base: linear weights NF4 {NF4_BYTES:.4f} (QLoRA double quantization), the rest {w:g}"
            if settings.finetune == "qlora" else f"frozen base: {settings.dtype} weights {w:g}")
    return BytesPerParam(weights=w, gradients=0.0, optimizer=0.0, fp8_cache=lin, convention=prec.convention,
                         describe={"weights": what, "gradients": "none (frozen)", "optimizer": "none (frozen)"})


SRC_OFFLOAD = ("Ren et al. 2021 (ZeRO-Offload, arXiv:2101.06840) §4: fp32 master weights, optimizer states and the "
               "fp32 gradients on the CPU, 16-bit gradients down and parameters up each step; Megatron-Core "
               "--optimizer-cpu-offload --optimizer-offload-fraction")


def offload_optimizer(optimizer_bytes, prec: BytesPerParam, fraction):
    """Optimizer-state offload (``--optimizer-offload F``): (the optimizer bytes left in HBM, the host
    bytes). A share F of this GPU's optimizer states (fp32 master + moments, K B per parameter) lives
    in host memory with an fp32 gradient buffer for them (4 B per parameter: ZeRO-Offload §4 keeps
    the fp32 gradients on the CPU, where the step runs): host = F x (K + 4) x the parameters this GPU
    optimises. The 16-bit weights and the gradients as the backward produces them stay in HBM
    (not subtracted: DeepSpeed frees a ZeRO-2 gradient partition once copied, an upper bound here)."""
    f = float(fraction)
    if not f:
        return optimizer_bytes, 0.0 * np.asarray(optimizer_bytes, dtype=float)
    n = optimized_params(optimizer_bytes, prec)
    return (1.0 - f) * optimizer_bytes, f * (np.asarray(optimizer_bytes, dtype=float) + 4.0 * n)


SRC_PARAM_OFFLOAD = ("Rajbhandari et al. 2021 (ZeRO-Infinity, arXiv:2104.07857) §5: the 16-bit parameter shards in "
                     "CPU memory, copied to the GPU for each layer's all-gather; DeepSpeed zero_optimization."
                     "offload_param (stage 3 only, deepspeed/runtime/zero/offload_config.py)")


def offload_params(weights_bytes, zero, on):
    """Parameter offload (``--param-offload``, ZeRO-3): (the sharded weight bytes left in HBM, the
    host bytes). The rank's 16-bit shard of every parameter lives in host memory (ZeRO-Infinity §5;
    DeepSpeed keeps parameters below ``param_persistence_threshold``, 1e5 elements, on the GPU: the
    norms, a rounding error not counted); the two gathered layers' buffers stay in HBM (added by
    the caller). Array-polymorphic in ``weights_bytes`` and ``zero``."""
    w = np.asarray(weights_bytes, dtype=float)
    moved = np.where((np.asarray(zero) >= 3) & bool(on), w, 0.0)
    return w - moved, moved


def optimized_params(optimizer_bytes, prec: BytesPerParam):
    """Parameters this GPU's optimizer updates: its optimizer-state bytes over the bytes per
    parameter (all of them at ZeRO-0, 1/(dp·cp) at ZeRO-1+). Array-polymorphic."""
    return optimizer_bytes / prec.optimizer if prec.optimizer else 0.0 * np.asarray(optimizer_bytes)


def optimizer_step_bytes(mem, optimizer_bytes, prec: BytesPerParam):
    """The optimizer step's working buffers: the stack's ``memory.optimizer_step_bytes_per_param``
    (fitted; a foreach Adam's fp32 sqrt(v) is 4 B, torch/optim/adam.py _multi_tensor_adam) per
    parameter this GPU optimises, kept reserved by the caching allocator."""
    return mem.optimizer_step_bytes_per_param * optimized_params(optimizer_bytes, prec)


def convention_allows(settings: Settings, zero):
    """Mask of ZeRO stages a convention defines: megatron 0 and 1, deepspeed 2 and 3, llmpar all."""
    z = np.asarray(zero)
    if settings.convention == "megatron":
        return _out(z <= 1)
    if settings.convention == "deepspeed":
        return _out(z >= 2)
    return _out(np.ones_like(z, dtype=bool))


def check_convention(settings: Settings, zero: int) -> None:
    """One-line UserError for (convention, zero, optimizer) combinations a convention does not define."""
    if settings.convention == "megatron" and int(zero) > 1:
        raise UserError(
            f"--convention megatron covers ZeRO 0 (18 B/param) and 1 (distributed optimizer, 6 + 12/d), "
            f"not --zero {int(zero)}; use --convention llmpar or deepspeed"
        )
    if settings.convention == "deepspeed":
        if int(zero) < 2:
            raise UserError(
                f"--convention deepspeed reproduces DeepSpeed's ZeRO-2/3 estimators only, not --zero {int(zero)}; "
                "use --zero 2 or 3, or --convention llmpar"
            )
        if settings.optimizer not in ("adam", "adamw"):
            raise UserError(f"--convention deepspeed assumes Adam (its estimators count 12 B of optimizer state), "
                            f"not --optimizer {settings.optimizer}")


# ============================================================================ model states

def _zero_divisors(par: Parallel):
    """(weights, gradients, optimizer) divisors for non-expert and expert parameters.

    ZeRO (Rajbhandari 2019 §5) shards over the data-parallel group: dp·cp ranks (Megatron shards
    the distributed optimizer over the data-parallel-with-context-parallel group); expert
    parameters over the expert-data-parallel group tp·cp·dp/(ep·etp) (= dp·cp/ep when etp = tp).
    Stage 1 shards optimizer states,
    stage 2 also gradients, stage 3 also weights.
    """
    z = np.asarray(par.zero)
    n = np.asarray(par.dp, dtype=float) * np.asarray(par.cp, dtype=float)
    ne = np.asarray(par.expert_dp, dtype=float)   # Parallel.expert_dp: the one place the group size is computed
    one = np.ones_like(n)
    return (
        (np.where(z >= 3, n, one), np.where(z >= 2, n, one), np.where(z >= 1, n, one)),
        (np.where(z >= 3, ne, one), np.where(z >= 2, ne, one), np.where(z >= 1, ne, one)),
    )


def _states(ne, ex, lin_ne, lin_ex, prec: BytesPerParam, par: Parallel, div=None):
    """weights, gradients, optimizer bytes of ``ne`` non-expert + ``ex`` expert parameters
    (``div``: :func:`_zero_divisors` of ``par``, if already computed)."""
    (wd, gd, od), (wde, gde, ode) = div if div is not None else _zero_divisors(par)
    w = prec.weights * (ne / wd + ex / wde) + prec.fp8_cache * (lin_ne / wd + lin_ex / wde)
    g = np.asarray(prec.gradients) * (ne / gd + ex / gde)
    o = prec.optimizer * (ne / od + ex / ode)
    return w, g, o


def _zero3_buffers(model: ModelSpec, par: Parallel, prec: BytesPerParam, shard: LayerShard, has_layers):
    """Transient ZeRO-3 memory: llmpar/megatron: two layers' bf16 weights gathered (current +
    prefetched) and one layer's unsharded gradient; deepspeed: 4·largest_layer (2 B weight + 2 B
    gradient of the largest module, DeepSpeed's estimator). Returns (weights part, gradient part)."""
    z3 = np.asarray(par.zero) >= 3
    if prec.convention == "deepspeed":
        big = np.asarray(largest_layer_params(model, par))
        return np.where(z3, 2.0 * big, 0.0), np.where(z3, 2.0 * big, 0.0)
    layer = np.maximum(np.asarray(shard.dense), np.asarray(shard.moe) + np.asarray(shard.experts))
    layer = np.where(np.asarray(has_layers), layer, 0.0)
    return (np.where(z3, 2.0 * prec.weights * layer, 0.0),
            np.where(z3, np.asarray(prec.gradients) * layer, 0.0))



# ====================================================================== bare parameter count

def model_states_for_count(params, par: Parallel, settings: Settings) -> dict[str, Any]:
    """Model states of a bare parameter count Ψ (``--params 7.5B``), split evenly over tp·pp,
    ZeRO over dp·cp (Rajbhandari 2019 §5, Table 1). No shapes: no activations, and the DeepSpeed
    ZeRO-3 largest-layer term is 0. Array-polymorphic."""
    prec = bytes_per_param(settings, par.zero, par.microbatches)
    shard = np.asarray(params, dtype=float) / (np.asarray(par.tp, dtype=float) * np.asarray(par.pp, dtype=float))
    lin = shard if prec.fp8_cache else 0.0
    w, g, o = _states(shard, 0.0, lin, 0.0, prec, par)
    o, host = offload_optimizer(o, prec, settings.optimizer_offload)
    w, host_w = offload_params(w, par.zero, settings.param_offload)
    return {"params_per_gpu": _out(shard), "weights_bytes": _out(w), "gradients_bytes": _out(g),
            "optimizer_bytes": _out(o), "host_bytes": _out(host + host_w)}
