"""Helpers that keep cost/ formulas array-polymorphic (docs/architecture.md, rules of the house)."""

from __future__ import annotations

import numpy as np


def scalar_out(x):
    """0-d numpy results back to Python numbers, so scalar callers get scalars; arrays pass through."""
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return x.item()
    if isinstance(x, np.generic):
        return x.item()
    return x


def max_by(fixed, per_unit, usable):
    """Largest integer n with fixed + n·per_unit <= usable (inf when per_unit is 0; 0 if none)."""
    room = usable - fixed
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.where(per_unit > 0, np.floor(room / np.where(per_unit > 0, per_unit, 1.0)), np.inf)
    return np.where(room < 0, 0.0, np.maximum(n, 0.0))


def argmax_of(values):
    """Index of the largest of a list of equally-shaped values (first on ties), elementwise."""
    stacked = np.stack(np.broadcast_arrays(*[np.asarray(v, dtype=float) for v in values]))
    return np.argmax(stacked, axis=0)


def choose(pick, values):
    """Elementwise ``values[pick]`` of a list of equally-shaped values (numbers or arrays)."""
    return np.choose(pick, [np.broadcast_to(np.asarray(v, dtype=float), np.shape(pick)) for v in values])
