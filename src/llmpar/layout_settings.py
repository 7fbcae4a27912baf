"""The rules on the settings a layout runs with: optimizer and parameter offload (what ZeRO stage
they need, what host fields of the hardware), fine-tuning's degrees, and the checks of the
precision and stack settings against the hardware. Each layout rule is one array-polymorphic mask
(the planner masks candidates with it) with one message (memory and step refuse with it), as in
layout.py, which applies them when it resolves a layout (docs/architecture.md, The house)."""

from __future__ import annotations

import numpy as np

from llmpar.errors import UserError
from llmpar.parallel import Settings
from llmpar.specs.hardware import Hardware


def out_mask(x):
    """A rule's mask: a Python bool for one layout, the array for many."""
    return bool(x) if np.ndim(x) == 0 else x


def optimizer_offload_violations(settings: Settings, zero):
    """Mask of layouts outside what llmpar models for optimizer offload: ZeRO-0 (the offloaded states
    are ZeRO's partition: DeepSpeed offload_optimizer needs a ZeRO stage, Megatron-Core offloads the
    distributed optimizer's shard)."""
    z = np.asarray(zero)
    return out_mask((z < 1) & (settings.optimizer_offload > 0.0))


def param_offload_violations(settings: Settings, zero):
    """Mask of layouts where --param-offload has nothing to move: below ZeRO-3 the GPU holds the
    full replica it computes with (DeepSpeed offload_param is a stage-3 option)."""
    return out_mask((np.asarray(zero) < 3) & settings.param_offload)


def finetune_layout_violations(finetune: str, tp, pp, cp, ep):
    """Mask of layouts outside what llmpar models for LoRA/QLoRA: tp, pp, cp or ep > 1 (fine-tuning
    is priced data-parallel, with any ZeRO stage: cost/finetune.py's module doc). Full fine-tuning is unrestricted."""
    if finetune == "full":
        return out_mask(np.zeros(np.broadcast_shapes(*(np.shape(x) for x in (tp, pp, cp, ep))), dtype=bool))
    return out_mask((np.asarray(tp) > 1) | (np.asarray(pp) > 1) | (np.asarray(cp) > 1) | (np.asarray(ep) > 1))


def finetune_layout_message(finetune: str, tp: int, pp: int, cp: int, ep: int) -> str:
    given = ", ".join(f"{k} {v}" for k, v in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep)) if v > 1)
    return (f"--finetune {finetune} is modelled data-parallel only (tp = pp = cp = ep = 1, any ZeRO stage: the "
            f"Hugging Face PEFT / FSDP / DeepSpeed setting of the published runs), not {given}; "
            "TP-sharded adapters (NeMo) are not modelled (docs/finetune.md)")


def check_optimizer_offload(hardware: Hardware, settings: Settings, zero=None) -> None:
    """--optimizer-offload F needs the profile's host link, host DRAM bandwidth and host memory, and
    (when ``zero`` is given) a ZeRO stage >= 1 (optimizer_offload_violations above); so does
    --param-offload (check_param_offload)."""
    check_param_offload(hardware, settings, zero)
    f = settings.optimizer_offload
    if not f:
        return
    _need_host(hardware, f"--optimizer-offload {f:g}", ("host_bandwidth", "host_memory_bandwidth", "host_memory_per_gpu"))
    if zero is not None:
        if bool(optimizer_offload_violations(settings, zero)):
            raise UserError(f"--optimizer-offload {f:g} offloads ZeRO's optimizer partition: it needs --zero 1, 2 or 3 "
                            "(DeepSpeed offload_optimizer; Megatron-Core's distributed optimizer), got --zero 0")


def _need_host(hardware: Hardware, option: str, keys) -> None:
    """An offload option needs these host fields of the hardware profile (one line naming them)."""
    missing = [k for k in keys if getattr(hardware, k) is None]
    if missing:
        raise UserError(f"{option} needs the hardware's {', '.join(missing)}; {hardware.name} states none "
                        "(add them to a copy of the profile: docs/hardware.md)")


def check_param_offload(hardware: Hardware, settings: Settings, zero=None) -> None:
    """--param-offload needs a stack whose framework offloads parameters (stack
    ``param_offloading``), the profile's host link and host memory, and (when ``zero`` is given)
    ZeRO-3, whose parameter shards are what moves (param_offload_violations above)."""
    if not settings.param_offload:
        return
    stack = settings.stack
    if not stack.param_offloading:
        raise UserError(f"--param-offload: stack {stack.name} does not offload parameters to host memory (stack "
                        "param_offloading; deepspeed does: ZeRO-Infinity offload_param)")
    if stack.param_offloading == "with-optimizer" and settings.optimizer_offload < 1.0:
        raise UserError(f"--param-offload under stack {stack.name}: its CPU offload (torch FSDP2 CPUOffloadPolicy) "
                        "moves parameters, gradients and the optimizer step together: add --optimizer-offload 1")
    _need_host(hardware, "--param-offload", ("host_bandwidth", "host_memory_per_gpu"))
    if zero is not None:
        if bool(param_offload_violations(settings, zero)):
            raise UserError(f"--param-offload moves ZeRO-3's parameter shards to host memory: it needs --zero 3 "
                            f"(DeepSpeed offload_param is a stage-3 option), got --zero {int(np.asarray(zero))}")


def check_settings(hardware: Hardware, settings: Settings) -> None:
    """Rules on the precision settings that every command applies the same way: the compute dtype
    needs a peak on this hardware (A100 has no FP8 tensor cores: `memory` refused nothing while
    `step` and `plan` refused it, issue 9 item 6)."""
    try:
        hardware.gpu.peak(settings.dtype)
    except UserError as exc:
        raise UserError(f"--dtype {settings.dtype}: {exc}; choose a dtype this GPU computes in") from None
    sms = hardware.gpu.sms
    for key in ("ep_sms", "dp_sms"):
        held = getattr(settings.stack.overlap, key)
        if sms is not None and held > sms:    # reliability review, item 4: priced as more than every SM
            raise UserError(f"stack {settings.stack.name}: overlap.{key} {held} is more than the {sms} SMs of "
                            f"{hardware.gpu.name} ({hardware.name})")
