"""Read training logs people already have: Megatron-LM, NeMo and torchtitan.

Used by :mod:`llmpar.calibrate.runs_io`; nothing here prints and nothing is fitted. The layout the
arguments block, the ``using world size`` line and the device mesh state (in llmpar's option names)
is read by :mod:`llmpar.calibrate.train_log_layout`. What each format looks like (checked against
the printing code and against public log excerpts, see ``docs/runs-format.md`` and
``tests/fixtures/train_logs/``):

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

from llmpar.calibrate.train_log_layout import USING_NAMES, arg_value, megatron_layout, mesh_layout, positive_int
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
#: corrupted log; refused rather than read (runs_row.make_run applies the same bound to runs tables)
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


def _rate(text: str, where: str, what: str, scale: float = 1.0, top: float | None = None) -> float:
    """A measured figure of an iteration line (a time, tokens/s, TFLOP/s, MFU): finite, not negative,
    and at most ``top`` where physics bounds it (only MFU's: 1, the GPU's peak). docs/runs-format.md: an MFU above 1 or a
    negative value from any log line is refused; such a line had gone into the steady-state median
    unsaid (a 340 % MFU, -5,869 tokens/s)."""
    v = _finite(text, where, what) * scale
    if v < 0:   # a zero is kept: a rounded-down rate is dropped with a note where the row has another
        raise UserError(f"{where}: {what} {text} is negative: not a measurement")
    if top is not None and v > top:
        raise UserError(f"{where}: {what} {text} % is above 100 % of the GPU's peak: not a measurement")
    return v


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


@dataclass
class _Scan:
    """What the line loop of :func:`read_log` has collected so far, for every format at once."""

    notes: list[str] = field(default_factory=list)
    meg: list[_Entry] = field(default_factory=list)
    nemo: list[_Entry] = field(default_factory=list)
    titan: list[_Entry] = field(default_factory=list)
    args: dict[str, Any] = field(default_factory=dict)
    arg_lines: dict[str, int] = field(default_factory=dict)    # argument -> its line in the arguments block
    layout_found: dict[str, Any] = field(default_factory=dict)
    gbs_seen: dict[int, int] = field(default_factory=dict)     # global batch size -> first line
    mem_alloc: list[float] = field(default_factory=list)
    mem_reserved: list[float] = field(default_factory=list)
    tt_mem: list[float] = field(default_factory=list)
    tt_mem_ranks: set = field(default_factory=set)   # the ranks (torchrun's [rankN]: prefix) whose memory figures were read
    meg_mem_ranks: set = field(default_factory=set)  # the ranks of Megatron's "[Rank N] (after ...) memory" lines
    in_args: bool = False
    oom_line: int = 0
    validations: int = 0


def read_log(text: str, name: str) -> LogRead:
    """Parse one log's text. ``name`` (the file's display name) goes into every ``name:line`` note.

    Returns a :class:`LogRead` with ``iterations == 0`` and ``status == 'ok'`` when no iteration line
    was found; the caller turns that into a :class:`~llmpar.errors.UserError`.
    """
    scan = _Scan()
    for lineno, raw in enumerate(text.split("\n"), start=1):
        for piece in raw.split("\r"):
            line = _ANSI.sub("", piece)
            if not line.strip():
                continue
            _read_line(scan, line, lineno, f"{name}:{lineno}")
    return _summarise(scan, name)


def _read_line(s: _Scan, line: str, lineno: int, where: str) -> None:
    """One line of a log: the arguments block, an iteration / memory / layout line, or foreign."""
    if s.in_args:
        if _ARGS_END.search(line):
            s.in_args = False
            return
        m = _ARG_LINE.search(line)
        if m:
            s.args[m.group(1)] = arg_value(m.group(2))
            s.arg_lines[m.group(1)] = lineno
            return
        # anything else inside the block (another rank's output interleaved) is foreign
    if _ARGS_START.search(line) and not _ARGS_END.search(line):
        s.in_args = True
        return
    if not s.oom_line and _OOM.search(line):
        s.oom_line = lineno
    if _USING_WORLD.search(line):
        for key, val in _USING_PAIR.findall(line):
            s.layout_found[USING_NAMES[key]] = int(val)
        return
    if _MEG_TRIGGER in line:
        _megatron_iteration(s, line, lineno, where)
        return
    if _MEG_ITER.search(line) and _NEMO_TRIGGER not in line:
        s.notes.append(f"{where}: Megatron iteration line without an elapsed time; not used")
        return
    if _MEG_MEM_TRIGGER.search(line):
        _megatron_memory(s, line, where)
        return
    if _NEMO_TRIGGER in line:
        _nemo_step(s, line, lineno, where)
        return
    if _TT_TRIGGER.search(line):
        _torchtitan_step(s, line, lineno, where)
        return
    m = _TT_MESH.search(line)
    if m:
        s.layout_found.update(mesh_layout(m.group(1), m.group(2), where, s.notes))
    m = _TT_INIT.search(line)
    if m:
        s.layout_found["global_batch"] = int(m.group(2))
        s.layout_found["seq"] = int(m.group(3))
    # every other line (launcher, NCCL INFO/WARN, Python warnings, timers) is foreign: skipped


def _megatron_iteration(s: _Scan, line: str, lineno: int, where: str) -> None:
    """Megatron-LM's training_log line: iteration, elapsed time, TFLOP/s, global batch size."""
    it, el = _MEG_ITER.search(line), _MEG_ELAPSED.search(line)
    if not (it and el):
        s.notes.append(f"{where}: Megatron iteration line without a readable iteration number "
                       f"and elapsed time; not used")
        return
    vals = {"step_time_s": _rate(el.group(1), where, "the iteration time (ms)", 1e-3)}
    tf = _MEG_TFLOPS.search(line)
    if tf:
        vals["tflops_per_gpu"] = _rate(tf.group(1), where, "throughput per GPU (TFLOP/s/GPU)")
    g = _MEG_GBS.search(line)
    if g:
        s.gbs_seen.setdefault(int(g.group(1)), lineno)
    s.meg.append(_Entry(int(it.group(1)), lineno, vals))


def _megatron_memory(s: _Scan, line: str, where: str) -> None:
    """Megatron-LM's report_memory line: max allocated and max reserved (MiB), and whose rank."""
    m = _MEG_MEM.search(line)
    if not m:
        s.notes.append(f"{where}: memory report not in Megatron's 'memory (MB) | allocated: | "
                       f"max allocated: | reserved: | max reserved:' form; not used")
        return
    s.mem_alloc.append(_memory(m.group(3), _MIB, where, "max allocated (MB)"))
    s.mem_reserved.append(_memory(m.group(5), _MIB, where, "max reserved (MB)"))
    r = _MEG_RANK.search(line)
    s.meg_mem_ranks.add(int(r.group(1)) if r else None)


def _nemo_step(s: _Scan, line: str, lineno: int, where: str) -> None:
    """NeMo's progress line: step and train_step_timing (and a global batch size where printed)."""
    t = _NEMO_TIME.search(line)
    step = next((m for m in (p.search(line) for p in _NEMO_STEP) if m), None)
    if not (t and step):
        s.notes.append(f"{where}: NeMo progress line without a readable step and "
                       f"train_step_timing; not used")
        return
    g = _NEMO_GBS.search(line)
    if g:
        s.gbs_seen.setdefault(int(g.group(1)), lineno)
    s.nemo.append(_Entry(int(step.group(1)), lineno,
                         {"step_time_s": _rate(t.group(1), where, "train_step_timing")}))


def _torchtitan_step(s: _Scan, line: str, lineno: int, where: str) -> None:
    """torchtitan's MetricsProcessor line: step, tps, tflops, mfu, memory (validation lines counted)."""
    if _TT_VALIDATE.search(line):
        s.validations += 1
        return
    st, tps = _TT_STEP.search(line), _TT_TPS.search(line)
    if not (st and tps):
        s.notes.append(f"{where}: torchtitan step line without a readable tps; not used")
        return
    vals = {"tokens_per_s_per_gpu": _rate(tps.group(1), where, "tps")}
    for key, rx, scale in (("tflops_per_gpu", _TT_TFLOPS, 1.0), ("mfu", _TT_MFU, 0.01)):
        m = rx.search(line)
        if m:
            vals[key] = _rate(m.group(1), where, key.split("_")[0], scale, 1.0 if key == "mfu" else None)
    m = _TT_MEM.search(line)
    if m:
        s.tt_mem.append(_memory(m.group(1), _GIB, where, "memory (GiB)"))
        r = _TT_RANK.search(line)
        s.tt_mem_ranks.add(int(r.group(1)) if r else None)
    s.titan.append(_Entry(int(st.group(1)), lineno, vals))


def _summarise(s: _Scan, name: str) -> LogRead:
    """The :class:`LogRead` of a scanned log: layout, steady-state medians, batch, peak memory, status."""
    notes = s.notes
    kinds = [k for k, e in (("megatron", s.meg), ("nemo", s.nemo), ("torchtitan", s.titan)) if e]
    entries = sorted(s.meg, key=lambda e: e.line) + s.nemo + s.titan
    first_line = min((e.line for e in entries), default=s.oom_line or 1)
    out = LogRead(kind="+".join(kinds) or "unknown", line=first_line, notes=notes,
                  iterations=len(entries))
    if len(kinds) > 1:
        notes.append(f"{name}: iteration lines of several formats ({', '.join(kinds)}); read together as one run")
    if s.validations:
        notes.append(f"{name}: {s.validations} torchtitan validation line(s) skipped")
    layout = _layout(s, name, out)
    for series in (s.meg, s.nemo, s.titan):
        if not series:
            continue
        steady = _steady(series, f"{name}:{series[0].line}", notes)
        for key in ("step_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu", "mfu"):
            med = _median(steady, key)
            if med is not None:
                out.measured[key] = med
    if s.gbs_seen:
        _global_batch(s, name, layout)
    _peak_memory(s, name, layout, out)
    if s.oom_line:
        out.status = "oom"
        notes.append(f"{name}:{s.oom_line}: out-of-memory error in the log: status oom")
    out.layout = layout
    return out


def _layout(s: _Scan, name: str, out: LogRead) -> dict[str, Any]:
    """The arguments block's layout and model shape, then what other lines state (the block wins)."""
    args, arg_lines, layout_found = s.args, s.arg_lines, s.layout_found
    layout = megatron_layout(args, f"{name}", s.notes, arg_lines) if args else {}
    for arg, key in (("num_layers", "layers"), ("hidden_size", "hidden"), ("num_attention_heads", "heads")):
        if positive_int(args.get(arg)):
            out.shape[key] = (int(args[arg]), f"{name}:{arg_lines[arg]}" if arg in arg_lines else name)
    layout.update({k: v for k, v in layout_found.items() if k not in layout})
    for key, val in layout_found.items():
        if key in layout and layout[key] != val:
            s.notes.append(f"{name}: the arguments block says {key}={layout[key]}, another line says {val}; "
                           f"kept the arguments block")
    return layout


def _global_batch(s: _Scan, name: str, layout: dict[str, Any]) -> None:
    """The global batch size the iteration lines print (the last one), noted where it changes."""
    gbs_seen, notes = s.gbs_seen, s.notes
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


def _peak_memory(s: _Scan, name: str, layout: dict[str, Any], out: LogRead) -> None:
    """Peak memory over all lines, and whose: pipeline stage 0's when only its ranks reported."""
    notes = s.notes
    if s.mem_alloc:
        out.measured["peak_allocated_bytes"] = max(s.mem_alloc)
        out.measured["peak_reserved_bytes"] = max(s.mem_reserved)
        # Megatron prints report_memory on every data-parallel-rank-0 process; pipeline stages are the
        # outermost rank dimension (stage = rank // (gpus / pp)). When every line read is stage 0's
        # (a log of one node, or of rank 0 only), the peak is that stage's, not the largest
        meg_mem_ranks = s.meg_mem_ranks
        pp, gpus = int(layout.get("pp", 1) or 1), layout.get("gpus")
        if pp > 1 and gpus and None not in meg_mem_ranks and all(r // (int(gpus) // pp) == 0 for r in meg_mem_ranks):
            out.memory_stage = "first"
            notes.append(f"{name}: the memory reports are of pipeline stage 0's ranks only "
                         f"({', '.join(map(str, sorted(meg_mem_ranks)))} of {gpus}, pp {pp}): compared with "
                         "llmpar's stage 0 (memory_stage first)")
    if s.tt_mem:
        out.measured["peak_reserved_bytes"] = max(s.tt_mem)
        # torchtitan's run_train.sh shows one rank (LOG_RANK, default 0: torchrun --local-ranks-filter);
        # world rank 0 is pipeline stage 0, so under PP its peak is that stage's, not the largest
        if s.tt_mem_ranks == {0}:
            out.memory_stage = "first"
            if int(layout.get("pp", 1) or 1) > 1:
                notes.append(f"{name}: the memory figures are rank 0's only (pipeline stage 0 of {layout['pp']}): "
                             "compared with llmpar's stage 0 (memory_stage first)")
