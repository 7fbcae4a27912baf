"""The planner: which TP/PP/DP/CP/EP layout (and micro-batch, schedule, ZeRO, recompute, SP) is
best for N GPUs — every candidate evaluated through :mod:`llmpar.cost` on numpy arrays.

    >>> import llmpar
    >>> r = llmpar.plan("llama-3-70b", gpus=2048)        # the function, from llmpar.api
    >>> r.plans[0].parallel.tp, r.plans[0].step_time_s, r.space.feasible

:mod:`llmpar.plan.space` enumerates candidates and masks the constraints;
:mod:`llmpar.plan.search` evaluates, ranks and builds the result objects (:mod:`llmpar.results`);
:mod:`llmpar.plan.sweep` plans a list of GPU counts on several hardware profiles.

``llmpar.plan`` is the *function* (:func:`llmpar.api.plan`), not this package: import the
modules with ``from llmpar.plan import search`` or ``from llmpar.plan.search import plan``.
This file stays import-free: ``import llmpar`` loads it (see ``llmpar/__init__.py``).
"""
