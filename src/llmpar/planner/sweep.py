"""`llmpar sweep`: plan every GPU count on every hardware profile, and what training costs there.

For each profile and each count, :func:`llmpar.planner.search.plan` ranks the layouts (the same
search and cost model as `llmpar plan`); the sweep keeps #1 and adds, through
:mod:`llmpar.cost.training`, the days, GPU-hours, energy and cost to train the token budget, and
the scaling efficiency against the smallest count that has a layout (tokens/s per GPU relative to
that count's, per profile). A count where nothing can run is a row that says why, in words:

* ``does_not_fit`` - every layout that divides needs more memory than the GPU has (the planner's
  message: the smallest memory needed and at which layout);
* ``batch_cannot_split`` - the global batch cannot be divided over that many GPUs (every layout
  left needs micro_batch x dp to divide the batch);
* ``no_layout`` - no layout passes the other rules (a --fix degree that does not divide, heads).

The global batch is the same at every count (the plan's default, 4,194,304 tokens / seq, or
--global-batch): a sweep is strong scaling of one training recipe. Nothing here prints;
:mod:`llmpar.cli.sweep_cmd` renders the :class:`SweepResult`.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import numpy as np

from llmpar import inputs
from llmpar.errors import CheckFailed, UserError, refuse_unknown
from llmpar.parallel import MAX_GPUS, callback, whole
from llmpar.results_plan import SweepResult, SweepRow
from llmpar.specs.registry import DEFAULT_HARDWARE

STATUSES = ("ok", "does_not_fit", "batch_cannot_split", "no_layout")
_NOT_PLAN_OPTIONS = ("top", "pareto", "explain_rank", "objective", "min_gpus")
# one plan per (count, profile): a sweep is a scaling curve, not a batch job. 64 counts at ~0.05-4 s
# each is already minutes on two cores; more is a loop over llmpar.plan (issue 24: output sizes
# capped; the newcomer review timed 1,000 counts at 38 s with no bound)
MAX_COUNTS = 64
MAX_CELLS = 256


# ------------------------------------------------------------------------------------ inputs

def parse_gpu_list(value) -> list[int]:
    """GPU counts: ``"256,512,1024"``, ``[256, 512]``, or ``"256,512,...,16384"`` (an ellipsis
    continues the ratio of the first two up to the last, which it must reach exactly).
    Returns the counts ascending, without repeats."""
    if value is None:
        raise UserError("--gpus is required: the GPU counts to sweep, e.g. --gpus 256,512,1024 or 256,512,...,16384")
    if isinstance(value, (int, np.integer, float, np.floating)) and not isinstance(value, bool):
        items: list = [value]     # one count; count() below takes 8 and 8.0, refuses 8.5
    elif isinstance(value, str):
        items = [x.strip() for x in value.split(",")]
        if len(items) > 1 and "" in items:
            raise UserError(f"--gpus {value}: an empty entry between commas (write e.g. 8,16,32)")
        items = [x for x in items if x]
    else:
        try:
            items = list(value)
        except TypeError:
            raise UserError(f"gpus must be a list of GPU counts or the text '8,16,32', got {value!r}") from None
        # a list holds numbers, as every integer argument of the API does (docs/api.md: "2" raises);
        # the text form "8,16,...,1024" is the string above. Anything else (None, "8") is refused here.
        for x in items:
            if isinstance(x, bool) or not isinstance(x, (int, np.integer, float, np.floating)):
                raise UserError(f"gpus must be whole numbers, got {x!r} in {value!r} (or give the text '8,16,32')")
    if not items:
        raise UserError("--gpus: no GPU counts given")
    text = ",".join(str(x) for x in items)

    def count(x) -> int:
        if isinstance(x, str):
            try:
                n = int(x.strip())
            except ValueError:
                raise UserError(f"--gpus {text}: {x!r} is not a whole number of GPUs") from None
        else:
            try:
                n = whole(x, "gpus")    # the API's one rule for integers (parallel.py)
            except UserError:
                raise UserError(f"--gpus {text}: {x!r} is not a whole number of GPUs") from None
        if n < 1:
            raise UserError(f"--gpus {text}: GPU counts must be positive, got {n}")
        if n > MAX_GPUS:
            raise UserError(f"--gpus {text}: {n:,} GPUs is beyond what llmpar models (at most {MAX_GPUS:,})")
        return n

    if any(str(x).strip() in ("...", "..") for x in items):
        dots = [i for i, x in enumerate(items) if str(x).strip() in ("...", "..")]
        if len(dots) != 1 or dots[0] != 2 or len(items) != 4:
            raise UserError(f"--gpus {text}: an ellipsis goes as A,B,...,Z (first two counts, then the last)")
        a, b, z = count(items[0]), count(items[1]), count(items[3])
        if b <= a or b % a:
            raise UserError(f"--gpus {text}: A,B,...,Z needs B a multiple of A greater than A (ratio B/A)")
        if z < b:
            raise UserError(f"--gpus {text}: the last count {z} is below the second {b}")
        r, seq = b // a, [a]
        while seq[-1] < z:
            seq.append(seq[-1] * r)
        if seq[-1] != z:
            raise UserError(f"--gpus {text}: {a} x {r}^k never reaches {z} (last {seq[-2]}, then {seq[-1]})")
        return _capped(seq, text)
    return _capped(sorted({count(x) for x in items}), text)


def _capped(counts: list[int], text: str) -> list[int]:
    if len(counts) > MAX_COUNTS:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise UserError(f"--gpus {shown}: {len(counts):,} GPU counts; a sweep takes at most {MAX_COUNTS} "
                        f"(call llmpar.plan in a loop for more)")
    return counts


def _hardware_list(value) -> list:
    if value is None:
        value = [DEFAULT_HARDWARE]
    elif isinstance(value, str) and "," in value and os.path.isfile(value):
        value = [value]       # a profile path with a comma in it is one path (reliability review, item 32)
    elif isinstance(value, str):
        items = [x.strip() for x in value.split(",")]
        if len(items) > 1 and "" in items:   # as --gpus: "h100-sxm," is a typo, not a list of one
            raise UserError(f"--hardware {value}: an empty entry between commas (write e.g. h100-sxm,b200)")
        value = [x for x in items if x]
    elif not isinstance(value, (list, tuple)):
        value = [value]
    if not value:
        raise UserError("--hardware: no hardware profile given")
    out, seen = [], set()
    for item in value:
        hw = inputs.load_hardware_spec(item)   # unknown name: UserError (exit 2), one line
        if hw.name not in seen:
            seen.add(hw.name)
            out.append(hw)
    return out


# ------------------------------------------------------------------------------------ sweep

def _batch_reason(rejected: dict[str, int], n: int, global_batch: int) -> str:
    total, hit = sum(rejected.values()), rejected["batch"]
    rest = ", the rest for other rules" if hit < total else ""
    return (f"the global batch of {global_batch:,} sequences cannot be split over {n:,} GPUs: every layout needs "
            f"micro_batch x dp to divide it, with dp = {n:,} / (tp x cp x pp) ({hit:,} of {total:,} layouts "
            f"rejected for the batch{rest}); raise --global-batch or use fewer GPUs")


def _row_for(spec, hw, n, opts, global_batch, train_in) -> tuple[SweepRow, Any]:
    """(the row, the plan result | the FixConflict that made the row | None)."""
    from llmpar.cost import training as TR
    from llmpar.planner.arguments import FixConflict
    from llmpar.planner.refusals import NoLayout
    from llmpar.planner.search import plan

    try:
        r = plan(spec, gpus=n, hardware=hw, top=1, **opts)
    except FixConflict as exc:
        return SweepRow(gpus=n, hardware=hw.name, status="no_layout", reason=str(exc)), exc
    except NoLayout as exc:
        if exc.rejected and exc.rejected.get("batch"):
            return SweepRow(gpus=n, hardware=hw.name, status="batch_cannot_split",
                            reason=_batch_reason(exc.rejected, n, global_batch)), None
        return SweepRow(gpus=n, hardware=hw.name, status="no_layout", reason=str(exc)), None
    except CheckFailed as exc:
        return SweepRow(gpus=n, hardware=hw.name, status="does_not_fit", reason=str(exc)), None
    best = r.best
    training = None
    if train_in["tokens"] is not None:
        training = TR.estimate(hw, tokens=train_in["tokens"], tokens_per_s=best.tokens_per_s, gpus=n,
                               tokens_per_step=r.global_batch * r.seq, pue=train_in["pue"],
                               gpu_hour_price=train_in["gpu_hour_price"], power_per_gpu_w=train_in["power_per_gpu_w"],
                               checkpoint_bytes=TR.checkpoint_bytes_of(spec, r.settings), train_in=train_in)
    return SweepRow(gpus=n, hardware=hw.name, status="ok", plan=best, training=training), r


def _plan_keywords() -> set[str]:
    """The keywords sweep() passes on to plan(): plan's own and the layout knobs."""
    import inspect

    from llmpar.planner import arguments as ARG
    from llmpar.planner.search import plan

    own = {k for k, p in inspect.signature(plan).parameters.items() if p.kind is p.KEYWORD_ONLY}
    return own | set(ARG.LAYOUT_KNOBS)


def sweep(
    model=None,
    *,
    gpus=None,
    hardware=None,
    tokens=None,
    pue=None,
    gpu_hour_price=None,
    power_per_gpu=None,
    failure_rate=None,
    restart_time=None,
    checkpoint_bandwidth=None,
    checkpoint=None,
    deadline=None,
    seq: int | None = None,
    global_batch: int | None = None,
    tokens_per_batch: int | None = None,
    hf: str | None = None,
    progress=None,
    **plan_options,
) -> SweepResult:
    """Plan each of ``gpus`` (a list, or ``"256,512,...,16384"``) on each ``hardware`` profile
    (a list, or ``"h100-sxm,b200"``; default h100-sxm) for ``model``.

    ``tokens`` (``"15T"``, ``"300B"``, ``2.5e12``), ``pue``, ``gpu_hour_price``,
    ``power_per_gpu``: as in :func:`llmpar.cost.training.estimate`. Every other keyword is
    :func:`llmpar.planner.search.plan`'s (``fix``, ``allow``, ``max_tp``, ``zero``, ``dtype``,
    ``stack``, ...) and applies at every count. Raises UserError for bad input (an unknown
    profile, a bad count); a count where nothing runs is a row with a ``reason``. ``progress``:
    an optional ``progress(name, done, total)`` callback, called after each plan (the CLI's bar).
    """
    from llmpar.cost import training as TR

    t0 = time.perf_counter()
    bad = sorted(set(plan_options) & set(_NOT_PLAN_OPTIONS))
    if bad:
        raise UserError(f"sweep() keeps plan #1 at each count by step time; it takes no {', '.join(bad)}")
    unread = sorted(set(plan_options) & {"units", "keep_points"})
    if unread:   # accepted and ignored before: a sweep row has bytes, not a unit, and keeps no candidate points
        raise UserError(f"sweep() takes no {', '.join(unread)}: its rows hold memory in bytes and no candidate "
                        "points (llmpar.plan(gpus=N, ...) has them for one count)")
    refuse_unknown("sweep", {k: v for k, v in plan_options.items() if k not in _plan_keywords()},
                   [*_plan_keywords(), "gpus", "hardware", "tokens", "deadline", "progress"])
    callback(progress, "progress", "progress(name, done, total)")
    counts = parse_gpu_list(gpus)
    train_in = TR.parse_inputs(tokens, pue, gpu_hour_price, power_per_gpu, failure_rate, restart_time,
                               checkpoint_bandwidth, checkpoint)
    due = None
    if deadline is not None:
        if train_in["tokens"] is None:
            raise UserError("--deadline is the time to train --tokens in: give the token budget too")
        due = TR.parse_deadline(deadline)
    hws = _hardware_list(hardware)
    TR.check_prices_used(train_in["gpu_hour_price"], hws)
    if len(counts) * len(hws) > MAX_CELLS:
        raise UserError(f"--gpus x --hardware: {len(counts)} counts x {len(hws)} profiles = {len(counts) * len(hws):,} "
                        f"plans; a sweep runs at most {MAX_CELLS}")
    notes_price = _price_note(train_in, hws)
    defaults: list[str] = []
    notes: list[str] = []
    spec, alias, seq, global_batch = _model_and_batch(model, hf, hardware, seq, global_batch, tokens_per_batch,
                                                      defaults, notes)
    opts = dict(plan_options, seq=seq, global_batch=global_batch)
    rows, first = _plan_rows(spec, hws, counts, opts, global_batch, train_in, progress, notes)
    _scaling(rows, notes)
    if train_in["tokens"] is not None:
        notes += _training_notes(rows, hws)
    notes += notes_price
    return SweepResult(
        model=spec.name, model_requested=alias, hardware=[h.name for h in hws], gpus=counts, seq=int(seq),
        global_batch=int(global_batch), tokens=train_in["tokens"], rows=rows,
        settings=first.settings if first is not None else None, elapsed_s=time.perf_counter() - t0,
        defaults_used=defaults, assumptions=notes, deadline=None if due is None else _deadline(rows, hws, due),
    )


def _price_note(train_in: dict, hws) -> list[str]:
    """One --gpu-hour-price for several GPU types: a note that they rarely cost the same ([] otherwise)."""
    if isinstance(train_in["gpu_hour_price"], (int, float)) and len(hws) > 1:
        return [f"one --gpu-hour-price for {', '.join(h.name for h in hws)}: GPU types rarely cost the same "
                "(give one each: --gpu-hour-price " + ",".join(f"{h.name}=P" for h in hws) + ")"]
    return []


def _model_and_batch(model, hf, hardware, seq, global_batch, tokens_per_batch, defaults: list[str],
                     notes: list[str]) -> tuple[Any, str | None, int, int]:
    """(model spec, the alias asked for, seq, global batch): the one batch every count of the sweep plans."""
    from llmpar.planner.arguments import DEFAULT_MODEL, resolve_batch

    if model is None and hf is None:
        model = DEFAULT_MODEL
        defaults.append(f"model {DEFAULT_MODEL}")
    if hardware is None:
        defaults.append(f"hardware {DEFAULT_HARDWARE}")
    spec, alias = inputs.load_model_spec(model, hf)
    if alias:
        notes.append(f"model {alias} -> {spec.name}")

    # one batch for every count (the plan's defaults and checks, resolved once so every row uses the same)
    seq, global_batch, _ = resolve_batch(spec, seq, global_batch, tokens_per_batch, None, defaults, notes)
    notes.append(f"the global batch ({global_batch:,} sequences x {seq:,} tokens) is the same at every count: "
                 "strong scaling of one recipe")
    return spec, alias, seq, global_batch


def _plan_rows(spec, hws, counts, opts, global_batch, train_in, progress, notes: list[str]) -> tuple[list, Any]:
    """(one row per profile and count, the first plan result or None), with the notes the rows call for."""
    from llmpar.planner.arguments import FixConflict

    rows: list[SweepRow] = []
    conflicts: list = []        # a --fix/--tp... degree that divides no count: bad input, as in `plan`
    first = None
    offloading: list[str] = []
    for hw in hws:
        for n in counts:
            row, result = _row_for(spec, hw, n, opts, global_batch, train_in)
            if isinstance(result, FixConflict):
                conflicts.append(result)
                result = None
            rows.append(row)
            if progress is not None:
                progress(f"{hw.name} x {n:,}", len(rows), len(hws) * len(counts))
            if first is None and result is not None:
                first = result
            if result is not None and int(result.plans[0].parallel.offload_layers):
                offloading.append(f"{hw.name} x {n:,}")
    if len(conflicts) == len(rows):
        raise UserError(f"{conflicts[0]} (nor any other GPU count of the sweep)")
    if first is not None:
        notes += [a for a in first.assumptions if a.startswith("stack ") or a.startswith("seq ")]
    for hw in hws:
        fabric = inputs.fabric_note(hw, max(counts))
        if fabric is not None:
            notes.append(fabric)
    if offloading:
        notes.append(f"off:N rows ({', '.join(offloading)}) offload N layers' activations to host memory, priced at the "
                     "host link's raw rate shared by the GPUs behind it (hardware gpus_per_host_link), checked "
                     "against the profile's host_memory_per_gpu: the copy time is a lower bound "
                     "(--fix offload_layers=0 plans without offloading; docs/planner.md)")
    return rows, first


def _training_notes(rows: list[SweepRow], hws) -> list[str]:
    """The training estimate's assumptions, once (power per profile, goodput's inputs)."""
    notes: list[str] = []
    with_t = [r.training for r in rows if r.training is not None]
    if with_t:
        notes += [a for a in with_t[0]["assumptions"] if not a.startswith("power:")]
        for hw in hws:
            t = next((r.training for r in rows if r.training is not None and r.hardware == hw.name), None)
            if t is not None:
                notes += [f"{hw.name} {a}" for a in t["assumptions"] if a.startswith("power:")]
        # goodput's inputs (cost/goodput.py), once; the failure interval 3,600/(λN) h differs by
        # count, so it is given at the smallest and the largest (it had been the largest count's alone)
        g = next((t["goodput"] for t in reversed(with_t) if t.get("goodput")), None)
        if g is not None:
            by_count = sorted({(r.gpus, float(r.training["goodput"]["mtbf_s"])) for r in rows
                               if r.training is not None and r.training.get("goodput")})
            span = "; ".join(f"{m / 3600:.3g} h at {n:,} GPUs" for n, m in
                             ([by_count[0], by_count[-1]] if len(by_count) > 1 else by_count))
            notes += ["goodput " + re.sub(r"the job fails every [0-9.e+]+ h", f"the job fails every {span}", a)
                      for a in g["assumptions"]]
    return notes


def _deadline(rows: list[SweepRow], hws, days: float) -> dict[str, Any]:
    """Per profile: the smallest swept count whose effective days (with failures and checkpoints;
    the ideal days where goodput is unknown) meet ``days``, with its days and cost; None where none
    of the counts does."""
    out: dict[str, Any] = {"days": days, "by_hardware": {}}
    for hw in hws:
        best = None
        for r in sorted((r for r in rows if r.hardware == hw.name and r.ok and r.training), key=lambda r: r.gpus):
            g = r.training.get("goodput") or {}
            eff = g.get("effective_days") if g else r.training["days"]
            if eff is not None and eff <= days:
                best = {"gpus": r.gpus, "days": r.training["days"], "effective_days": eff,
                        "cost": g.get("effective_cost") if g else r.training["cost"]}
                break
        out["by_hardware"][hw.name] = best
    return out


def _scaling(rows: list[SweepRow], notes: list[str]) -> None:
    """Scaling efficiency per profile against its smallest count that has a layout
    (cost.training.scaling_efficiency, all of a profile's counts at once)."""
    from llmpar.cost.training import scaling_efficiency

    for name in dict.fromkeys(r.hardware for r in rows):
        mine = [r for r in rows if r.hardware == name]
        ok = [r for r in mine if r.ok]
        if not ok:
            continue
        ref = ok[0]
        eff = scaling_efficiency(np.array([r.plan.tokens_per_s for r in ok]), np.array([r.gpus for r in ok], float),
                                 ref.plan.tokens_per_s, ref.gpus)
        for r, e in zip(ok, eff):
            r.scaling_efficiency = float(e)
            r.scaling_reference_gpus = ref.gpus
        if ref is not mine[0]:
            notes.append(f"{name}: scaling efficiency is against {ref.gpus:,} GPUs, the smallest count that has a "
                         f"layout ({mine[0].gpus:,} has none)")


__all__ = ["STATUSES", "SweepResult", "SweepRow", "parse_gpu_list", "sweep"]
