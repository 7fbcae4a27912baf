"""Engine profile: what a *serving* engine achieves of the hardware (data, pydantic).

Serving's counterpart of a stack (docs/serving.md, "Engines"): the scheduler's limits and
defaults (how many sequences and tokens one iteration may hold, how much of the GPU memory the
engine takes), what its decode kernels reach of the HBM bandwidth, what its prefill GEMMs and
attention reach of the peak, and its fixed costs per iteration, per sequence and per request. One
YAML file per engine in ``engines/`` (shipped in the wheel); a user file may ``extends:`` a
shipped one. Values that differ by GPU generation are one number or a mapping
``{default: .., ampere: ..}`` (:func:`llmpar.specs.stack.per_gen`). Each shipped value carries
its source in a YAML comment and in docs/serving.md.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, model_validator

from llmpar.specs.base import MIN_SHARE, STRICT_SPEC, Name, Text, at_most
from llmpar.specs.stack import GENERATIONS, MEMORY_BYTES, PerGen, PerGenSeconds, _check_gen_keys, per_gen

# counts that differ by GPU generation (vLLM's scheduler defaults do: arg_utils.py get_batch_defaults)
Count = Annotated[int, Field(gt=0, le=1_048_576)]
PerGenCount = Annotated[Union[Count, dict[str, Count]], BeforeValidator(_check_gen_keys)]


class _Strict(BaseModel):
    model_config = STRICT_SPEC


class Scheduler(_Strict):
    """Continuous batching limits (vLLM ``SchedulerConfig``, SGLang ``ServerArgs``, TRT-LLM
    ``BuildConfig``/``KvCacheConfig``)."""

    max_num_seqs: PerGenCount = Field(256, description="sequences one iteration may hold (vLLM --max-num-seqs)")
    max_num_batched_tokens: PerGenCount = Field(
        8192, description="tokens (decode + prefill chunk) one iteration may hold (vLLM --max-num-batched-tokens)")
    chunked_prefill: bool = Field(True, description="a long prompt is split into chunks that share iterations with decodes")
    budget_covers_seqs: bool = Field(
        False, description="the engine refuses max_num_batched_tokens below max_num_seqs (vLLM SchedulerConfig: every "
                           "running sequence needs a token of the iteration's budget)")
    mixed_prefill: bool = Field(
        True, description="prefill chunks run in the same iterations as the decodes (vLLM V1, TensorRT-LLM in-flight "
                          "batching); false: a prefill batch is an iteration of its own and the decodes wait for it "
                          "(SGLang without --enable-mixed-chunk)")
    memory_fraction: float = Field(0.9, ge=MIN_SHARE, le=1, description="share of the GPU memory the engine may use")
    memory_rule: Literal["total", "free"] = Field(
        "total", description="total: weights + activations + KV fit in memory_fraction x HBM (vLLM, SGLang); "
                             "free: the KV pool is memory_fraction of what is free after weights (TRT-LLM)")
    block_tokens: Count = Field(16, description="tokens per KV-cache block (vLLM --block-size; SGLang pages of 1)")

    @model_validator(mode="after")
    def _budget_holds_the_sequences(self):
        """An engine file whose own defaults break its ``budget_covers_seqs`` rule describes a server
        that does not start (vLLM SchedulerConfig): refused when the file is read, on every GPU
        generation it names."""
        if self.budget_covers_seqs:
            gens = {None} | {g for v in (self.max_num_seqs, self.max_num_batched_tokens) if isinstance(v, dict)
                             for g in v}
            for g in sorted(gens, key=str):
                seqs, budget = per_gen(self.max_num_seqs, g), per_gen(self.max_num_batched_tokens, g)
                if budget < seqs:
                    where = "" if g in (None, "default") else f" ({g})"
                    raise ValueError(f"max_num_batched_tokens {int(budget):,} is below max_num_seqs {int(seqs):,}{where}: "
                                     "with budget_covers_seqs the engine refuses to start")
        return self


class Kernels(_Strict):
    """Achieved fractions (fitted where data exist; docs/serving.md)."""

    decode_bandwidth: PerGen = Field(
        0.85, description="fraction of the achievable HBM bandwidth (datasheet x gpu.memory_efficiency) that "
                          "decode's weight and KV-cache reads reach")
    gemm_efficiency: PerGen = Field(
        0.85, description="fraction of the hardware GEMM curve (gpu.gemm) the prefill GEMMs reach")
    attention_efficiency: PerGen = Field(
        0.5, description="fraction of the dense 16-bit peak the prefill attention kernel reaches")


class Overheads(_Strict):
    """Host-side and launch costs the GPU work does not hide (bounds: the fit's own bounds,
    serving/fit.PARAMS, times 20 or more)."""

    per_step_s: Annotated[PerGenSeconds, at_most(1.0, "2 ms", "engine")] = Field(
        0.002, description="per iteration: scheduling, input preparation, sampling launch (at most 1 s)")
    per_seq_s: Annotated[PerGenSeconds, at_most(0.1, "59 us", "engine")] = Field(
        0.0, description="per sequence in an iteration: sampling, detokenisation (at most 0.1 s)")
    per_layer_s: Annotated[PerGenSeconds, at_most(0.1, "20 us", "engine")] = Field(
        0.0, description="per layer per iteration: launch gaps CUDA graphs do not remove (at most 0.1 s)")
    per_request_s: Annotated[PerGenSeconds, at_most(10.0, "5 ms", "engine")] = Field(
        0.0, description="per request, on the first token: HTTP, tokenisation, admission (at most 10 s)")


def _workspace(v: float) -> float:
    if 0 < v < 2**20:   # a bare `1.5` is 1.5 bytes ("workspace 0.00 GB")
        raise ValueError(f"{v:g} bytes is below 1 MiB: a unit is probably missing (write e.g. '1.5 GiB')")
    return v


class Memory(_Strict):
    workspace_bytes: Annotated[MEMORY_BYTES, AfterValidator(_workspace)] = Field(
        1.5 * 2**30, le=2**40, description="CUDA context, CUDA graphs and library workspaces per GPU, outside the KV pool")


class Engine(_Strict):
    name: Name
    description: Text = ""
    extends: str | None = None
    version: Text = Field("", description="the engine version the values describe")
    sources: list[Text] = Field(default_factory=list, description="where the values come from")
    fitted_on: list[Text] = Field(default_factory=list, description="the measurements any fitted value was fitted on")
    generations: list[Literal[GENERATIONS]] | None = Field(
        None, min_length=1, description="the GPU generations the engine runs on (TensorRT-LLM: NVIDIA's only); `serve` refuses "
                          "it on another and `serve-plan --engine all` leaves it out there; None = every generation")
    expert_parallel: Literal["tp", "divisor"] = Field(
        "divisor", description="how a replica's MoE layers may split their experts: 'divisor', over ep groups of "
                               "tp/ep ranks, ep any divisor of tp (TensorRT-LLM moe_ep_size x moe_tp_size = tp, "
                               "SGLang --ep-size); 'tp', over every TP rank or none (vLLM --enable-expert-parallel: "
                               "ep = tp x dp, so ep = tp in one replica)")
    scheduler: Scheduler = Field(default_factory=Scheduler)
    kernels: Kernels = Field(default_factory=Kernels)
    overhead: Overheads = Field(default_factory=Overheads)
    memory: Memory = Field(default_factory=Memory)
    calibration: dict | None = Field(None, description="what the fit fitted, on what, how well")
