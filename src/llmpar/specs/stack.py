"""Stack profile: what the *software* achieves of the hardware on the model (data, pydantic).

docs/architecture.md, "Three inputs, kept apart": the hardware says what the silicon and wires can do, the
model what must be computed and stored, the stack what a framework makes of the first on the
second — kernel efficiencies, what it fuses and saves for backward, what it overlaps, its
allocator and its fixed costs. One YAML file per framework in ``stacks/`` (shipped in the wheel);
a user file may ``extends:`` a shipped one; ``llmpar calibrate runs`` writes such a file.

Values that differ by GPU generation are written either as one number or as a mapping
``{ampere: 0.85, hopper: 0.80, default: 0.80}``; :func:`per_gen` resolves them for a profile's
``gpu.generation``. Each shipped value carries its source in a YAML comment and in
docs/stacks.md.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, model_validator

from llmpar.specs.base import MIN_SHARE, STRICT_SPEC, Multiplier, Name, Text, at_least_bytes, at_most
from llmpar.specs.model import MAX_LAYERS
from llmpar.units import parse_bytes, parse_seconds

GENERATIONS = ("volta", "ampere", "hopper", "blackwell", "cdna3")   # cdna3: AMD MI300X/MI325X
ATTENTION_KERNELS = ("flash-2", "flash-3", "cudnn", "sdpa", "eager")
FP8_GEMMS = ("qkv", "proj", "fc1", "fc2", "experts", "lm_head")
MEMORY_BYTES = Annotated[float, BeforeValidator(lambda v: parse_bytes(v, "memory size", allow_zero=True))]
#: a runtime buffer of the memory block (CUDA context, NCCL buffers, a gradient bucket): 0 (none) or
#: at least 1 MiB, so a bare `cuda_context_bytes: 0.6` (meant as GB) is refused with the unit
RUNTIME_BYTES = Annotated[MEMORY_BYTES, at_least_bytes(2**20, "600 MB", "runtime buffer")]
SECONDS = Annotated[float, BeforeValidator(lambda v: parse_seconds(v, "time", allow_zero=True))]


def _check_gen_keys(v):
    if isinstance(v, dict):
        bad = set(v) - set(GENERATIONS) - {"default"}
        if bad:
            raise ValueError(f"unknown GPU generation(s) {sorted(bad)}; known: {', '.join(GENERATIONS)}, default")
        if "default" not in v:
            raise ValueError("a per-generation mapping needs a 'default' entry")
    return v


def _check_shares(v):
    """Each value of a (per-generation) share in [MIN_SHARE, 1], named (a union's own error named
    its first branch: "Input should be a valid number")."""
    for gen, x in (v.items() if isinstance(v, dict) else [(None, v)]):
        if not MIN_SHARE <= x <= 1:
            at = f" ({gen})" if gen else ""
            raise ValueError(f"{x:g}{at} is not a share between {MIN_SHARE:g} and 1")
    return v


PerGen = Annotated[Union[float, dict[str, float]], BeforeValidator(_check_gen_keys), AfterValidator(_check_shares)]


def _bucket(v: float) -> float:
    """A gradient bucket is 0 (one collective) or at least 1 KiB: DDP's bucket_cap_mb is 25 MB, DeepSpeed's
    reduce_bucket_size 5e8 elements; 1e-300 MB made ~10^300 collectives of a 10^57-second step."""
    if 0 < v < 1024:
        raise ValueError(f"a gradient bucket of {v:g} B: give 0 (one collective) or at least 1 KiB")
    return v
def _gen_seconds(v):
    """A time or a per-generation mapping of times ('5 ms', 0.005), parsed in one place so an error
    names the field, not pydantic's union branch."""
    v = _check_gen_keys(v)
    if isinstance(v, dict):
        return {k: parse_seconds(x, "time", allow_zero=True) for k, x in v.items()}
    return parse_seconds(v, "time", allow_zero=True)


# a per-generation time: at most 60 s (a host cost per layer or expert beyond that is a unit slip)
BoundedSeconds = Annotated[float, Field(ge=0, le=60)]
PerGenSeconds = Annotated[Union[BoundedSeconds, dict[str, BoundedSeconds]], BeforeValidator(_gen_seconds)]


def per_gen(value, generation: str | None) -> float:
    """A per-generation value for ``generation`` (its own entry, else ``default``)."""
    if isinstance(value, dict):
        return float(value.get(generation or "default", value["default"]))
    return float(value)


class _Strict(BaseModel):
    # strict: a YAML `true` is not 1 and a quoted "0.8" is not a number (unit strings are parsed
    # by the fields' BeforeValidators first); unknown keys are refused
    model_config = STRICT_SPEC


class Fp8Recipe(_Strict):
    """How ``--dtype fp8`` runs (Transformer Engine / torchao): which GEMMs are FP8, at what
    fraction of the FP8 peak relative to BF16's, and the work and memory around them."""

    recipe: Literal["delayed", "current", "blockwise", "mxfp8"] = Field(
        "delayed", description="scaling recipe (informational: its cost is in cast_bytes_per_element)")
    gemms: list[Literal["qkv", "proj", "fc1", "fc2", "experts", "lm_head"]] = Field(
        default_factory=lambda: ["qkv", "proj", "fc1", "fc2", "experts"],
        description="layer GEMMs that run in FP8; attention's core and (usually) the LM head stay BF16")
    gemm_efficiency: PerGen = Field(
        0.75, description="achieved fraction of the FP8 peak, relative to the BF16 GEMM fraction on the same shape")
    # bounds (reliability review, item 4): beyond them a value is a unit or typing slip, not a stack;
    # each is far outside anything a framework does (a cast reads and writes a few bytes, a weight
    # copy is a few bytes per parameter, host work per MoE layer is milliseconds, not minutes)
    cast_bytes_per_element: float = Field(
        3.0, ge=0, le=64, description="extra HBM bytes per FP8 GEMM operand element (cast: read 2 B, write 1 B; amax fused)")
    weight_copy_bytes_per_param: float = Field(
        2.0, ge=0, le=64, description="FP8 weight (+ transposed) copies kept per FP8-GEMM parameter, bytes")
    primary_weights: bool = Field(
        False, description="the FP8 copies are the primary linear weights (no BF16 copy: Megatron-Core "
                           "--fp8-param-gather, TE fp8_model_init)")
    tp_all_gather_fp8: bool = Field(
        False, description="with sequence parallelism the TP all-gathers (forward: the FP8 GEMMs' inputs; backward: "
                           "their output gradients) move 1-byte FP8, the reduce-scatters stay 16-bit (torchao "
                           "Float8ColwiseParallel / Float8RowwiseParallel: cast before the all-gather)")
    dispatch_fp8: bool = Field(
        False, description="the MoE dispatch all-to-all (forward: tokens to the experts; backward: the gradients "
                           "before the down projections) moves FP8 with one fp32 scale per 128 elements; the "
                           "combines stay 16-bit (DeepSeek-V3 §3.3.3; DeepEP's FP8 dispatch)")
    bf16_layers_at_start: int = Field(
        0, ge=0, le=MAX_LAYERS, description="the first N transformer layers run every GEMM in BF16 under --dtype fp8 (Megatron-Core "
                             "--first-last-layers-bf16 with --num-layers-at-start-in-bf16; Megatron-Bridge's "
                             "bf16_with_fp8_current_scaling_mixed sets 1, its performance scripts 0)")
    bf16_layers_at_end: int = Field(
        0, ge=0, le=MAX_LAYERS, description="the same for the last N layers (--num-layers-at-end-in-bf16)")
    cache_swiglu_input_fp8: bool = Field(
        False, description="the routed experts' SwiGLU input (the gate and up outputs) is saved for the backward in "
                           "FP8 with one fp32 scale per 128 elements (1.03 B per element instead of 2; DeepSeek-V3 "
                           "§3.3.3 'Low-Precision Activation')")


class AttentionKernel(_Strict):
    """The attention core's kernel, apart from the GEMM curve: its own achieved fraction of the
    BF16 dense peak, forward and backward (backward does 2.5x the forward's FLOPs: Dao 2023 §3)."""

    kernel: Literal["flash-2", "flash-3", "cudnn", "sdpa", "eager"] = Field(
        "flash-2", description="eager: QK^T and PV as batched GEMMs, s^2 scores through HBM; others fused")
    forward_efficiency: PerGen = Field(0.6, description="achieved fraction of the BF16 dense peak, forward (fused kernels)")
    backward_efficiency: PerGen = Field(0.45, description="the same, backward (2.5x the forward FLOPs)")
    causal_skip: bool = Field(True, description="the kernel skips the masked upper triangle (flash/cuDNN do; eager does not)")


class Kernels(_Strict):
    gemm_efficiency: PerGen = Field(
        1.0, description="achieved fraction of the hardware's measured GEMM curve (gpu.gemm, MAMF) in training: "
                         "sustained clocks under the power cap, interference from communication kernels")
    attention: AttentionKernel = Field(default_factory=AttentionKernel)
    fp8: Fp8Recipe = Field(default_factory=Fp8Recipe)
    elementwise_traffic: float = Multiplier(
        1.0, 100, "HBM traffic of the memory-bound ops relative to Megatron's fused set (eager PyTorch > 1)", lo=0.01)
    launch_s_per_layer: Annotated[SECONDS, at_most(0.05, "20 us", "framework")] = Field(
        0.0, description="CPU/launch time per layer per micro-batch (forward + backward) not hidden behind the GPU")
    moe_s_per_layer: Annotated[PerGenSeconds, at_most(1.0, "2 ms", "framework")] = Field(
        0.0, description="seconds per MoE layer per micro-batch (forward + backward) beyond its GEMMs and all-to-alls: "
                         "router, top-k, token permutation and the dispatcher's host synchronisation, which stop the "
                         "CPU from running ahead of the GPU")
    moe_s_per_local_expert: Annotated[PerGenSeconds, at_most(0.1, "0.37 ms", "framework")] = Field(
        0.0, description="seconds per routed expert held on the GPU (experts / ep), per MoE layer and micro-batch "
                         "(forward + backward): Transformer Engine's GroupedLinear issues one GEMM (and, in FP8, one "
                         "quantisation) per local expert from the host, so the MoE layer's launch work grows with "
                         "the local experts")
    ep_dispatcher: Literal["alltoall", "deepep"] = Field(
        "alltoall", description="how a MoE layer's tokens reach their experts. alltoall: one copy per (token, expert) "
                                "pair in a flat all-to-all (Megatron-Core MoEAlltoAllTokenDispatcher). deepep: one "
                                "copy per destination node over the NICs, forwarded over NVLink to each destination "
                                "GPU once (DeepSeek-V3 §3.2.2; DeepEP normal kernels; Megatron-Core flex dispatcher)")
    zero_gather_s_per_tensor_rank: Annotated[SECONDS, at_most(0.01, "10 us", "framework")] = Field(
        0.0, description="host seconds per (parameter tensor on the stage x data-parallel rank) in the ZeRO-1/2 weight "
                         "all-gather: frameworks that gather into per-rank, per-parameter views and copy each back "
                         "(nanotron all_gather_coalesced) pay one slice and one copy launch per pair, synchronously; "
                         "0 for flat-buffer gathers (Megatron-Core, DeepSpeed)")


class Overlap(_Strict):
    """Fractions (0..1) of a collective's time hidden behind the compute that can cover it."""

    grad_reduce_dtype: Literal["fp32", "model"] = Field(
        "fp32", description="dtype of the data-parallel gradient reduction: fp32 (Megatron-Core grad_reduce_in_fp32, "
                            "nanotron's fp32 accumulation buffer) or the 16-bit model dtype (Megatron-LM 2021 fp16, DeepSpeed)")
    dp_bucket_bytes: Annotated[MEMORY_BYTES, AfterValidator(_bucket)] = Field(
        0.0, description="bytes of gradients per data-parallel collective (DDP bucket_cap_mb, Megatron-Core "
                         "bucket_size, DeepSpeed reduce_bucket_size); each bucket pays its own latency; 0 = one collective")
    tp_mode: Literal["none", "async", "userbuffers"] = Field(
        "none", description="how TP communication is overlapped (informational: its effect is overlap.tp)")
    tp: float = Field(0.0, ge=0, le=1, description="TP collectives behind their GEMMs (inside one NVLink domain only)")
    tp_generations: list[Literal[GENERATIONS]] | None = Field(
        None, description="GPU generations on which the stack's overlap.tp is achieved; on others its TP collectives "
                          "stay exposed unless --tp-overlap says otherwise (Transformer Engine userbuffers: CUDA "
                          "multicast needs compute capability 9.0+, older GPUs fall back to a slower IPC path); "
                          "None = every generation")
    dp: float = Field(0.0, ge=0, le=1, description="gradient reduce behind the last micro-batch's backward (bucketed)")
    param_gather: float | None = Field(
        None, ge=0, le=1, description="ZeRO-1/2 weight all-gather after the optimizer step hidden behind the next "
                                      "step's forward (Megatron-Core overlap_param_gather); 0 = synchronous after the "
                                      "step (nanotron, DeepSpeed stage 1/2); None = as overlap.dp")
    param_gather_bucket_bytes: RUNTIME_BYTES | None = Field(
        None, description="bytes of weights per ZeRO-1/2 all-gather collective; 0 = one collective over all the "
                          "rank's weights (nanotron's all_gather_coalesced); None = as many collectives as the "
                          "gradient buckets (dp_bucket_bytes)")
    zero3_prefetch: float = Field(0.0, ge=0, le=1, description="ZeRO-3 / FSDP parameter gathers behind compute")
    pp: float = Field(0.0, ge=0, le=1, description="pipeline p2p behind compute (1 = async send/recv, 0 = blocking)")
    pp_schedules: list[Literal["gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe"]] | None = Field(
        None, description="pipeline schedules under which the stack's overlap.pp is achieved; under the others its "
                          "p2p sends are blocking (Megatron-Core: overlap_p2p_comm only with the interleaved schedule; "
                          "1F1B raises 'Non-interleaved pipeline parallelism does not support overlapping p2p "
                          "communication'); None = every schedule")
    cp: float = Field(1.0, ge=0, le=1, description="CP K/V exchange behind the attention core (ring attention)")
    ep: float = Field(0.0, ge=0, le=1, description="EP all-to-alls behind compute (beyond DualPipe's own pairing)")
    ep_sms: int = Field(
        0, ge=0, le=1024, description="SMs the DeepEP-style dispatch/combine kernels (ep_dispatcher deepep) hold while they "
                             "run behind compute; the compute they overlap slows by ep_sms / gpu.sms for that time "
                             "(DeepSeek-V3 §3.2.2: 20 of 132 on H800; Megatron-Core's DeepEP default 20); not priced "
                             "for the flat NCCL all-to-all; 0 = not priced")
    # 24: an H100 nsys profile of an FSDP-style prefetch shows ncclAllGather launching 24 blocks
    # beside a 132-block GEMM (NVIDIA developer forum, "Compute-communication overlap causes severe
    # GEMM performance degradation because of tail effect", 2025); Lee et al. 2025 (arXiv:2507.03114)
    # measure an 18.9 % mean compute slowdown under overlapped collectives on A100 and H100 (24/132
    # = 18 %). A default for every stack: NCCL's, not a framework's (cost/step.py _dp)
    dp_sms: int = Field(
        24, ge=0, le=1024, description="SMs the data-parallel NCCL collectives (gradient reduce, ZeRO gathers) hold "
                             "while they run behind compute; the compute under them slows by dp_sms / gpu.sms for "
                             "the hidden time (NCCL runs one thread block per channel on its own SM); 0 = not priced")


class Network(_Strict):
    """What the framework's collectives achieve of the hardware's links (NCCL plugins, transport,
    SM contention): multipliers on the collective model's tier parameters (cost/collectives.py)."""

    scale_out_efficiency: float = Multiplier(
        1.0, 1.5, "multiplier on the scale-out tier's achieved bandwidth (e.g. NCCL over a provider plugin or "
                  "sockets vs the InfiniBand the profile measured)")
    scale_out_latency: float = Multiplier(1.0, 1000, "multiplier on the scale-out tier's per-step latencies")
    scale_up_efficiency: float = Multiplier(1.0, 1.5, "multiplier on the NVLink tier's achieved bandwidth")


class MemoryModel(_Strict):
    """What the framework keeps in memory beyond the model states of the optimizer convention."""

    activations: Literal["fused", "eager"] = Field(
        "fused", description="fused: the Megatron/TE saved set (Korthikanti §4.1 terms); eager: PyTorch autograd "
                             "saves every op's inputs (norm and SwiGLU intermediates, fp32 norm statistics)")
    norm_kernel: Literal["fused", "eager"] | None = Field(
        None, description="the RMSNorm's saved set when it differs from `activations` (nanotron: a fused Triton "
                          "RMSNorm inside an otherwise eager block); None = as `activations`")
    selective_recompute: Literal["attention-core", "torchtitan-op", "modules"] = Field(
        "attention-core", description="what `--recompute selective` keeps: attention-core = Korthikanti §5 (everything "
                                      "but the attention core's s^2 tensors; Megatron); torchtitan-op = torchtitan's "
                                      "op-level SAC (the layer input, SDPA's output and every odd-numbered matmul "
                                      "output; the rest re-runs in backward); modules = Megatron-Core's "
                                      "--recompute-modules (recompute_modules below)")
    recompute_modules: list[Literal["core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                                    "shared_experts"]] = Field(
        default_factory=lambda: ["core_attn"],
        description="with selective_recompute = modules: the submodules selective recompute re-runs (Megatron-Core "
                    "TransformerConfig.recompute_modules; default core_attn); --recompute-modules overrides")
    activation_factor: float = Multiplier(1.0, 100, "multiplier on the saved-activation bytes (fitted)", lo=0.01)
    working_layers: float = Field(
        0.0, ge=0, le=10_000, description="backward working set: temporaries worth this many layers' saved activations of one "
                               "micro-batch, live once (not per micro-batch in flight); fitted")
    moe_probs_in_activation: bool = Field(
        False, description="the MoE routing weights scale the experts' activation output (before the down "
                           "projection), so the routing-weight gradient needs no saved expert output (Megatron-Core "
                           "TEGroupedMLP: weighted_bias_swiglu_impl; the combine's unpermute gets no probs); False: "
                           "they scale the expert outputs at the combine, whose 16-bit copies are saved for it")
    fp32_logits: bool = Field(True, description="the logits are upcast to fp32 for the loss (4 B per element)")
    logits_grad: bool = Field(True, description="the fp32 gradient of the logits is live with the logits")
    logits_16bit_live: bool = Field(
        False, description="the LM head's 16-bit output stays allocated while the fp32 loss runs (torchtitan train.py: "
                           "`pred = model(x); loss = loss_fn(pred, labels); del pred` before backward)")
    loss_parallel_fp32_copies: float = Field(
        0.0, ge=0, le=100, description="fp32 copies of the vocab-sharded logits the loss holds beyond a fused log_softmax when "
                               "TP > 1 (torch loss_parallel decomposes it: x - max, exp, result; torchtitan: 1)")
    main_grad_fp32: bool = Field(False, description="an fp32 main-grad buffer accumulates gradients (Megatron, nanotron)")
    accumulated_grad_fp32: bool = Field(
        False, description="under ZeRO-1 with more than one micro-batch the unsharded gradients accumulated between "
                           "gradient syncs are fp32 (FSDP2 with gradient sync off upcasts them to its reduce dtype: "
                           "FSDPParam.to_accumulated_grad_if_needed), whatever the gradient dtype")
    grad_bucket_bytes: RUNTIME_BYTES = Field(0.0, le=2**40, description="DDP / ZeRO gradient bucket held during reduction")
    ddp_bucket_copy: bool = Field(
        False, description="torch DDP without gradient_as_bucket_view: its buckets hold a flat 16-bit copy of every "
                           "gradient (data parallelism > 1)")
    optimizer_step_bytes_per_param: float = Field(
        0.0, ge=0, le=1_000, description="bytes per locally optimised parameter (all of them at ZeRO 0, the shard at ZeRO >= 1) "
                               "beyond the optimizer states: the optimizer step's working buffers the caching "
                               "allocator keeps reserved (torch's foreach Adam allocates sqrt(v) in fp32: 4 B; fused "
                               "optimizers: 0); fitted")
    allocator_overhead: float = Field(
        0.0, ge=0, le=1, description="reserved/allocated - 1 at the peak (caching-allocator fragmentation)")
    cuda_context_bytes: RUNTIME_BYTES = Field(0.0, le=2**40, description="CUDA context + cuBLAS/cuDNN workspaces, per GPU")
    nccl_bytes_per_communicator: RUNTIME_BYTES = Field(0.0, le=2**40, description="NCCL buffers per communicator a rank is in")
    uncertainty: float = Field(
        0.05, ge=0, le=1, description="relative uncertainty of the peak: within it of the HBM limit the verdict is TIGHT")


# Upper bounds above (bytes 1 TiB, a fixed cost a day per step or an hour per micro-batch, 100x
# factors): far beyond any framework, they only stop a typo (1e30) from printing absurd numbers.


class FixedCosts(_Strict):
    per_step_s: Annotated[SECONDS, at_most(300.0, "50 ms", "framework")] = Field(0.0, description="per step: optimizer launch, grad-norm/clipping sync, logging")
    per_microbatch_s: Annotated[SECONDS, at_most(10.0, "10 ms", "framework")] = Field(0.0, description="per micro-batch: data loading, pipeline bookkeeping")


class Stack(_Strict):
    name: Name
    description: Text = ""
    extends: str | None = None
    sources: list[Text] = Field(default_factory=list, description="where the values come from")
    fitted_on: list[Text] = Field(default_factory=list, description="the measurements any fitted value was fitted on")
    zero_stages: list[Literal[0, 1, 2, 3]] = Field(
        default_factory=lambda: [0, 1, 2, 3], min_length=1,
        description="ZeRO stages the framework implements (the planner and calibrate runs search only these)")
    pp_zero_stages: list[Literal[0, 1, 2, 3]] | None = Field(
        None, description="ZeRO stages the framework launches together with pipeline parallelism (pp > 1), cited "
                          "from its own argument checks (DeepSpeed's PipelineEngine: 0 and 1); None: every stage of "
                          "zero_stages (layout.stack_violations)")
    pp_only_zero_stages: list[Literal[0, 1, 2, 3]] | None = Field(
        None, description="ZeRO stages that are the framework's only under pipeline parallelism (torchtitan: 1, "
                          "FSDP2 that does not reshard after forward when PP is on; at pp 1 it has no such "
                          "setting); None: none (layout.stack_violations)")
    schedules: list[Literal["gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe"]] = Field(
        default_factory=lambda: ["gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe"], min_length=1,
        description="pipeline schedules the framework implements (the planner searches only these unless "
                    "--allow/--fix names one)")
    moe_folding: bool = Field(
        False, description="the framework sets the expert tensor-parallel degree apart from tp (Megatron-Core "
                           "expert_tensor_parallel_size, MoE parallel folding): the planner then searches etp in "
                           "{tp, 1} for MoE models unless --etp/--fix/--allow names it")
    activation_offloading: bool = Field(
        False, description="the framework can hold the saved activations of some layers in host memory "
                           "(Megatron-Core cpu_offloading_num_layers, --offload-layers): the planner then "
                           "searches it where it runs (pp 1, no recompute, hardware with a host link) "
                           "unless --fix/--allow offload_layers= names the counts")
    param_offloading: Literal[False, True, "with-optimizer"] = Field(
        False, description="the framework can hold ZeRO-3's parameter shards in host memory (--param-offload): "
                           "true = on their own (DeepSpeed ZeRO-Infinity offload_param); with-optimizer = only "
                           "together with the optimizer states and step (torch FSDP2 CPUOffloadPolicy)")
    kernels: Kernels = Field(default_factory=Kernels)
    overlap: Overlap = Field(default_factory=Overlap)
    network: Network = Field(default_factory=Network)
    memory: MemoryModel = Field(default_factory=MemoryModel)
    fixed: FixedCosts = Field(default_factory=FixedCosts)
    calibration: dict | None = Field(None, description="what `llmpar calibrate runs` fitted, on what, how well")

    @model_validator(mode="after")
    def _check(self) -> Stack:
        return self

    def value(self, path: str, generation: str | None = None) -> float:
        """A (possibly per-generation) value by dotted path, e.g. ``kernels.gemm_efficiency``.
        ``overlap.param_gather`` left unset is the value it takes, ``overlap.dp``."""
        if path == "overlap.param_gather" and self.overlap.param_gather is None:
            return float(self.overlap.dp)
        obj = self
        for part in path.split("."):
            obj = getattr(obj, part)
        return per_gen(obj, generation)
