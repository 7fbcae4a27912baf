"""The options of ``llmpar plan`` / ``llmpar.plan`` read and checked, one at a time: the positive
integers and their bounds, ``--margin``, ``--fix`` / ``--allow`` and the layout keywords as the
values of each knob (:mod:`llmpar.planner.knobs`), the fixed degrees that cannot work whatever
else is chosen, and the batch (sequence length, global batch, micro-batches) with the defaults of
docs/architecture.md, which `sweep` resolves once for every count too.

Bad input is a :class:`~llmpar.errors.UserError` (exit 2), one line. Nothing here searches.
"""

from __future__ import annotations

import numpy as np

from llmpar.errors import UserError
from llmpar.layout import seq_note
from llmpar.parallel import (
    DEFAULT_BATCH_TOKENS, MAX_BATCH, MAX_SEQ, MAX_TOKENS_PER_STEP, RECOMPUTE, SCHEDULES, default_global_batch,
    default_seq, flag, positive_int, whole
)
from llmpar.planner import knobs as K
from llmpar.specs.registry import DEFAULT_HARDWARE  # noqa: F401 (ARG.DEFAULT_HARDWARE; its home is specs.registry)

#: the most rows a plan lists: each row is a full step result (its JSON ~10 kB), and rendering
#: 100,000 of them took 39 s where the search takes 0.1 s (reliability review, item 13)
MAX_TOP = 1000
DEFAULT_MODEL = "llama-3-70b"
OBJECTIVES = ("time", "memory")


class FixConflict(UserError):
    """A degree fixed with --fix cannot divide the GPU count: bad input in `plan` (exit 2); in
    `sweep`, where the count varies, a row that says why."""

    rejected = None



LAYOUT_KNOBS = {"tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp", "ep": "ep", "etp": "etp", "zero": "zero", "sp": "sp",
                 "recompute": "recompute", "micro_batch": "micro_batch", "schedule": "schedule",
                 "virtual_stages": "virtual_stages", "offload_layers": "offload_layers"}


def _as_specs(value, what: str) -> list[str]:
    """--fix/--allow given as a string, a list of strings, or a dict {knob: value(s)}."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            if isinstance(v, (list, tuple, set)):
                v = ",".join(_knob_text(x, k) for x in v)
            else:
                v = _knob_text(v, k)
            out.append(f"{k}={v}")
        return out
    if not isinstance(value, (list, tuple, set)) or not all(isinstance(v, str) for v in value):
        example = "'tp=8,pp=4'" if what == "fix" else "['zero=0,1,3']"
        raise UserError(f"{what} must be a string such as {example}, a list of such strings, or a dict "
                        f"{{knob: value{'s' if what == 'allow' else ''}}}, got {value!r}")
    return list(value)


def _knob_text(x, key: str = "") -> str:
    """One value of a knob given to the API (a bool, a number, a name) as --fix text."""
    if isinstance(x, bool):
        return "on" if x else "off"
    if isinstance(x, (float, np.floating)):
        return str(whole(x, key or "value"))   # the API's rule for integers: 8.0 is 8, 8.5 and nan are refused
    return str(x)


def _layout_keyword(key: str, value) -> str:
    """A layout keyword of plan() (``tp=8``, ``sp=False``, ``recompute="full"``) as --fix text, by
    the API's rules (docs/api.md): sp a bool, recompute and schedule a name, any other knob a whole
    number (parallel.whole)."""
    if key == "sp":
        return _knob_text(flag(value, "sp"))
    if key in ("recompute", "schedule"):
        if not isinstance(value, str):
            names = RECOMPUTE if key == "recompute" else SCHEDULES
            raise UserError(f"{key} must be one of {', '.join(names)}, got {value!r}")
        return value
    return str(whole(value, key))


def checked_int(value, what: str, hi: int | None = None, required: bool = False):
    """A positive integer option within ``hi`` (None stays None unless ``required``); UserError otherwise."""
    if value is None and required:
        raise UserError(f"{what.replace('-', '_')} must be a positive integer, got None")
    value = positive_int(value, what, hi)   # the API's one rule for integers (parallel.whole), then the bounds
    return None if value is None else int(value)



def resolve_batch(model, seq, global_batch, tokens_per_batch, microbatches, defaults, notes) -> tuple[int, int, int | None]:
    """Sequence length, global batch (sequences) and micro-batch count of the plan, with the
    defaults of docs/architecture.md (seq = min(8192, model max); 4,194,304 tokens / seq sequences) and the
    bounds of what llmpar models; what was assumed goes into ``defaults`` / ``notes``. `sweep`
    resolves its one batch for every GPU count with it too."""
    if seq is None:
        seq = default_seq(model)
        defaults.append(f"seq {seq}")
    else:
        seq = checked_int(seq, "seq", MAX_SEQ)
        if (note := seq_note(model, seq)) is not None:
            notes.append(note)
    global_batch = checked_int(global_batch, "global-batch", MAX_BATCH)
    tokens_per_batch = checked_int(tokens_per_batch, "tokens-per-batch", MAX_TOKENS_PER_STEP)
    if tokens_per_batch is not None:
        if tokens_per_batch % seq:
            raise UserError(f"--tokens-per-batch {tokens_per_batch:,} is not a multiple of the sequence length {seq}")
        if global_batch is not None and global_batch != tokens_per_batch // seq:
            raise UserError(f"--global-batch {global_batch} disagrees with --tokens-per-batch {tokens_per_batch:,} / "
                            f"seq {seq} = {tokens_per_batch // seq}")
        global_batch = tokens_per_batch // seq
    microbatches = checked_int(microbatches, "microbatches", MAX_BATCH)
    if global_batch is None:
        global_batch, capped = default_global_batch(seq)
        defaults.append(f"global batch {global_batch} sequences = {DEFAULT_BATCH_TOKENS:,} tokens / seq {seq}"
                        if global_batch * seq == DEFAULT_BATCH_TOKENS else capped or
                        f"global batch {global_batch} sequences ({global_batch * seq:,} tokens, the nearest to "
                        f"{DEFAULT_BATCH_TOKENS:,})")
    if global_batch * seq > MAX_TOKENS_PER_STEP:
        raise UserError(f"{global_batch:,} sequences x {seq:,} tokens per step is beyond what llmpar models "
                        f"(at most {MAX_TOKENS_PER_STEP:,} tokens)")
    return seq, global_batch, microbatches


class Held(dict):
    """knob -> the values to search, and ``origin``: knob -> the option that held it, in the user's
    spelling (``--tp``, ``--fix``, ``--allow``), for the messages (an --allow cp=3 had been called
    "--fix cp=3", a --tp 3 too)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.origin: dict[str, str] = {}

    def said(self, k: str) -> str:
        """``--tp 3``, ``--fix tp=3`` or ``--allow tp=3`` as the user held knob ``k``."""
        how = self.origin.get(k, "--fix")
        shown = K.show_values(k, self[k])
        return f"{how} {shown}" if how.startswith("--") and how not in ("--fix", "--allow") else f"{how} {k}={shown}"


def knob_values(fix, allow, layout) -> Held:
    """knob -> the values to search: --allow sets, narrowed by --fix and the layout keywords."""
    fixed = K.parse_assignments(_as_specs(fix, "fix"), "fix")
    origin = {k: "--fix" for k in fixed}
    for key, value in layout.items():
        if value is None:
            continue
        k = K.knob_name(key)
        vals = K.parse_values(k, _layout_keyword(k, value))
        if k in fixed and fixed[k] != vals:
            # both in the user's spelling (the codes had shown: "--fix schedule=1", "--sp True ... sp=False")
            opt = (f"--{'' if vals[0] else 'no-'}sp" if k == "sp"
                   else f"--{key.replace('_', '-')} {K.show_values(k, vals)}")
            raise UserError(f"{opt} contradicts --fix {k}={K.show_values(k, fixed[k])}")
        fixed[k] = vals
        origin.setdefault(k, f"--{key.replace('_', '-')}")
    allowed = Held(K.parse_assignments(_as_specs(allow, "allow"), "allow"))
    allowed.origin = {k: "--allow" for k in allowed}
    for k, vals in fixed.items():
        if k in allowed and not set(vals) <= set(allowed[k]):
            raise UserError(f"--fix {k}={K.show_values(k, vals)} is outside --allow {k}={K.show_values(k, allowed[k])}")
        allowed[k] = vals
        allowed.origin[k] = origin[k]
    return allowed


def margin_value(value) -> float | None:
    """--margin as a fraction in [0, 1): 0.1 or "10%"; None (not given): the recommending default."""
    if value is None:
        return None
    text = str(value).strip()
    try:
        m = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise UserError(f"--margin must be a fraction such as 0.1 or a percentage such as 10%, got {value!r}") from None
    if not 0.0 <= m < 1.0:
        raise UserError(f"--margin must be at least 0 and below 1 (100 %), got {value!r}")
    return m


def check_fixed_degrees(allowed: dict, gpus: int, model, max_tp, global_batch: int | None = None) -> None:
    """Fixed degrees that cannot work whatever else is chosen: one clear line (exit 2)."""
    said = allowed.said if isinstance(allowed, Held) else (lambda k: f"--fix {k}={K.show_values(k, allowed[k])}")
    one = {k: v[0] for k, v in allowed.items() if len(v) == 1 and k in ("tp", "pp", "dp", "cp")}
    for k, v in one.items():
        if gpus % v:
            raise FixConflict(f"{said(k)} does not divide --gpus {gpus}")
    prod = 1
    for v in one.values():
        prod *= v
    if gpus % prod:
        raise FixConflict(f"{', '.join(said(k) for k in one)}: the product {prod} does not divide --gpus {gpus}")
    if len(one) == 4 and prod != gpus:
        raise FixConflict(f"tp*pp*dp*cp held at {prod} ({', '.join(said(k) for k in one)}) but --gpus is {gpus}")
    if "tp" in one and max_tp is not None and one["tp"] > max_tp:
        raise UserError(f"{said('tp')} exceeds --max-tp {max_tp}")
    ep = allowed.get("ep")
    if ep and len(ep) == 1 and ep[0] > 1 and model.moe is None:
        raise UserError(f"{said('ep')}: {model.name} has no experts")
    if ep and len(ep) == 1 and model.moe is not None and model.moe.experts % ep[0]:
        # step's layout rule (layout.py "ep"), as bad input: a fixed value can be no layout at all
        raise UserError(f"{said('ep')} does not divide the {model.moe.experts} experts of {model.name}")
    etp = allowed.get("etp")
    if etp and model.moe is None:
        raise UserError(f"--etp / etp={','.join(map(str, etp))}: {model.name} has no experts")
    if "tp" in one and (model.heads % one["tp"] or model.n_kv_heads % one["tp"]):
        raise UserError(f"{said('tp')} does not divide the {model.heads} heads / {model.n_kv_heads} KV heads "
                        f"of {model.name}")
    if "pp" in one and one["pp"] > model.layers:
        raise UserError(f"{said('pp')} exceeds the {model.layers} layers of {model.name}")
    off = allowed.get("offload_layers")
    if off and 0 not in off:
        # Megatron-Core's rules for CPU offloading (layout.resolve refuses the same for `llmpar step`)
        pp_fixed, rec = allowed.get("pp"), allowed.get("recompute")
        if pp_fixed and 1 not in pp_fixed:
            raise FixConflict(f"offload_layers={','.join(map(str, off))} needs pp 1 (Megatron-Core: no CPU offloading "
                              f"with pipeline parallelism), but pp is held at {','.join(map(str, pp_fixed))}")
        if rec and RECOMPUTE.index("none") not in rec:
            raise FixConflict("offload_layers needs recompute none (Megatron-Core: no CPU offloading with activation "
                              "recomputation), but recompute is held at " + ",".join(RECOMPUTE[r] for r in rec))
    b = allowed.get("micro_batch")
    per = one.get("dp", 1) * (b[0] if b and len(b) == 1 else 1)
    if global_batch is not None and ("dp" in one or (b and len(b) == 1)) and global_batch % per:
        # options that contradict each other are bad input, not a search that found nothing; named as
        # held (a held micro_batch 3 alone had read "the fixed micro_batch*dp = 3", as if dp were 1)
        held = [said(k) for k in ("micro_batch", "dp") if k in allowed and len(allowed[k]) == 1]
        what = "micro_batch x dp" if len(held) == 2 else "micro_batch" if "micro_batch" in " ".join(held) else "dp"
        raise UserError(f"global batch {global_batch:,} is not divisible by {what} {per} ({', '.join(held)})")
