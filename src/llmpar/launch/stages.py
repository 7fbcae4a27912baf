"""The pipeline split every emitter writes (docs/launch.md): how many layers each stage, or each of
its v virtual stages, holds. One rule for Megatron-LM, NeMo and torchtitan."""

from __future__ import annotations

from llmpar.errors import UserError


def layers_per_chunk(framework: str, model, d: dict) -> int:
    """The layers of one pipeline chunk (a stage, or one of its v virtual stages), L / (pp·v): the
    one split rule of every emitter. A layer count that does not divide is refused: Megatron-LM
    needs --decoder-first/last-pipeline-num-layers for it and NeMo their recipe fields, which llmpar
    does not emit, and torchtitan would choose its own stages (a fuzz sweep, 2026-12-04: NeMo and
    torchtitan had accepted DeepSeek-V3's 61 layers over pp 32 x v 2; Megatron 80 over pp 3)."""
    v = d["virtual_stages"] if d["schedule"] == "interleaved" and d["virtual_stages"] > 1 else 1
    chunks = d["pp"] * v
    if model.layers % chunks:
        split = f"{d['pp']} x {v} equal chunks" if v > 1 else f"{d['pp']} equal stages"
        raise UserError(f"--emit {framework}: {model.layers} layers do not split into {split}; llmpar emits even "
                        f"splits only: plan with --allow pp=N for a pp (x v) that divides {model.layers}")
    return model.layers // chunks



def first_last(model, d: dict) -> tuple[int, int] | None:
    """Megatron-LM's uneven split (1F1B): every middle stage holds the busiest stage's ceil(L/pp)
    layers (layout.stage_layers, what llmpar prices) and the first and last stages share the rest,
    as --decoder-first/last-pipeline-num-layers; None when L divides evenly. Llama 3.1 405B, 126
    layers on pp 16: 14 x 8 + 7 + 7 (Llama 3, arXiv:2407.21783 §3.3.2). Interleaved and uneven is
    refused (layers_per_chunk)."""
    L, pp = model.layers, d["pp"]
    if pp == 1 or L % pp == 0:
        return None
    if d["schedule"] == "interleaved" and d["virtual_stages"] > 1:
        layers_per_chunk("megatron", model, d)       # raises: uneven chunks are not emitted
    c = -(-L // pp)
    rest = L - (pp - 2) * c
    first = -(-rest // 2)
    last = rest - first
    if pp == 2 or not (1 <= last <= first <= c):
        raise UserError(f"--emit megatron: {L} layers on pp {pp} leave no even middle with the rest on the first and "
                        "last stages (--decoder-first/last-pipeline-num-layers): plan with --allow pp=N for one that "
                        f"divides {L}")
    return first, last
