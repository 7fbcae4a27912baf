"""Helpers that keep cost/ formulas array-polymorphic (DESIGN.md, rules of the house)."""

from __future__ import annotations

import numpy as np


def scalar_out(x):
    """0-d numpy results back to Python numbers, so scalar callers get scalars; arrays pass through."""
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return x.item()
    if isinstance(x, np.generic):
        return x.item()
    return x
