"""The planner: which TP/PP/DP/CP/EP layout (and micro-batch, schedule, ZeRO, recompute, SP) is
best for N GPUs — every candidate evaluated through :mod:`llmpar.cost` on numpy arrays.

    >>> import llmpar
    >>> r = llmpar.plan("llama-3-70b", gpus=2048)        # the function, from llmpar.api
    >>> r.plans[0].parallel.tp, r.plans[0].step_time_s, r.space.feasible

:mod:`llmpar.planner.space` enumerates candidates and masks the constraints (the knobs --fix/--allow
name: :mod:`llmpar.planner.knobs`); :mod:`llmpar.planner.search` runs the search and ``plan`` in
stages: :mod:`~llmpar.planner.request` reads the options (:mod:`~llmpar.planner.arguments`),
:mod:`~llmpar.planner.evaluate` evaluates and builds the rows (:mod:`llmpar.results`),
:mod:`~llmpar.planner.ranking` orders them, :mod:`~llmpar.planner.refusals` says why none is left;
:mod:`llmpar.planner.sweep` plans a list of GPU counts on several hardware profiles.

The function is ``llmpar.plan`` (:func:`llmpar.api.plan`); this package is ``llmpar.planner``
(no subpackage shares a name with an API function).
"""
