"""The option group shared by `memory`, `step` and `plan` (docs/architecture.md, CLI conventions), and
helpers to print JSON. Same names and meaning everywhere; the API takes the same keywords."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click
import numpy as np

from llmpar.parallel import FINETUNE, LORA_TARGETS
from llmpar.errors import UserError
from llmpar.parallel import ATTENTION, CONVENTIONS, DTYPES, GRAD_DTYPES, OPTIMIZERS, RECOMPUTE, SCHEDULES

_LAYOUT_OPTIONS = [
    click.option("--hardware", "hardware", default="h100-sxm", show_default=True,
                 shell_complete=lambda c, p, i: complete_hardware(c, p, i),
                 help="Shipped profile name (see `llmpar hardware`) or a YAML path."),
    click.option("--gpus", type=int, help="Total GPUs = tp*cp*pp*dp."),
    click.option("--tp", type=int, help="Tensor-parallel degree (default 1)."),
    click.option("--pp", type=int, help="Pipeline-parallel degree (default 1; uneven stages allowed)."),
    click.option("--dp", type=int, help="Data-parallel degree (default: derived from --gpus, or one node)."),
    click.option("--cp", type=int, help="Context-parallel degree (default 1)."),
    click.option("--ep", type=int, help="Expert-parallel degree, carved out of dp*cp (default 1)."),
    click.option("--etp", type=int, help="Expert tensor-parallel degree (default tp). Below tp, EP also spans the "
                                          "TP ranks: ep*etp divides tp*cp*dp (Megatron-Core MoE parallel folding)."),
    click.option("--zero", type=click.IntRange(0, 3), default=0, show_default=True, help="ZeRO stage over dp*cp."),
    click.option("--sp/--no-sp", default=None, help="Sequence parallelism (default: on when tp > 1)."),
    click.option("--recompute", type=click.Choice(RECOMPUTE), default="none", show_default=True),
    click.option("--micro-batch", type=int, help="Sequences per micro-batch (default 1)."),
    click.option("--global-batch", type=int, help="Sequences per step (m = B / (b*dp))."),
    click.option("--microbatches", type=int, help="Micro-batches per step, instead of --global-batch."),
    click.option("--seq", type=int, help="Sequence length (default min(8192, model max))."),
    click.option("--schedule", type=click.Choice(SCHEDULES), help="Pipeline schedule (default 1f1b)."),
    click.option("--virtual-stages", type=int, help="Chunks per stage; > 1 means interleaved."),
    click.option("--recompute-layers", type=int,
                 help="With --recompute full: recompute only N layers of each pipeline chunk, as Megatron-Core's "
                      "--recompute-method block --recompute-num-layers N (default: all)."),
    click.option("--offload-layers", type=int,
                 help="Hold the saved activations of the first N layers in host memory, copied out after their "
                      "forward and back before their backward (Megatron-Core --cpu-offloading-num-layers; needs "
                      "--pp 1 and --recompute none)."),
]

_PRECISION_OPTIONS = [
    click.option("--dtype", type=click.Choice(DTYPES), default="bf16", show_default=True, help="Compute/weight dtype."),
    click.option("--optimizer", type=click.Choice(OPTIMIZERS), default="adam", show_default=True),
    click.option("--stack", default=None, shell_complete=lambda c, p, i: complete_stack(c, p, i),
                 help="Framework profile: shipped name (see `llmpar stacks`) or a YAML path (default megatron-core)."),
    click.option("--grad-dtype", type=click.Choice(GRAD_DTYPES),
                 help="Gradient dtype (default: the stack's: fp32 when it keeps an fp32 main-grad buffer, else bf16); "
                      "bf16 given here is also reduced in bf16."),
    click.option("--convention", type=click.Choice(CONVENTIONS), default="llmpar", show_default=True,
                 help="Byte accounting: llmpar, megatron (18 B/param) or deepspeed (ZeRO estimators)."),
    click.option("--attention", type=click.Choice(ATTENTION),
                 help="standard (s² scores in HBM) or flash (default: the stack's attention kernel)."),
    click.option("--recompute-modules", default=None,
                 help="What --recompute selective re-runs, as Megatron-Core --recompute-modules: comma-separated "
                      "core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts (default: the stack's "
                      "selective set; megatron-core: core_attn)."),
    click.option("--reserve", help="Runtime memory held back, e.g. 6GiB: replaces the stack's CUDA context + NCCL buffers "
                                   "(the allocator overhead still applies)."),
    click.option("--finetune", type=click.Choice(FINETUNE), default=None,
                 help="full (default), lora (frozen 16-bit base + rank-r adapters) or qlora (frozen NF4 base with "
                      "double quantization + adapters): docs/finetune.md."),
    click.option("--lora-rank", type=click.IntRange(1, 65536), default=None, metavar="R",
                 help="LoRA/QLoRA adapter rank r (default 16): r (d_in + d_out) trainable parameters per adapted matrix."),
    click.option("--optimizer-offload", default=None, metavar="F",
                 help="Share of the optimizer states kept in host memory, their step run on the CPU (0-1; 1 = "
                      "DeepSpeed ZeRO-Offload; Megatron-Core --optimizer-offload-fraction): needs ZeRO >= 1."),
    click.option("--param-offload", is_flag=True, default=None,
                 help="Hold ZeRO-3's 16-bit parameter shards in host memory, copied in before each gather "
                      "(DeepSpeed ZeRO-Infinity offload_param device cpu): needs --zero 3 and a stack that does it."),
    click.option("--lora-targets", type=click.Choice(LORA_TARGETS), default=None,
                 help="Linears that get adapters: all (every block linear, QLoRA's choice; default), attention "
                      "(q, k, v, o) or qv (PEFT's Llama default)."),
]

_OUTPUT_OPTIONS = [
    click.option("--units", type=click.Choice(["gb", "gib"]), default="gb", show_default=True,
                 help="Memory display unit: GB = 1e9 (the papers'), GiB = 2^30."),
    click.option("--json", "as_json", is_flag=True, help="Print one JSON object."),
    click.option("--explain", is_flag=True, help="Print each term's formula, inputs and source."),
]


def _apply(options, f):
    for opt in reversed(options):
        f = opt(f)
    return f


_OVERLAP_OPTIONS = [
    click.option("--dp-overlap", type=float, default=None,
                 help="Usable fraction of the compute DP traffic hides behind (default: the stack's "
                      "overlap.dp; 0: none, as Megatron-LM 2021)."),
    click.option("--tp-overlap", type=float, default=None,
                 help="Usable fraction of the GEMM time TP collectives hide behind inside an NVLink domain "
                      "(default: the stack's overlap.tp; 0: none, as Megatron-LM 2021-22)."),
    click.option("--ep-overlap", type=float, default=None,
                 help="Usable fraction of a MoE layer's compute its all-to-alls hide behind, on the chunks the "
                      "schedule pairs with one of the other direction (default: the stack's overlap.ep; 1: "
                      "Megatron-Core --overlap-moe-expert-parallel-comm; DualPipe always pairs)."),
    click.option("--ep-dispatcher", type=click.Choice(["alltoall", "deepep"]), default=None,
                 help="How MoE tokens reach their experts (default: the stack's kernels.ep_dispatcher): alltoall, "
                      "one copy per (token, expert); deepep, once per remote node over the NICs, then NVLink "
                      "(Megatron-Core --moe-enable-deepep / flex dispatcher; DeepSeek-V3)."),
    click.option("--rank-order", default=None,
                 help="Rank order, innermost first: which groups share a node (default tp-cp-dp-pp, Megatron's)."),
]


def overlap_options(f):
    """Time-model options of `step` and `plan`: communication overlap and rank order."""
    return _apply(_OVERLAP_OPTIONS, f)


def layout_options(f):
    return _apply(_LAYOUT_OPTIONS, f)


def precision_options(f):
    return _apply(_PRECISION_OPTIONS, f)


def output_options(f):
    return _apply(_OUTPUT_OPTIONS, f)


def common_options(f):
    """The whole shared group: layout, precision, output."""
    return layout_options(precision_options(output_options(f)))


LAYOUT_KEYS = ("gpus", "tp", "pp", "dp", "cp", "ep", "etp", "zero", "sp", "recompute", "micro_batch",
               "global_batch", "microbatches", "seq", "schedule", "virtual_stages", "recompute_layers",
               "offload_layers")


def layout_kwargs(kw: dict[str, Any]) -> dict[str, Any]:
    return {k: kw.get(k) for k in LAYOUT_KEYS if k in kw}


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else None
    return obj


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(_jsonable(obj), indent=2))


def plot_option(what: str):
    """``--plot FILE.png|svg`` (cli/plots.py draws it). The suffix and matplotlib are checked when
    the option is read, before any work: a missing matplotlib is one line naming the extra, exit 2."""

    def check(ctx, param, value):
        if value is None:
            return None
        from llmpar.cli.plots import check_path, require

        path = check_path(value)
        require()
        return path

    return click.option("--plot", "plot_path", default=None, metavar="FILE.png|svg", callback=check,
                        help=f"Also draw {what} into an image (.png or .svg; needs matplotlib: "
                             "pip install 'llmpar[plot]').")


def html_option(what: str):
    """``--html FILE.html`` (cli/report_html.py writes it): the suffix is checked when the option is
    read, before any work; the folder and "not one of the inputs" by :func:`llmpar.outputs.check_out`."""

    def check(ctx, param, value):
        if value is None:
            return None
        path = Path(value)
        if path.suffix.lower() not in (".html", ".htm"):
            raise UserError(f"--html {value}: the report is one HTML page: name it .html")
        from llmpar.outputs import check_out

        check_out(path, option="--html")
        return path

    return click.option("--html", "html_path", default=None, metavar="FILE.html", callback=check,
                        help=f"Also write one self-contained HTML page: {what}; no script, no network.")


# ------------------------------------------------------------------------------ shell completion
# click's own completion (`_LLMPAR_COMPLETE=bash_source llmpar`, docs/cli.md) calls these for MODEL,
# --hardware and --stack: the shipped names and aliases from the registry, or files for a path.

def _complete(kind: str, incomplete: str, *, comma_list: bool = False):
    from click.shell_completion import CompletionItem

    head, sep, word = incomplete.rpartition(",") if comma_list else ("", "", incomplete)
    if "/" in word or word.startswith(".") or word.endswith((".yaml", ".yml", ".json")):
        return [CompletionItem(incomplete, type="file")]
    try:
        from llmpar.specs.registry import _index

        names = sorted(_index(kind))          # canonical names and aliases
    except Exception:  # noqa: BLE001 - completion must never crash the shell
        return []
    prefix = head + sep
    return [CompletionItem(prefix + n) for n in names if n.startswith(word.lower())]


def complete_model(ctx, param, incomplete: str):
    """Shipped model names and aliases starting with ``incomplete`` (files for a path)."""
    return _complete("models", incomplete)


def complete_hardware(ctx, param, incomplete: str):
    """Shipped hardware profile names (also after a comma: `sweep --hardware h100-sxm,b2<TAB>`)."""
    return _complete("hardware", incomplete, comma_list=True)


def complete_stack(ctx, param, incomplete: str):
    """Shipped stack names and aliases."""
    return _complete("stacks", incomplete)


def guard_outputs(model, kw: dict, outputs: dict) -> None:
    """Every file a command writes (``--out``, ``--plot``, ``--html``, ``--trace``: option -> path or
    None) is checked before any work against the files it reads (a model, HF config, hardware or
    stack given as a path; a comma list of profiles too): never written over an input (reliability
    review, writers: `plan m.yaml --html m.yaml` replaced the model with the report)."""
    from llmpar.outputs import check_out

    named = [model, kw.get("hf"), kw.get("stack"), *str(kw.get("hardware") or "").split(",")]
    inputs = [Path(v) for v in named if isinstance(v, (str, Path)) and str(v) and Path(v).is_file()]
    for option, path in outputs.items():
        check_out(path, inputs=inputs, option=option)
