"""The one pydantic configuration every spec model (hardware, model, stack) uses.

- ``extra="forbid"``: a misspelt field is an error naming it, not a silently ignored key.
- ``allow_inf_nan=False``: every float field of every spec, including the values unit parsers
  return (``80 GiB``, ``2 us``) and the per-generation maps (``{default: 0.85, hopper: 0.74}``),
  must be finite: ``.inf`` or ``.nan`` in a YAML file is one error naming the field, never a
  ``nan us per step`` (reliability review, item 2: the class, not the seven fields it found).
- ``defer_build=True``: validators are built on first use (start-up time, docs/cli.md).
- ``Name`` / ``Text``: what a spec prints is printable (reliability review, item 35): a name is one
  non-blank line without control characters (a newline or an ANSI escape in ``name:`` was written
  straight to the terminal); free text (descriptions, sources) may wrap lines but holds no other
  control character.
- ``MIN_SHARE`` / ``Multiplier``: every efficiency, fraction of a peak or line rate, and every fitted
  multiplier has a lower bound as well as an upper one (reliability review, item 4, re-checked
  2026-12-03: ``gemm_efficiency: 1.0e-300`` printed a 10^60-second step, a tier efficiency of 1e-300
  a 10^58-second one). A kernel's share or a multiplier is at least 1e-3 (MIN_SHARE: no shipped
  spec states below 0.01); the two multipliers that scale whole byte counts, the memory-bound ops'
  HBM traffic and the saved activations, at least 0.01 (``Multiplier(..., lo=0.01)`` in
  specs/stack.py: a hundredth of Megatron's fused traffic or of the formula's activations is
  already no kernel llmpar knows of). A tier's efficiencies, which `calibrate fit` fits, at least 1e-6
  (MIN_FITTED_SHARE): the fit switches a path off by driving its share toward 0 (GB200's NVLS on a
  published 8-GPU nccl-tests log whose NCCL never ran it, `llmpar calibrate fit LOG --hardware
  gb200-nvl72` fits inr_efficiency 0.6 -> 0.0001073; log 19 of docs/calibration.md, not shipped),
  and a step that used it would then read a million times long, not 10^58 times.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field

SPEC = ConfigDict(extra="forbid", defer_build=True, allow_inf_nan=False)
STRICT_SPEC = ConfigDict(extra="forbid", strict=True, defer_build=True, allow_inf_nan=False)


def _control(v: str, allowed: str = "") -> str | None:
    return next((c for c in v if unicodedata.category(c) == "Cc" and c not in allowed), None)


def _check_name(v: str) -> str:
    if not v.strip():
        raise ValueError("is blank: give the spec a name")
    if v != v.strip():
        raise ValueError(f"{v!r} has leading or trailing blanks")
    if (c := _control(v)) is not None:
        raise ValueError(f"{v!r} holds the control character {c!r}: a name is one printable line")
    return v


def _check_text(v: str) -> str:
    if (c := _control(v, "\n\t")) is not None:
        raise ValueError(f"holds the control character {c!r} (it would be written to the terminal as it is)")
    return v


Name = Annotated[str, AfterValidator(_check_name)]
Text = Annotated[str, AfterValidator(_check_text)]

#: the smallest achieved share of a peak a kernel, or a multiplier, may state (0.1 %)
MIN_SHARE = 1e-3
#: the smallest share of a line rate a (fitted) interconnect tier may state
MIN_FITTED_SHARE = 1e-6


def at_most(limit: float, example: str, who: str):
    """A host time (seconds, or a per-generation mapping of them) no {who} spends: a bare number is
    seconds, so `59` meant as microseconds is 59 s (an engine's "TTFT 3222540.901 s"), refused
    with the unit suggested, as hardware refuses `memory: 80` (review of 2026-12-03: the class is
    every host-time field of stacks and engines). ``limit``: 10x or more the bound `calibrate runs`
    / `calibrate serve` fit the field within."""
    def check(v):
        for gen, x in (v.items() if isinstance(v, dict) else [(None, v)]):
            if x > limit:
                at = f" ({gen})" if gen else ""
                raise ValueError(f"{x:g} s{at} is more than any {who} spends ({limit:g} s): a bare number is "
                                 f"seconds, so a unit is probably missing (write e.g. '{example}')")
        return v
    return AfterValidator(check)


def at_least_bytes(floor: float, example: str, who: str):
    """A size (bytes) of which a nonzero value below ``floor`` is no {who}: a bare number is bytes,
    so `host_memory_per_gpu: 256` (meant as GB) or `cuda_context_bytes: 0.6` (GB) is refused with
    the unit suggested, as `memory: 80` is (a fuzz sweep of 2026-12-04: these had been 256 and 0.6
    bytes). 0 stays allowed where the field allows it (none)."""
    shown = f"{floor / 1e9:g} GB" if floor >= 1e9 else f"{floor / 2**20:g} MiB"

    def check(v):
        if v is not None and 0 < v < floor:
            raise ValueError(f"{v:g} bytes is less than any {who} ({shown}): a bare number is bytes, so a "
                             f"unit is probably missing (write e.g. '{example}')")
        return v
    return AfterValidator(check)


def Multiplier(default: float, hi: float, description: str, lo: float = MIN_SHARE):  # noqa: N802 - a field type
    """A fitted multiplier field in [lo, hi] (lo 1e-3 unless given)."""
    return Field(default, ge=lo, le=hi, description=description)
