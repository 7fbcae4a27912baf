"""The runs ``llmpar calibrate runs`` evaluates, resolved and expanded into candidate layouts.

:func:`prepare` resolves each run's model and hardware, checks its layout and measurements (one
UserError naming the run's ``file:line``) and expands every run into the layouts it may have run:
the knobs it states, and for the ones it leaves out (micro-batch, virtual stages, ZeRO stage,
recompute) every value searched (docs/calibrate-runs.md, "How the fit works"); the candidates of
runs that share a model, hardware, dtype and stated settings form one :class:`RunGroup` of arrays.
Nothing here prints.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from llmpar.calibrate.runs_record import SETTING_KEYS, MeasuredRun
from llmpar.errors import UserError
from llmpar.parallel import SCHEDULES as SCHEDULE_NAMES   # every schedule: a stack's `schedules` narrows it

MICRO_BATCHES = (1, 2, 4, 8, 16)

# One measured run: the record the readers produce (runs tables, logs, the published rows).
Run = MeasuredRun


def as_run(obj) -> Run:
    """A :class:`Run` (a reader's :class:`~llmpar.calibrate.runs_record.MeasuredRun`), or one built
    from any record with the same attribute names; a run must name its model."""
    if isinstance(obj, Run):
        if not obj.model:
            raise UserError(f"{obj.source}: the run names no model")
        return obj
    names = {f.name for f in dataclasses.fields(Run)}
    kw = {k: getattr(obj, k) for k in names if hasattr(obj, k)}
    kw["layout"] = dict(kw.get("layout") or {})
    if not kw.get("model"):
        raise UserError(f"{getattr(obj, 'source', '?')}: the run names no model")
    return Run(**kw)


@dataclass
class RunGroup:
    """Runs of one (model, hardware, dtype, recompute modules, stated settings), expanded over the
    knobs they leave out."""

    model: Any
    hw: Any
    dtype: str
    index: np.ndarray            # run index of each candidate
    modules: tuple | None        # the runs' recompute_modules (Megatron-Core), None: the stack's selective set
    settings: dict               # the settings the runs state (runs_record.SETTING_KEYS: --optimizer,
                                 # --grad-dtype, --tp-overlap ...); absent: the stack's
    par: Any                     # Parallel of arrays, one entry per candidate
    # what predict() computes once per group: (memory key, memory result) and the figures no stack
    # value changes (FLOPs, layout-rule violations); a fit of time-only parameters then costs
    # step time alone per evaluation (the same figures: memory depends on no time parameter)
    cache: dict = field(default_factory=dict)


PARTIAL_RECOMPUTE = (1 / 8, 1 / 4, 3 / 8, 1 / 2, 5 / 8, 3 / 4, 7 / 8)


def recompute_layer_counts(rec: int, rec_given, n_given, per_chunk: int) -> list[int]:
    """recompute_layers values to evaluate: the stated one; for a run that does not state its
    recompute, full recompute of every layer (0) and of about 1/8 .. 7/8 of each chunk's layers
    (Megatron-Core's block method, searched like the other tuned knobs); otherwise 0 (all)."""
    from llmpar.cost.pipeline import partial_recompute_layers
    from llmpar.parallel import RECOMPUTE

    if RECOMPUTE[rec] != "full":
        return [0]
    if n_given:
        return [n_given]
    if rec_given is not None:
        return [0]
    partial = sorted({int(partial_recompute_layers(f, per_chunk)) for f in PARTIAL_RECOMPUTE} - {per_chunk})
    return [0] + [n for n in partial if n < per_chunk]


def _layout_int(lay: dict, where: str, key: str, default=None) -> int | None:
    """One layout key of a run as a non-negative integer; None when absent (and no default)."""
    v = lay.get(key, default)
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise UserError(f"{where}: {key} must be a number, got {v!r}") from None
    if f != int(f) or f < 0:
        raise UserError(f"{where}: {key} must be a non-negative integer, got {v!r}")
    return int(f)


def _data_parallel(gpus: int | None, dp: int | None, tp: int, cp: int, pp: int, where: str) -> int:
    """The run's data-parallel degree: stated, or its GPUs over tp*cp*pp (which must agree)."""
    if dp is None:
        if gpus is None:
            raise UserError(f"{where}: give gpus or dp")
        if gpus % (tp * cp * pp):
            raise UserError(f"{where}: gpus {gpus} is not divisible by tp*cp*pp = {tp * cp * pp}")
        dp = gpus // (tp * cp * pp)
    elif gpus is not None and gpus != tp * cp * pp * dp:
        raise UserError(f"{where}: gpus {gpus} disagrees with tp*cp*pp*dp = {tp * cp * pp * dp}")
    return dp


def _recompute_choices(lay: dict, num, rec_given, model, pp: int, where: str) -> tuple[list[int], int | None, int]:
    """(recompute values to search, the stated recompute_layers, offload_layers) of a run, checked
    against each other."""
    from llmpar.parallel import RECOMPUTE

    if rec_given is not None and str(rec_given) not in RECOMPUTE:
        raise UserError(f"{where}: recompute must be one of {', '.join(RECOMPUTE)}, got {rec_given!r}")
    recs = [RECOMPUTE.index(str(rec_given))] if rec_given is not None else list(range(len(RECOMPUTE)))
    if lay.get("recompute_modules") is not None:
        # Megatron-Core's --recompute-modules name what selective recompute re-runs
        if rec_given is not None and str(rec_given) != "selective":
            raise UserError(f"{where}: recompute_modules needs recompute: selective (got {rec_given})")
        recs = [RECOMPUTE.index("selective")]
    n_rec_given = num("recompute_layers")
    if n_rec_given and (rec_given is None or str(rec_given) != "full"):
        raise UserError(f"{where}: recompute_layers needs recompute: full")
    n_off = num("offload_layers") or 0
    if n_off:
        # Megatron-Core's rules for CPU offloading (layout.resolve): below the layer count, pp 1,
        # no recompute (an unstated recompute is therefore none)
        if n_off >= model.layers:
            raise UserError(f"{where}: offload_layers {n_off} must be below the model's {model.layers} layers")
        if pp > 1:
            raise UserError(f"{where}: offload_layers needs pp 1 (got pp {pp})")
        if rec_given is not None and str(rec_given) != "none":
            raise UserError(f"{where}: offload_layers needs recompute: none (got {rec_given})")
        recs = [RECOMPUTE.index("none")]
    return recs, n_rec_given, n_off


def _zero_choices(zero_given: int | None, zero_stages, pp: int, pp_zero_stages) -> list[int]:
    """The ZeRO stages to evaluate: the stated one, else the stack's (under pp, those it launches there)."""
    # an unstated ZeRO stage is searched like the other tuned knobs (FSDP-style runs rarely say
    # which stage their sharding amounts to)
    zeros = [zero_given] if zero_given is not None else list(zero_stages)
    if zero_given is None and pp > 1 and pp_zero_stages is not None:
        # under pipeline parallelism only the stages the framework launches there
        # (layout.stack_violations)
        zeros = [z for z in zeros if z in pp_zero_stages] or zeros
    return zeros


def _virtual_stage_choices(v_given: int | None, sched, schedules, pp: int, per_stage: int) -> tuple[str, list[int]]:
    """(the plain schedule of a run that states none, the virtual-stage counts to evaluate)."""
    # a run that states no schedule ran one its framework implements (the stack's `schedules`):
    # the interleaved one is searched only where the stack has it, else its plain schedule (1F1B)
    single = [x for x in schedules if x != "interleaved"]
    plain = "1f1b" if "1f1b" in single or not single else single[0]
    if v_given:
        vs = [v_given]
    elif pp > 1 and (sched == "interleaved" or (sched is None and "interleaved" in schedules)):
        vs = [1] + [v for v in range(2, per_stage + 1) if per_stage % v == 0]
    else:
        vs = [1]
    return plain, vs


@dataclass
class _Knobs:
    """A run's layout knobs: the values it states and, for those it leaves out, the values searched."""

    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    etp: int
    sp: bool
    seq: int
    gb: int | None
    m_given: int | None
    bs: list[int]
    recs: list[int]
    rec_given: Any
    n_rec_given: int | None
    n_off: int
    zeros: list[int]
    sched: Any
    plain: str
    vs: list[int]


def layout_candidates(run: Run, model, zero_stages=(0, 1, 2, 3),
                      schedules=SCHEDULE_NAMES, pp_zero_stages=None) -> list[dict[str, int]]:
    """Every layout ``run`` may have run: the knobs it states, each one it leaves out searched."""
    from llmpar.cost.pipeline import stage_layers

    lay = run.layout
    where = run.source
    num = functools.partial(_layout_int, lay, where)
    tp, pp, cp, ep = (num(k, 1) for k in ("tp", "pp", "cp", "ep"))
    etp = num("etp", 0)
    etp = 0 if etp == tp else etp     # 0: expert-TP = tp (Parallel.etp)
    gpus, dp = num("gpus"), num("dp")
    dp = _data_parallel(gpus, dp, tp, cp, pp, where)
    seq = num("seq")
    if seq is None:
        raise UserError(f"{where}: the run states no sequence length (seq)")
    gb, m_given, b_given = num("global_batch"), num("microbatches"), num("micro_batch")
    rec_given = lay.get("recompute")
    recs, n_rec_given, n_off = _recompute_choices(lay, num, rec_given, model, pp, where)
    zeros = _zero_choices(num("zero"), zero_stages, pp, pp_zero_stages)
    sp = lay.get("sp")
    sp = bool(tp > 1) if sp is None else bool(sp)
    sched = lay.get("schedule")
    v_given = num("virtual_stages")
    bs = [b_given] if b_given else [b for b in MICRO_BATCHES]
    per_stage = int(stage_layers(model.layers, pp))
    plain, vs = _virtual_stage_choices(v_given, sched, schedules, pp, per_stage)
    knobs = _Knobs(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, sp=sp, seq=seq, gb=gb, m_given=m_given, bs=bs,
                   recs=recs, rec_given=rec_given, n_rec_given=n_rec_given, n_off=n_off, zeros=zeros, sched=sched,
                   plain=plain, vs=vs)
    return _expand(knobs, model, where)


def _expand(k: _Knobs, model, where: str) -> list[dict[str, int]]:
    """The candidate layouts of a run's knobs, each schedule checked by its own rule."""
    from llmpar.cost.pipeline import chunk_layers, schedule_feasible
    from llmpar.parallel import SCHEDULES

    tp, pp, dp, cp, ep, etp, sp, seq, n_off = k.tp, k.pp, k.dp, k.cp, k.ep, k.etp, k.sp, k.seq, k.n_off
    gb, n_rec_given = k.gb, k.n_rec_given
    out, infeasible = [], []
    for b in k.bs:
        if gb is not None:
            if gb % (b * dp):
                continue
            m = gb // (b * dp)
        elif k.m_given is not None:
            m = k.m_given
        else:
            raise UserError(f"{where}: the run states neither global_batch nor microbatches")
        for v in k.vs:
            per_chunk = int(chunk_layers(model.layers, pp, v))
            if n_rec_given and n_rec_given > per_chunk:
                raise UserError(f"{where}: recompute_layers {n_rec_given} exceeds the {per_chunk} layers of a "
                                f"pipeline chunk ({model.layers} layers / pp={pp}" + (f" / v={v})" if v > 1 else ")"))
            s_name = k.sched or ("interleaved" if v > 1 else k.plain)
            if s_name not in SCHEDULES:
                raise UserError(f"{where}: unknown schedule {s_name!r}")
            # the schedule's own rule (cost/pipeline.py), as the planner and the CLI apply it
            if not bool(schedule_feasible(SCHEDULES.index(s_name), pp, m, v)):
                infeasible.append(f"{s_name} with pp={pp}, {m} micro-batches, v={v}")
                continue
            for zero in k.zeros:
                for rec in k.recs:
                    for n_rec in recompute_layer_counts(rec, k.rec_given, n_rec_given, per_chunk):
                        out.append(dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, zero=zero, sp=sp, recompute=rec,
                                        micro_batch=b, microbatches=m, seq=seq, schedule=SCHEDULES.index(s_name),
                                        virtual_stages=v, recompute_layers=n_rec, offload_layers=n_off))
    if not out:
        if infeasible:
            raise UserError(f"{where}: the schedule cannot run any candidate layout "
                            f"({infeasible[0]}; cost/pipeline.py schedule_feasible)")
        raise UserError(f"{where}: no micro-batch divides the global batch {gb} over dp={dp}")
    return out


def _check_measured(r: Run, hw, dtype: str) -> None:
    """What a run's hardware bounds: TFLOP/s per GPU at most the GPU's dense peak for the run's
    dtype (an MFU above 1 otherwise, which the readers refuse), peak memory at most its memory."""
    if r.tflops_per_gpu is not None and r.tflops_per_gpu * 1e12 > hw.gpu.peak(dtype):
        raise UserError(f"{r.source}: tflops_per_gpu {r.tflops_per_gpu:g} is above the dense {dtype} peak of "
                        f"{hw.gpu.name} ({hw.gpu.peak(dtype) / 1e12:g} TFLOP/s): an MFU above 1")
    for key in ("peak_allocated_bytes", "peak_reserved_bytes"):
        v = getattr(r, key)
        if v is not None and v > hw.gpu.memory:
            raise UserError(f"{r.source}: {key} {v / 2**30:.4g} GiB is more than the {hw.gpu.memory / 2**30:.4g} GiB "
                            f"of memory of {hw.gpu.name} ({hw.name})")


class _Specs:
    """The models and hardware the runs name, each loaded once; a failure names the run."""

    def __init__(self, models: dict | None):
        self.models = models or {}
        self.model_cache: dict[str, Any] = {}
        self.hw_cache: dict[str, Any] = {}

    def model_of(self, name, where):
        """The run's model: an inline spec of the runs file, else a shipped or user one."""
        from llmpar.specs import load_model
        from llmpar.specs.model import ModelSpec

        if name not in self.model_cache:
            spec = self.models.get(name)
            try:
                self.model_cache[name] = spec if isinstance(spec, ModelSpec) else load_model(name)
            except UserError as exc:
                raise UserError(f"{where}: {exc}") from None
        return self.model_cache[name]

    def hw_of(self, name, where):
        """The run's hardware profile."""
        from llmpar.specs import load_hardware

        if name not in self.hw_cache:
            try:
                self.hw_cache[name] = load_hardware(name)
            except UserError as exc:
                raise UserError(f"{where}: {exc}") from None
        return self.hw_cache[name]


def prepare(runs: Iterable, *, hardware: str | None = None, models: dict | None = None,
            zero_stages=(0, 1, 2, 3),
            schedules=SCHEDULE_NAMES, notes: list[str] | None = None,
            pp_zero_stages=None) -> tuple[list[Run], list[RunGroup]]:
    """Resolve models and hardware and expand every run's candidate layouts into array groups.

    Each run goes through the rules ``llmpar step`` applies (``layout.check_layout``,
    ``layout_settings.check_settings``) and its measurements through its hardware's bounds; a failure is
    one UserError naming the run's ``file:line``. A layout that breaks a layout rule is refused
    for a run that ran (status ok) and noted for one that did not (it is predicted not to run,
    which its status agrees with) or for a published row (``row:``), kept as published. The notes
    go to the runs' ``notes`` and to ``notes``."""
    runs = [as_run(r) for r in runs]
    if not runs:
        raise UserError("no runs to evaluate")
    specs = _Specs(models)
    buckets = _candidate_buckets(runs, hardware, specs, zero_stages, schedules, pp_zero_stages)
    groups = []
    broken: dict[int, str] = {}    # run -> the layout rule every candidate of it breaks
    for key, items in buckets.items():
        groups.append(_group_of(key, items, runs, specs, broken))
    _note_broken(runs, broken, notes)
    return runs, groups


def _candidate_buckets(runs: list[Run], hardware, specs: _Specs, zero_stages, schedules,
                       pp_zero_stages) -> dict[tuple, list[tuple[int, dict]]]:
    """Every run's checked candidate layouts, by (model, hardware, dtype, modules, stated settings)."""
    from llmpar.layout_settings import check_settings
    from llmpar.parallel import Settings

    buckets: dict[tuple, list[tuple[int, dict]]] = {}
    settings_ok: set[tuple] = set()
    for i, r in enumerate(runs):
        hw_name = r.hardware or hardware
        if hw_name is None:
            raise UserError(f"{r.source}: the run names no hardware; give --hardware")
        dtype = str(r.layout.get("dtype", "bf16"))
        hw = specs.hw_of(str(hw_name), r.source)
        if (str(hw_name), dtype) not in settings_ok:
            try:   # the dtype needs a peak on this GPU (fp8 on A100), as step and plan say
                check_settings(hw, Settings(dtype=dtype))
            except UserError as exc:
                raise UserError(f"{r.source}: {str(exc).removeprefix('--')}") from None
            settings_ok.add((str(hw_name), dtype))
        _check_measured(r, hw, dtype)
        key = (r.model, str(hw_name), dtype, r.layout.get("recompute_modules"),
               tuple((k, r.layout[k]) for k in SETTING_KEYS if r.layout.get(k) is not None))
        for cand in layout_candidates(r, specs.model_of(r.model, r.source), zero_stages, schedules, pp_zero_stages):
            buckets.setdefault(key, []).append((i, cand))
    return buckets


def _group_of(key: tuple, items: list[tuple[int, dict]], runs: list[Run], specs: _Specs,
              broken: dict[int, str]) -> RunGroup:
    """One bucket's candidates as a group of arrays; runs whose every candidate breaks a layout
    rule go to ``broken`` with check_layout's message."""
    from llmpar.layout import check_layout, layout_violations
    from llmpar.parallel import Parallel

    mname, hw_name, dtype, modules, stated = key
    fields = items[0][1].keys()
    arr = {k: np.array([c[k] for _, c in items]) for k in fields}
    hw = specs.hw_cache[hw_name]
    if hw.host_bandwidth is None and np.any(arr["offload_layers"] > 0):
        i = next(i for i, c in items if c["offload_layers"])
        raise UserError(f"{runs[i].source}: offload_layers needs the hardware's host_bandwidth (the CPU-GPU "
                        f"link); {hw.name} states none")
    model, par = specs.model_of(mname, runs[items[0][0]].source), Parallel(**arr)
    index = np.array([i for i, _ in items])
    # the layout rules `llmpar step` and the planner apply (layout.layout_violations), over
    # every candidate at once; the message is check_layout's, of the first broken candidate
    bad = np.zeros(len(items), dtype=bool)
    for mask in layout_violations(model, par).values():
        bad = bad | np.broadcast_to(np.asarray(mask, dtype=bool), bad.shape)
    for i in dict.fromkeys(index[bad].tolist()):
        if bad[index == i].all():
            try:
                check_layout(model, par.take(int(np.flatnonzero(index == i)[0])))
            except UserError as exc:
                broken[i] = str(exc)
    return RunGroup(model=model, hw=hw, dtype=dtype, modules=modules, settings=dict(stated),
                    index=index, par=par)


def _note_broken(runs: list[Run], broken: dict[int, str], notes: list[str] | None) -> None:
    """Refuse a run that ran on a layout llmpar's rules break; note (and keep) the others."""
    for i in sorted(broken):
        r = runs[i]
        if r.status == "ok" and not r.row:
            raise UserError(f"{r.source}: {broken[i]}")
        why = (f"the published run (row {r.row}) is kept as published" if r.status == "ok"
               else f"kept: predicted not to run, as its status ({r.status}) says")
        note = f"{r.source}: {broken[i]} (llmpar's layout rules); {why}"
        runs[i] = dataclasses.replace(r, notes=r.notes + (note,))
        if notes is not None:
            notes.append(note)
