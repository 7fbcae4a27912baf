"""Published training measurements the time model is checked against.

Each row cites its paper and table. Only the numbers needed to set up the run and compare the
result are kept (layout, batch, and the measured iteration time or TFLOP/s); the model shapes are
the shipped ``models/megatron-gpt-*.yaml`` files.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PublishedRun:
    source: str
    model: str
    gpus: int
    tp: int
    pp: int
    global_batch: int
    seq: int
    recompute: str            # none | selective | full
    sp: bool
    micro_batch: int | None   # None: not published -> best value searched (the runs were tuned)
    virtual_stages: int | None  # None: not published -> best value searched
    iteration_time_s: float | None = None
    tflops_per_gpu: float | None = None   # Narayanan 2021 eq. 3 FLOPs / time / GPUs

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)


# Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
# Table 3 (configurations: seq 2048, no data parallelism; interleaved with 3 chunks for 175B and
# 530B) and Table 5 (end-to-end iteration time: full recompute baseline vs SP + selective).
_K = "Korthikanti et al. 2022, Tables 3 and 5"
KORTHIKANTI_TABLE5 = [
    PublishedRun(_K, "megatron-gpt-22b", 8, 8, 1, 4, 2048, "full", False, 4, 1, iteration_time_s=1.42),
    PublishedRun(_K, "megatron-gpt-22b", 8, 8, 1, 4, 2048, "selective", True, 4, 1, iteration_time_s=1.10),
    PublishedRun(_K, "megatron-gpt-175b", 64, 8, 8, 64, 2048, "full", False, 1, 3, iteration_time_s=18.13),
    PublishedRun(_K, "megatron-gpt-175b", 64, 8, 8, 64, 2048, "selective", True, 1, 3, iteration_time_s=13.75),
    PublishedRun(_K, "megatron-gpt-530b", 280, 8, 35, 280, 2048, "full", False, 1, 3, iteration_time_s=49.05),
    PublishedRun(_K, "megatron-gpt-530b", 280, 8, 35, 280, 2048, "selective", True, 1, 3, iteration_time_s=37.83),
    PublishedRun(_K, "megatron-gpt-1t", 512, 8, 64, 512, 2048, "full", False, 1, 1, iteration_time_s=94.42),
    PublishedRun(_K, "megatron-gpt-1t", 512, 8, 64, 512, 2048, "selective", True, 1, 1, iteration_time_s=71.49),
]

# Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM", Table 1 (weak scaling; seq 2048, full activation recompute, interleaved schedule
# with the scatter/gather optimisation; micro-batch and chunks per stage not published).
_N = "Narayanan et al. 2021, Table 1"
NARAYANAN_TABLE1 = [
    PublishedRun(_N, "megatron-gpt-1.7b", 32, 1, 1, 512, 2048, "full", False, None, 1, tflops_per_gpu=137),
    PublishedRun(_N, "megatron-gpt-3.6b", 64, 2, 1, 512, 2048, "full", False, None, 1, tflops_per_gpu=138),
    PublishedRun(_N, "megatron-gpt-7.5b", 128, 4, 1, 512, 2048, "full", False, None, 1, tflops_per_gpu=142),
    PublishedRun(_N, "megatron-gpt-18.4b", 256, 8, 1, 1024, 2048, "full", False, None, 1, tflops_per_gpu=135),
    PublishedRun(_N, "megatron-gpt-39.1b", 512, 8, 2, 1536, 2048, "full", False, None, None, tflops_per_gpu=138),
    PublishedRun(_N, "megatron-gpt-76.1b", 1024, 8, 4, 1792, 2048, "full", False, None, None, tflops_per_gpu=140),
    PublishedRun(_N, "megatron-gpt-145.6b", 1536, 8, 8, 2304, 2048, "full", False, None, None, tflops_per_gpu=148),
    PublishedRun(_N, "megatron-gpt-310.1b", 1920, 8, 16, 2160, 2048, "full", False, None, None, tflops_per_gpu=155),
    PublishedRun(_N, "megatron-gpt-530b", 2520, 8, 35, 2520, 2048, "full", False, None, None, tflops_per_gpu=163),
    PublishedRun(_N, "megatron-gpt-1t", 3072, 8, 64, 3072, 2048, "full", False, None, None, tflops_per_gpu=163),
]
