"""Hardware profile (data, validated by pydantic).

One YAML file per system in ``hardware/``; a user file may ``extends:`` a shipped one. Numbers are
unit strings (``80 GiB``, ``3.35 TB/s``, ``900 GB/s bidirectional``, ``989 TFLOPS``, ``2 us``) and
are stored internally in bytes, bytes/s (per direction), FLOP/s and seconds.

Bandwidth convention (docs/architecture.md, Units): ``Tier.bandwidth`` is *per GPU, per direction*. For an
NVLink tier that is the GPU's NVLink bandwidth in one direction (H100: 450 GB/s); for a scale-out
tier it is the GPU's share of the node's NICs (DGX H100: 8 x 400 Gb/s / 8 GPUs = 50 GB/s).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, Field, field_validator, model_validator

from llmpar.specs.base import MIN_FITTED_SHARE, SPEC, Name, Text, at_least_bytes, at_most
from llmpar.specs.stack import GENERATIONS
from llmpar.units import parse_bytes, parse_flops, parse_per_direction_bandwidth, parse_power, parse_seconds

Bytes = Annotated[float, BeforeValidator(lambda v: parse_bytes(v, "memory size"))]
Bandwidth = Annotated[float, BeforeValidator(lambda v: parse_per_direction_bandwidth(v))]
Flops = Annotated[float, BeforeValidator(lambda v: parse_flops(v))]
Seconds = Annotated[float, BeforeValidator(lambda v: parse_seconds(v, "latency"))]
#: a collective's per-step latency: microseconds on every fabric; a bare `latency: 0.6` (meant as us)
#: had been 0.6 s, 600,000 us, and was printed so
Latency = Annotated[Seconds, at_most(0.1, "5 us", "interconnect step")]
Watts = Annotated[float, BeforeValidator(lambda v: parse_power(v))]

DTYPES = ("bf16", "fp16", "fp8", "fp4", "tf32", "fp32")   # fp4: Blackwell NVFP4/MXFP4 tensor cores (serving)


class GemmEfficiency(BaseModel):
    """Achieved/peak matmul throughput as a function of GEMM shape (see llmpar.cost.compute):

    eff(m, n, k, count) = max_efficiency * d / (d + half_dim) * F / (F + half_flops)
        d = min(m, n, k)            skinny GEMMs (small k, or few tokens) fall towards the
                                    memory roof: arithmetic intensity grows with d
        F = 2*m*n*k*count           FLOPs of one launch: half_flops / (peak * max_efficiency) is the
                                    fixed per-kernel cost (launch, ramp-up, last partial wave)
    (docs/architecture.md, GEMM efficiency: large square bf16 GEMMs reach ~87 % of peak on A100 and ~80 % on
    H100, ml-engineering MAMF; small or skinny GEMMs fall off). ``llmpar calibrate gemm`` refits it.
    """

    model_config = SPEC
    # bounds (reliability review, item 4): a GEMM reaches at least 1 % of its peak; half its best
    # efficiency at a smallest dimension of at most 2^20 (the largest llmpar models) and at a
    # fixed cost of at most 1e15 FLOPs per launch (a second of a PFLOP/s GPU)
    max_efficiency: float = Field(0.80, ge=0.01, le=1)
    half_dim: float = Field(64.0, ge=0, le=2**20, description="smallest GEMM dimension at which efficiency is half "
                                                              "the maximum")
    half_flops: float = Field(0.0, ge=0, le=1e15, description="FLOPs per launch at which the fixed kernel cost halves "
                                                              "efficiency")


class Accelerator(BaseModel):
    model_config = SPEC
    name: Name
    generation: Literal[GENERATIONS] | None = Field(   # the names a stack keys its per-generation values by
        None, description="GPU architecture; selects a stack's per-generation values (None: the stacks' defaults)")
    sms: int | None = Field(
        None, gt=0, description="streaming multiprocessors (whitepaper); prices SMs a stack's overlapped "
                                "communication kernels take from compute (stack overlap.ep_sms); None: not priced")
    memory: Bytes = Field(description="HBM capacity, in the unit the vendor means (H100 '80 GB' is 80 GiB)")
    memory_bandwidth: Bandwidth = Field(description="HBM bandwidth (datasheet)")
    memory_efficiency: float = Field(0.85, ge=0.01, le=1, description="achieved/datasheet HBM bandwidth (STREAM-like)")
    peak_flops: dict[str, Flops] = Field(description="dense peak FLOP/s per dtype: bf16, fp16, fp8, tf32, fp32")
    gemm: GemmEfficiency = Field(default_factory=GemmEfficiency)
    board_power: Watts | None = Field(
        None, le=1e5, description="maximum board power (TDP) of one GPU, W (datasheet); energy to train (llmpar.cost.training)")

    @field_validator("memory")
    @classmethod
    def _memory_unit(cls, value: float) -> float:
        if value < 2**30:
            # no GPU llmpar plans for has less; a bare `memory: 80` is 80 bytes (printed as 0.0 GB)
            raise ValueError(f"{value:g} bytes is below 1 GiB: a unit is probably missing (write e.g. '80 GiB')")
        if value > 2**40:
            raise ValueError(f"{value:g} bytes is above 1 TiB per GPU: check the unit")
        return value

    @model_validator(mode="after")
    def _check(self) -> Accelerator:
        unknown = set(self.peak_flops) - set(DTYPES)
        if unknown:
            raise ValueError(f"peak_flops has unknown dtype(s) {sorted(unknown)}; known: {', '.join(DTYPES)}")
        if "bf16" not in self.peak_flops and "fp16" not in self.peak_flops:
            raise ValueError("peak_flops needs at least bf16 or fp16")
        # bounds far beyond any GPU (1 GFLOP/s .. 1 EFLOP/s, 1 GB/s .. 1 PB/s): a unit typo is one
        # line, not a step of 1e30 s
        for k, v in self.peak_flops.items():
            if not 1e9 <= v <= 1e18:
                raise ValueError(f"peak_flops.{k} {v:g} FLOP/s is outside 1 GFLOP/s .. 1 EFLOP/s: check the unit")
        if not 1e9 <= self.memory_bandwidth <= 1e15:
            raise ValueError(f"memory_bandwidth {self.memory_bandwidth:g} B/s is outside 1 GB/s .. 1 PB/s: check the unit")
        half = self.peak_flops.get("bf16") or self.peak_flops.get("fp16")
        if "fp8" in self.peak_flops and self.peak_flops["fp8"] < half:
            raise ValueError(f"peak_flops.fp8 {self.peak_flops['fp8'] / 1e12:g} TFLOP/s is below the 16-bit peak "
                             f"{half / 1e12:g}: FP8 tensor cores run at least at the 16-bit rate")
        return self

    def peak(self, dtype: str) -> float:
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]
        if dtype in ("bf16", "fp16"):
            return self.peak_flops.get("bf16") or self.peak_flops["fp16"]
        from llmpar.errors import UserError

        raise UserError(f"hardware {self.name!r} states no peak for dtype {dtype!r} (has: {', '.join(self.peak_flops)})")


class TierFit(BaseModel):
    """Per-collective values of a tier's collective-model fit parameters (``Tier.collectives``).

    Written by ``llmpar calibrate fit`` for each collective it measured (NCCL reaches different
    bandwidths for all-reduce, all-gather, all-to-all on the same links); a field left out falls
    back to the tier's own value. Meaning of each field: see :class:`Tier`.
    """

    model_config = SPEC
    latency: Latency | None = None
    ll128_latency: Latency | None = None
    simple_latency: Latency | None = None
    efficiency: float | None = Field(None, ge=MIN_FITTED_SHARE, le=1)
    ll_efficiency: float | None = Field(None, ge=MIN_FITTED_SHARE, le=1)
    ll128_efficiency: float | None = Field(None, ge=MIN_FITTED_SHARE, le=1)
    inr_latency: Latency | None = None
    inr_efficiency: float | None = Field(None, ge=MIN_FITTED_SHARE, le=1)


class Tier(BaseModel):
    """One level of the interconnect, from the GPU's point of view.

    ``domain_size``: how many GPUs this tier connects directly (8 for NVLink inside a DGX, 72 for
    an NVL72 rack); ``None`` for the scale-out network, which reaches every GPU.
    """

    model_config = SPEC
    name: Name
    kind: Literal["pcie", "nvlink", "nvswitch", "infiniband", "ethernet"]
    domain_size: int | None = Field(None, gt=0)
    bandwidth: Bandwidth = Field(ge=1e6, le=1e15,
                                 description="per GPU, per direction (for a NIC tier: the GPU's share of the node's NICs)")
    latency: Latency = Field(description="hardware latency per step of a collective with NCCL's LL protocol (alpha)")
    in_network_reduction: bool = Field(False, description="NVLS (NVSwitch SHARP) or IB SHARP available")
    efficiency: float = Field(0.9, ge=MIN_FITTED_SHARE, le=1, description="achieved/line-rate bandwidth for large messages")
    # --- optional refinements of the collective model (llmpar.cost.collectives; docs/collectives.md).
    # None = derived from `latency` with the ratios of NCCL's hwLatencies table for this tier's kind.
    ll128_latency: Latency | None = Field(None, description="per-step latency with the LL128 protocol")
    simple_latency: Latency | None = Field(None, description="per-step latency with the Simple protocol")
    inr_latency: Latency | None = Field(
        None, description="latency of one in-network reduction (NVLS on NVSwitch, SHARP on the NIC tier)")
    inr_efficiency: float | None = Field(
        None, ge=MIN_FITTED_SHARE, le=1, description="achieved/line-rate bandwidth of in-network reduction (NVLS/SHARP)")
    # NCCL picks the protocol by size, so these are the size-dependent efficiency: None = NCCL's
    # ring fractions of the Simple bandwidth (LL 0.5, LL128 0.92); other algorithms scale alike.
    ll_efficiency: float | None = Field(
        None, ge=MIN_FITTED_SHARE, le=1, description="ring bandwidth of the LL protocol as a fraction of Simple's (NCCL: 0.5)")
    ll128_efficiency: float | None = Field(
        None, ge=MIN_FITTED_SHARE, le=1, description="ring bandwidth of the LL128 protocol as a fraction of Simple's (NCCL: 0.92)")
    collectives: dict[str, TierFit] | None = Field(
        None, description="per-collective values of the fit parameters (llmpar calibrate fit); keys: all_reduce, ...")

    @model_validator(mode="after")
    def _check_collectives(self) -> Tier:
        if self.collectives:
            from llmpar.specs.collective_names import normalize_collective  # names live in one place

            self.collectives = {normalize_collective(k): v for k, v in self.collectives.items()}
        return self


class Hardware(BaseModel):
    model_config = SPEC
    name: Name
    description: Text = ""
    source: Text = ""
    extends: str | None = None
    gpu: Accelerator
    gpus_per_node: int = Field(gt=0)
    reserve: Annotated[Bytes, at_least_bytes(2**20, "6 GiB", "runtime reserve")] | None = Field(
        None, description="legacy: a flat runtime reserve; the stack's memory block (CUDA context, NCCL buffers, "
                          "allocator overhead) replaces it. When a user profile sets it, it acts as --reserve "
                          "(docs/design-notes.md)")
    tiers: list[Tier] = Field(min_length=1)
    job_domain: int | None = Field(
        None, gt=0, description="GPUs of one scale-up domain a job's ranks fill before they move on to the next (a "
                                "scheduler's allocation unit inside the domain, e.g. Slurm topology/block --segment "
                                "x gpus_per_node on GB200 NVL72); None = the whole domain")
    calibration: dict | None = Field(None, description="what `llmpar calibrate fit` fitted, from which files, when, how well")
    host_bandwidth: Bandwidth | None = Field(
        None, ge=1e8, le=1e13, description="CPU-GPU link per GPU and direction (PCIe, NVLink-C2C): prices activation offloading "
                          "(--offload-layers); None: offloading is refused")
    gpus_per_host_link: int = Field(
        1, gt=0, le=64, description="GPUs that share one host link's bandwidth when they copy at once (e.g. two GPUs "
                                    "behind one PCIe switch uplink): offload copies run at host_bandwidth / this")
    host_memory_bandwidth: Bandwidth | None = Field(
        None, ge=1e8, le=1e13, description="host DRAM bandwidth per GPU (the node's CPU memory channels x rate / "
                                           "gpus_per_node): prices a CPU optimizer step (--optimizer-offload); None: "
                                           "optimizer offload is refused")
    host_memory_per_gpu: Annotated[Bytes, at_least_bytes(1e9, "256 GB", "host memory per GPU")] | None = Field(
        None, description="host (CPU) memory per GPU: the node's RAM / gpus_per_node; offloaded activations must fit "
                          "in it (None: offloading is refused, its capacity is unknown)")
    node_power: Watts | None = Field(
        None, le=1e6, description="maximum power of one node of gpus_per_node GPUs, W, GPUs included (CPUs, memory, NICs, "
                          "NVSwitches, fans, PSU losses): its share per GPU is node_power / gpus_per_node "
                          "(llmpar.cost.training)")
    gpu_hour_price: float | None = Field(
        None, gt=0, le=1e6, description="the user's price of one GPU-hour, in their currency (at most 10^6, as "
                                        "--gpu-hour-price: 1e306 had overflowed the cost to inf); no shipped profile "
                                        "states one")

    @model_validator(mode="after")
    def _check(self) -> Hardware:
        sizes = [t.domain_size for t in self.tiers]
        if sizes[-1] is not None:
            raise ValueError("the last tier must be the scale-out network (domain_size: null)")
        inner = [s for s in sizes[:-1]]
        if any(s is None for s in inner):
            raise ValueError("only the last tier may have domain_size: null (a file that extends a profile merges its "
                             "tiers with the base's by name: a new name is appended after them; give the scale-out "
                             "tier the base's name to replace it, or write the profile without extends:)")
        if inner != sorted(inner):
            raise ValueError("tiers must be ordered from the smallest domain to the largest")
        for t in self.tiers[:-1]:
            # a scale-up domain is part of a node (a PCIe switch of 2 of 8 GPUs) or whole nodes (an
            # NVL72 rack of 18 4-GPU trays): rank placement (cost/topology.py) counts it both ways
            if t.domain_size % self.gpus_per_node and self.gpus_per_node % t.domain_size:
                raise ValueError(f"tier {t.name!r}: domain_size {t.domain_size} neither divides nor is a multiple of "
                                 f"gpus_per_node ({self.gpus_per_node})")
        if self.job_domain is not None:
            domain = max(inner) if inner else 1
            if self.job_domain > domain or self.job_domain % self.gpus_per_node:
                raise ValueError(f"job_domain {self.job_domain} must be a multiple of gpus_per_node "
                                 f"({self.gpus_per_node}) and at most the scale-up domain ({domain})")
        if self.reserve is not None and self.reserve >= self.gpu.memory:
            raise ValueError("reserve must be smaller than the GPU memory")
        if self.node_power is not None and self.gpu.board_power is not None and \
                self.node_power < self.gpus_per_node * self.gpu.board_power:
            raise ValueError(f"node_power {self.node_power:g} W is less than gpus_per_node x gpu.board_power = "
                             f"{self.gpus_per_node * self.gpu.board_power:g} W (node_power includes the GPUs)")
        return self

    @property
    def scale_up(self) -> Tier:
        """The fastest tier (NVLink/NVSwitch inside the node or rack)."""
        return self.tiers[0]

    @property
    def scale_out(self) -> Tier:
        return self.tiers[-1]

    @property
    def nvlink_domain(self) -> int:
        """GPUs reachable without the scale-out network (8 on a DGX, 72 on GB200 NVL72)."""
        return max((t.domain_size or 0) for t in self.tiers[:-1]) if len(self.tiers) > 1 else 1

    @property
    def placement_domain(self) -> int:
        """GPUs of one scale-up domain a job fills before the next (``job_domain``, else the
        whole domain): the D that rank placement (cost/topology.py) divides the job into."""
        return int(self.job_domain) if self.job_domain is not None else self.nvlink_domain
