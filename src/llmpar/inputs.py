"""The first step of every command: its options turned into specs and settings.

Model, hardware and stack names (or YAML paths, a Hugging Face config.json, or already-loaded
spec objects) become :class:`~llmpar.specs.model.ModelSpec`, :class:`~llmpar.specs.hardware.Hardware`
and :class:`~llmpar.parallel.Settings`; ``--reserve`` becomes bytes. The API
(:mod:`llmpar.api`), the planner (:mod:`llmpar.planner.search`, :mod:`llmpar.planner.sweep`) and the
CLI all start here, so a name means the same thing everywhere. Nothing here computes a cost.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from llmpar.errors import UserError
from llmpar.parallel import SCHEDULES, Settings
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec
from llmpar.units import parse_bytes, refuse_underflow


def load_model_spec(model: str | ModelSpec | None = None, hf: str | None = None) -> tuple[ModelSpec, str | None]:
    """(spec, alias typed or None) from a shipped name/alias, a YAML path, a HF config.json, or a
    loaded :class:`ModelSpec`."""
    from llmpar.specs import registry

    if model is not None and hf is not None:
        raise UserError("give either a MODEL or --hf config.json, not both")
    if isinstance(model, ModelSpec):
        return model, None
    if hf is not None:
        if not isinstance(hf, (str, os.PathLike)):   # the one check of an hf= argument (API and CLI)
            raise UserError(f"hf must be the path of a HF config.json (a string or a Path), got {hf!r}")
        path = Path(hf)
        if path.is_dir():
            raise UserError(f"--hf: {hf} is a folder; give its config.json")
        if not path.is_file():
            raise UserError(f"--hf: file not found: {hf}")
        from llmpar.specs.hf import load_hf_config

        return load_hf_config(path), None
    if not isinstance(model, (str, Path)):
        raise UserError(f"model must be a name, a YAML path or a ModelSpec, got {model!r}")
    spec = registry.load_model(str(model))
    _, alias = registry.resolved_name(str(model)) if not registry.looks_like_path(str(model)) else (None, None)
    return spec, alias


def load_hardware_spec(hardware: str | Hardware) -> Hardware:
    """A shipped profile name, a YAML path, or a loaded :class:`Hardware` (returned as is)."""
    from llmpar.specs import registry

    return registry.load_hardware(hardware)


def parse_reserve(reserve, hw: Hardware) -> float | None:
    """--reserve as bytes: an explicit override of the runtime memory (CUDA context + NCCL buffers),
    or None = the stack's runtime model (a legacy ``reserve`` in a user's hardware profile counts
    as --reserve). Must leave room on the GPU."""
    if reserve is None and getattr(hw, "reserve", None) is None:
        return None
    # + 0.0: '-0' is zero, not a "-0.00 GiB" reserve
    value = (float(hw.reserve) if reserve is None else parse_bytes(reserve, "--reserve", allow_zero=True)) + 0.0
    if reserve is not None:
        from llmpar.units import refuse_bare_small

        refuse_bare_small(reserve, value, 2**20, "--reserve", "GiB")   # a runtime reserve is never under 1 MiB
    if value >= hw.gpu.memory:
        raise UserError(f"--reserve {reserve} is not smaller than the {hw.gpu.memory / 1e9:.2f} GB of GPU memory")
    return value


def _fraction(value, option: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UserError(f"--{option} must be a number between 0 and 1, got {value!r}") from None


def make_settings(model: ModelSpec | None, *, dtype="bf16", optimizer="adam", grad_dtype=None,
                  convention="llmpar", attention=None, kv_dtype=None, dp_overlap=None, tp_overlap=None,
                  rank_order=None, stack=None, ep_overlap=None, ep_dispatcher=None,
                  recompute_modules=None, finetune=None, lora_rank=None, lora_targets=None,
                  optimizer_offload=None, param_offload=None) -> Settings:
    """Settings from the CLI's precision/overlap options and ``--stack`` (a name, a YAML path or
    a loaded Stack; None = the default stack). An option left as None takes the stack's value."""
    if grad_dtype is not None and convention in ("megatron", "deepspeed"):
        # the convention's formula fixes the gradient bytes (Megatron fp32 main gradients, 4 B/param;
        # DeepSpeed's estimators): a --grad-dtype would change nothing (reliability review, item 17)
        raise UserError(f"--grad-dtype {grad_dtype} has no effect under --convention {convention}, whose formula "
                        "fixes the gradient bytes: drop it, or use --convention llmpar to count it")
    kv = kv_dtype or ("fp16" if dtype == "fp16" else "bf16")
    extra = {key: _fraction(v, key.replace("_", "-")) for key, v in
             (("dp_overlap", dp_overlap), ("tp_overlap", tp_overlap), ("ep_overlap", ep_overlap)) if v is not None}
    extra.update({key: (v if key == "recompute_modules" else str(v)) for key, v in
                  (("ep_dispatcher", ep_dispatcher), ("recompute_modules", recompute_modules),
                   ("rank_order", rank_order)) if v is not None})
    if (lora_rank is not None or lora_targets is not None) and finetune in (None, "full"):
        given = " and ".join(o for o, v in (("--lora-rank", lora_rank), ("--lora-targets", lora_targets)) if v is not None)
        raise UserError(f"{given} describe{'s' if ' and ' not in given else ''} LoRA adapters: add --finetune lora "
                        "or qlora (full fine-tuning has none)")
    if finetune is not None:
        extra["finetune"] = str(finetune)
    if lora_rank is not None:
        extra["lora_rank"] = lora_rank
    if lora_targets is not None:
        extra["lora_targets"] = str(lora_targets)
    if optimizer_offload is not None:
        try:
            extra["optimizer_offload"] = float(str(optimizer_offload).strip().rstrip("%")) / (
                100.0 if str(optimizer_offload).strip().endswith("%") else 1.0)
        except ValueError:
            raise UserError(f"--optimizer-offload must be a fraction from 0 to 1, got {optimizer_offload!r}") from None
        if not math.isfinite(extra["optimizer_offload"]):
            raise UserError(f"--optimizer-offload must be a fraction from 0 to 1, got {optimizer_offload!r}")
        # 1e-400 reads as 0.0 (below the smallest float): it was silently no offload at all
        refuse_underflow(extra["optimizer_offload"], str(optimizer_offload).rstrip("%"), "--optimizer-offload")
    if param_offload is not None:
        extra["param_offload"] = param_offload
    settings = Settings(dtype=dtype, optimizer=optimizer, grad_dtype=grad_dtype, convention=convention,
                        attention=attention, kv_dtype=kv, stack=stack, **extra)
    if recompute_modules is not None and model is not None:
        _check_modules(model, settings.recompute_modules)
    if model is not None and lora_rank is not None and settings.finetune != "full":
        # a rank the user gave above an adapted matrix's smaller side is refused, naming it; the
        # default rank meeting a narrow matrix (Mixtral's router) is said in the note instead
        from llmpar.cost.finetune import refuse_wide_rank

        refuse_wide_rank(model, settings)
    return settings


def _check_modules(model: ModelSpec, modules) -> None:
    """--recompute-modules that name a module the model does not have would re-run nothing
    (reliability review, item 16: the output said "selective recompute" and matched none)."""
    have = {"moe_act": model.moe is not None, "moe": model.moe is not None,
            "shared_experts": model.moe is not None and model.moe.shared_experts > 0,
            "mla_up_proj": model.mla is not None, "mlp": model.dense_layers > 0}
    missing = [m for m in modules if not have.get(m, True)]
    if missing:
        raise UserError(f"--recompute-modules {', '.join(missing)}: {model.name} has no such module"
                        f"{'s' * (len(missing) > 1)} (" + "; ".join(
                            {"moe_act": "no MoE layers", "moe": "no MoE layers", "shared_experts": "no shared experts",
                             "mla_up_proj": "no MLA attention", "mlp": "no dense FFN layers"}[m] for m in missing) + ")")


def stack_note(settings: Settings, generation: str | None = None) -> str:
    """One line naming the stack and the values of it a result used on a GPU of ``generation``, and
    what overrode it."""
    st = settings.stack
    over = settings.overrides()
    tp = settings.tp_overlap_on(generation)
    tp_text = f"tp overlap {tp:g}" + ("" if tp == settings.tp_overlap else
                                      f" (its {settings.tp_overlap:g} is measured on "
                                      f"{', '.join(st.overlap.tp_generations or ()) or 'no GPU generation'}"
                                      f"{' only' if st.overlap.tp_generations else ''}: "
                                      f"none on {generation} without --tp-overlap)")
    parts = [f"attention {settings.attention} ({st.kernels.attention.kernel} kernel)",
             f"grad dtype {settings.grad_dtype}", tp_text, f"dp overlap {settings.dp_overlap:g}"]
    text = f"stack {st.name}: " + ", ".join(parts)
    if over:
        text += " (given: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in over.items()) + ")"
    return text + " (`llmpar stacks show " + st.name + "`)"


def stack_support_note(settings: Settings, par) -> str | None:
    """A warning when a layout uses a ZeRO stage or pipeline schedule the stack's framework does not
    implement (its ``zero_stages`` / ``schedules``, which the planner and calibrate runs search
    within): the result is priced with llmpar's generic rules for it, not that framework's."""
    st = settings.stack
    missing = []
    zero, sched = int(par.zero), SCHEDULES[int(par.schedule)]
    if zero not in st.zero_stages:
        missing.append(f"ZeRO-{zero} (it implements " + ", ".join(str(z) for z in st.zero_stages) + ")")
    if int(par.pp) > 1 and sched not in st.schedules:
        missing.append(f"the {sched} schedule (it implements " + ", ".join(st.schedules) + ")")
    from llmpar.layout import stack_violation_message, stack_violations

    refused = [stack_violation_message(rule, st, par) for rule, bad in stack_violations(st, par).items() if bool(bad)]
    if refused:
        return "; ".join(refused) + ": the planner never ranks it; priced with llmpar's generic rules all the same"
    if not missing:
        return None
    return (f"stack {st.name} does not implement " + " or ".join(missing) + ": priced with llmpar's generic "
            "rules for it, not this framework's (`llmpar stacks show " + st.name + "`)")


def moe_cost_note(model: ModelSpec, hw, settings: Settings) -> str | None:
    """A warning when an MoE model's step time gets no MoE launch cost on this GPU generation:
    the stack states none for it (kernels.moe_s_per_layer and moe_s_per_local_expert are 0), and
    every MoE measurement in validation/ ran slower than GEMMs and all-to-alls alone (docs/stacks.md)."""
    from llmpar.specs.stack import per_gen

    if model is None or model.moe is None:
        return None
    k, gen = settings.stack.kernels, hw.gpu.generation
    if per_gen(k.moe_s_per_layer, gen) or per_gen(k.moe_s_per_local_expert, gen):
        return None
    return (f"stack {settings.stack.name} states no MoE launch cost for {gen or 'this GPU'} "
            "(kernels.moe_s_per_layer and moe_s_per_local_expert are 0 there): the MoE layers' router, "
            "permutation and per-expert GEMM launches are not priced, so this step is likely optimistic "
            "(docs/stacks.md, limits)")


def generation_note(hw, settings: Settings) -> str | None:
    """A warning when the stack states per-generation kernel values for other GPU generations but
    none for this one: the time then rests on the stack's defaults, priors fitted on no GPU of this
    kind (the attention fractions are capped at the GPU's MAMF: cost/compute.attention_efficiency)."""
    from llmpar.specs.stack import per_gen

    k, gen = settings.stack.kernels, hw.gpu.generation
    fields = {"kernels.gemm_efficiency": k.gemm_efficiency,
              "kernels.attention.forward_efficiency": k.attention.forward_efficiency,
              "kernels.attention.backward_efficiency": k.attention.backward_efficiency}
    if settings.dtype == "fp8":
        fields["kernels.fp8.gemm_efficiency"] = k.fp8.gemm_efficiency
    missing = [name for name, v in fields.items()
               if isinstance(v, dict) and set(v) - {"default"} and (gen or "default") not in v]
    if not missing:
        return None
    vals = ", ".join(f"{name.split('.', 1)[1]} {per_gen(fields[name], None):g}" for name in missing)
    return (f"stack {settings.stack.name} states values for other GPU generations but none for {gen or 'this GPU'} "
            f"({hw.name}): its defaults apply ({vals}), priors not fitted on this GPU; `llmpar calibrate runs` "
            "fits them to your runs (docs/stacks.md)")


def fabric_note(hw, gpus: int | None = None) -> str | None:
    """Which scale-out fabric the numbers assume (a plan, a step across nodes): the profile's last
    tier, its per-GPU bandwidth and efficiency, and the word that a cluster with another fabric or
    fewer NICs per node is a different profile. None when the job stays inside one node's domain."""
    tier = hw.tiers[-1]
    inner = hw.tiers[-2].domain_size if len(hw.tiers) > 1 else hw.gpus_per_node
    if gpus is not None and gpus <= (hw.job_domain or inner or hw.gpus_per_node):
        return None
    gbit = tier.bandwidth * 8 / 1e9
    return (f"network: {hw.name}'s scale-out tier {tier.name!r} ({tier.kind}), {gbit:,.0f} Gb/s per GPU and direction "
            f"at {tier.efficiency:g} efficiency ({gbit * hw.gpus_per_node:,.0f} Gb/s per {hw.gpus_per_node}-GPU node); "
            "a cluster with another fabric or fewer NICs per node is another profile (`llmpar hardware` lists the "
            "shipped ones; `llmpar calibrate fit` fits yours to nccl-tests logs)")


__all__ = ["fabric_note", "generation_note", "load_hardware_spec", "load_model_spec", "make_settings", "moe_cost_note", "parse_reserve",
           "stack_note", "stack_support_note"]
