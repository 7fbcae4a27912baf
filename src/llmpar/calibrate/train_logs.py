"""Read training logs people already have: Megatron-LM, NeMo and torchtitan.

Used by :mod:`llmpar.calibrate.runs_io`; nothing here prints and nothing is fitted. What each format
looks like (checked against the printing code and against public log excerpts, see
``docs/runs-format.md`` and ``tests/fixtures/train_logs/``):

- Megatron-LM ``training_log`` (megatron/training/training.py): `` iteration   71/  100 | consumed
  samples: ... | elapsed time per iteration (ms): 5361.6 | throughput per GPU (TFLOP/s/GPU): 243.6 |
  ... | global batch size:   128 | ...``; older versions omit the TFLOP/s field. ``report_memory``:
  ``[Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ... | reserved: ...
  | max reserved: ...`` (before 2021 without ``[Rank N] (``); MB there is ``/ (1024 * 1024)``, i.e. MiB.
  The ``---- arguments ----`` block and the ``using world size: ..., tensor-model-parallel size: ...``
  line give the layout.
- NeMo (Lightning progress bar or the NeMo 2 text logger): ``train_step_timing in s: 0.0315`` or
  ``train_step_timing in s=1.23``, with ``iteration N/M`` or ``global_step: N``.
- torchtitan ``MetricsProcessor.log`` (torchtitan/components/metrics.py): ``step: 10  loss: 7.8
  [grad_norm: 1.2]  memory: 36.25GiB(45.79%)  tps: 6,542  tflops: 379.04  mfu: 38.33%``. ``memory`` is
  ``device_mem_stats.max_reserved_gib`` (peak *reserved* since the previous log line, in GiB); ``tps`` is
  tokens / (seconds x non-data-parallel size), i.e. tokens per second per GPU (older versions: ``wps``).
  ``Building N-D device mesh with [names], [sizes]`` and ``Trainer is initialized with local batch size
  B, global batch size G, sequence length S`` give the layout.

Steady state (step time, TFLOP/s, tokens/s, MFU): the median over iteration lines after dropping the
warm-up -- every line at iteration <= WARMUP_ITERS and the first iteration logged in each segment
(a segment starts at the top of the log and again wherever the iteration number goes back, i.e. a
restart). The first logged line's window always contains the start of the process (CUDA context,
NCCL communicators, torch.compile, allocator growth); iterations 2-3 are still often slow. The median
then ignores the odd checkpoint save or garbage-collection spike. Peak memory is the maximum over all
lines, warm-up included (a peak is a peak).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from llmpar.errors import UserError

#: iterations whose number is <= this are warm-up and never enter a median
WARMUP_ITERS = 3

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# a number as the frameworks print it; 'nan' / 'inf' are matched too, so that a non-finite figure is
# refused with its line (``_finite``) instead of making the line unreadable
_NUM = r"([-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf(?:inity)?))"

# --- Megatron-LM
_MEG_TRIGGER = "elapsed time per iteration"
_MEG_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|")
_MEG_ELAPSED = re.compile(r"elapsed time per iteration \(ms\):\s*" + _NUM)
_MEG_TFLOPS = re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*" + _NUM)
_MEG_GBS = re.compile(r"global batch size:\s*(\d+)")
_MEG_MEM = re.compile(
    r"memory \((MB)\)\s*\|\s*allocated:\s*" + _NUM + r"\s*\|\s*max allocated:\s*" + _NUM
    + r"\s*\|\s*reserved:\s*" + _NUM + r"\s*\|\s*max reserved:\s*" + _NUM
)
_MEG_MEM_TRIGGER = re.compile(r"memory \((?:MB|GB|GiB|MiB)\)\s*\|\s*allocated")
_ARGS_START = re.compile(r"-{3,}\s*arguments\s*-{3,}")
_ARGS_END = re.compile(r"-{3,}\s*end of arguments\s*-{3,}")
_ARG_LINE = re.compile(r"(?:^|[\s:\]])([A-Za-z_][A-Za-z0-9_]*) \.{2,} ?(.*?)\s*$")
_USING_WORLD = re.compile(r"using world size:")
_USING_PAIR = re.compile(
    r"(world|data-parallel|tensor-model-parallel|pipeline-model-parallel|context-parallel|"
    r"expert-model-parallel)[ -]size:\s*(\d+)"
)

# --- NeMo
_NEMO_TRIGGER = "train_step_timing in s"
_NEMO_TIME = re.compile(r"train_step_timing in s\s*[:=]\s*(\d[\d.]*(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf(?:inity)?))")
_NEMO_STEP = (
    re.compile(r"global_step\s*[:=]\s*(\d+)"),
    re.compile(r"\biteration\s+(\d+)\s*/"),
    re.compile(r"\|\s*(\d+)/(?:\d+|\?)\s*\["),
)
_NEMO_GBS = re.compile(r"global_batch_size\s*[:=]\s*(\d+)")

# --- torchtitan
_TT_TRIGGER = re.compile(r"(?<![A-Za-z_])step:\s*\d+\s+loss:")
_TT_VALIDATE = re.compile(r"valid\w*\s+step:|context: val")
_TT_STEP = re.compile(r"(?<![A-Za-z_])step:\s*(\d+)")
_TT_TPS = re.compile(r"\b(?:tps|wps):\s*" + _NUM)
_TT_TFLOPS = re.compile(r"\btflops:\s*" + _NUM)
_TT_MFU = re.compile(r"\bmfu:\s*" + _NUM + "%")
_TT_MEM = re.compile(r"\bmemory:\s*" + _NUM + r"\s*GiB")
_TT_RANK = re.compile(r"^\s*\[rank(\d+)\]:")    # torchrun's --tee prefix of each rank's lines
_MEG_RANK = re.compile(r"\[Rank (\d+)\] \(after")  # report_memory's prefix (Megatron-LM utils.py)
_TT_MESH = re.compile(r"Building \d+-D device mesh with \[([^\]]*)\],\s*\[([^\]]*)\]")
_TT_INIT = re.compile(r"local batch size (\d+), global batch size (\d+), sequence length (\d+)")

_OOM = re.compile(r"CUDA out of memory|HIP out of memory|OutOfMemoryError")

_MIB = 2.0**20
_GIB = 2.0**30
#: a peak memory figure above this is no GPU's (the largest hold a few hundred GB): a wrong unit or a
#: corrupted log; refused rather than read (runs_io applies the same bound to runs tables)
MAX_MEMORY_BYTES = 10e12


@dataclass
class LogRead:
    """What one log says: layout (CLI option names), measured values, notes. Not yet validated."""

    kind: str                                   # 'megatron', 'nemo', 'torchtitan' (or 'a+b' if mixed)
    line: int                                   # first iteration line used (or the OOM line)
    layout: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)
    status: str = "ok"
    notes: list[str] = field(default_factory=list)
    iterations: int = 0                         # iteration lines read (all, warm-up included)
    # whose peak memory: "first" when every memory figure came from world rank 0 (pipeline stage 0),
    # else None (the largest over the ranks the log holds)
    memory_stage: str | None = None
    # the model's shape as the arguments block states it: {"layers"|"hidden"|"heads": (value, file:line)}
    shape: dict[str, tuple[int, str]] = field(default_factory=dict)


@dataclass
class _Entry:
    it: int
    line: int
    values: dict[str, float]


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _finite(text: str, where: str, what: str) -> float:
    """``_num`` for a figure a run is measured by: NaN or infinity is bad input naming the line."""
    v = _num(text)
    if not math.isfinite(v):
        raise UserError(f"{where}: {what} {text!r} is not a finite number")
    return v


def _positive_int(v) -> bool:
    """A JSON/YAML value that is a whole number >= 1 (a bool is not one)."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _memory(text: str, scale: float, where: str, what: str) -> float:
    """A memory figure of a log line in bytes; beyond any GPU's memory it is refused (wrong unit?)."""
    v = _finite(text, where, what) * scale
    if v > MAX_MEMORY_BYTES:
        raise UserError(f"{where}: {what} {text} is {v:.3g} bytes, an implausible size, more than any GPU "
                        f"holds (llmpar reads at most {MAX_MEMORY_BYTES / 1e12:g} TB)")
    return v


def _steady(entries: list[_Entry], where: str, notes: list[str]) -> list[_Entry]:
    """The entries after warm-up (module docstring); falls back, with a note, when none are left."""
    firsts: set[int] = set()
    prev = seg_first = None
    for i, e in enumerate(entries):
        if prev is None or e.it < prev:
            seg_first = e.it  # a new segment: the top of the log, or a restart
        if e.it == seg_first:
            firsts.add(i)     # every rank's copy of the segment's first logged iteration
        prev = e.it
    kept = [e for i, e in enumerate(entries) if i not in firsts and e.it > WARMUP_ITERS]
    if kept:
        return kept
    kept = [e for i, e in enumerate(entries) if i not in firsts]
    if kept:
        notes.append(f"{where}: only warm-up iterations (<= {WARMUP_ITERS}) after the first logged one; "
                     f"used them for the medians")
        return kept
    notes.append(f"{where}: a single logged iteration; warm-up not dropped")
    return entries


def _median(entries: list[_Entry], key: str) -> float | None:
    vals = [e.values[key] for e in entries if key in e.values]
    return float(statistics.median(vals)) if vals else None


def _arg_value(raw: str):
    v = re.sub(r"\.{2,}\s*\w*$", "", raw).strip()  # Megatron-DeepSpeed: "value.......default"
    if v in ("", "None"):
        return None
    if v in ("True", "False"):
        return v == "True"
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def _megatron_layout(args: dict[str, Any], where: str, notes: list[str],
                     lines: dict[str, int] | None = None) -> dict[str, Any]:
    """Megatron argument names -> CLI option names (``lines``: argument -> its line, for notes)."""
    out: dict[str, Any] = {}

    def at(arg: str) -> str:
        return f"{where}:{lines[arg]}" if lines and arg in lines else where

    direct = {
        "tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
        "context_parallel_size": "cp", "expert_model_parallel_size": "ep",
        "expert_tensor_parallel_size": "etp",
        "data_parallel_size": "dp", "world_size": "gpus", "micro_batch_size": "micro_batch",
        "global_batch_size": "global_batch", "seq_length": "seq", "sequence_parallel": "sp",
    }
    for arg, name in direct.items():
        if args.get(arg) is not None:
            out[name] = args[arg]
    gran = args.get("recompute_granularity")
    if gran is not None:
        out["recompute"] = str(gran)
    elif args.get("recompute_activations") is True:
        out["recompute"] = "selective"
    elif "recompute_granularity" in args:
        out["recompute"] = "none"
    v = args.get("virtual_pipeline_model_parallel_size")
    per_stage = args.get("num_layers_per_virtual_pipeline_stage")
    if v is not None and not _positive_int(v):
        notes.append(f"{at('virtual_pipeline_model_parallel_size')}: virtual_pipeline_model_parallel_size={v} is not "
                     f"a positive number of model "
                     f"chunks: virtual stages not set")
        v = None
    if v is None and per_stage is not None and not _positive_int(per_stage):
        notes.append(f"{at('num_layers_per_virtual_pipeline_stage')}: num_layers_per_virtual_pipeline_stage="
                     f"{per_stage} is not a positive layer count: "
                     f"virtual stages not set")
    elif v is None and isinstance(per_stage, int) and per_stage > 0:
        layers, pp = args.get("num_layers"), args.get("pipeline_model_parallel_size")
        if isinstance(layers, int) and isinstance(pp, int) and pp > 0 and layers % (pp * per_stage) == 0:
            v = layers // (pp * per_stage)
        else:
            notes.append(f"{at('num_layers_per_virtual_pipeline_stage')}: num_layers_per_virtual_pipeline_stage="
                         f"{per_stage} but num_layers/pp "
                         f"not readable or not divisible: virtual stages not set")
    if isinstance(v, int) and v > 1:
        out["virtual_stages"] = v
        out["schedule"] = "interleaved"
    if args.get("fp8") not in (None, False):
        out["dtype"] = "fp8"
    elif args.get("bf16") is True:
        out["dtype"] = "bf16"
    elif args.get("fp16") is True:
        out["dtype"] = "fp16"
    # settings the arguments block states (printed after Megatron-LM's validate_args, so effective):
    # bf16 gradients reduced in bf16 unless accumulate_allreduce_grads_in_fp32 (arguments.py sets it
    # for fp32 main grads; --grad-reduce-in-bf16 clears it); the combined-1F1B all-to-all overlap;
    # TP and DP overlap switched off (switched on, the stack's fractions stand); the dispatcher
    acc = args.get("accumulate_allreduce_grads_in_fp32")
    if acc is True:
        out["grad_dtype"] = "fp32"
    elif acc is False and out.get("dtype") in ("bf16", "fp8"):
        out["grad_dtype"] = "bf16"
    if isinstance(args.get("overlap_moe_expert_parallel_comm"), bool):
        out["ep_overlap"] = 1.0 if args["overlap_moe_expert_parallel_comm"] else 0.0
    if args.get("tp_comm_overlap") is False and out.get("tp", 1) > 1:
        out["tp_overlap"] = 0.0
    if args.get("overlap_grad_reduce") is False:
        out["dp_overlap"] = 0.0
    if args.get("moe_enable_deepep") is True:
        out["ep_dispatcher"] = "deepep"
    elif args.get("moe_token_dispatcher_type") == "alltoall":
        out["ep_dispatcher"] = "alltoall"
    if args.get("use_distributed_optimizer") is True:
        out["zero"] = 1
        notes.append(f"{where}: Megatron's distributed optimizer read as zero=1 (optimizer states sharded)")
    elif args.get("use_distributed_optimizer") is False:
        out["zero"] = 0
    return out


_USING_NAMES = {"world": "gpus", "data-parallel": "dp", "tensor-model-parallel": "tp",
                "pipeline-model-parallel": "pp", "context-parallel": "cp", "expert-model-parallel": "ep"}
_MESH_DP = {"dp_replicate", "dp_shard", "dp_shard_mod_ep", "dp_shard_in_ep"}


def _mesh_layout(names_raw: str, sizes_raw: str, where: str, notes: list[str]) -> dict[str, Any]:
    names = [n.strip().strip("'\"") for n in names_raw.split(",") if n.strip()]
    try:
        sizes = [int(s) for s in sizes_raw.split(",") if s.strip()]
    except ValueError:
        notes.append(f"{where}: device mesh sizes {sizes_raw!r} not readable; layout not taken from it")
        return {}
    if len(names) != len(sizes) or not names:
        notes.append(f"{where}: device mesh names and sizes differ in length; layout not taken from it")
        return {}
    out: dict[str, Any] = {}
    dp, understood = 1, True
    for n, s in zip(names, sizes):
        if n in ("tp", "pp", "cp"):
            out[n] = s
        elif n in _MESH_DP:
            dp *= s
        else:
            understood = False
            notes.append(f"{where}: device mesh dimension {n!r}={s} not read (give ep etc. explicitly)")
    if understood:
        out["dp"] = dp
        total = 1
        for s in sizes:
            total *= s
        out["gpus"] = total
    return out


def read_log(text: str, name: str) -> LogRead:
    """Parse one log's text. ``name`` (the file's display name) goes into every ``name:line`` note.

    Returns a :class:`LogRead` with ``iterations == 0`` and ``status == 'ok'`` when no iteration line
    was found; the caller turns that into a :class:`~llmpar.errors.UserError`.
    """
    notes: list[str] = []
    meg: list[_Entry] = []
    nemo: list[_Entry] = []
    titan: list[_Entry] = []
    args: dict[str, Any] = {}
    arg_lines: dict[str, int] = {}   # argument -> its line in the arguments block
    layout_found: dict[str, Any] = {}
    gbs_seen: dict[int, int] = {}  # global batch size -> first line
    mem_alloc: list[float] = []
    mem_reserved: list[float] = []
    tt_mem: list[float] = []
    tt_mem_ranks: set = set()      # the ranks (torchrun's [rankN]: prefix) whose memory figures were read
    meg_mem_ranks: set = set()     # the ranks of Megatron's "[Rank N] (after ...) memory" lines
    in_args = False
    oom_line = 0
    validations = 0
    for lineno, raw in enumerate(text.split("\n"), start=1):
        for piece in raw.split("\r"):
            line = _ANSI.sub("", piece)
            if not line.strip():
                continue
            where = f"{name}:{lineno}"
            if in_args:
                if _ARGS_END.search(line):
                    in_args = False
                    continue
                m = _ARG_LINE.search(line)
                if m:
                    args[m.group(1)] = _arg_value(m.group(2))
                    arg_lines[m.group(1)] = lineno
                    continue
                # anything else inside the block (another rank's output interleaved) is foreign
            if _ARGS_START.search(line) and not _ARGS_END.search(line):
                in_args = True
                continue
            if not oom_line and _OOM.search(line):
                oom_line = lineno
            if _USING_WORLD.search(line):
                for key, val in _USING_PAIR.findall(line):
                    layout_found[_USING_NAMES[key]] = int(val)
                continue
            if _MEG_TRIGGER in line:
                it, el = _MEG_ITER.search(line), _MEG_ELAPSED.search(line)
                if not (it and el):
                    notes.append(f"{where}: Megatron iteration line without a readable iteration number "
                                 f"and elapsed time; not used")
                    continue
                vals = {"step_time_s": _finite(el.group(1), where, "the iteration time (ms)") * 1e-3}
                tf = _MEG_TFLOPS.search(line)
                if tf:
                    vals["tflops_per_gpu"] = _finite(tf.group(1), where, "throughput per GPU (TFLOP/s/GPU)")
                g = _MEG_GBS.search(line)
                if g:
                    gbs_seen.setdefault(int(g.group(1)), lineno)
                meg.append(_Entry(int(it.group(1)), lineno, vals))
                continue
            if _MEG_ITER.search(line) and _NEMO_TRIGGER not in line:
                notes.append(f"{where}: Megatron iteration line without an elapsed time; not used")
                continue
            if _MEG_MEM_TRIGGER.search(line):
                m = _MEG_MEM.search(line)
                if not m:
                    notes.append(f"{where}: memory report not in Megatron's 'memory (MB) | allocated: | "
                                 f"max allocated: | reserved: | max reserved:' form; not used")
                    continue
                mem_alloc.append(_memory(m.group(3), _MIB, where, "max allocated (MB)"))
                mem_reserved.append(_memory(m.group(5), _MIB, where, "max reserved (MB)"))
                r = _MEG_RANK.search(line)
                meg_mem_ranks.add(int(r.group(1)) if r else None)
                continue
            if _NEMO_TRIGGER in line:
                t = _NEMO_TIME.search(line)
                step = next((m for m in (p.search(line) for p in _NEMO_STEP) if m), None)
                if not (t and step):
                    notes.append(f"{where}: NeMo progress line without a readable step and "
                                 f"train_step_timing; not used")
                    continue
                g = _NEMO_GBS.search(line)
                if g:
                    gbs_seen.setdefault(int(g.group(1)), lineno)
                nemo.append(_Entry(int(step.group(1)), lineno,
                                   {"step_time_s": _finite(t.group(1), where, "train_step_timing")}))
                continue
            if _TT_TRIGGER.search(line):
                if _TT_VALIDATE.search(line):
                    validations += 1
                    continue
                st, tps = _TT_STEP.search(line), _TT_TPS.search(line)
                if not (st and tps):
                    notes.append(f"{where}: torchtitan step line without a readable tps; not used")
                    continue
                vals = {"tokens_per_s_per_gpu": _finite(tps.group(1), where, "tps")}
                for key, rx, scale in (("tflops_per_gpu", _TT_TFLOPS, 1.0), ("mfu", _TT_MFU, 0.01)):
                    m = rx.search(line)
                    if m:
                        vals[key] = _finite(m.group(1), where, key.split("_")[0]) * scale
                m = _TT_MEM.search(line)
                if m:
                    tt_mem.append(_memory(m.group(1), _GIB, where, "memory (GiB)"))
                    r = _TT_RANK.search(line)
                    tt_mem_ranks.add(int(r.group(1)) if r else None)
                titan.append(_Entry(int(st.group(1)), lineno, vals))
                continue
            m = _TT_MESH.search(line)
            if m:
                layout_found.update(_mesh_layout(m.group(1), m.group(2), where, notes))
            m = _TT_INIT.search(line)
            if m:
                layout_found["global_batch"] = int(m.group(2))
                layout_found["seq"] = int(m.group(3))
            # every other line (launcher, NCCL INFO/WARN, Python warnings, timers) is foreign: skipped

    kinds = [k for k, e in (("megatron", meg), ("nemo", nemo), ("torchtitan", titan)) if e]
    entries = sorted(meg, key=lambda e: e.line) + nemo + titan
    first_line = min((e.line for e in entries), default=oom_line or 1)
    out = LogRead(kind="+".join(kinds) or "unknown", line=first_line, notes=notes,
                  iterations=len(entries))
    if len(kinds) > 1:
        notes.append(f"{name}: iteration lines of several formats ({', '.join(kinds)}); read together as one run")
    if validations:
        notes.append(f"{name}: {validations} torchtitan validation line(s) skipped")
    layout = _megatron_layout(args, f"{name}", notes, arg_lines) if args else {}
    for arg, key in (("num_layers", "layers"), ("hidden_size", "hidden"), ("num_attention_heads", "heads")):
        if _positive_int(args.get(arg)):
            out.shape[key] = (int(args[arg]), f"{name}:{arg_lines[arg]}" if arg in arg_lines else name)
    layout.update({k: v for k, v in layout_found.items() if k not in layout})
    for key, val in layout_found.items():
        if key in layout and layout[key] != val:
            notes.append(f"{name}: the arguments block says {key}={layout[key]}, another line says {val}; "
                         f"kept the arguments block")
    for series in (meg, nemo, titan):
        if not series:
            continue
        steady = _steady(series, f"{name}:{series[0].line}", notes)
        for key in ("step_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu", "mfu"):
            med = _median(steady, key)
            if med is not None:
                out.measured[key] = med
    if gbs_seen:
        if len(gbs_seen) > 1:
            sizes = ", ".join(f"{g} (line {ln})" for g, ln in gbs_seen.items())
            notes.append(f"{name}: global batch size changes ({sizes}); kept the last")
        last = list(gbs_seen)[-1]
        stated = layout.get("global_batch")
        if stated is not None and stated != last:
            # the iteration lines print the batch their iterations ran (Megatron's batch-size
            # ramp-up runs below the arguments' global_batch_size); their times are what is read
            notes.append(f"{name}:{gbs_seen[last]}: the iteration lines say global batch size {last}, the "
                         f"arguments block {stated}: used {last}, the batch the timed iterations ran")
        layout["global_batch"] = last
    if mem_alloc:
        out.measured["peak_allocated_bytes"] = max(mem_alloc)
        out.measured["peak_reserved_bytes"] = max(mem_reserved)
        # Megatron prints report_memory on every data-parallel-rank-0 process; pipeline stages are the
        # outermost rank dimension (stage = rank // (gpus / pp)). When every line read is stage 0's
        # (a log of one node, or of rank 0 only), the peak is that stage's, not the largest
        pp, gpus = int(layout.get("pp", 1) or 1), layout.get("gpus")
        if pp > 1 and gpus and None not in meg_mem_ranks and all(r // (int(gpus) // pp) == 0 for r in meg_mem_ranks):
            out.memory_stage = "first"
            notes.append(f"{name}: the memory reports are of pipeline stage 0's ranks only "
                         f"({', '.join(map(str, sorted(meg_mem_ranks)))} of {gpus}, pp {pp}): compared with "
                         "llmpar's stage 0 (memory_stage first)")
    if tt_mem:
        out.measured["peak_reserved_bytes"] = max(tt_mem)
        # torchtitan's run_train.sh shows one rank (LOG_RANK, default 0: torchrun --local-ranks-filter);
        # world rank 0 is pipeline stage 0, so under PP its peak is that stage's, not the largest
        if tt_mem_ranks == {0}:
            out.memory_stage = "first"
            if int(layout.get("pp", 1) or 1) > 1:
                notes.append(f"{name}: the memory figures are rank 0's only (pipeline stage 0 of {layout['pp']}): "
                             "compared with llmpar's stage 0 (memory_stage first)")
    if oom_line:
        out.status = "oom"
        notes.append(f"{name}:{oom_line}: out-of-memory error in the log: status oom")
    out.layout = layout
    return out
