"""The planner: which TP/PP/DP/CP/EP layout (and micro-batch, schedule, ZeRO, recompute, SP) is
best for N GPUs — every candidate evaluated through :mod:`llmpar.cost` on numpy arrays.

    >>> import llmpar
    >>> r = llmpar.plan("llama-3-70b", gpus=2048)
    >>> r.plans[0].parallel.tp, r.plans[0].step_time_s, r.space.feasible

``llmpar.plan`` is this package *and* the function: calling the package calls
:func:`llmpar.plan.search.plan` (so ``llmpar.plan(...)`` works however the package was imported).
:mod:`llmpar.plan.space` enumerates candidates and masks the constraints;
:mod:`llmpar.plan.search` evaluates, ranks and builds the result objects.
"""

from __future__ import annotations

import sys
import types


def plan(*args, **kwargs):
    """See :func:`llmpar.plan.search.plan`."""
    from llmpar.plan.search import plan as _plan

    return _plan(*args, **kwargs)


class _CallablePackage(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return plan(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage

__all__ = ["plan"]
