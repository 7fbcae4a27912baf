"""The knobs ``--fix`` / ``--allow`` name (the fields of :class:`llmpar.parallel.Parallel` the
planner searches), their aliases and bounds, and the reading of their values from text
(``tp=8,pp=16``, ``zero=0,1,3``, ``recompute=none,selective``, ``sp=on``).

Nothing here enumerates the space (:mod:`llmpar.planner.space`).
"""

from __future__ import annotations

from llmpar.errors import UserError
from llmpar.parallel import MAX_BATCH, MAX_GPUS, RECOMPUTE, SCHEDULES

# the knobs --fix / --allow accept: key -> Parallel field
KNOBS = ("tp", "pp", "dp", "cp", "ep", "etp", "zero", "sp", "recompute", "micro_batch", "schedule", "virtual_stages",
         "offload_layers")
_KNOB_ALIASES = {"micro-batch": "micro_batch", "mb": "micro_batch", "b": "micro_batch", "v": "virtual_stages",
                 "virtual-stages": "virtual_stages", "vpp": "virtual_stages", "offload": "offload_layers",
                 "offload-layers": "offload_layers"}
# the largest value of each integer knob: the bounds `llmpar memory` and `step` apply to the same
# options (layout.resolve: degrees, virtual stages and layer counts at most MAX_GPUS, a micro-batch
# at most MAX_BATCH); beyond them the knob's column would leave int64 (--virtual-stages 10^30 did)
KNOB_MAX = {"micro_batch": MAX_BATCH, **{k: MAX_GPUS for k in ("tp", "pp", "dp", "cp", "ep", "etp", "virtual_stages",
                                                               "offload_layers")}}
_BOOL = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}


def knob_name(key: str) -> str:
    """The knob a --fix/--allow key names (an alias, any case, - or _); UserError if none."""
    k = key.strip().lower().replace("-", "_")
    k = _KNOB_ALIASES.get(key.strip().lower(), _KNOB_ALIASES.get(k, k))
    if k not in KNOBS:
        raise UserError(f"unknown knob {key.strip()!r} in --fix/--allow; choose from: {', '.join(KNOBS)}")
    return k


def parse_values(key: str, text: str) -> tuple:
    """Values of one knob from text ('8', '0,1,3', 'none,selective', 'on'); UserError if bad."""
    raw = [t.strip() for t in str(text).split(",")]
    items = [t for t in raw if t]
    if not items:
        raise UserError(f"--fix/--allow {key}= needs at least one value")
    if len(items) != len(raw):     # reliability review, item 27: 'tp=1,,2' was taken as tp=1,2
        raise UserError(f"--fix/--allow {key}={text}: an empty entry between commas (write e.g. {key}=1,2)")
    out = []
    for t in items:
        if key == "recompute":
            if t not in RECOMPUTE:
                raise UserError(f"recompute={t!r}: choose from {', '.join(RECOMPUTE)}")
            out.append(RECOMPUTE.index(t))
        elif key == "schedule":
            if t not in SCHEDULES:
                raise UserError(f"schedule={t!r}: choose from {', '.join(SCHEDULES)}")
            out.append(SCHEDULES.index(t))
        elif key == "sp":
            if t.lower() not in _BOOL:
                raise UserError(f"sp={t!r}: use on or off")
            out.append(_BOOL[t.lower()])
        else:
            try:
                v = int(t)
            except ValueError:
                raise UserError(f"{key}={t!r} is not an integer") from None
            if key == "zero" and not 0 <= v <= 3:
                raise UserError(f"zero={v}: ZeRO stages are 0, 1, 2 and 3")
            if key == "offload_layers" and v < 0:
                raise UserError(f"offload_layers={v} must be 0 or more")
            if key not in ("zero", "offload_layers") and v < 1:
                raise UserError(f"{key}={v} must be a positive integer")
            if key in KNOB_MAX and v > KNOB_MAX[key]:
                raise UserError(f"{key}={v} is beyond what llmpar models (at most {KNOB_MAX[key]:,})")
            out.append(v)
    return tuple(dict.fromkeys(out))


def parse_assignments(specs, what: str) -> dict[str, tuple]:
    """'tp=8,pp=16' (several allowed) -> {knob: values}. --fix takes one value per knob; --allow
    a comma list for one knob per option (``--allow zero=0,1,3``)."""
    out: dict[str, tuple] = {}
    for spec in specs or ():
        text = str(spec).strip()
        if what == "fix":
            parts = text.split(",")
            if any(not p.strip() for p in parts) and any(p.strip() for p in parts):
                # an empty entry ('tp=2,,pp=1', a trailing comma) is a typo, as in --allow's lists
                raise UserError(f"--fix {text!r}: an empty entry between commas (e.g. --fix tp=8,pp=16)")
            parts = [p for p in parts if p.strip()]
        else:
            parts = [text]
        if not parts:      # --fix '' or --fix ',': nothing held is a typo, not a request
            raise UserError(f"--{what} {text!r}: expected KNOB=VALUE" + ("S" if what == "allow" else "")
                            + f" (e.g. --{what} " + ("tp=8,pp=16" if what == "fix" else "zero=0,1,3") + ")")
        for part in parts:
            if "=" not in part:
                raise UserError(f"--{what} {text!r}: expected KNOB=VALUE" + ("S" if what == "allow" else "")
                                + f" (e.g. --{what} " + ("tp=8,pp=16" if what == "fix" else "zero=0,1,3") + ")")
            key, val = part.split("=", 1)
            key = knob_name(key)
            vals = parse_values(key, val)
            if what == "fix" and len(vals) != 1:
                raise UserError(f"--fix {key}= takes one value; use --allow {key}={val} for a set")
            if key in out and set(out[key]) != set(vals):
                raise UserError(f"--{what} gives {key} twice with different values "
                                f"({show_values(key, out[key])} and {show_values(key, vals)})")
            out[key] = vals
    return out


def show_values(key, vals) -> str:
    """Values of one knob as --fix/--allow text (names for recompute and schedule, on/off for sp)."""
    names = {"recompute": RECOMPUTE, "schedule": SCHEDULES}.get(key)
    if names:
        return ",".join(names[v] for v in vals)
    if key == "sp":
        return ",".join("on" if v else "off" for v in vals)
    return ",".join(str(v) for v in vals)

