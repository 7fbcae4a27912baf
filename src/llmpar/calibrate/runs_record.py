"""The measured-run record and the runs table's column names: what ``llmpar calibrate runs`` reads.

:class:`MeasuredRun` is the one record the readers (:mod:`llmpar.calibrate.runs_io`) produce; the
layout keys, the accepted column spellings (:data:`ALIASES`), the time, MFU and memory columns and
their units, and the per-source readings (:data:`KNOWN_SOURCES`) are the format documented in
``docs/runs-format.md``. Nothing here reads a file or prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llmpar.options import LAYOUT_KEYS as OPTION_LAYOUT_KEYS

STATUSES = ("ok", "oom", "crashed")
CONVENTIONS = ("full", "causal", "hardware")   # how a run's tflops_per_gpu / mfu count FLOPs (docs/runs-format.md)
DEGREES = ("tp", "pp", "dp", "cp", "ep", "etp")
# the layout options (declared once, llmpar.options) and the settings a runs table may state
LAYOUT_KEYS = OPTION_LAYOUT_KEYS + ("dtype", "recompute_modules", "optimizer", "grad_dtype", "tp_overlap", "dp_overlap",
                                    "ep_overlap", "ep_dispatcher")
#: the layout keys that are settings a run states (the CLI's --optimizer, --tp-overlap ...): runs are
#: evaluated in groups that share them (calibrate/runs_layouts.py prepare)
SETTING_KEYS = ("optimizer", "grad_dtype", "tp_overlap", "dp_overlap", "ep_overlap", "ep_dispatcher")
#: whose peak memory a run measured: the largest over the ranks, or world rank 0's (pipeline stage 0)
MEMORY_STAGES = ("max", "first")
MEASURED_KEYS = ("step_time_s", "tokens_per_s_per_gpu", "mfu", "tflops_per_gpu", "peak_allocated_bytes",
                 "peak_reserved_bytes")


@dataclass(frozen=True)
class MeasuredRun:
    """One measured training run. Units: seconds, tokens/s per GPU, MFU as a fraction, TFLOP/s per GPU
    (as the framework counted it), bytes. A measurement the input did not give is None."""

    source: str                                  # 'file:line' of the row, or of the log's first iteration
    model: str | None
    hardware: str | None
    layout: dict[str, Any]                       # CLI option names only (LAYOUT_KEYS)
    status: str = "ok"                           # 'ok' | 'oom' | 'crashed' (did not run)
    step_time_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    mfu: float | None = None
    tflops_per_gpu: float | None = None
    peak_allocated_bytes: float | None = None
    peak_reserved_bytes: float | None = None
    notes: tuple[str, ...] = ()
    convention: str = "full"     # how tflops_per_gpu / mfu count FLOPs: full | causal | hardware
    mfu_peak_dtype: str = "bf16"  # the dense peak an MFU figure is relative to
    # whose peak memory was measured: "max" (the largest over the ranks: the most-loaded pipeline
    # stage) or "first" (world rank 0, i.e. pipeline stage 0, as nanotron's benchmark CSV writes it)
    memory_stage: str = "max"
    row: str | None = None       # where in a published source (validation/*.yaml 'row:')
    stack: str | None = None     # the framework the run used, when the table says (top-level 'stack:')
    metric: str | None = None    # the headline measurement to compare (top-level 'metric:'), when several are given

    @property
    def has_speed(self) -> bool:
        """The run ran and gives a speed figure (step time, tokens/s, TFLOP/s or MFU)."""
        return self.status == "ok" and any(
            v is not None for v in (self.step_time_s, self.tokens_per_s_per_gpu, self.tflops_per_gpu, self.mfu))

    @property
    def has_memory(self) -> bool:
        """The run gives a memory figure: its peak, or the lower bound an OOM implies."""
        return (self.status == "ok" and (self.peak_allocated_bytes or self.peak_reserved_bytes) is not None) \
            or self.status == "oom"



# ----------------------------------------------------------------------------- column names

def column_key(name: Any) -> str:
    """A column name as the aliases spell it: lower case, spaces and dashes as underscores."""
    return re.sub(r"[\s\-]+", "_", str(name).strip().lower())


#: accepted spellings -> CLI option name (docs/runs-format.md, "Columns")
ALIASES: dict[str, str] = {
    **{k: k for k in LAYOUT_KEYS},
    "tensor_parallel": "tp", "tensor_parallel_size": "tp", "tensor_model_parallel_size": "tp",
    "pipeline_parallel": "pp", "pipeline_parallel_size": "pp", "pipeline_model_parallel_size": "pp",
    "data_parallel": "dp", "data_parallel_size": "dp",
    "context_parallel": "cp", "context_parallel_size": "cp",
    "expert_parallel": "ep", "expert_parallel_size": "ep", "expert_model_parallel_size": "ep",
    "expert_tensor_parallel": "etp", "expert_tensor_parallel_size": "etp",
    "zero_stage": "zero", "sequence_parallel": "sp", "recompute_granularity": "recompute",
    "micro_batch_size": "micro_batch", "mbs": "micro_batch",
    "global_batch_size": "global_batch", "gbs": "global_batch",
    "grad_accum": "microbatches", "gradient_accumulation_steps": "microbatches", "num_microbatches": "microbatches",
    "seq_len": "seq", "seq_length": "seq", "sequence_length": "seq",
    "num_gpus": "gpus", "n_gpus": "gpus", "world_size": "gpus",
    "virtual_pipeline_model_parallel_size": "virtual_stages", "vpp": "virtual_stages",
    "recompute_num_layers": "recompute_layers",
    "cpu_offloading_num_layers": "offload_layers",
    "model": "model", "model_name": "model", "hardware": "hardware", "gpu": "hardware",
    "status": "status", "log": "log",
    "step_time_s": "step_time_s", "iteration_time_s": "step_time_s",
    "tokens_per_s_per_gpu": "tokens_per_s_per_gpu", "tokens_per_sec_per_gpu": "tokens_per_s_per_gpu",
    "tps": "tokens_per_s_per_gpu", "tgs": "tokens_per_s_per_gpu",
    "tokens_per_s": "tokens_per_s", "tokens_per_sec": "tokens_per_s",
    "mfu": "mfu", "tflops_per_gpu": "tflops_per_gpu", "tflops": "tflops_per_gpu",
}
#: time columns: name -> seconds per unit (None: the value must carry its unit, '1.2 s', '850 ms')
TIME_COLUMNS = {"step_time_s": 1.0, "iteration_time_s": 1.0, "step_time_ms": 1e-3, "iteration_time_ms": 1e-3,
                 "elapsed_time_per_iteration_ms": 1e-3, "step_time": None, "iteration_time": None}
PERCENT_COLUMNS = ("mfu_pct", "mfu_percent")
_MEM_UNITS = {"bytes": 1.0, "b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
              "kib": 2.0**10, "mib": 2.0**20, "gib": 2.0**30, "tib": 2.0**40}
_MEM_RE = re.compile(r"^(?:peak_|max_)?(?:gpu_)?(?:memory_)?(allocated|reserved|memory)(?:_([a-z]+))?$")

#: per-source readings of columns whose name does not say enough (matched against a YAML's ``source:``)
KNOWN_SOURCES: dict[str, dict[str, tuple[str, float, str]]] = {
    # The Ultra-Scale Playbook's figure data label memory "GB", but nanotron logs memory with
    # torch.cuda.max_memory_allocated()/max_memory_reserved() divided by 1024**2 (MiB), so the figures'
    # "GB" are GiB. Which peak is plotted is not stated; the largest successful run is 76.9 on an H100
    # (79.1 GiB usable) and none lies in 77-79 GiB, which fits the allocated peak (the reserved one
    # includes the caching allocator's slack and would reach the capacity). docs/runs-format.md.
    "hf_ultrascale_playbook": {
        "gpu_memory_gb": ("peak_allocated_bytes", 2.0**30,
                          "Ultra-Scale Playbook gpu_memory_gb read as peak allocated GiB (nanotron logs MiB)"),
    },
}


def memory_column(key: str) -> tuple[str, float | None] | None:
    """'peak_reserved_gib' -> ('peak_reserved_bytes', 2**30); 'gpu_memory' -> ('peak_allocated_bytes', None)."""
    m = _MEM_RE.match(key)
    if not m:
        return None
    kind = "peak_reserved_bytes" if m.group(1) == "reserved" else "peak_allocated_bytes"
    unit = m.group(2)
    if unit is None:
        return kind, None
    return (kind, _MEM_UNITS[unit]) if unit in _MEM_UNITS else None

